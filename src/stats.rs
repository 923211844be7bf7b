//! Counters and the status report built from them.
//!
//! Owns the per-frontend and per-backend counters (plain relaxed atomics, bumped on the
//! request path without locks) and [`StatusReport`], the one shape in which status leaves
//! the process: `/gearlb-status.json` on the status listener and `gearlb ctl status`.
//! Field names in the report are a public interface: add, don't rename.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::routing::{BackendState, CheckReport, RoutingTable};

/// Index of a status code's class (1xx → 0 … 5xx → 4).
fn class_index(status: u16) -> usize {
    (status / 100).clamp(1, 5) as usize - 1
}

/// Counters of the client side.
#[derive(Debug, Default)]
pub struct FrontendStats {
    pub connections_current: AtomicU64,
    pub connections_max: AtomicU64,
    pub connections_total: AtomicU64,
    /// Connections closed at once because `limits.max_connections` was reached.
    pub connections_refused: AtomicU64,
    /// Connections closed for client inactivity (`timeouts.client`).
    pub client_timeouts: AtomicU64,
    pub requests_total: AtomicU64,
    pub requests_current: AtomicU64,
    pub responses: [AtomicU64; 5],
    /// Requests answered by the balancer itself because no backend was available (503).
    pub no_backend: AtomicU64,
}

impl FrontendStats {
    pub fn connection_opened(&self) {
        self.connections_total.fetch_add(1, Ordering::Relaxed);
        let now = self.connections_current.fetch_add(1, Ordering::Relaxed) + 1;
        self.connections_max.fetch_max(now, Ordering::Relaxed);
    }

    pub fn connection_closed(&self) {
        self.connections_current.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn response(&self, status: u16) {
        self.responses[class_index(status)].fetch_add(1, Ordering::Relaxed);
    }
}

/// Counters of one backend.
#[derive(Debug, Default)]
pub struct BackendStats {
    /// Requests sent and not yet fully answered (HAProxy `scur`).
    pub outstanding: AtomicU64,
    pub outstanding_max: AtomicU64,
    /// Requests sent (HAProxy `stot`).
    pub requests: AtomicU64,
    /// Failed connection attempts (HAProxy `econ`).
    pub connect_errors: AtomicU64,
    /// Failures after the connection was made: reset, closed, bad response (`eresp`).
    pub response_errors: AtomicU64,
    /// Response headers not received within `timeouts.server`.
    pub timeouts: AtomicU64,
    pub responses: [AtomicU64; 5],
    pub connections_opened: AtomicU64,
}

impl BackendStats {
    pub fn request_started(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let now = self.outstanding.fetch_add(1, Ordering::Relaxed) + 1;
        self.outstanding_max.fetch_max(now, Ordering::Relaxed);
    }

    pub fn request_finished(&self) {
        self.outstanding.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn response(&self, status: u16) {
        self.responses[class_index(status)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn errors(&self) -> u64 {
        self.connect_errors.load(Ordering::Relaxed)
            + self.response_errors.load(Ordering::Relaxed)
            + self.timeouts.load(Ordering::Relaxed)
    }
}

/// Responses by status class.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ByClass {
    #[serde(rename = "1xx")]
    pub c1: u64,
    #[serde(rename = "2xx")]
    pub c2: u64,
    #[serde(rename = "3xx")]
    pub c3: u64,
    #[serde(rename = "4xx")]
    pub c4: u64,
    #[serde(rename = "5xx")]
    pub c5: u64,
}

impl ByClass {
    fn read(a: &[AtomicU64; 5]) -> Self {
        let r = |i: usize| a[i].load(Ordering::Relaxed);
        ByClass {
            c1: r(0),
            c2: r(1),
            c3: r(2),
            c4: r(3),
            c5: r(4),
        }
    }
}

/// The status of one balancer, as served and printed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    pub version: String,
    pub pid: u32,
    pub uptime_secs: u64,
    /// Gear uuid in cartridge mode, else `null`.
    pub gear_uuid: Option<String>,
    pub listen: ListenReport,
    pub frontend: FrontendReport,
    pub backends: Vec<BackendReport>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenReport {
    pub proxy: String,
    pub status: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrontendReport {
    pub connections_current: u64,
    pub connections_max: u64,
    pub connections_total: u64,
    pub connections_refused: u64,
    pub client_timeouts: u64,
    pub requests_current: u64,
    pub requests_total: u64,
    pub responses: ByClass,
    pub no_backend: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendReport {
    pub name: String,
    pub addr: String,
    pub gear_dns: Option<String>,
    pub state: BackendState,
    /// In this balancer's subset (else used only as a backup or for sticky requests).
    pub in_subset: bool,
    /// Latest active health check, if one ran.
    pub last_check: Option<CheckReport>,
    /// Upgraded connections (WebSocket) open now.
    pub tunnels: u64,
    /// Requests in flight now (HAProxy `scur`).
    pub sessions: u64,
    pub sessions_max: u64,
    pub requests_total: u64,
    pub errors: u64,
    pub connect_errors: u64,
    pub response_errors: u64,
    pub timeouts: u64,
    pub responses: ByClass,
    pub connections_open: u64,
    pub connections_idle: u64,
}

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
        }
    }
}

/// One report row per backend of a snapshot.
pub fn backend_reports(table: &RoutingTable) -> Vec<BackendReport> {
    table
        .entries()
        .iter()
        .map(|e| {
            let b = &e.backend;
            let s = &b.stats;
            let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
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
            }
        })
        .collect()
}

impl StatusReport {
    /// Human-readable text for `gearlb ctl status`.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let f = &self.frontend;
        out.push_str(&format!(
            "gearlb {} pid {} up {}s  proxy {}  status {}\n",
            self.version, self.pid, self.uptime_secs, self.listen.proxy, self.listen.status
        ));
        out.push_str(&format!(
            "frontend: {} conns (max {}, total {}, refused {}), {} requests in flight, {} total; 2xx {} 3xx {} 4xx {} 5xx {}; no backend {}\n",
            f.connections_current,
            f.connections_max,
            f.connections_total,
            f.connections_refused,
            f.requests_current,
            f.requests_total,
            f.responses.c2,
            f.responses.c3,
            f.responses.c4,
            f.responses.c5,
            f.no_backend
        ));
        if self.backends.is_empty() {
            out.push_str("backends: none\n");
            return out;
        }
        let w = self
            .backends
            .iter()
            .map(|b| b.name.len())
            .max()
            .unwrap_or(4)
            .max(4);
        out.push_str(&format!(
            "{:<w$}  {:<22}  {:<8}  {:>8}  {:>10}  {:>7}  {:>6}  CHECK\n",
            "NAME", "ADDRESS", "STATE", "SESSIONS", "REQUESTS", "ERRORS", "CONNS"
        ));
        for b in &self.backends {
            let state = serde_json::to_value(b.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            let check = match &b.last_check {
                Some(c) => format!(
                    "{} {} ({} ms)",
                    if c.ok { "ok" } else { "FAIL" },
                    c.result,
                    c.ms
                ),
                None => "-".into(),
            };
            out.push_str(&format!(
                "{:<w$}  {:<22}  {:<8}  {:>8}  {:>10}  {:>7}  {:>6}  {}\n",
                b.name,
                b.addr,
                state,
                b.sessions,
                b.requests_total,
                b.errors,
                b.connections_open,
                check
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_of_status() {
        assert_eq!(class_index(101), 0);
        assert_eq!(class_index(200), 1);
        assert_eq!(class_index(404), 3);
        assert_eq!(class_index(503), 4);
        assert_eq!(class_index(999), 4);
        assert_eq!(class_index(0), 0);
    }

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
