//! The report's shape: [`StatusReport`] and its parts, as serialized to JSON.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::routing::{BackendState, CheckReport};
use crate::stats::availability;

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
    /// Reads a counter array indexed by status class.
    pub(crate) fn read(a: &[AtomicU64; 5]) -> Self {
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
    /// The services beside the default one (`[[services]]`, watched files,
    /// registrations, etcd).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<ServiceStatus>,
    /// A router's routing SPI (`[routing_spi]`): broker, events, table, peers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_spi: Option<super::spi::SpiReport>,
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
    /// What `proxy` speaks: `http` or `tcp` (the CSV's `mode`).
    #[serde(default)]
    pub mode: crate::config::Mode,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    /// A service's backup (used only when no other backend is up).
    #[serde(default)]
    pub backup: bool,
    /// Requests waiting for a slot (`max_connections`) now.
    #[serde(default)]
    pub queued: u64,
    /// Its connection limit, if it has one.
    #[serde(default)]
    pub max_connections: Option<u32>,
    /// The version it runs, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// A service beside the default one: its routes, where they came from, its own
/// listener's traffic and its backends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServiceStatus {
    pub name: String,
    /// `config`, `file <path>`, `registration` or `etcd key <key>`.
    pub origin: String,
    pub hosts: Vec<String>,
    pub paths: Vec<String>,
    /// Its own listener, when it has one, and that listener's traffic.
    pub listen: Option<String>,
    /// What it speaks: `http` or `tcp`.
    #[serde(default)]
    pub mode: crate::config::Mode,
    pub frontend: Option<FrontendReport>,
    /// Whether a backend may take a request, and since when.
    pub availability: Option<availability::AvailabilityReport>,
    pub backends: Vec<BackendReport>,
    /// Its backends' version groups, when they have versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<VersionGroups>,
}

/// A service's version groups: which is active, which is the canary, the operator's
/// decisions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionGroups {
    /// Each group's versions, oldest group first.
    pub groups: Vec<Vec<String>>,
    pub active: Option<usize>,
    pub canary: Option<usize>,
    /// The canary's share of new sessions, per mille.
    pub canary_per_mille: u32,
    pub cutover: Option<String>,
    pub held: Vec<String>,
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
