//! The steps of a balancer's start-up, in the order [`Server::bind`](super::Server::bind)
//! takes them: the local sockets ([`LocalSockets`]), what was saved and recorded while
//! stopped ([`Restored`]), the listeners ([`Listeners`]), the cluster
//! ([`start_cluster`]), rotations and backends restored into the router
//! ([`restore_rotations`], [`load_backends`]), and the [`App`] assembled from its parts
//! ([`assemble`]).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use arc_swap::ArcSwap;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::parts::{config_specs, local_gear_spec, scaler_settings, App, Identity};
use super::parts::{Persistence, Reporting};
use crate::cluster::{self, Cluster};
use crate::config::{backends_fingerprint, Config};
use crate::control;
use crate::health::HealthSettings;
use crate::metrics::{ClusterCollector, Metrics, RotationCounters};
use crate::proxy::{ProxyCtx, Settings};
use crate::report::ListenReport;
use crate::rotation::{Op, RotationOp, Rotations};
use crate::routing::{BackendSpec, Router};
use crate::scaler::broker::{Broker, BrokerConfig};
use crate::scaler::Scaler;
use crate::state::{Pending, PersistedState, StateStore, FORMAT};
use crate::stats::FrontendStats;
use crate::tls::{AliasCerts, Resumption, TlsAcceptor};

/// The control and stats sockets: bound first, so that a live balancer on them is
/// refused before anything else is touched.
pub(super) struct LocalSockets {
    pub(super) control: UnixListener,
    pub(super) control_path: PathBuf,
    pub(super) stats: UnixListener,
    pub(super) stats_path: PathBuf,
}

impl LocalSockets {
    pub(super) async fn bind(cfg: &Config) -> anyhow::Result<Self> {
        let control_path = cfg.control.socket.clone();
        let control = control::bind(&control_path).await?;
        let stats_path = cfg.control.stats_socket_path();
        let stats = control::bind_socket(&stats_path, "stats socket").await?;
        Ok(LocalSockets {
            control,
            control_path,
            stats,
            stats_path,
        })
    }
}

/// What the state directory says: the saved backend set (when the configuration's
/// `[[backends]]` did not change since), peers and rotations, and the calls recorded
/// while the balancer was stopped.
pub(super) struct Restored {
    pub(super) specs: Vec<BackendSpec>,
    /// The backend set is the saved one (else the configuration's).
    pub(super) from_state: bool,
    /// Fingerprint of the configuration's `[[backends]]`.
    pub(super) fingerprint: String,
    pub(super) peers: Vec<crate::gear::PeerSpec>,
    pub(super) peers_config: Option<String>,
    /// Saved rotations and those recorded while stopped (the latest op per gear wins).
    pub(super) rotations: Vec<RotationOp>,
    pub(super) pending: Option<Pending>,
}

impl Restored {
    /// Read the state directory; an unreadable state file is set aside and the
    /// configuration used instead.
    pub(super) fn load(store: &StateStore, cfg: &Config) -> Self {
        let pending = match store.load_pending() {
            Ok(p) => p.filter(|p| !p.is_empty()),
            Err(e) => {
                error!(error = %e, "calls recorded while stopped cannot be read: ignored");
                None
            }
        };
        let fingerprint = backends_fingerprint(&cfg.backends);
        let mut restored = Restored {
            specs: Vec::new(),
            from_state: false,
            fingerprint,
            peers: Vec::new(),
            peers_config: None,
            rotations: Vec::new(),
            pending: None,
        };
        match store.load() {
            Ok(Some(st)) => {
                restored.peers = st.peers;
                restored.peers_config = st.peers_config;
                restored.rotations = st.rotations;
                if st.config_backends == restored.fingerprint {
                    restored.specs = st.backends;
                    restored.from_state = true;
                } else {
                    info!("[[backends]] in the configuration changed since the state was saved: using the configuration");
                }
            }
            Ok(None) => {}
            Err(e) => {
                error!(error = %e, "cannot use the saved state: starting from the configuration");
                match store.set_aside() {
                    Ok(p) => {
                        warn!(path = %p.display(), "unreadable state file kept for inspection")
                    }
                    Err(e) => warn!(error = %e, "could not move the unreadable state file aside"),
                }
            }
        }
        if !restored.from_state {
            restored.specs = config_specs(cfg);
        }
        if let Some(p) = &pending {
            for op in &p.rotations {
                info!(gear = %op.gear, op = ?op.op, "rotation recorded while stopped applied");
            }
            restored.rotations.extend(p.rotations.iter().cloned());
        }
        restored.pending = pending;
        restored
    }
}

/// The TCP listeners: the proxy port, the status port and the optional HTTPS port
/// with its certificates.
pub(super) struct Listeners {
    pub(super) proxy: TcpListener,
    pub(super) status: TcpListener,
    pub(super) tls: Option<TcpListener>,
    pub(super) tls_acceptor: Option<Arc<TlsAcceptor>>,
}

impl Listeners {
    pub(super) async fn bind(cfg: &Config) -> anyhow::Result<Self> {
        let proxy = TcpListener::bind(cfg.listen.proxy)
            .await
            .with_context(|| format!("cannot listen on {} (listen.proxy)", cfg.listen.proxy))?;
        let status = TcpListener::bind(cfg.listen.status)
            .await
            .with_context(|| format!("cannot listen on {} (listen.status)", cfg.listen.status))?;
        let (tls, tls_acceptor) = match cfg.listen.tls {
            None => (None, None),
            Some(addr) => {
                // With the application's secret, a session resumes on any of its
                // balancers; without one, on this one only.
                let resumption = match &cfg.cluster.secret {
                    Some(secret) => Resumption::shared(&cfg.cluster.id, secret.as_bytes()),
                    None => Resumption::new().context("TLS session tickets cannot be set up")?,
                };
                // Alias certificates set at runtime; reloads keep them.
                let aliases = AliasCerts::new();
                let certs = crate::tls::load_with(&cfg.tls, cfg.proxy.h2c, &resumption, &aliases)
                    .map_err(|problems| {
                    let list: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
                    anyhow::anyhow!("TLS certificates unusable:\n{}", list.join("\n"))
                })?;
                let l = TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr} (listen.tls)"))?;
                (
                    Some(l),
                    Some(Arc::new(TlsAcceptor::new(certs, resumption, aliases))),
                )
            }
        };
        Ok(Listeners {
            proxy,
            status,
            tls,
            tls_acceptor,
        })
    }
}

/// Join the application's balancers, when gossip is on: the known peers are the
/// configured ones, or the saved ones while `cluster.peers` is unchanged.
pub(super) async fn start_cluster(
    cfg: &Config,
    listeners: &Listeners,
    restored: &Restored,
) -> anyhow::Result<Option<Arc<Cluster>>> {
    let listen = match cfg.cluster.listen {
        Some(l) => l,
        None if cfg.cluster.gossip() => listeners.proxy.local_addr()?,
        None => return Ok(None),
    };
    let (known, source) = cluster::combine_peers(
        &cfg.cluster.peers,
        &restored.peers,
        restored.peers_config.as_deref(),
    );
    match source {
        cluster::PeerSource::ConfigurationChanged { dropped } => info!(
            peers = known.len(),
            dropped,
            "cluster.peers changed since the state was saved: using the configuration, not the saved peer list"
        ),
        cluster::PeerSource::Saved => {
            info!(peers = known.len(), "known peer balancers from the state file")
        }
        cluster::PeerSource::Configured => {}
    }
    Ok(Some(
        Cluster::start(&cfg.cluster, listen, known, cfg.gear.name.clone()).await?,
    ))
}

/// The rotation register from what was restored; gears rotated out stay out of
/// rotation in `router` from the start.
pub(super) fn restore_rotations(router: &Router, restored: &Restored) -> Arc<Rotations> {
    let rotations = Arc::new(Rotations::new(restored.rotations.clone()));
    router.set_rotated_out(
        rotations
            .ops()
            .values()
            .filter(|o| o.op == Op::Out)
            .map(|o| o.gear.clone())
            .collect(),
    );
    rotations
}

/// The restored backend set, with `local-gear` when configured, into the router.
pub(super) fn load_backends(router: &Router, cfg: &Config, restored: &Restored) {
    let mut specs = restored.specs.clone();
    if let Some(l) = local_gear_spec(cfg) {
        specs.retain(|s| s.name != l.name);
        specs.push(l);
    }
    let change = router.replace_backends(specs);
    let source = if restored.from_state {
        "state file"
    } else {
        "configuration"
    };
    info!(backends = change.added.len(), source, "backends loaded");
    for name in &change.added {
        info!(backend = %name, "backend added");
    }
}

/// Save the state a balancer starts with when it did not come from the state file.
pub(super) fn save_started_state(
    saved: &Persistence,
    router: &Router,
    cluster: &Option<Arc<Cluster>>,
    rotations: &Rotations,
) {
    let st = PersistedState {
        format: FORMAT,
        config_backends: saved
            .fingerprint
            .lock()
            .map(|f| f.clone())
            .unwrap_or_default(),
        backends: router.specs(),
        peers: cluster.as_ref().map(|c| c.known()).unwrap_or_default(),
        peers_config: Some(saved.peers_config.clone()),
        rotations: rotations.ops().into_values().collect(),
    };
    if let Err(e) = saved.store.save(&st) {
        warn!(error = %e, "could not save state; serving anyway");
    }
}

/// The [`App`] of a balancer from its parts: the request path's context, health
/// settings, the scaler and the metrics, built from `cfg`, which it keeps as the
/// configuration in force.
pub(super) fn assemble(
    cfg: Config,
    listeners: &Listeners,
    router: Arc<Router>,
    cluster: Option<Arc<Cluster>>,
    rotations: Arc<Rotations>,
    saved: Persistence,
) -> anyhow::Result<Arc<App>> {
    let frontend = Arc::new(FrontendStats::default());
    frontend
        .connections_limit
        .store(cfg.limits.max_connections as u64, Ordering::Relaxed);
    frontend.set_average_window(cfg.scaler.average_window);
    let (eject_tx, eject_rx) = mpsc::unbounded_channel();
    let stopping = CancellationToken::new();
    let proxy = ProxyCtx::new(
        router.clone(),
        frontend.clone(),
        Settings::from_config(&cfg),
        eject_tx,
        stopping.clone(),
    )
    .with_endpoint(cluster.as_ref().and_then(|c| c.upgrade_endpoint()));
    let self_id = cluster
        .as_ref()
        .map(|c| c.self_id().to_string())
        .or_else(|| cfg.gear.uuid.clone())
        .unwrap_or_else(|| "self".into());
    let scaler = Scaler::new(
        scaler_settings(&cfg),
        build_broker(&cfg, &self_id),
        self_id.clone(),
    );
    let rotation_counters = Arc::new(RotationCounters::default());
    let proxy = Arc::new(proxy);
    let services = Arc::new(crate::services::ServiceSet::new(
        proxy.clone(),
        &cfg,
        &self_id,
    ));
    let routers = services.clone();
    let mut metrics = Metrics::new(
        router.clone(),
        Arc::new(move || routers.routers()),
        frontend.clone(),
        crate::time::unix_secs(),
    );
    let spi = Arc::new(std::sync::OnceLock::new());
    metrics.register(crate::metrics::SpiCollector { spi: spi.clone() });
    metrics.register(ClusterCollector {
        cluster: cluster.clone(),
        scaler: scaler.clone(),
        rotations: rotation_counters.clone(),
    });
    let seen = Reporting {
        started: Instant::now(),
        listen: ListenReport {
            proxy: listeners.proxy.local_addr()?.to_string(),
            status: listeners.status.local_addr()?.to_string(),
            mode: cfg.listen.mode,
        },
        status_counters: Arc::new(crate::status::ListenerStats::default()),
        metrics,
        rotation_counters,
    };
    Ok(Arc::new(App {
        services,
        id: Identity::of(&cfg, self_id),
        router,
        cluster,
        rotations,
        scaler,
        proxy,
        frontend,
        health: Arc::new(ArcSwap::from_pointee(HealthSettings::of(&cfg))),
        ejections: Mutex::new(Some(eject_rx)),
        coverage: Arc::new(AtomicU32::new(cfg.subset.coverage)),
        tls: listeners.tls_acceptor.clone(),
        stopping,
        keep_seen: Arc::new(crate::idler::Counters::default()),
        spi,
        cluster_secret: cfg.cluster.secret.clone(),
        config: tokio::sync::Mutex::new(cfg),
        saved,
        seen,
    }))
}

/// The idler keep-seen task (`crate::idler`), when it is on: it samples this
/// balancer's client counters and the loads its live peers publish.
pub(super) fn keep_seen_task(
    app: &Arc<App>,
    cfg: &Config,
    stop: CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    let node_conf = crate::cartridge::node::node_conf(&crate::config::ProcessEnv);
    let settings = crate::idler::Settings::of(cfg, node_conf.as_deref())?;
    let (frontend, cluster) = (app.frontend.clone(), app.cluster.clone());
    let self_id = app.id.self_id.clone();
    let sample = move || {
        let read = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        crate::idler::Sample {
            served: read(&frontend.requests_total).wrapping_add(read(&frontend.connections_total)),
            open: read(&frontend.tunnels_current),
            peers_serving: cluster.as_ref().is_some_and(|c| {
                c.view()
                    .loads
                    .iter()
                    .any(|(id, l)| *id != self_id && (l.rps > 0.0 || l.in_flight > 0))
            }),
        }
    };
    let touch = Arc::new(crate::idler::FrontendTouch);
    Some(tokio::spawn(crate::idler::run(
        settings,
        sample,
        touch,
        app.keep_seen.clone(),
        stop,
    )))
}

/// The broker client, when the gear environment says where and who we are.
fn build_broker(cfg: &Config, node: &str) -> Option<Broker> {
    let url = cfg.scaler.broker_url.clone()?;
    let (Some(namespace), Some(app), Some(home)) =
        (&cfg.gear.namespace, &cfg.gear.app_name, &cfg.gear.homedir)
    else {
        warn!("broker configured but OPENSHIFT_NAMESPACE, OPENSHIFT_APP_NAME or OPENSHIFT_HOMEDIR is missing: no scaling");
        return None;
    };
    let bc = BrokerConfig {
        url,
        namespace: namespace.clone(),
        app: app.clone(),
        auth_dir: home.join(".auth"),
        ca_file: cfg.scaler.broker_ca.clone(),
        timeout: cfg.scaler.broker_timeout,
        node: node.to_string(),
    };
    match Broker::new(bc) {
        Ok(b) => Some(b),
        Err(e) => {
            error!(error = %e, "broker client not available: no scaling");
            None
        }
    }
}
