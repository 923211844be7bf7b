//! Selection cost against the number of backends: is picking a gear flat in N?
//!
//! `cargo run --release --example select_cost` times the request path's choice of a
//! backend (`Router::load().select()`, the same call `proxy::forward` makes) for N = 3 …
//! 10 000 backends, with every backend's outstanding-request counter set to a random
//! small load (re-randomised between rounds, so that the choice is not always the same
//! one). Prints nanoseconds per selection, and the spread of picks over the backends.
//! bench/RESULTS.md uses it to separate selection cost from the cost of touching many
//! backend connections in the N = 1000 scenario.

use std::sync::atomic::Ordering;
use std::time::Instant;

use gearlb::routing::{BackendSpec, Router};

fn router(n: usize) -> Router {
    let r = Router::new(1);
    r.replace_backends(
        (0..n)
            .map(|i| BackendSpec {
                name: format!("web{i}"),
                addr: format!("127.0.0.1:{}", 20000 + i % 40000).parse().unwrap(),
                gear_dns: None,
                cookie: None,
                backup: false,
                max_connections: None,
                version: None,
                compatible: Vec::new(),
                send_proxy: None,
            })
            .collect(),
    );
    r
}

fn main() {
    const PICKS: usize = 2_000_000;
    println!("{:>7} {:>10} {:>12}", "N", "ns/select", "distinct");
    for n in [3usize, 8, 32, 33, 100, 1000, 10_000] {
        let r = router(n);
        let mut best = f64::MAX;
        let mut distinct = 0;
        for _round in 0..5 {
            for t in r.load().targets() {
                t.stats
                    .outstanding
                    .store(fastrand::u64(0..4), Ordering::Relaxed);
            }
            let mut seen = std::collections::HashSet::new();
            let started = Instant::now();
            for i in 0..PICKS {
                let b = r
                    .load()
                    .select()
                    .map(|b| std::sync::Arc::as_ptr(b) as usize);
                if i % 64 == 0 {
                    seen.insert(std::hint::black_box(b));
                }
            }
            let ns = started.elapsed().as_nanos() as f64 / PICKS as f64;
            best = best.min(ns);
            distinct = seen.len();
        }
        println!("{n:>7} {best:>10.1} {distinct:>12}");
    }
}
