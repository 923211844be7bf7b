//! Subset simulation: gearlb's ring slices next to rendezvous hashing.
//!
//! `cargo run --release --example subsets` prints, for M balancers × N gears × coverage
//! C: the subset size, the min/max number of balancers covering a gear, and churn (the
//! share of (balancer, gear) assignments that change, among balancers present before and
//! after) when one gear or one balancer joins or leaves.

use std::collections::BTreeSet;

use gearlb::routing::subset::{assign, rendezvous, subset_size};

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:04x}")).collect()
}

type Scheme = fn(&str, &[&str], &[&str], u32) -> BTreeSet<String>;

fn ring(me: &str, bs: &[&str], gears: &[&str], c: u32) -> BTreeSet<String> {
    assign(me, bs, gears, c)
        .into_iter()
        .map(str::to_string)
        .collect()
}

fn hrw(me: &str, bs: &[&str], gears: &[&str], c: u32) -> BTreeSet<String> {
    let k = subset_size(gears.len(), bs.len(), c);
    rendezvous(me, gears, k)
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// (min, max) balancers per gear.
fn coverage(scheme: Scheme, bs: &[&str], gears: &[&str], c: u32) -> (usize, usize) {
    let sets: Vec<_> = bs.iter().map(|b| scheme(b, bs, gears, c)).collect();
    let counts: Vec<usize> = gears
        .iter()
        .map(|g| sets.iter().filter(|s| s.contains(*g)).count())
        .collect();
    (
        *counts.iter().min().unwrap_or(&0),
        *counts.iter().max().unwrap_or(&0),
    )
}

/// Changed assignments / assignments before, over balancers in both worlds.
fn churn(scheme: Scheme, b1: &[&str], g1: &[&str], b2: &[&str], g2: &[&str], c: u32) -> f64 {
    let (mut changed, mut total) = (0usize, 0usize);
    for b in b1.iter().filter(|b| b2.contains(b)) {
        let x = scheme(b, b1, g1, c);
        let y = scheme(b, b2, g2, c);
        changed += x.symmetric_difference(&y).count();
        total += x.len();
    }
    if total == 0 {
        0.0
    } else {
        100.0 * changed as f64 / total as f64 / 2.0
    }
}

fn main() {
    println!(
        "churn = % of a balancer's gears replaced, averaged; cov = balancers per gear (min..max)"
    );
    println!(
        "{:>3} {:>5} {:>4} {:>5} | {:>7} {:>6} {:>6} {:>6} {:>6} | {:>7} {:>6} {:>6} {:>6} {:>6}",
        "M",
        "N",
        "C%",
        "k",
        "ring cov",
        "+gear",
        "-gear",
        "+lb",
        "-lb",
        "hrw cov",
        "+gear",
        "-gear",
        "+lb",
        "-lb"
    );
    for m in [2usize, 3, 10, 50] {
        for n in [2usize, 10, 100, 1000] {
            for c in [100u32, 50, 33, 10] {
                let bn = names("lb", m + 1);
                let gn = names("gear", n + 1);
                let bs: Vec<&str> = bn[..m].iter().map(String::as_str).collect();
                let bs_plus: Vec<&str> = bn.iter().map(String::as_str).collect();
                let bs_minus: Vec<&str> = bn[..m - 1].iter().map(String::as_str).collect();
                let gs: Vec<&str> = gn[..n].iter().map(String::as_str).collect();
                let gs_plus: Vec<&str> = gn.iter().map(String::as_str).collect();
                let gs_minus: Vec<&str> = gn[1..n].iter().map(String::as_str).collect();
                let k = subset_size(n, m, c);
                let mut row = format!("{m:>3} {n:>5} {c:>4} {k:>5} |");
                for scheme in [ring as Scheme, hrw as Scheme] {
                    let (lo, hi) = coverage(scheme, &bs, &gs, c);
                    row.push_str(&format!(
                        " {:>7} {:>5.1}% {:>5.1}% {:>5.1}% {:>5.1}% |",
                        format!("{lo}..{hi}"),
                        churn(scheme, &bs, &gs, &bs, &gs_plus, c),
                        churn(scheme, &bs, &gs, &bs, &gs_minus, c),
                        churn(scheme, &bs, &gs, &bs_plus, &gs, c),
                        if m > 1 {
                            churn(scheme, &bs, &gs, &bs_minus, &gs, c)
                        } else {
                            0.0
                        },
                    ));
                }
                println!("{}", row.trim_end_matches('|'));
            }
        }
    }
}
