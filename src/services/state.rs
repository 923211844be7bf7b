//! What the [`super::ServiceSet`] keeps between changes ([`State`]): each source's
//! inputs (watched files, leases, the peers' and etcd's), the services running and
//! retiring, and what was refused.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tokio::time::Instant;

use super::running::{Lease, Running};
use super::sources::{Refusal, Registration};
use crate::config::ServiceConfig;

/// What the prefix holds, parsed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EtcdState {
    /// Services by key.
    pub services: BTreeMap<String, ServiceConfig>,
    /// Instances by key.
    pub instances: BTreeMap<String, Registration>,
}

/// A watched file as last read.
#[derive(Clone, Debug, Default)]
pub struct FileState {
    /// Its last good definition, kept while the file is bad.
    pub good: Option<ServiceConfig>,
    /// Why its current content is refused.
    pub problem: Option<String>,
}

/// What the cluster's other balancers share: their file services and registrations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Remote {
    /// (balancer, path, service).
    pub files: Vec<(String, PathBuf, ServiceConfig)>,
    /// (balancer, registration).
    pub regs: Vec<(String, Registration)>,
    /// (balancer, service, its version decisions).
    pub version_ops: Vec<(String, String, VersionOps)>,
    /// (balancer, service, the decision it adopted and drained for: its `at_ms`).
    pub version_acks: Vec<(String, String, u64)>,
    /// The live peers (ids), who must acknowledge a cut-over.
    pub live: Vec<String>,
}

/// An operator's version decisions for one service (`gearlb ctl cutover`, `hold`),
/// shared by gossip: the newest (by time, then balancer id) counts everywhere.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VersionOps {
    /// Make this version's group active now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cutover: Option<String>,
    /// Versions whose groups are held back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<String>,
    /// When it was decided, Unix milliseconds.
    pub at_ms: u64,
}

impl VersionOps {
    /// The version policy of a service with this `[versions]` configuration.
    pub fn policy(&self, cfg: &crate::config::VersionsConfig) -> crate::routing::versions::Policy {
        use crate::routing::versions::{Policy, Version};
        Policy {
            rule: cfg.rule,
            prefer: cfg.prefer,
            canary_per_mille: cfg.canary_per_mille,
            cutover: self.cutover.as_deref().and_then(|v| Version::parse(v).ok()),
            held: self
                .held
                .iter()
                .filter_map(|v| Version::parse(v).ok())
                .collect(),
        }
    }
}

#[derive(Default)]
pub(super) struct State {
    pub(super) remote: Remote,
    /// Version decisions taken here, by service.
    pub(super) version_ops: BTreeMap<String, VersionOps>,
    /// The decision (its `at_ms`) each service runs by here.
    pub(super) adopted: BTreeMap<String, u64>,
    pub(super) etcd: EtcdState,
    /// The routing SPI's applications (origin: the destination), when a router.
    pub(super) spi: (String, Vec<ServiceConfig>),
    pub(super) files: BTreeMap<PathBuf, FileState>,
    pub(super) leases: BTreeMap<(String, String), Lease>,
    pub(super) running: BTreeMap<String, Running>,
    /// Services no longer defined, draining.
    pub(super) retiring: Vec<(Running, Instant)>,
    pub(super) refused: Vec<Refusal>,
}

impl State {
    /// The gossip keys of this balancer's file services and of the instances
    /// registered here (see `super::gossip`).
    pub(super) fn shared_keys(&self) -> BTreeMap<String, String> {
        use crate::cluster::keys::{REGISTRATION_PREFIX, SERVICE_FILE_PREFIX};
        let mut out = BTreeMap::new();
        for (path, f) in &self.files {
            if let Some(g) = &f.good {
                if let Some(v) = shared_file_value(path, g) {
                    out.insert(format!("{SERVICE_FILE_PREFIX}{}", g.name), v);
                }
            }
        }
        for (service, ops) in &self.version_ops {
            if let Ok(v) = serde_json::to_string(ops) {
                out.insert(
                    format!("{}{service}", crate::cluster::keys::VERSIONS_PREFIX),
                    v,
                );
            }
        }
        // The version decision each service runs by here, once nothing is in flight
        // outside its active group: a cut-over's acknowledgment.
        for (service, r) in &self.running {
            let at = self.adopted.get(service).copied().unwrap_or(0);
            if at > 0 && super::running::in_flight_outside_active(&r.service.router) == 0 {
                out.insert(
                    format!("{}{service}", crate::cluster::keys::VERSION_ACK_PREFIX),
                    at.to_string(),
                );
            }
        }
        for ((service, backend), l) in &self.leases {
            if let Ok(v) = serde_json::to_string(&l.reg) {
                out.insert(format!("{REGISTRATION_PREFIX}{service}/{backend}"), v);
            }
        }
        out
    }
}

/// The gossip value of a file's service; `None` when it is over gossip's limit (it
/// would hold back every later key of this balancer: such a service is served here
/// and not shared).
pub(super) fn shared_file_value(path: &std::path::Path, g: &ServiceConfig) -> Option<String> {
    let v = serde_json::json!({ "path": path, "service": g }).to_string();
    (v.len() <= crate::cluster::keys::MAX_VALUE).then_some(v)
}

impl State {
    /// The version decisions in force for `service`: the newest among this balancer's
    /// and its peers'.
    pub(super) fn ops_of(&self, service: &str, self_id: &str) -> VersionOps {
        let mut best: Option<(u64, &str, &VersionOps)> =
            self.version_ops.get(service).map(|o| (o.at_ms, self_id, o));
        for (node, s, o) in &self.remote.version_ops {
            if s == service && best.is_none_or(|(at, n, _)| (o.at_ms, node.as_str()) > (at, n)) {
                best = Some((o.at_ms, node, o));
            }
        }
        best.map(|(_, _, o)| o.clone()).unwrap_or_default()
    }
}

impl State {
    /// The live peers that have not acknowledged `service`'s decision of `at` (or a
    /// later one).
    pub(super) fn unacknowledged(&self, service: &str, at: u64) -> Vec<String> {
        self.remote
            .live
            .iter()
            .filter(|peer| {
                !self
                    .remote
                    .version_acks
                    .iter()
                    .any(|(n, s, a)| n == *peer && s == service && *a >= at)
            })
            .cloned()
            .collect()
    }
}
