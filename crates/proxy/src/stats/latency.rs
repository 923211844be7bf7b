//! Lock-free response-time records of one backend.
//!
//! Owns [`Histogram`] (fixed buckets of relaxed atomic counters: one bucket increment and
//! one sum increment per response, read and made cumulative only at scrape time, for
//! `/metrics`) and [`Recent`] (a small ring of per-interval mean response times, written
//! by the stats sampler, for the status page's sparkline and HAProxy's `rtime`).
//!
//! What is measured: from the moment a request is handed to a backend (pooled connection
//! taken or new connection opened) to the moment the backend's response head arrives.
//! Failed attempts are not observed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the histogram buckets, in seconds (the last bucket, +Inf, is implied).
/// Up to a minute: the default `timeouts.server`.
pub const BUCKETS_SECS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The same bounds in microseconds.
const BUCKETS_US: [u64; 15] = [
    1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
    5_000_000, 10_000_000, 30_000_000, 60_000_000,
];

/// Number of buckets including +Inf.
const SLOTS: usize = BUCKETS_US.len() + 1;

/// Response times of one backend, bucketed.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Observations per bucket (not cumulative); the last one is above every bound.
    counts: [AtomicU64; SLOTS],
    sum_us: AtomicU64,
}

impl Histogram {
    /// Record one response time: two relaxed atomic additions.
    pub fn observe(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        // First bound >= us: Prometheus buckets are "less than or equal".
        let i = BUCKETS_US.partition_point(|&b| b < us);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed)),
            sum_us: self.sum_us.load(Ordering::Relaxed),
        }
    }
}

/// A copy of a [`Histogram`] at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistogramSnapshot {
    pub counts: [u64; SLOTS],
    pub sum_us: u64,
}

impl HistogramSnapshot {
    /// Observations in all buckets.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn sum_secs(&self) -> f64 {
        self.sum_us as f64 / 1e6
    }

    /// `(upper bound in seconds, observations <= bound)` for every finite bound, then
    /// `(+Inf, count)`: the Prometheus shape. The last entry always equals [`Self::count`].
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut acc = 0;
        let mut out = Vec::with_capacity(SLOTS);
        for (i, n) in self.counts.iter().enumerate() {
            acc += n;
            out.push((BUCKETS_SECS.get(i).copied().unwrap_or(f64::INFINITY), acc));
        }
        out
    }
}

/// Points kept by [`Recent`].
pub const RECENT_POINTS: usize = 60;
/// Seconds covered by one point of [`Recent`] (so the ring covers five minutes).
pub const RECENT_INTERVAL_SECS: u64 = 5;

/// Mean response time per interval over the last few minutes, newest last.
///
/// Written only by the stats sampler (one writer), read by status reports. Each slot is
/// one atomic holding the interval's response count (high 32 bits) and mean time in
/// microseconds (low 32 bits), so a reader never sees half a point.
#[derive(Debug)]
pub struct Recent {
    slots: [AtomicU64; RECENT_POINTS],
    /// Points written so far; the next one goes to `written % RECENT_POINTS`.
    written: AtomicU64,
    /// Histogram count and sum at the previous point (sampler-only).
    prev_count: AtomicU64,
    prev_sum_us: AtomicU64,
}

impl Default for Recent {
    fn default() -> Self {
        Recent {
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
            written: AtomicU64::new(0),
            prev_count: AtomicU64::new(0),
            prev_sum_us: AtomicU64::new(0),
        }
    }
}

/// One interval of [`Recent`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub responses: u64,
    /// Mean time to the response head; `None` when there was no response.
    pub mean_ms: Option<f64>,
}

impl Recent {
    /// Close an interval: the responses observed by `h` since the previous call become
    /// one point.
    pub fn push(&self, h: &HistogramSnapshot) {
        let (count, sum) = (h.count(), h.sum_us);
        let prev_count = self.prev_count.swap(count, Ordering::Relaxed);
        let prev_sum = self.prev_sum_us.swap(sum, Ordering::Relaxed);
        let n = count.saturating_sub(prev_count);
        let mean_us = sum.saturating_sub(prev_sum).checked_div(n).unwrap_or(0);
        let packed = (n.min(u32::MAX as u64) << 32) | mean_us.min(u32::MAX as u64);
        let at = self.written.load(Ordering::Relaxed);
        self.slots[(at % RECENT_POINTS as u64) as usize].store(packed, Ordering::Relaxed);
        self.written.store(at + 1, Ordering::Relaxed);
    }

    /// The points written so far, oldest first (at most [`RECENT_POINTS`]).
    pub fn points(&self) -> Vec<Point> {
        let written = self.written.load(Ordering::Relaxed);
        let kept = written.min(RECENT_POINTS as u64);
        (written - kept..written)
            .map(|i| {
                let v = self.slots[(i % RECENT_POINTS as u64) as usize].load(Ordering::Relaxed);
                let responses = v >> 32;
                Point {
                    responses,
                    mean_ms: (responses > 0).then(|| (v & u32::MAX as u64) as f64 / 1000.0),
                }
            })
            .collect()
    }
}

/// Mean of `points` weighted by their response counts; `None` without any response.
pub fn window_mean_ms(points: &[Point]) -> Option<f64> {
    let (n, total) = points
        .iter()
        .fold((0u64, 0f64), |(n, t), p| match p.mean_ms {
            Some(m) => (n + p.responses, t + m * p.responses as f64),
            None => (n, t),
        });
    (n > 0).then(|| total / n as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_less_or_equal() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(1_000)); // exactly 1 ms: first bucket
        h.observe(Duration::from_micros(1_001)); // just over: second
        h.observe(Duration::from_secs(3600)); // over every bound: +Inf
        let s = h.snapshot();
        let c = s.cumulative();
        assert_eq!(c.len(), 16);
        assert_eq!(c[0], (0.001, 1));
        assert_eq!(c[1], (0.0025, 2));
        assert_eq!(c[14], (60.0, 2));
        assert_eq!(c[15].1, 3);
        assert!(c[15].0.is_infinite());
        assert_eq!(s.count(), 3);
        assert_eq!(s.sum_us, 1_000 + 1_001 + 3_600_000_000);
    }

    #[test]
    fn recent_points_are_interval_means() {
        let h = Histogram::default();
        let r = Recent::default();
        assert!(r.points().is_empty());
        h.observe(Duration::from_millis(10));
        h.observe(Duration::from_millis(30));
        r.push(&h.snapshot());
        r.push(&h.snapshot()); // nothing new: a point without responses
        h.observe(Duration::from_millis(100));
        r.push(&h.snapshot());
        let p = r.points();
        assert_eq!(p.len(), 3);
        assert_eq!(
            p[0],
            Point {
                responses: 2,
                mean_ms: Some(20.0)
            }
        );
        assert_eq!(p[1].mean_ms, None);
        assert_eq!(p[2].mean_ms, Some(100.0));
        assert_eq!(window_mean_ms(&p), Some(140.0 / 3.0));
    }

    #[test]
    fn recent_ring_keeps_the_newest() {
        let h = Histogram::default();
        let r = Recent::default();
        for i in 0..(RECENT_POINTS as u64 + 7) {
            h.observe(Duration::from_millis(i + 1));
            r.push(&h.snapshot());
        }
        let p = r.points();
        assert_eq!(p.len(), RECENT_POINTS);
        assert_eq!(p[0].mean_ms, Some(8.0), "oldest kept");
        assert_eq!(
            p[RECENT_POINTS - 1].mean_ms,
            Some(RECENT_POINTS as f64 + 7.0)
        );
    }
}
