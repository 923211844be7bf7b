//! The stats sampler: once a second, off the request path, turns counters into rates and
//! the response-time ring.
//!
//! Owns the [`run`] task. It is the only writer of [`Rate`](crate::stats::Rate)s and of
//! [`Recent`](crate::stats::latency::Recent) points; the request path only bumps
//! counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::routing::{Router, Snapshot};
use crate::stats::latency::RECENT_INTERVAL_SECS;
use crate::stats::FrontendStats;

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
pub fn sample(table: &Snapshot, frontend: &FrontendStats, elapsed: Duration, close_point: bool) {
    let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
    frontend.sample_inflight();
    frontend
        .connection_rate
        .update(r(&frontend.connections_total), elapsed);
    frontend
        .request_rate
        .update(r(&frontend.requests_total), elapsed);
    for t in table.targets() {
        let s = &t.stats;
        s.rate.update(r(&s.requests), elapsed);
        if close_point {
            s.recent.push(&s.latency.snapshot());
        }
    }
}
