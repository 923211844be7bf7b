//! What one computation of every balancer's subset costs (`Assignment::new`), the
//! part of a membership change that grows with the gears (bench/CLUSTER.md):
//!
//! ```text
//! cargo run --release -p gearlb-core --example assign_cost -- M N [REPS] [LATE]
//! ```
//!
//! M balancers started together (the first LATE of them 90 s later, as after a join)
//! over N gears at coverage 10%; prints the mean time per computation.
use gearlb_core::routing::subset::Assignment;
use std::time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("M N [REPS] [LATE]: numbers"))
        .collect();
    let (Some(&m), Some(&n)) = (args.first(), args.get(1)) else {
        eprintln!("usage: assign_cost M N [REPS] [LATE]");
        std::process::exit(2);
    };
    let reps = args.get(2).copied().unwrap_or(10).max(1);
    let late = args.get(3).copied().unwrap_or(0);
    let bs: Vec<String> = (0..m)
        .map(|i| format!("balancer-{i:03}.example.net"))
        .collect();
    let gs: Vec<String> = (0..n)
        .map(|i| format!("gear-{i:05}-0123456789abcdef"))
        .collect();
    let members: Vec<(&str, u64)> = bs
        .iter()
        .enumerate()
        .map(|(i, b)| {
            (
                b.as_str(),
                1_700_000_000_000 + if i < late { 90_000 } else { 0 },
            )
        })
        .collect();
    let gears: Vec<&str> = gs.iter().map(String::as_str).collect();
    let t = Instant::now();
    let mut k = 0;
    for _ in 0..reps {
        k = Assignment::new(&members, &gears, 10).subset_size();
    }
    let ms = t.elapsed().as_secs_f64() * 1000.0 / reps as f64;
    println!("M = {m} (late {late}) x N = {n}, k = {k}: {ms:.2} ms per Assignment::new");
}
