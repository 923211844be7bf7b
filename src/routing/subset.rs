//! Coverage-limited subsets: which web gears each balancer talks to.
//!
//! A pure function of (live balancers, gears, coverage C): every balancer computes the
//! same assignment from the same inputs, with no coordination.
//!
//! The scheme: gears sit on a ring ordered by a hash of their name (a stable position
//! that does not depend on which other gears exist); the M live balancers, in node-id
//! order, start at evenly spaced ring positions `floor(i·N/M)`, and each takes the `k`
//! consecutive gears from its start, where `k = max(⌈C·N⌉, ⌈N/M⌉)`, at least 2 when
//! N ≥ 2 and at most N. Properties (tested exhaustively for small sizes):
//! - every gear is covered: consecutive starts are at most ⌈N/M⌉ ≤ k apart;
//! - each balancer has exactly k gears (all of them at C = 100%);
//! - coverage is even: the starts `floor(i·N/M)` are a balanced sequence, so any window
//!   of k ring positions holds ⌊kM/N⌋ or ⌈kM/N⌉ of them: per-gear balancer counts
//!   differ by at most one;
//! - churn is low: one gear added or removed shifts each slice by at most a position or
//!   two; one balancer added or removed moves the starts by at most N/(M+1) positions.
//!
//! This is the contiguous-slice family of Google's Ringsteady and Finagle's aperture
//! rings (without fractional weights: Twitter's deterministic aperture is patented and
//! not used). `examples/subsets.rs` measures it next to rendezvous hashing.

use std::collections::BTreeSet;

/// Stable 64-bit hash (FNV-1a) of a name: the same on every balancer and every build.
pub fn stable_hash(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Gears per balancer for `n` gears, `m` balancers and coverage `percent` (1-100).
pub fn subset_size(n: usize, m: usize, percent: u32) -> usize {
    if n == 0 || m == 0 {
        return 0;
    }
    let wanted = (n * percent.clamp(1, 100) as usize).div_ceil(100);
    let cover_all = n.div_ceil(m);
    wanted.max(cover_all).max(2.min(n)).min(n)
}

/// The ring: gear names ordered by stable hash (name as tie-break).
pub fn ring<'a>(gears: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut v: Vec<&str> = gears.into_iter().collect();
    v.sort_by_key(|g| (stable_hash(g), *g));
    v.dedup();
    v
}

/// Ring indices of the gears balancer `rank` (0-based, of `m`) covers on a ring of `n`.
pub fn slice(rank: usize, m: usize, n: usize, k: usize) -> impl Iterator<Item = usize> {
    let start = (rank * n).checked_div(m).unwrap_or(0);
    (0..k.min(n)).map(move |j| (start + j) % n.max(1))
}

/// The gears covered by balancer `me` among `balancers` (live node ids; order does not
/// matter, they are sorted here). A balancer not in the list covers nothing.
pub fn assign<'a>(
    me: &str,
    balancers: &[&str],
    gears: &[&'a str],
    percent: u32,
) -> BTreeSet<&'a str> {
    let mut bs: Vec<&str> = balancers.to_vec();
    bs.sort_unstable();
    bs.dedup();
    let Ok(rank) = bs.binary_search(&me) else {
        return BTreeSet::new();
    };
    let ring = ring(gears.iter().copied());
    let k = subset_size(ring.len(), bs.len(), percent);
    slice(rank, bs.len(), ring.len(), k)
        .map(|i| ring[i])
        .collect()
}

/// Every live balancer's subset at once: what a balancer needs to know which gears a
/// peer covers (and so reports the health of).
#[derive(Clone, Debug, Default)]
pub struct Assignment {
    /// Balancer id → its rank.
    ranks: std::collections::HashMap<String, usize>,
    /// Gear → its ring index.
    ring: std::collections::HashMap<String, usize>,
    m: usize,
    n: usize,
    k: usize,
}

impl Assignment {
    pub fn new(balancers: &[&str], gears: &[&str], percent: u32) -> Self {
        let mut bs: Vec<&str> = balancers.to_vec();
        bs.sort_unstable();
        bs.dedup();
        let ring = ring(gears.iter().copied());
        let k = subset_size(ring.len(), bs.len(), percent);
        Assignment {
            m: bs.len(),
            n: ring.len(),
            k,
            ranks: bs
                .iter()
                .enumerate()
                .map(|(i, b)| (b.to_string(), i))
                .collect(),
            ring: ring
                .iter()
                .enumerate()
                .map(|(i, g)| (g.to_string(), i))
                .collect(),
        }
    }

    /// Whether `balancer` covers `gear`.
    pub fn covers(&self, balancer: &str, gear: &str) -> bool {
        let (Some(&rank), Some(&idx)) = (self.ranks.get(balancer), self.ring.get(gear)) else {
            return false;
        };
        let start = (rank * self.n).checked_div(self.m).unwrap_or(0);
        (idx + self.n - start) % self.n.max(1) < self.k
    }

    /// Gears per balancer.
    pub fn subset_size(&self) -> usize {
        self.k
    }
}

/// Rendezvous (highest-random-weight) subsets, for comparison in the simulation: each
/// balancer takes the k gears with the highest hash of (balancer, gear).
pub fn rendezvous<'a>(me: &str, gears: &[&'a str], k: usize) -> BTreeSet<&'a str> {
    let mut scored: Vec<(u64, &str)> = gears
        .iter()
        .map(|g| (stable_hash(&format!("{me}/{g}")), *g))
        .collect();
    scored.sort_unstable_by(|a, b| b.cmp(a));
    scored.into_iter().take(k).map(|(_, g)| g).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    /// Per-gear count of covering balancers.
    fn coverage(bs: &[&str], gears: &[&str], percent: u32) -> Vec<usize> {
        let sets: Vec<BTreeSet<&str>> = bs.iter().map(|b| assign(b, bs, gears, percent)).collect();
        gears
            .iter()
            .map(|g| sets.iter().filter(|s| s.contains(g)).count())
            .collect()
    }

    fn check(m: usize, n: usize, percent: u32) {
        let bn = names("lb", m);
        let gn = names("gear", n);
        let bs: Vec<&str> = bn.iter().map(String::as_str).collect();
        let gears: Vec<&str> = gn.iter().map(String::as_str).collect();
        let k = subset_size(n, m, percent);
        for b in &bs {
            let s = assign(b, &bs, &gears, percent);
            assert_eq!(s.len(), k, "m={m} n={n} c={percent}: subset size");
            if n >= 2 {
                assert!(s.len() >= 2);
            }
            if percent == 100 {
                assert_eq!(s.len(), n);
            }
            assert!(s.len() >= (n * percent as usize).div_ceil(100).min(n));
        }
        let cov = coverage(&bs, &gears, percent);
        if n > 0 {
            let (min, max) = (cov.iter().min().unwrap(), cov.iter().max().unwrap());
            assert!(*min >= 1, "m={m} n={n} c={percent}: uncovered gear {cov:?}");
            assert!(max - min <= 1, "m={m} n={n} c={percent}: uneven {cov:?}");
        }
    }

    #[test]
    fn properties_hold_exhaustively_for_small_sizes() {
        for m in 1..=8 {
            for n in 0..=24 {
                for percent in [1, 10, 25, 33, 50, 66, 75, 99, 100] {
                    check(m, n, percent);
                }
            }
        }
    }

    #[test]
    fn properties_hold_for_random_large_sizes() {
        let mut rng = fastrand::Rng::with_seed(42);
        for _ in 0..40 {
            let m = rng.usize(1..60);
            let n = rng.usize(1..1200);
            let percent = rng.u32(1..=100);
            check(m, n, percent);
        }
    }

    #[test]
    fn every_balancer_computes_the_same_assignment() {
        let gn = names("g", 30);
        let gears: Vec<&str> = gn.iter().map(String::as_str).collect();
        let a = assign("lb2", &["lb1", "lb2", "lb3"], &gears, 33);
        let b = assign("lb2", &["lb3", "lb1", "lb2", "lb1"], &gears, 33);
        let mut shuffled = gears.clone();
        shuffled.reverse();
        let c = assign("lb2", &["lb1", "lb2", "lb3"], &shuffled, 33);
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert!(assign("stranger", &["lb1"], &gears, 33).is_empty());
    }

    #[test]
    fn one_gear_more_changes_few_assignments() {
        let gn = names("g", 100);
        let bn = names("lb", 5);
        let bs: Vec<&str> = bn.iter().map(String::as_str).collect();
        let before: Vec<&str> = gn.iter().map(String::as_str).collect();
        let mut after = before.clone();
        after.push("newcomer");
        for b in &bs {
            let x = assign(b, &bs, &before, 20);
            let y = assign(b, &bs, &after, 20);
            let changed = x.symmetric_difference(&y).count();
            assert!(changed <= 4, "{b}: {changed} changes for one added gear");
        }
    }

    #[test]
    fn the_assignment_agrees_with_each_balancers_own_subset() {
        let gn = names("g", 37);
        let bn = names("lb", 5);
        let gears: Vec<&str> = gn.iter().map(String::as_str).collect();
        let bs: Vec<&str> = bn.iter().map(String::as_str).collect();
        for percent in [10, 40, 100] {
            let a = Assignment::new(&bs, &gears, percent);
            for b in &bs {
                let mine = assign(b, &bs, &gears, percent);
                for g in &gears {
                    assert_eq!(a.covers(b, g), mine.contains(g), "{b} {g} {percent}");
                }
            }
            assert!(!a.covers("stranger", gears[0]));
            assert!(!a.covers(bs[0], "no-such-gear"));
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(subset_size(0, 3, 50), 0);
        assert_eq!(subset_size(1, 3, 10), 1);
        assert_eq!(
            subset_size(10, 2, 10),
            5,
            "two balancers must cover ten gears"
        );
        assert_eq!(subset_size(100, 10, 33), 33);
        assert_eq!(subset_size(3, 10, 10), 2, "at least two when there are two");
        assert_eq!(subset_size(7, 1, 100), 7);
    }
}
