//! What `gearlb ctl services` reports of each service: its routes and where they came
//! from, and each backend's state, load, queue and lease.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Serialize;
use tokio::time::Instant;

use super::running::Lease;
use super::sources::{Origin, Refusal};
use super::state::State;
use crate::config::DEFAULT_SERVICE;
use crate::report::VersionGroups;
use crate::routing::{BackendState, Router};

/// `gearlb ctl services --json`.
#[derive(Clone, Debug, Serialize)]
pub struct ServicesReport {
    pub services: Vec<ServiceReport>,
    pub refused: Vec<Refusal>,
    pub files: Vec<FileReport>,
}

/// The report of `st`, with the default service's router when it is served.
pub(super) fn build(st: &State, default: Option<&Router>) -> ServicesReport {
    let now = Instant::now();
    let mut services = Vec::new();
    if let Some(router) = default {
        services.push(ServiceReport::of(
            DEFAULT_SERVICE,
            &Origin::Default,
            &["*".to_string()],
            &["/".to_string()],
            None,
            router,
            &st.leases,
            now,
            false,
        ));
    }
    for r in st.running.values() {
        services.push(ServiceReport::of(
            &r.config.name,
            &r.origin,
            &r.config.hosts,
            &r.config.paths,
            r.listener.as_ref().map(|l| l.0),
            &r.service.router,
            &st.leases,
            now,
            false,
        ));
    }
    for (r, _) in &st.retiring {
        services.push(ServiceReport::of(
            &r.config.name,
            &r.origin,
            &[],
            &[],
            None,
            &r.service.router,
            &st.leases,
            now,
            true,
        ));
    }
    let files = st
        .files
        .iter()
        .map(|(p, f)| FileReport {
            path: p.clone(),
            service: f.good.as_ref().map(|g| g.name.clone()),
            problem: f.problem.clone(),
        })
        .collect();
    ServicesReport {
        services,
        refused: st.refused.clone(),
        files,
    }
}

/// One service.
#[derive(Clone, Debug, Serialize)]
pub struct ServiceReport {
    pub name: String,
    pub origin: Origin,
    pub hosts: Vec<String>,
    pub paths: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// A backend may take a request (what `/health/<service>` answers).
    pub up: bool,
    /// No longer defined: draining, then removed.
    pub retiring: bool,
    pub backends: Vec<BackendReport>,
    /// Its backends' versions, when they have some.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub versions: Option<VersionGroups>,
}

/// One backend of a service.
#[derive(Clone, Debug, Serialize)]
pub struct BackendReport {
    pub name: String,
    pub addr: String,
    pub state: BackendState,
    pub backup: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// Requests in flight.
    pub outstanding: u64,
    /// Requests waiting for a slot.
    pub queued: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Seconds left on its registration's lease, for a registered instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_left_s: Option<f64>,
}

/// One watched file.
#[derive(Clone, Debug, Serialize)]
pub struct FileReport {
    pub path: PathBuf,
    /// The service it defines (its last good definition).
    pub service: Option<String>,
    /// Why its current content is refused.
    pub problem: Option<String>,
}

impl ServiceReport {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn of(
        name: &str,
        origin: &Origin,
        hosts: &[String],
        paths: &[String],
        listen: Option<SocketAddr>,
        router: &Router,
        leases: &BTreeMap<(String, String), Lease>,
        now: Instant,
        retiring: bool,
    ) -> Self {
        let table = router.load();
        let backends = table
            .iter()
            .map(|(e, t)| BackendReport {
                name: e.backend.name().to_string(),
                addr: e.backend.spec.addr.to_string(),
                state: e.state(),
                backup: e.backend.spec.backup,
                max_connections: e.backend.spec.max_connections,
                version: e
                    .announced
                    .as_ref()
                    .map(|v| v.to_string())
                    .or_else(|| e.backend.spec.version.clone()),
                outstanding: t.outstanding(),
                queued: t.queued.load(std::sync::atomic::Ordering::Relaxed),
                lease_left_s: leases
                    .get(&(name.to_string(), e.backend.name().to_string()))
                    .map(|l| l.expires.saturating_duration_since(now).as_secs_f64()),
            })
            .collect();
        ServiceReport {
            name: name.to_string(),
            origin: origin.clone(),
            hosts: hosts.to_vec(),
            paths: paths.to_vec(),
            listen,
            up: table.can_serve(),
            retiring,
            backends,
            versions: versions_report(router, &table),
        }
    }
}

/// The version groups of `router`'s backends, when they have versions.
pub fn versions_report(router: &Router, table: &crate::routing::Snapshot) -> Option<VersionGroups> {
    let policy = router.versions();
    let p = table.version_plan(&policy);
    p.versioned.then(|| VersionGroups {
        groups: p
            .groups
            .iter()
            .map(|g| g.iter().map(|v| v.to_string()).collect())
            .collect(),
        active: p.active_group,
        canary: p.canary_group,
        canary_per_mille: p.canary_per_mille,
        cutover: policy.cutover.as_ref().map(|v| v.to_string()),
        held: policy.held.iter().map(|v| v.to_string()).collect(),
    })
}
