//! Counters and the status report built from them.
//!
//! Owns the per-frontend and per-backend counters (plain relaxed atomics, bumped on the
//! request path without locks) and [`StatusReport`], the one shape in which status leaves
//! the process: `/gearlb-status.json` on the status listener and `gearlb ctl status`, and
//! the source of the HTML page and the HAProxy CSV. Field names in the report are a
//! public interface: add (with `#[serde(default)]`), don't rename.
//!
//! [`latency`] holds the lock-free response-time histogram and ring; [`sampler`] the
//! once-a-second task that derives rates and ring points from the counters;
//! [`availability`] whether any backend can take a request, and its history.

pub mod availability;
pub mod latency;
pub mod sampler;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::routing::{BackendState, CheckReport, RoutingTable};
use latency::{Histogram, Recent, RECENT_INTERVAL_SECS};
pub use sampler::Rate;

/// Index of a status code's class (1xx → 0 … 5xx → 4).
fn class_index(status: u16) -> usize {
    (status / 100).clamp(1, 5) as usize - 1
}

/// Unix time, seconds.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Bytes moved on some connections (headers, bodies and tunnelled bytes alike), counted
/// by the socket wrapper [`crate::proxy::io::Counted`].
#[derive(Debug, Default)]
pub struct Traffic {
    pub received: AtomicU64,
    pub sent: AtomicU64,
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
    /// Idle keep-alive connections holding no HTTP state now (see `proxy::client`).
    pub connections_parked: AtomicU64,
    pub requests_total: AtomicU64,
    pub requests_current: AtomicU64,
    pub responses: [AtomicU64; 5],
    /// Requests answered by the balancer itself because no backend was available (503).
    pub no_backend: AtomicU64,
    /// `limits.max_connections` (HAProxy `slim`), set once at start.
    pub connections_limit: AtomicU64,
    /// Most requests in flight at once.
    pub requests_max: AtomicU64,
    /// Bytes read from and written to client connections.
    pub traffic: Arc<Traffic>,
    /// New connections per second (sampled).
    pub connection_rate: Rate,
    /// New requests per second (sampled).
    pub request_rate: Rate,
    /// Moving average of sessions on the backends, requests in flight and open tunnels
    /// (f64 bits; sampled once a second): the old autoscaler averaged HAProxy's
    /// `BACKEND` `scur`, which counts both; the scaler adds it up across balancers.
    pub inflight_avg: AtomicU64,
    /// Weight of each new sample in `inflight_avg` (f64 bits), from the averaging window.
    pub inflight_alpha: AtomicU64,
    /// Upgraded connections (WebSocket) whose tunnel is open now. Each is also one of
    /// `connections_current`, but not of `requests_current`.
    pub tunnels_current: AtomicU64,
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

    pub fn request_started(&self) {
        self.requests_total.fetch_add(1, Ordering::Relaxed);
        let now = self.requests_current.fetch_add(1, Ordering::Relaxed) + 1;
        // Load first: the maximum rarely moves, a write on every request would bounce
        // the cache line.
        if now > self.requests_max.load(Ordering::Relaxed) {
            self.requests_max.fetch_max(now, Ordering::Relaxed);
        }
    }

    pub fn response(&self, status: u16) {
        self.responses[class_index(status)].fetch_add(1, Ordering::Relaxed);
    }

    /// Average requests in flight over about `window` (see `inflight_avg`).
    pub fn set_average_window(&self, window: std::time::Duration) {
        let alpha = 1.0 - (-1.0 / window.as_secs_f64().max(1.0)).exp();
        self.inflight_alpha
            .store(alpha.to_bits(), Ordering::Relaxed);
    }

    /// The moving average of requests in flight and open tunnels.
    pub fn inflight_average(&self) -> f64 {
        f64::from_bits(self.inflight_avg.load(Ordering::Relaxed))
    }

    /// Sessions on the backends now: requests in flight and open tunnels (an upgrade
    /// request becomes a tunnel once its `101` went out: counted once).
    pub fn sessions_now(&self) -> u64 {
        self.requests_current.load(Ordering::Relaxed) + self.tunnels_current.load(Ordering::Relaxed)
    }

    /// Fold the current sessions into the average (once a second).
    pub fn sample_inflight(&self) {
        let alpha = f64::from_bits(self.inflight_alpha.load(Ordering::Relaxed));
        let alpha = if alpha > 0.0 {
            alpha
        } else {
            1.0 - (-1.0f64 / 50.0).exp()
        };
        let now = self.sessions_now() as f64;
        let avg = self.inflight_average();
        self.inflight_avg
            .store((avg + (now - avg) * alpha).to_bits(), Ordering::Relaxed);
    }
}

/// Counters of one backend.
#[derive(Debug)]
pub struct BackendStats {
    /// Sessions on this backend (HAProxy `scur`): requests sent and not yet fully
    /// answered, and open tunnels (an upgrade request stays one until its tunnel
    /// closes). What least-outstanding selection compares, as HAProxy's `leastconn`.
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
    /// Requests that left this backend for another one after it failed them (HAProxy
    /// `wredis`).
    pub redispatches: AtomicU64,
    /// Time to the response head.
    pub latency: Histogram,
    /// Recent mean time to the response head (sampled).
    pub recent: Recent,
    /// Requests per second (sampled).
    pub rate: Rate,
    pub checks_ok: AtomicU64,
    pub checks_failed: AtomicU64,
    /// Up → down transitions (HAProxy `chkdown`).
    pub went_down: AtomicU64,
    /// Unix time of the last up/down transition, else of the backend's creation.
    pub last_change: AtomicU64,
    /// Seconds spent down, not counting the current down period (HAProxy `downtime`).
    pub downtime_before: AtomicU64,
}

impl Default for BackendStats {
    fn default() -> Self {
        BackendStats {
            outstanding: AtomicU64::new(0),
            outstanding_max: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            connect_errors: AtomicU64::new(0),
            response_errors: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            responses: Default::default(),
            connections_opened: AtomicU64::new(0),
            redispatches: AtomicU64::new(0),
            latency: Histogram::default(),
            recent: Recent::default(),
            rate: Rate::default(),
            checks_ok: AtomicU64::new(0),
            checks_failed: AtomicU64::new(0),
            went_down: AtomicU64::new(0),
            last_change: AtomicU64::new(unix_now()),
            downtime_before: AtomicU64::new(0),
        }
    }
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

    /// A response head arrived `d` after the request was handed to this backend.
    pub fn response_head(&self, d: Duration) {
        self.latency.observe(d);
    }

    /// An active health check's result (health supervisor only).
    pub fn check_result(&self, ok: bool) {
        let c = if ok {
            &self.checks_ok
        } else {
            &self.checks_failed
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The backend's health changed (health supervisor only).
    pub fn health_changed(&self, up: bool) {
        let now = unix_now();
        let since = self.last_change.swap(now, Ordering::Relaxed);
        if up {
            self.downtime_before
                .fetch_add(now.saturating_sub(since), Ordering::Relaxed);
        } else {
            self.went_down.fetch_add(1, Ordering::Relaxed);
        }
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
    /// Gear DNS name in cartridge mode, else `null`.
    #[serde(default)]
    pub gear_dns: Option<String>,
    /// Health-check settings in force.
    #[serde(default)]
    pub health: Option<HealthReport>,
    /// The application's other balancers as this one sees them (empty until the
    /// cluster work fills it).
    #[serde(default)]
    pub peers: Vec<PeerReport>,
    /// Rotations (gears taken out of or put back into rotation) in progress (empty until
    /// the rotation work fills it).
    #[serde(default)]
    pub rotations: Vec<RotationReport>,
    /// The scaler as this balancer sees it.
    #[serde(default)]
    pub scaler: Option<crate::scaler::ScalerReport>,
    /// Whether any backend can take a request, and its history (the CSV's `BACKEND`
    /// `chkdown`, `lastchg`, `downtime`).
    #[serde(default)]
    pub availability: Option<availability::AvailabilityReport>,
    /// The status listener's own traffic (the CSV's `stats` proxy); no limit, so
    /// `connections_limit` is 0.
    #[serde(default)]
    pub status_listener: Option<FrontendReport>,
}

/// Health-check settings (`[health]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthReport {
    pub enabled: bool,
    pub uri: String,
    pub interval_ms: u64,
    pub timeout_ms: u64,
    pub fall: u32,
    pub rise: u32,
}

impl HealthReport {
    pub fn from_settings(s: &crate::health::HealthSettings) -> Self {
        HealthReport {
            enabled: s.enabled,
            uri: s.uri.clone(),
            interval_ms: s.interval.as_millis() as u64,
            timeout_ms: s.timeout.as_millis() as u64,
            fall: s.fall,
            rise: s.rise,
        }
    }
}

/// Another balancer of the same application.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerReport {
    /// Its gear name (or uuid).
    pub name: String,
    /// Where it is reached.
    pub addr: String,
    /// As this balancer sees it, e.g. `alive`, `suspect`, `dead`.
    pub state: String,
    /// Seconds since it was last heard from.
    #[serde(default)]
    pub last_seen_secs: Option<u64>,
    /// Its current sessions (requests in flight), when known.
    #[serde(default)]
    pub sessions: Option<u64>,
}

/// A gear being taken out of (or put back into) rotation on every balancer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RotationReport {
    /// Server name of the gear.
    pub backend: String,
    /// `out` or `in`.
    pub action: String,
    /// Where it stands, e.g. `draining`, `waiting for peers`, `done`.
    pub state: String,
    /// Seconds since it started.
    pub age_secs: u64,
    /// Balancers that have completed their part, of all involved.
    #[serde(default)]
    pub balancers_done: u32,
    #[serde(default)]
    pub balancers_total: u32,
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
    /// `limits.max_connections`.
    #[serde(default)]
    pub connections_limit: u64,
    /// Most requests in flight at once since start.
    #[serde(default)]
    pub requests_max: u64,
    /// Bytes read from clients (headers, bodies, tunnels).
    #[serde(default)]
    pub bytes_received: u64,
    /// Bytes written to clients.
    #[serde(default)]
    pub bytes_sent: u64,
    /// New connections per second over the last second, and the highest such rate.
    #[serde(default)]
    pub connection_rate: u64,
    #[serde(default)]
    pub connection_rate_max: u64,
    /// New requests per second over the last second, and the highest such rate.
    #[serde(default)]
    pub request_rate: u64,
    #[serde(default)]
    pub request_rate_max: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackendReport {
    pub name: String,
    pub addr: String,
    pub gear_dns: Option<String>,
    pub state: BackendState,
    /// In this balancer's subset (else used only as a backup or for sticky requests).
    pub in_subset: bool,
    /// Latest active health check, if one ran.
    pub last_check: Option<CheckReport>,
    /// Upgraded connections (WebSocket) open now; each is also one of `sessions`.
    pub tunnels: u64,
    /// Sessions now (HAProxy `scur`): requests in flight and open tunnels.
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
    /// Sticky cookie value naming this backend.
    #[serde(default)]
    pub cookie: String,
    /// Requests per second over the last second, and the highest such rate.
    #[serde(default)]
    pub request_rate: u64,
    #[serde(default)]
    pub request_rate_max: u64,
    /// Requests moved to another backend after this one failed them.
    #[serde(default)]
    pub redispatches: u64,
    /// Bytes written to and read from this backend's connections.
    #[serde(default)]
    pub bytes_sent: u64,
    #[serde(default)]
    pub bytes_received: u64,
    /// Active health checks passed and failed.
    #[serde(default)]
    pub checks_ok: u64,
    #[serde(default)]
    pub checks_failed: u64,
    /// Up → down transitions.
    #[serde(default)]
    pub down_transitions: u64,
    /// Seconds since the last up/down transition (or since the backend was added).
    #[serde(default)]
    pub last_change_secs: u64,
    /// Seconds spent down in total.
    #[serde(default)]
    pub downtime_secs: u64,
    /// Time to the response head.
    #[serde(default)]
    pub response_time: ResponseTimeReport,
}

/// Time from handing a request to a backend to its response head.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResponseTimeReport {
    /// Responses measured since the backend was added.
    pub responses: u64,
    /// Mean over all of them, milliseconds.
    pub mean_ms: Option<f64>,
    /// Seconds covered by each point of `recent_ms`.
    pub interval_secs: u64,
    /// Mean per interval, oldest first, up to five minutes; `null` for an interval
    /// without responses.
    pub recent_ms: Vec<Option<f64>>,
    /// Mean over the `recent_ms` window, weighted by responses.
    pub recent_mean_ms: Option<f64>,
    /// Responses in the `recent_ms` window.
    pub recent_responses: u64,
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
pub fn backend_reports(table: &RoutingTable) -> Vec<BackendReport> {
    let now = unix_now();
    table
        .entries()
        .iter()
        .map(|e| {
            let b = &e.backend;
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
