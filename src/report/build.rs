//! Reading the report from the counters ([`crate::stats`]) and a routing snapshot.

use std::sync::atomic::{AtomicU64, Ordering};

use super::types::{BackendReport, ByClass, FrontendReport, ResponseTimeReport};
use crate::routing::Snapshot;
use crate::stats::latency::{self, RECENT_INTERVAL_SECS};
use crate::stats::FrontendStats;
use crate::time::unix_secs;

impl FrontendReport {
    pub fn read(f: &FrontendStats) -> Self {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FrontendReport {
            connections_current: r(&f.connections_current),
            connections_max: r(&f.connections_max),
            connections_total: r(&f.connections_total),
            connections_refused: r(&f.connections_refused),
            client_timeouts: r(&f.client_timeouts),
            requests_current: r(&f.requests_current),
            requests_total: r(&f.requests_total),
            responses: ByClass::read(&f.responses),
            no_backend: r(&f.no_backend),
            connections_limit: r(&f.connections_limit),
            requests_max: r(&f.requests_max),
            bytes_received: r(&f.traffic.received),
            bytes_sent: r(&f.traffic.sent),
            connection_rate: f.connection_rate.current(),
            connection_rate_max: f.connection_rate.max(),
            request_rate: f.request_rate.current(),
            request_rate_max: f.request_rate.max(),
        }
    }
}

/// One report row per backend of a snapshot.
pub fn backend_reports(table: &Snapshot) -> Vec<BackendReport> {
    let now = unix_secs();
    table
        .iter()
        .map(|(e, b)| {
            let s = &b.stats;
            let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
            let since = now.saturating_sub(r(&s.last_change));
            let hist = s.latency.snapshot();
            let points = s.recent.points();
            let responses = hist.count();
            BackendReport {
                name: b.spec.name.clone(),
                addr: b.spec.addr.to_string(),
                gear_dns: b.spec.gear_dns.clone(),
                state: e.state(),
                in_subset: e.in_subset,
                last_check: b.last_check.load_full().map(|c| (*c).clone()),
                tunnels: b.tunnels.load(Ordering::Relaxed),
                sessions: r(&s.outstanding),
                sessions_max: r(&s.outstanding_max),
                requests_total: r(&s.requests),
                errors: s.errors(),
                connect_errors: r(&s.connect_errors),
                response_errors: r(&s.response_errors),
                timeouts: r(&s.timeouts),
                responses: ByClass::read(&s.responses),
                connections_open: b.pool.open_connections(),
                connections_idle: b.pool.idle_connections() as u64,
                cookie: b.sticky.clone(),
                request_rate: s.rate.current(),
                request_rate_max: s.rate.max(),
                redispatches: r(&s.redispatches),
                bytes_sent: r(&b.pool.traffic().sent),
                bytes_received: r(&b.pool.traffic().received),
                checks_ok: r(&s.checks_ok),
                checks_failed: r(&s.checks_failed),
                down_transitions: r(&s.went_down),
                last_change_secs: since,
                downtime_secs: r(&s.downtime_before) + if e.up { 0 } else { since },
                response_time: ResponseTimeReport {
                    responses,
                    mean_ms: (responses > 0)
                        .then(|| hist.sum_us as f64 / 1000.0 / responses as f64),
                    interval_secs: RECENT_INTERVAL_SECS,
                    recent_ms: points.iter().map(|p| p.mean_ms).collect(),
                    recent_mean_ms: latency::window_mean_ms(&points),
                    recent_responses: points.iter().map(|p| p.responses).sum(),
                },
                backup: b.spec.backup,
                queued: b.queued.load(Ordering::Relaxed),
                max_connections: b.spec.max_connections,
                version: e
                    .announced
                    .as_ref()
                    .map(|v| v.to_string())
                    .or_else(|| b.spec.version.clone()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_tracks_peak() {
        let f = FrontendStats::default();
        f.connection_opened();
        f.connection_opened();
        f.connection_closed();
        f.connection_opened();
        let r = FrontendReport::read(&f);
        assert_eq!(
            (
                r.connections_current,
                r.connections_max,
                r.connections_total
            ),
            (2, 2, 3)
        );
    }
}
