//! The greedy's order of the (balancer, gear) pairs, laid out lazily ([`Edges`]): the
//! part of computing the subsets that grows with M × N.

/// A balancer's score range per minute of later start.
const TIER_MS: u128 = 60_000;

pub(super) fn mix(mut x: u64) -> u64 {
    // splitmix64's finaliser: every input bit moves every output bit.
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Scores are 48 bits wide: one whole range per minute of later start ([`TIER_MS`]).
const SCORE_BITS: u32 = 48;

/// The (balancer, gear) pairs in the greedy's order: best score first, then balancer,
/// then gear (a total order). A pair's *rank* is `2^48 − 1 − score + penalty`, so the
/// order is the ascending order of (rank, balancer, gear).
///
/// Taking pairs best first ends long before the last pair (M × k of M × N are taken),
/// so the order is laid out lazily and exactly: the pairs whose rank is below a limit
/// chosen to hold about `HEAD_FACTOR × M × k` of them (the head) are packed in one
/// `u128` each and counted into small buckets by rank, and a bucket is sorted only when
/// the greedy reaches it. Past the head, only the pairs of a balancer and a gear that
/// both still have room can be taken (room only shrinks during a pass): those are laid
/// out and sorted then ([`Edges::rest`]). Either way the greedy takes what a walk of
/// the full sort would.
pub(super) struct Edges {
    /// Head pairs, bucketed by rank: `rank << 64 | balancer << 32 | gear`.
    pub(super) head: Vec<u128>,
    /// Bucket `b` is `head[starts[b]..starts[b + 1]]`.
    starts: Vec<usize>,
    /// Buckets sorted so far, and the head's prefix they make.
    next_bucket: usize,
    sorted: usize,
    /// Inputs, to rank the pairs past the head.
    hb: Vec<u64>,
    hg: Vec<u64>,
    penalty: Vec<u128>,
    limit: u128,
}

fn pair_rank(hb: u64, hg: u64, penalty: u128) -> u128 {
    let raw = mix(hb ^ hg.rotate_left(32)) >> (64 - SCORE_BITS);
    u128::from((1u64 << SCORE_BITS) - 1 - raw) + penalty
}

impl Edges {
    /// The order of balancers with hashes `hb` started at `started` (Unix ms) and gears
    /// with hashes `hg`, each balancer to take `k` gears.
    pub(super) fn new(
        hb: Vec<u64>,
        hg: Vec<u64>,
        started: &[u64],
        k: usize,
        head_factor: usize,
    ) -> Self {
        let (m, n) = (hb.len(), hg.len());
        let first = started.iter().copied().min().unwrap_or(0);
        let penalty: Vec<u128> = started
            .iter()
            .map(|s| (u128::from(s - first) << SCORE_BITS) / TIER_MS)
            .collect();
        // Ranks of balancers without penalty are uniform below 2^48: this limit keeps
        // about head_factor × k of each one's N pairs.
        let full = 1u128 << SCORE_BITS;
        let limit = if n == 0 {
            0
        } else {
            (full * (head_factor * k) as u128 / n as u128).min(full)
        };
        let mut head: Vec<u128> = Vec::with_capacity((m * k * head_factor).min(m * n));
        for (i, &b) in hb.iter().enumerate() {
            if penalty[i] >= limit {
                continue;
            }
            for (j, &g) in hg.iter().enumerate() {
                let rank = pair_rank(b, g, penalty[i]);
                if rank < limit {
                    head.push(rank << 64 | (i as u128) << 32 | j as u128);
                }
            }
        }
        // Counting sort into buckets of about 16 pairs by rank; each is sorted later.
        // Buckets are ranges of ranks 2^shift wide: a shift, not a division, per pair.
        let want = (head.len() / 16).max(1) as u64;
        let shift = (64 - (limit as u64).leading_zeros()).saturating_sub(64 - want.leading_zeros());
        let buckets = ((limit as u64).saturating_sub(1) >> shift) as usize + 1;
        let bucket = |e: u128| ((e >> 64) as u64 >> shift) as usize;
        let mut starts = vec![0usize; buckets + 1];
        for &e in &head {
            starts[bucket(e) + 1] += 1;
        }
        for b in 0..buckets {
            starts[b + 1] += starts[b];
        }
        let mut fill = starts.clone();
        let mut laid = vec![0u128; head.len()];
        for &e in &head {
            let b = bucket(e);
            laid[fill[b]] = e;
            fill[b] += 1;
        }
        Edges {
            head: laid,
            starts,
            next_bucket: 0,
            sorted: 0,
            hb,
            hg,
            penalty,
            limit,
        }
    }

    /// The `x`-th pair of the order (balancer, gear), `x` within the head.
    pub(super) fn get(&mut self, x: usize) -> (usize, usize) {
        while x >= self.sorted {
            let b = self.next_bucket;
            self.head[self.starts[b]..self.starts[b + 1]].sort_unstable();
            self.sorted = self.starts[b + 1];
            self.next_bucket += 1;
        }
        let e = self.head[x];
        ((e >> 32) as u32 as usize, e as u32 as usize)
    }

    /// The pairs past the head of balancer `i` and gear `j` with `open(i, j)`, in order.
    pub(super) fn rest(&self, open: impl Fn(usize, usize) -> bool) -> Vec<(usize, usize)> {
        let mut rest: Vec<(u128, u32, u32)> = Vec::new();
        for (i, &b) in self.hb.iter().enumerate() {
            for (j, &g) in self.hg.iter().enumerate() {
                if open(i, j) {
                    let rank = pair_rank(b, g, self.penalty[i]);
                    if rank >= self.limit {
                        rest.push((rank, i as u32, j as u32));
                    }
                }
            }
        }
        rest.sort_unstable();
        rest.into_iter()
            .map(|(_, i, j)| (i as usize, j as usize))
            .collect()
    }
}
