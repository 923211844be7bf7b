//! A backend: what it is ([`BackendSpec`], persisted), how it is reported
//! ([`BackendState`], [`Admin`], [`CheckReport`]), and the value a routing snapshot
//! holds ([`Backend`]: a spec with an id). What the data plane keeps per backend
//! (connection pool, counters, passive health, tunnels) it keys by that id.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::gear::Addr;

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
    /// A service's backup: takes requests only when no other backend is usable.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub backup: bool,
    /// At most this many requests at once; more wait in a FIFO queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// The version it runs (`catalog-2.4.1`; see [`super::versions`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Versions it is compatible with (the explicit rule).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compatible: Vec<String>,
    /// In TCP mode, the PROXY protocol header sent before the client's bytes (and a v2
    /// LOCAL one before a check's), as HAProxy's `send-proxy`/`send-proxy-v2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_proxy: Option<SendProxy>,
}

/// The PROXY protocol version a backend wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SendProxy {
    V1,
    V2,
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
    /// The version the backend announced in its answer (`X-Gearlb-Version`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Which backend this is: unique in the process. A backend re-created for the same name
/// (a new address) gets a new id, so what was kept for the old one is never mistaken
/// for the new one's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendId(u64);

impl BackendId {
    /// A new id, never handed out before in this process.
    pub fn fresh() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        BackendId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// One backend as a routing snapshot holds it: an immutable value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    pub id: BackendId,
    pub spec: BackendSpec,
    /// The sticky cookie value (cached [`BackendSpec::sticky_value`]).
    pub sticky: String,
    /// Its version and the versions it is compatible with, parsed (one that does not
    /// parse counts as none: the configuration and registration checked them).
    pub version: Option<super::versions::Version>,
    pub compatible: Vec<super::versions::Version>,
}

impl Backend {
    /// A backend with a fresh id.
    pub fn new(spec: BackendSpec) -> Self {
        use super::versions::Version;
        Backend {
            id: BackendId::fresh(),
            sticky: spec.sticky_value(),
            version: spec.version.as_deref().and_then(|v| Version::parse(v).ok()),
            compatible: spec
                .compatible
                .iter()
                .filter_map(|v| Version::parse(v).ok())
                .collect(),
            spec,
        }
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }
}
