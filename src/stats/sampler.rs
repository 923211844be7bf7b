//! The stats sampler: once a second, off the request path, turns counters into rates and
//! the response-time ring.
//!
//! Owns [`Rate`] (per-second rate of a monotonic counter and its maximum, HAProxy's
//! `rate`/`rate_max`/`req_rate`) and the [`run`] task. It is the only writer of rates and
//! of [`Recent`](super::latency::Recent) points; the request path only bumps counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::latency::RECENT_INTERVAL_SECS;
use super::FrontendStats;
use crate::routing::{Router, RoutingTable};

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

/// Sample every second until `stop`.
pub async fn run(router: Arc<Router>, frontend: Arc<FrontendStats>, stop: CancellationToken) {
    let period = Duration::from_secs(1);
    let mut tick = tokio::time::interval_at(Instant::now() + period, period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last = Instant::now();
    let mut ticks: u64 = 0;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = Instant::now();
        ticks += 1;
        let close_point = ticks.is_multiple_of(RECENT_INTERVAL_SECS);
        sample(&router.snapshot(), &frontend, now - last, close_point);
        last = now;
    }
}

/// One sampling step: update every rate; with `close_point`, close the current
/// response-time interval of every backend.
pub fn sample(
    table: &RoutingTable,
    frontend: &FrontendStats,
    elapsed: Duration,
    close_point: bool,
) {
    let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
    frontend.sample_inflight();
    frontend
        .connection_rate
        .update(r(&frontend.connections_total), elapsed);
    frontend
        .request_rate
        .update(r(&frontend.requests_total), elapsed);
    for e in table.entries() {
        let s = &e.backend.stats;
        s.rate.update(r(&s.requests), elapsed);
        if close_point {
            s.recent.push(&s.latency.snapshot());
        }
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
