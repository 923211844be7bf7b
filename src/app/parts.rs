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

use crate::cluster::Cluster;
use crate::config::Config;
use crate::health::HealthSettings;
use crate::proxy::ProxyCtx;
use crate::report::ListenReport;
use crate::rotation::Rotations;
use crate::routing::{BackendSpec, Router, Target};
use crate::scaler::{policy::PolicyConfig, Scaler, ScalerSettings};
use crate::state::StateStore;
use crate::stats::FrontendStats;

/// The shared application state behind the listeners.
pub struct App {
    pub(super) router: Arc<Router>,
    pub(super) cluster: Option<Arc<Cluster>>,
    pub(super) coverage: Arc<AtomicU32>,
    pub(super) health: Arc<ArcSwap<HealthSettings>>,
    pub(super) ejections: Mutex<Option<mpsc::UnboundedReceiver<Arc<Target>>>>,
    pub(super) stopping: CancellationToken,
    pub(super) frontend: Arc<FrontendStats>,
    pub(super) proxy: Arc<ProxyCtx>,
    pub(super) store: StateStore,
    pub(super) started: Instant,
    pub(super) listen: ListenReport,
    pub(super) gear_uuid: Option<String>,
    /// This balancer's id in the cluster (node id, else gear uuid, else "self").
    pub(super) self_id: String,
    pub(super) namespace: Option<String>,
    pub(super) rotations: Arc<Rotations>,
    pub(super) scaler: Arc<Scaler>,
    pub(super) rotation_counters: Arc<crate::metrics::RotationCounters>,
    pub(super) self_name: Option<String>,
    /// The web server in this gear, always a backend when configured.
    pub(super) local_gear: Option<BackendSpec>,
    /// This gear's DNS name: its `update-cluster` entry is `local-gear`.
    pub(super) own_dns: Option<String>,
    /// Fingerprint of the config's `[[backends]]` as last applied (for the state file).
    pub(super) fingerprint: Mutex<String>,
    pub(super) gear_dns: Option<String>,
    /// The status listener's own traffic (the CSV's `stats` proxy).
    pub(super) status_counters: Arc<crate::status::ListenerStats>,
    pub(super) metrics: crate::metrics::Metrics,
    /// The HTTPS listener's certificates, when it runs (swapped on reload).
    pub(super) tls: Option<Arc<crate::tls::TlsAcceptor>>,
    /// The configuration in force; also serialises control-plane operations.
    pub(super) config: tokio::sync::Mutex<Config>,
    /// How the node's gear uuids map to labels (see `cartridge::registry`).
    pub(super) names: crate::cartridge::registry::Names,
    /// The node's gear registry, when in a gear.
    pub(super) registry_path: Option<PathBuf>,
    /// Held while this balancer runs: calls made while it is stopped go to the
    /// pending file instead (see `state`).
    /// (`None` when the directory cannot hold the lock file: served all the same.)
    pub(super) state_lock: Option<crate::state::StateLock>,
    /// `cluster::peers_fingerprint` of `cluster.peers` at start, saved with the peers.
    pub(super) peers_config: String,
    /// Orders state saves: each is built and written under it, so the last written is
    /// the last built.
    pub(super) saving: tokio::sync::Mutex<()>,
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
    })
}

/// Scaler settings from a configuration.
pub(super) fn scaler_settings(cfg: &Config) -> ScalerSettings {
    let s = &cfg.scaler;
    ScalerSettings {
        enabled: s.enabled,
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
