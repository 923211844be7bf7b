//! [`Rate`]: the per-second rate of a monotonic counter and its maximum (HAProxy's
//! `rate`/`rate_max`/`req_rate`). Only the sampler writes it; the request path never
//! touches it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Events per second of a monotonic counter, over the last sampling interval.
#[derive(Debug, Default)]
pub struct Rate {
    prev_total: AtomicU64,
    per_sec: AtomicU64,
    max: AtomicU64,
}

impl Rate {
    /// The counter stands at `total`, `elapsed` after the previous update.
    pub fn update(&self, total: u64, elapsed: Duration) {
        let prev = self.prev_total.swap(total, Ordering::Relaxed);
        let secs = elapsed.as_secs_f64();
        let r = if secs > 0.0 {
            (total.saturating_sub(prev) as f64 / secs).round() as u64
        } else {
            0
        };
        self.per_sec.store(r, Ordering::Relaxed);
        self.max.fetch_max(r, Ordering::Relaxed);
    }

    /// Events per second over the last interval.
    pub fn current(&self) -> u64 {
        self.per_sec.load(Ordering::Relaxed)
    }

    /// Highest rate seen.
    pub fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_per_second_and_max() {
        let r = Rate::default();
        r.update(10, Duration::from_secs(1));
        assert_eq!((r.current(), r.max()), (10, 10));
        r.update(14, Duration::from_secs(2));
        assert_eq!((r.current(), r.max()), (2, 10));
        r.update(14, Duration::ZERO);
        assert_eq!(r.current(), 0);
    }
}
