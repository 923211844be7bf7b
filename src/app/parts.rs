//! The [`App`]: what a running balancer holds, shared by its listeners and its control
//! plane; and the parts of it derived from the configuration (the backend set, the
//! scaler's settings, how gears are named).
//!
//! A leaf of [`crate::app`]: every other file there builds, uses or extends `App`.

use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cartridge::registry::{self, Names};
use crate::cluster::Cluster;
use crate::config::Config;
use crate::health::HealthSettings;
use crate::metrics::{Metrics, RotationCounters};
use crate::proxy::ProxyCtx;
use crate::report::ListenReport;
use crate::rotation::Rotations;
use crate::routing::{BackendSpec, Router, Target};
use crate::scaler::{policy::PolicyConfig, Scaler, ScalerSettings};
use crate::state::{StateLock, StateStore};
use crate::stats::FrontendStats;
use crate::status::ListenerStats;

/// What a running balancer holds, shared by its listeners and its control plane: the
/// parts the request path and the control plane act on, and, grouped by concern, who
/// it is (`Identity`), its state file (`Persistence`) and what only reports read
/// (`Reporting`).
pub struct App {
    pub(super) id: Identity,
    pub(super) router: Arc<Router>,
    pub(super) cluster: Option<Arc<Cluster>>,
    pub(super) rotations: Arc<Rotations>,
    pub(super) scaler: Arc<Scaler>,
    pub(super) proxy: Arc<ProxyCtx>,
    /// The services beside the default one (routes, own listeners, registrations).
    pub(super) services: Arc<crate::services::ServiceSet>,
    pub(super) frontend: Arc<FrontendStats>,
    pub(super) health: Arc<ArcSwap<HealthSettings>>,
    /// Passive ejections from the request path, until the health supervisor takes them.
    pub(super) ejections: Mutex<Option<mpsc::UnboundedReceiver<Arc<Target>>>>,
    /// `subset.coverage` in force (reload changes it).
    pub(super) coverage: Arc<AtomicU32>,
    /// The HTTPS listener's certificates, when it runs (swapped on reload).
    pub(super) tls: Option<Arc<crate::tls::TlsAcceptor>>,
    pub(super) stopping: CancellationToken,
    /// What the idler keep-seen task did (`crate::idler`).
    pub(super) keep_seen: Arc<crate::idler::Counters>,
    /// A router's routing SPI, once started (`[routing_spi]`).
    pub(super) spi: Arc<std::sync::OnceLock<Arc<crate::spi::Spi>>>,
    /// `cluster.secret`, which a router's table is given to its peers under.
    pub(super) cluster_secret: Option<String>,
    /// The configuration in force; also serialises control-plane operations.
    pub(super) config: tokio::sync::Mutex<Config>,
    pub(super) saved: Persistence,
    pub(super) seen: Reporting,
}

/// Who this balancer is, and how it names gears.
pub(super) struct Identity {
    /// This balancer's id in the cluster (node id, else gear uuid, else "self").
    pub(super) self_id: String,
    /// Its gear's name (`OPENSHIFT_GEAR_NAME`).
    pub(super) self_name: Option<String>,
    /// Its gear's DNS name: that gear's `update-cluster` entry is `local-gear`.
    pub(super) dns: Option<String>,
    /// How the node's gear uuids map to labels (see `cartridge::registry`); also this
    /// gear's uuid and namespace.
    pub(super) names: Names,
    /// The node's gear registry, when in a gear.
    pub(super) registry_path: Option<PathBuf>,
    /// The web server in this gear, always a backend when configured.
    pub(super) local_gear: Option<BackendSpec>,
}

impl Identity {
    pub(super) fn of(cfg: &Config, self_id: String) -> Self {
        Identity {
            self_id,
            self_name: cfg.gear.name.clone(),
            dns: cfg.gear.dns.clone(),
            names: Names::of(&cfg.gear),
            registry_path: cfg.gear.homedir.as_deref().map(registry::path),
            local_gear: local_gear_spec(cfg),
        }
    }
}

/// The state file: where it is, how saves are ordered, and what it is compared with.
pub(super) struct Persistence {
    pub(super) store: StateStore,
    /// Orders state saves: each is built and written under it, so the last written is
    /// the last built.
    pub(super) saving: tokio::sync::Mutex<()>,
    /// Fingerprint of the config's `[[backends]]` as last applied.
    pub(super) fingerprint: Mutex<String>,
    /// `cluster::peers_fingerprint` of `cluster.peers` at start, saved with the peers.
    pub(super) peers_config: String,
    /// Held while this balancer runs: calls made while it is stopped go to the
    /// pending file instead (see `state`). (`None` when the directory cannot hold the
    /// lock file: served all the same.)
    pub(super) state_lock: Option<StateLock>,
}

/// What only the reports read: uptime, addresses, the status listener's own traffic,
/// the metrics registry and the rotations' counters.
pub(super) struct Reporting {
    pub(super) started: Instant,
    pub(super) listen: ListenReport,
    /// The status listener's own traffic (the CSV's `stats` proxy).
    pub(super) status_counters: Arc<ListenerStats>,
    pub(super) metrics: Metrics,
    pub(super) rotation_counters: Arc<RotationCounters>,
}

pub(super) fn config_specs(cfg: &Config) -> Vec<BackendSpec> {
    let mut specs: Vec<BackendSpec> = cfg
        .backends
        .iter()
        .map(|b| BackendSpec {
            name: b.name.clone(),
            addr: b.addr.clone(),
            gear_dns: None,
            cookie: None,
            backup: false,
            max_connections: None,
            version: None,
            compatible: Vec::new(),
            send_proxy: b.send_proxy,
        })
        .collect();
    if let Some(l) = local_gear_spec(cfg) {
        specs.retain(|s| s.name != l.name);
        specs.push(l);
    }
    specs
}

/// `local-gear`: the web server of this balancer's own gear, with the sticky value
/// every balancer uses for this gear (`<gearname>-<ns>`, BZ 1377433).
pub(super) fn local_gear_spec(cfg: &Config) -> Option<BackendSpec> {
    let addr = cfg.local_gear.clone()?;
    let cookie = cfg.gear.own_label();
    Some(BackendSpec {
        name: "local-gear".into(),
        addr,
        gear_dns: cfg.gear.dns.clone(),
        cookie,
        backup: false,
        max_connections: None,
        version: None,
        compatible: Vec::new(),
        send_proxy: None,
    })
}

/// Scaler settings from a configuration.
pub(super) fn scaler_settings(cfg: &Config) -> ScalerSettings {
    let s = &cfg.scaler;
    ScalerSettings {
        // A router has no application of its own to scale.
        enabled: s.enabled && cfg.routing_spi.is_none(),
        preferred: s.preferred.clone(),
        app_name: cfg.gear.app_name.clone(),
        policy: PolicyConfig {
            max_sessions_per_gear: s.max_sessions_per_gear,
            up_pct: s.up_threshold,
            down_checks: s.down_checks,
            flap_protection: s.flap_protection,
            error_backoff: s.error_backoff,
            up_cooldown: s.up_cooldown,
        },
        check_interval: s.check_interval,
        gear_ratio: s.gear_ratio,
        marker: cfg
            .gear
            .repo_dir
            .as_ref()
            .map(|d| d.join(".openshift/markers/disable_auto_scaling")),
    }
}
