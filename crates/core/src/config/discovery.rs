//! Where services come from besides the configuration's `[[services]]`
//! ([`DiscoveryConfig`]: a watched directory, registrations, etcd), and where this
//! balancer registers its own ([`UpstreamConfig`]: a tree of balancers). Plain data.

use std::path::PathBuf;
use std::time::Duration;

/// `[discovery]`: services from a watched directory and from registrations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveryConfig {
    /// A directory of service files (`*.yaml`, `*.yml`, `*.toml`), one service each,
    /// watched: a change applies without a restart. Default none.
    pub dir: Option<PathBuf>,
    /// Lease of a registration that names none (`gearlb ctl register --ttl`).
    /// Default 30s.
    pub ttl: Duration,
    /// The bearer token of registration over HTTP (`POST /services/register` on the
    /// status listener), at least 16 characters. Default none: that endpoint is off.
    pub token: Option<String>,
    /// etcd endpoints (`http://host:port`) whose keys under `etcd_prefix` define
    /// services and instances (see `services::etcd`). Default none.
    pub etcd: Vec<String>,
    /// Default `/gearlb/`.
    pub etcd_prefix: String,
}

/// `[upstream]`: the balancers this one registers its services with, as one backend
/// each (itself), so that a tree of balancers routes down to the services' hosts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// Status listeners of the upstream balancers (`http://host:port`). Default none.
    pub balancers: Vec<String>,
    /// Their `discovery.token`.
    pub token: Option<String>,
    /// The address they reach this balancer's proxy at (default `listen.proxy`).
    pub advertise: Option<String>,
    /// Lease of the registrations; they are renewed every third of it. Default 10s.
    pub ttl: Duration,
}
