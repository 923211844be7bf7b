//! A backend: what it is ([`BackendSpec`], persisted), how it is reported
//! ([`BackendState`], [`Admin`], [`CheckReport`]) and its long-lived part ([`Backend`]:
//! counters, connection pool), carried over from one routing snapshot to the next.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use serde::{Deserialize, Serialize};

use crate::gear::Addr;
use crate::proxy::upstream::Pool;
use crate::stats::BackendStats;

/// What a backend is and where it is; persisted in the state file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendSpec {
    /// Server name: `gear-<gearname>-<ns>`, `local-gear`, or a `[[backends]]` name.
    pub name: String,
    pub addr: Addr,
    /// The gear's DNS name when the platform announced it (`update-cluster`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gear_dns: Option<String>,
    /// Sticky cookie value, when it is not derived (see [`BackendSpec::sticky_value`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie: Option<String>,
}

impl BackendSpec {
    /// The sticky cookie value naming this backend, the same on every balancer: the
    /// gear's `<gearname>-<ns>` (first label of its DNS name), else the backend name.
    pub fn sticky_value(&self) -> String {
        if let Some(c) = &self.cookie {
            return c.clone();
        }
        match &self.gear_dns {
            Some(dns) => dns.split('.').next().unwrap_or(dns).to_string(),
            None => self.name.clone(),
        }
    }
}

/// A backend's state as reported (status, CSV, JSON): the administrative state when
/// the backend is out of rotation, else its health.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendState {
    /// Healthy and in rotation.
    Up,
    /// Failed health checks or passive checks: not selected.
    Down,
    /// Being taken out of rotation: no new requests, in-flight ones finish.
    Draining,
    /// Out of rotation and idle.
    Drained,
}

/// Whether a backend is in rotation (operator's decision, independent of health).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Admin {
    Active,
    Draining,
    Drained,
}

/// The result of the latest active health check of a backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckReport {
    pub ok: bool,
    /// Status code, or the error when there was none.
    pub result: String,
    /// Milliseconds the check took.
    pub ms: u64,
    /// Unix time of the check, seconds.
    pub at: u64,
}

/// The long-lived part of one backend.
#[derive(Debug)]
pub struct Backend {
    pub spec: BackendSpec,
    /// The sticky cookie value (cached [`BackendSpec::sticky_value`]).
    pub sticky: String,
    pub stats: BackendStats,
    pub pool: Pool,
    /// Consecutive failures seen on real traffic (reset by any answered request).
    pub passive_failures: AtomicU32,
    /// Upgraded connections (WebSocket) open now; each is also one of `outstanding`.
    pub tunnels: AtomicU64,
    /// Latest active check, if any ran.
    pub last_check: ArcSwapOption<CheckReport>,
}

impl Backend {
    pub fn new(spec: BackendSpec, max_idle: usize) -> Arc<Self> {
        Arc::new(Backend {
            sticky: spec.sticky_value(),
            spec,
            stats: BackendStats::default(),
            pool: Pool::new(max_idle),
            passive_failures: AtomicU32::new(0),
            tunnels: AtomicU64::new(0),
            last_check: ArcSwapOption::empty(),
        })
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Sessions on this backend: requests sent and not yet answered in full, and open
    /// tunnels (HAProxy's `scur`, what `leastconn` compares).
    pub fn outstanding(&self) -> u64 {
        self.stats.outstanding.load(Ordering::Relaxed)
    }
}
