//! Subset churn: gearlb's assignment (`routing::subset::Assignment`) next to the ring
//! slices it replaced, against a lower bound on the minimum.
//!
//! `cargo run --release --example subsets` prints, for M balancers × N gears ×
//! coverage C: the subset size k, the balancers per gear (min..max), and for one
//! balancer leaving, one joining (started later), one gear added and one removed: the
//! total number of (balancer, gear) assignments that change (a newcomer's k count), the
//! lower bound on what any assignment with k' gears each and spread ≤ 1 must change
//! (each balancer must grow or shrink to k', each gear must get back to ⌊k'M'/N'⌋
//! coverers), and the ratio. Gear names have the platform's real shape (32 hex digits
//! and a 16-letter namespace); balancer ids are 32 hex digits.

use std::collections::{BTreeMap, BTreeSet};

use gearlb::routing::subset::{ring_assign, subset_size, Assignment};

type Sets = BTreeMap<String, BTreeSet<String>>;

fn hex(i: u64) -> String {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5851_f42d_4c95_7f2d;
    x ^= x >> 29;
    format!("{x:016x}{:016x}", x.rotate_left(17) ^ i)
}

fn sets(scheme: &str, members: &[(String, u64)], gears: &[String], c: u32) -> Sets {
    let g: Vec<&str> = gears.iter().map(String::as_str).collect();
    let ids: Vec<&str> = members.iter().map(|m| m.0.as_str()).collect();
    match scheme {
        "ring" => ids
            .iter()
            .map(|b| {
                let s = ring_assign(b, &ids, &g, c)
                    .into_iter()
                    .map(str::to_string)
                    .collect();
                (b.to_string(), s)
            })
            .collect(),
        _ => {
            let m: Vec<(&str, u64)> = members.iter().map(|m| (m.0.as_str(), m.1)).collect();
            let a = Assignment::new(&m, &g, c);
            ids.iter()
                .map(|b| {
                    let s = g
                        .iter()
                        .filter(|x| a.covers(b, x))
                        .map(|x| x.to_string())
                        .collect();
                    (b.to_string(), s)
                })
                .collect()
        }
    }
}

fn coverage(s: &Sets, gears: &[String]) -> (usize, usize) {
    let counts: Vec<usize> = gears
        .iter()
        .map(|g| s.values().filter(|x| x.contains(g)).count())
        .collect();
    (
        counts.iter().copied().min().unwrap_or(0),
        counts.iter().copied().max().unwrap_or(0),
    )
}

/// Changes between two worlds, over every balancer in either (a newcomer's whole set
/// counts; a leaver's does not: it goes whatever the scheme).
fn changes(x: &Sets, y: &Sets) -> usize {
    let empty = BTreeSet::new();
    y.iter()
        .map(|(b, s)| x.get(b).unwrap_or(&empty).symmetric_difference(s).count())
        .sum()
}

fn lower_bound(before: &Sets, after_ids: &[String], gears: &[String], c: u32) -> usize {
    let k2 = subset_size(gears.len(), after_ids.len(), c);
    let a2 = after_ids.len() * k2 / gears.len().max(1);
    let mut cov: BTreeMap<&str, usize> = gears.iter().map(|g| (g.as_str(), 0)).collect();
    for b in after_ids {
        for g in before.get(b).into_iter().flatten() {
            if let Some(c) = cov.get_mut(g.as_str()) {
                *c += 1;
            }
        }
    }
    let size = |b: &String| {
        before.get(b).map_or(0, |s| {
            s.iter().filter(|g| cov.contains_key(g.as_str())).count()
        })
    };
    let adds_b: usize = after_ids.iter().map(|b| k2.saturating_sub(size(b))).sum();
    let rems_b: usize = after_ids.iter().map(|b| size(b).saturating_sub(k2)).sum();
    let adds_g: usize = cov.values().map(|c| a2.saturating_sub(*c)).sum();
    let rems_g: usize = cov.values().map(|c| c.saturating_sub(a2 + 1)).sum();
    adds_b.max(adds_g) + rems_b.max(rems_g)
}

fn main() {
    println!("changes: total (balancer, gear) assignments changed / lower bound on the minimum (ratio); leave: the mean over 3 leavers");
    println!(
        "| M | N | C% | k | scheme | cov | leave | join | +gear | -gear |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for (m, n, c) in [
        (3, 100, 10),
        (3, 1000, 10),
        (10, 100, 10),
        (10, 1000, 5),
        (10, 1000, 10),
        (10, 1000, 33),
        (30, 1000, 10),
        (30, 1000, 50),
        (100, 1000, 10),
    ] {
        let gears: Vec<String> = (0..n as u64)
            .map(|i| format!("{}-abcdefghijklmnop", hex(i)))
            .collect();
        let members: Vec<(String, u64)> = (0..m as u64)
            .map(|i| (hex(1 << 40 | i), 1_000 + i))
            .collect();
        let newcomer = (hex(1 << 41), 1_000 + 600_000);
        for scheme in ["ring", "gearlb"] {
            let before = sets(scheme, &members, &gears, c);
            let (lo, hi) = coverage(&before, &gears);
            let ratio = |x: usize, lb: usize| {
                if lb == 0 {
                    format!("{x}/0")
                } else {
                    format!("{x}/{lb} ({:.2})", x as f64 / lb as f64)
                }
            };
            // Leaves: the oldest, a middle one, the youngest.
            let mut moved = 0;
            let mut lb = 0;
            for pos in [0, m / 2, m - 1] {
                let rest: Vec<(String, u64)> = members
                    .iter()
                    .filter(|x| x.0 != members[pos].0)
                    .cloned()
                    .collect();
                let after = sets(scheme, &rest, &gears, c);
                let ids: Vec<String> = rest.iter().map(|x| x.0.clone()).collect();
                moved += changes(&before, &after);
                lb += lower_bound(&before, &ids, &gears, c);
            }
            let leave = ratio(moved / 3, lb / 3);
            let mut more = members.clone();
            more.push(newcomer.clone());
            let after = sets(scheme, &more, &gears, c);
            let ids: Vec<String> = more.iter().map(|x| x.0.clone()).collect();
            let join = ratio(
                changes(&before, &after),
                lower_bound(&before, &ids, &gears, c),
            );
            let ids: Vec<String> = members.iter().map(|x| x.0.clone()).collect();
            let mut g2 = gears.clone();
            g2.push(format!("{}-abcdefghijklmnop", hex(1 << 42)));
            let after = sets(scheme, &members, &g2, c);
            let plus = ratio(changes(&before, &after), lower_bound(&before, &ids, &g2, c));
            let g3: Vec<String> = gears[1..].to_vec();
            let after = sets(scheme, &members, &g3, c);
            let minus = ratio(changes(&before, &after), lower_bound(&before, &ids, &g3, c));
            println!(
                "| {m} | {n} | {c} | {} | {scheme} | {lo}..{hi} | {leave} | {join} | {plus} | {minus} |",
                subset_size(n, m, c)
            );
        }
    }
}
