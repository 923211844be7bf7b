//! A service's definition as data ([`ServiceConfig`] and its parts), whichever source
//! it came from, and its claims on the route table.

use std::net::SocketAddr;
use std::time::Duration;

use crate::config::tcp::Mode;
use crate::gear::{is_backend_name, Addr};
use crate::routing::routes::{HostPattern, RouteSpec};
use crate::routing::versions::{Prefer, Rule};
use crate::routing::SendProxy;

/// One service as configured.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServiceConfig {
    pub name: String,
    /// Host patterns as written (each valid for [`HostPattern::parse`]).
    pub hosts: Vec<String>,
    /// Path prefixes, each starting with `/`.
    pub paths: Vec<String>,
    /// A listener of its own: every request on it goes to this service.
    pub listen: Option<SocketAddr>,
    /// What it speaks: `http`, or `tcp` (connections forwarded as bytes; its `hosts`
    /// match a TLS hello's server name). A service without a listener of its own has
    /// the mode of `listen.proxy`, where it is routed.
    #[serde(default)]
    pub mode: Mode,
    /// The sticky cookie's name for this service (default: `sticky.cookie`).
    pub sticky_cookie: Option<String>,
    /// Whether its sessions stick to a backend by cookie (when `[sticky]` is on).
    /// Default true; a router's applications do not (their own balancers keep the
    /// application's cookie, which the router must pass through untouched).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub sticky: bool,
    /// How long a request waits for a backend slot (`max_connections`) before a 503;
    /// default `timeouts.connect`, as HAProxy's `timeout queue`.
    pub queue_timeout: Option<Duration>,
    pub health: ServiceHealth,
    pub timeouts: ServiceTimeouts,
    pub backends: Vec<ServiceBackend>,
    /// How its backends' versions are served (`[versions]`).
    #[serde(default)]
    pub versions: VersionsConfig,
}

/// A service's `[versions]`: the compatibility rule, which versions of the active
/// group are preferred, the canary's share (see `routing::versions`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VersionsConfig {
    pub rule: Rule,
    pub prefer: Prefer,
    /// Per mille of new sessions to the next group.
    pub canary_per_mille: u32,
}

/// A service's health check, where it differs from `[health]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServiceHealth {
    /// The path checked (`health.uri`).
    pub path: Option<String>,
    /// Expected status, a regular expression (`health.expect`).
    pub expect: Option<String>,
    /// The port checked, when it is not the traffic port (seed 004's `port + 1`).
    pub port: Option<u16>,
    /// A listener that answers any GET with 200 while one of the service's backends
    /// may take a request, else 503 (for whoever sits in front).
    pub listen: Option<SocketAddr>,
}

/// A service's timeouts, where they differ from `[timeouts]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServiceTimeouts {
    pub connect: Option<Duration>,
    pub server: Option<Duration>,
}

/// One backend of a service.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServiceBackend {
    pub name: String,
    pub addr: Addr,
    /// Takes requests only when no other backend of the service is up.
    pub backup: bool,
    /// At most this many requests at once; more wait in a FIFO queue.
    pub max_connections: Option<u32>,
    /// The version it runs (`catalog-2.4.1`) and those it is compatible with.
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub compatible: Vec<String>,
    /// TCP mode: the PROXY protocol header it is sent.
    #[serde(default)]
    pub send_proxy: Option<SendProxy>,
}

impl ServiceConfig {
    /// The service's claims for the route table (hosts already checked when read).
    pub fn route_spec(&self) -> RouteSpec {
        RouteSpec {
            service: self.name.clone(),
            hosts: self
                .hosts
                .iter()
                .filter_map(|h| HostPattern::parse(h).ok())
                .collect(),
            paths: self.paths.clone(),
        }
    }
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// The name of the service of the top-level backends.
pub const DEFAULT_SERVICE: &str = "default";

/// The claim of the default service (the top-level backends): every host, every path.
pub fn default_route() -> RouteSpec {
    RouteSpec {
        service: DEFAULT_SERVICE.to_string(),
        hosts: vec![HostPattern::Any],
        paths: vec!["/".into()],
    }
}

/// Whether `s` may name a service: what a backend name may be (letters, digits, `-`,
/// `_`, `.`; at most 128 bytes).
pub fn is_service_name(s: &str) -> bool {
    is_backend_name(s)
}
