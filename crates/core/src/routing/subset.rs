//! Coverage-limited subsets: which web gears each balancer talks to.
//!
//! A pure function of (live balancers with their start times, gears, coverage C):
//! every balancer computes the same assignment from the same inputs, with no
//! coordination. Each balancer gets exactly `k = max(⌈C·N⌉, ⌈N/M⌉)` gears (at least
//! 2 when N ≥ 2, at most N), and every gear is covered by `a = ⌊kM/N⌋` or `a + 1`
//! balancers (spread ≤ 1, never 0).
//!
//! The scheme ([`Assignment`]): every (balancer, gear) pair has a stable pseudo-random
//! score (rendezvous hashing); pairs are taken greedily, best score first, while the
//! balancer has fewer than k gears and the gear fewer than a coverers, then again up
//! to a + 1; a deterministic augmenting-path repair completes the rare cases the
//! greedy leaves short (a balancer or gear whose remaining pairs all hit full ones).
//! This is the stable many-to-many matching of the scores: a balancer leaving frees
//! its gears, and they go to their next-best balancers with spare room, so little
//! else moves. A balancer's score is lowered by its start time (one whole score range
//! per minute of difference, chitchat's generation, the same for every observer):
//! balancers started together compete as equals, one started later (a new balancer,
//! a restart) never outbids the others, and takes the gears with spare coverage,
//! which is the least any join can move. `examples/subsets.rs` measures the churn of
//! a join and a leave against a lower bound on the minimum (`bench/CLUSTER.md`).
//!
//! The older scheme, contiguous ring slices from evenly spaced starts ([`ring_assign`],
//! the contiguous-slice family of Google's Ringsteady), balances as well but moves
//! most assignments when the number of balancers changes; it remains as the fallback
//! should the repair ever fail. Twitter's deterministic aperture is patented and not
//! used.

use order::Edges;
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

/// The gears balancer `me` covers among `balancers` (all started at the same time):
/// [`Assignment`] for one balancer. A balancer not in the list covers nothing.
pub fn assign<'a>(
    me: &str,
    balancers: &[&str],
    gears: &[&'a str],
    percent: u32,
) -> BTreeSet<&'a str> {
    let members: Vec<(&str, u64)> = balancers.iter().map(|b| (*b, 0)).collect();
    let a = Assignment::new(&members, gears, percent);
    gears.iter().copied().filter(|g| a.covers(me, g)).collect()
}

/// The ring-slice scheme: balancer `me` of `balancers` covers the k consecutive gears
/// of the ring (gears ordered by stable hash) from position `rank·N/M`.
pub fn ring_assign<'a>(
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

/// Every live balancer's subset at once (see the module doc): what a balancer needs to
/// know which gears it covers, and which a peer covers (and so reports the health of).
#[derive(Clone, Debug, Default)]
pub struct Assignment {
    /// Balancer id → its index.
    balancers: std::collections::HashMap<String, usize>,
    /// Gear → its index.
    gears: std::collections::HashMap<String, usize>,
    /// Index → gear (sorted).
    gear_names: Vec<String>,
    /// Per balancer, the indices of its gears, sorted.
    sets: Vec<Vec<u32>>,
    k: usize,
}

impl Assignment {
    /// The subsets of `balancers` (id, start time in Unix milliseconds; duplicates
    /// ignored) over `gears` at coverage `percent`.
    pub fn new(balancers: &[(&str, u64)], gears: &[&str], percent: u32) -> Self {
        let mut bs: Vec<(&str, u64)> = balancers.to_vec();
        bs.sort_unstable();
        bs.dedup_by(|a, b| a.0 == b.0);
        let mut gs: Vec<&str> = gears.to_vec();
        gs.sort_unstable();
        gs.dedup();
        let (m, n) = (bs.len(), gs.len());
        let k = subset_size(n, m, percent);
        let sets = if k == n {
            vec![(0..n as u32).collect(); m]
        } else {
            greedy(&bs, &gs, k).unwrap_or_else(|| ring_sets(&bs, &gs, k))
        };
        Assignment {
            balancers: bs
                .iter()
                .enumerate()
                .map(|(i, b)| (b.0.to_string(), i))
                .collect(),
            gears: gs
                .iter()
                .enumerate()
                .map(|(i, g)| (g.to_string(), i))
                .collect(),
            gear_names: gs.iter().map(|g| g.to_string()).collect(),
            sets,
            k,
        }
    }

    /// Whether `balancer` covers `gear`.
    pub fn covers(&self, balancer: &str, gear: &str) -> bool {
        let (Some(&b), Some(&g)) = (self.balancers.get(balancer), self.gears.get(gear)) else {
            return false;
        };
        self.sets[b].binary_search(&(g as u32)).is_ok()
    }

    /// Gears per balancer.
    pub fn subset_size(&self) -> usize {
        self.k
    }

    /// The gears `balancer` covers (none for a balancer not in the assignment): its k
    /// gears, without walking the N others.
    pub fn subset_of(&self, balancer: &str) -> impl Iterator<Item = &str> {
        let set = self.balancers.get(balancer).map(|&b| &self.sets[b]);
        set.into_iter()
            .flatten()
            .map(|&g| self.gear_names[g as usize].as_str())
    }

    /// The gears covered by at least one of `balancers`: a set built from their
    /// subsets (O(k) per balancer), asked per gear in O(1) with [`Covered::contains`].
    pub fn covered_by<'a>(&self, balancers: impl IntoIterator<Item = &'a str>) -> Covered<'_> {
        let mut bits = vec![false; self.gear_names.len()];
        for b in balancers {
            if let Some(&i) = self.balancers.get(b) {
                for &g in &self.sets[i] {
                    bits[g as usize] = true;
                }
            }
        }
        Covered { all: self, bits }
    }
}

/// Gears covered by a set of balancers (see [`Assignment::covered_by`]).
pub struct Covered<'a> {
    all: &'a Assignment,
    bits: Vec<bool>,
}

impl Covered<'_> {
    /// Whether one of the balancers covers `gear`.
    pub fn contains(&self, gear: &str) -> bool {
        self.all.gears.get(gear).is_some_and(|&g| self.bits[g])
    }
}

/// The ring-slice sets (the fallback).
fn ring_sets(bs: &[(&str, u64)], gs: &[&str], k: usize) -> Vec<Vec<u32>> {
    let index: std::collections::HashMap<&str, u32> =
        gs.iter().enumerate().map(|(i, g)| (*g, i as u32)).collect();
    let ring = ring(gs.iter().copied());
    let (m, n) = (bs.len(), ring.len());
    (0..m)
        .map(|rank| {
            let mut v: Vec<u32> = slice(rank, m, n, k).map(|i| index[ring[i]]).collect();
            v.sort_unstable();
            v
        })
        .collect()
}

/// The greedy stable assignment with its repair; `None` if the repair failed (never
/// seen; the caller then falls back to ring slices).
fn greedy(bs: &[(&str, u64)], gs: &[&str], k: usize) -> Option<Vec<Vec<u32>>> {
    greedy_with_head(bs, gs, k, HEAD_FACTOR)
}

/// How many pairs, in multiples of the M × k the greedy takes, are laid out ahead (see
/// [`order::Edges`]); past them only the pairs that can still be taken are. Any factor gives
/// the same assignment; 2 was the fastest at M = 100 × N = 1 000 and 10 000 (1, 1.5,
/// 1.75, 2.5 and 4 tried): 1.3 and 14 ms where sorting every pair took 5.3 and 70 ms.
const HEAD_FACTOR: usize = 2;

/// The greedy's state: who has what, and how many balancers (with fewer than k gears)
/// and gears (under the pass's cap) have room.
struct Fill {
    has: Vec<bool>,
    bcnt: Vec<usize>,
    gcnt: Vec<usize>,
    n: usize,
    k: usize,
    cap: usize,
    open_b: usize,
    open_g: usize,
}

impl Fill {
    fn open(&self) -> bool {
        self.open_b > 0 && self.open_g > 0
    }

    fn can_take(&self, i: usize, j: usize) -> bool {
        self.bcnt[i] < self.k && self.gcnt[j] < self.cap && !self.has[i * self.n + j]
    }

    fn take(&mut self, i: usize, j: usize) {
        if self.can_take(i, j) {
            self.has[i * self.n + j] = true;
            self.bcnt[i] += 1;
            self.gcnt[j] += 1;
            self.open_b -= usize::from(self.bcnt[i] == self.k);
            self.open_g -= usize::from(self.gcnt[j] == self.cap);
        }
    }
}

/// [`greedy`] with the head of the order sized by `head_factor` (see [`order::Edges`]): the
/// same assignment for any factor.
fn greedy_with_head(
    bs: &[(&str, u64)],
    gs: &[&str],
    k: usize,
    head_factor: usize,
) -> Option<Vec<Vec<u32>>> {
    let (m, n) = (bs.len(), gs.len());
    let a = m * k / n;
    let hb: Vec<u64> = bs.iter().map(|b| stable_hash(b.0)).collect();
    let hg: Vec<u64> = gs.iter().map(|g| stable_hash(g)).collect();
    let started: Vec<u64> = bs.iter().map(|b| b.1).collect();
    let mut edges = Edges::new(hb, hg, &started, k, head_factor);
    let mut fill = Fill {
        has: vec![false; m * n],
        bcnt: vec![0; m],
        gcnt: vec![0; n],
        n,
        k,
        cap: a,
        open_b: m,
        open_g: n,
    };
    // Once no balancer or no gear has room, no later pair can be taken in the pass: it
    // ends there, as a walk to the last pair would, taking nothing more.
    for cap in [a, a + 1] {
        fill.cap = cap;
        fill.open_g = fill.gcnt.iter().filter(|&&c| c < cap).count();
        let mut x = 0;
        while x < edges.head.len() && fill.open() {
            let (i, j) = edges.get(x);
            fill.take(i, j);
            x += 1;
        }
        if fill.open() {
            for (i, j) in edges.rest(|i, j| fill.can_take(i, j)) {
                fill.take(i, j);
            }
        }
    }
    let Fill {
        mut has,
        mut bcnt,
        mut gcnt,
        ..
    } = fill;
    repair(&mut has, &mut bcnt, &mut gcnt, m, n, k, a)?;
    // Trust nothing: the fallback is better than an assignment off by one. One pass
    // over the pairs builds the sets and counts each gear's coverers again.
    let mut sets: Vec<Vec<u32>> = Vec::with_capacity(m);
    let mut cover = vec![0usize; n];
    for i in 0..m {
        let row = &has[i * n..(i + 1) * n];
        let set: Vec<u32> = (0..n as u32).filter(|&j| row[j as usize]).collect();
        if set.len() != k {
            return None;
        }
        for &j in &set {
            cover[j as usize] += 1;
        }
        sets.push(set);
    }
    cover
        .iter()
        .all(|c| (a..=a + 1).contains(c))
        .then_some(sets)
}

/// Largest search of one repair step before giving up.
const REPAIR_BUDGET: usize = 1 << 22;

/// Bring every balancer to k gears and every gear to a or a + 1 coverers by augmenting
/// paths (each moves gears along a chain of balancers); deterministic. `None` if a
/// step finds no path within its budget.
fn repair(
    has: &mut [bool],
    bcnt: &mut [usize],
    gcnt: &mut [usize],
    m: usize,
    n: usize,
    k: usize,
    a: usize,
) -> Option<()> {
    use std::collections::VecDeque;
    let mut short_from = 0;
    loop {
        if let Some(start) = (0..m).find(|&i| bcnt[i] < k) {
            // A balancer short: it takes a gear with room, or takes a full gear from a
            // holder that then does the same.
            let mut parent: Vec<Option<(usize, usize)>> = vec![None; m];
            let mut seen = vec![false; m];
            seen[start] = true;
            let mut queue = VecDeque::from([start]);
            let mut work = 0usize;
            let mut end = None;
            'search: while let Some(x) = queue.pop_front() {
                for want in [a, a + 1] {
                    if let Some(y) = (0..n).find(|&y| !has[x * n + y] && gcnt[y] < want) {
                        end = Some((x, y));
                        break 'search;
                    }
                }
                for y in (0..n).filter(|&y| !has[x * n + y]) {
                    for z in 0..m {
                        work += 1;
                        if !seen[z] && has[z * n + y] {
                            seen[z] = true;
                            parent[z] = Some((x, y));
                            queue.push_back(z);
                        }
                    }
                }
                if work > REPAIR_BUDGET {
                    return None;
                }
            }
            let (mut cur, y) = end?;
            has[cur * n + y] = true;
            gcnt[y] += 1;
            bcnt[start] += 1;
            while let Some((p, g)) = parent[cur] {
                has[cur * n + g] = false;
                has[p * n + g] = true;
                cur = p;
            }
            continue;
        }
        // No gear's count ever falls below a once there (a step only lowers one with
        // a + 1): the first short gear is never before the last one found.
        short_from = (short_from..n).find(|&j| gcnt[j] < a).unwrap_or(n);
        if short_from < n {
            let start = short_from;
            // A gear short while every balancer is full: a balancer without it takes
            // it and drops one of its gears with a + 1 coverers, or drops one with a,
            // which is then short in turn.
            let mut parent: Vec<Option<(usize, usize)>> = vec![None; n];
            let mut seen = vec![false; n];
            seen[start] = true;
            let mut queue = VecDeque::from([start]);
            let mut work = 0usize;
            let mut end = None;
            // The gears with a + 1, when they are few: the search ends at the first
            // balancer without `y` that holds one, at the first it holds. Asking that of
            // them first finds what scanning the rows in order would, where the scan
            // would end; the rows are scanned only when no such balancer exists.
            let surplus: Vec<usize> = (0..n).filter(|&w| gcnt[w] > a).collect();
            let sparse = surplus.len() * 8 < n;
            'search: while let Some(y) = queue.pop_front() {
                if sparse {
                    for x in (0..m).filter(|&x| !has[x * n + y]) {
                        let row = &has[x * n..(x + 1) * n];
                        if let Some(&w) = surplus.iter().find(|&&w| row[w]) {
                            end = Some((x, y, w));
                            break 'search;
                        }
                    }
                }
                for x in (0..m).filter(|&x| !has[x * n + y]) {
                    let row = &has[x * n..(x + 1) * n];
                    for w in (0..n).filter(|&w| row[w]) {
                        work += 1;
                        if gcnt[w] > a {
                            end = Some((x, y, w));
                            break 'search;
                        }
                        if !seen[w] {
                            seen[w] = true;
                            parent[w] = Some((x, y));
                            queue.push_back(w);
                        }
                    }
                }
                if work > REPAIR_BUDGET {
                    return None;
                }
            }
            let (x, mut y, w) = end?;
            // x takes y and drops w; walking back, each short gear on the path was
            // dropped by the balancer that took its predecessor.
            has[x * n + y] = true;
            has[x * n + w] = false;
            gcnt[w] -= 1;
            gcnt[start] += 1;
            while let Some((px, py)) = parent[y] {
                // `px` took `py` and dropped `y`.
                has[px * n + py] = true;
                has[px * n + y] = false;
                y = py;
            }
            continue;
        }
        return Some(());
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

mod order;
#[cfg(test)]
mod tests;
