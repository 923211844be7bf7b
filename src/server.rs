//! Assembly of a running balancer: listeners, routing, state, control, and their life.
//!
//! Owns start-up order (configuration → restore the persisted backend set → bind every
//! listener → accept), the control-plane operations (`update-cluster`, reload, status),
//! and the graceful stop (stop accepting, let in-flight requests finish within
//! `timeouts.shutdown_grace`, close idle connections, remove the control and stats
//! sockets).
//! Control-plane operations are serialised by one async mutex; the request path never
//! sees it.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::cluster::{self, Cluster, ClusterView};
use crate::config::{self, backends_fingerprint, Config, ConfigErrors, EXIT_CONFIG};
use crate::control::{self, Reply, Request};
use crate::gear::{self, BadEntry};
use crate::health::{self, HealthSettings, HttpChecker};
use crate::proxy::{self, ProxyCtx, Settings};
use crate::report::{self, FrontendReport, HealthReport, ListenReport, StatusReport};
use crate::rotation::{self, AckState, Op, Rotations};
use crate::routing::{Backend, BackendSpec, Change, Router};
use crate::scaler::{
    self,
    broker::{Broker, BrokerConfig},
    policy::PolicyConfig,
    Scaler, ScalerSettings,
};
use crate::state::{PersistedState, StateStore, FORMAT};
use crate::stats::{self, FrontendStats};
use crate::status::StatusSource;

/// Exit code of `update-cluster` when some entries were invalid (as the old cartridge).
pub const EXIT_BAD_ENTRIES: i32 = 22;

/// How long the node's rotate call waits for peers once this balancer is done.
const NODE_PEER_GRACE: Duration = Duration::from_secs(5);

/// The shared application state behind the listeners.
pub struct App {
    router: Arc<Router>,
    cluster: Option<Arc<Cluster>>,
    coverage: Arc<AtomicU32>,
    health: Arc<ArcSwap<HealthSettings>>,
    ejections: Mutex<Option<mpsc::UnboundedReceiver<Arc<Backend>>>>,
    stopping: CancellationToken,
    frontend: Arc<FrontendStats>,
    proxy: Arc<ProxyCtx>,
    store: StateStore,
    started: Instant,
    listen: ListenReport,
    gear_uuid: Option<String>,
    /// This balancer's id in the cluster (node id, else gear uuid, else "self").
    self_id: String,
    namespace: Option<String>,
    rotations: Arc<Rotations>,
    scaler: Arc<Scaler>,
    rotation_counters: Arc<crate::metrics::RotationCounters>,
    self_name: Option<String>,
    /// The web server in this gear, always a backend when configured.
    local_gear: Option<BackendSpec>,
    /// This gear's DNS name: its `update-cluster` entry is `local-gear`.
    own_dns: Option<String>,
    /// Fingerprint of the config's `[[backends]]` as last applied (for the state file).
    fingerprint: Mutex<String>,
    gear_dns: Option<String>,
    /// The status listener's own traffic (the CSV's `stats` proxy).
    status_counters: Arc<crate::status::ListenerStats>,
    metrics: crate::metrics::Metrics,
    /// The HTTPS listener's certificates, when it runs (swapped on reload).
    tls: Option<Arc<crate::tls::TlsAcceptor>>,
    /// The configuration in force; also serialises control-plane operations.
    config: tokio::sync::Mutex<Config>,
    /// How the node's gear uuids map to labels (see `cartridge::registry`).
    names: crate::cartridge::registry::Names,
    /// The node's gear registry, when in a gear.
    registry_path: Option<PathBuf>,
    /// Held while this balancer runs: calls made while it is stopped go to the
    /// pending file instead (see `state`).
    /// (`None` when the directory cannot hold the lock file: served all the same.)
    state_lock: Option<crate::state::StateLock>,
    /// `cluster::peers_fingerprint` of `cluster.peers` at start, saved with the peers.
    peers_config: String,
    /// Orders state saves: each is built and written under it, so the last written is
    /// the last built.
    saving: tokio::sync::Mutex<()>,
}

/// A balancer with its listeners bound, not yet serving.
pub struct Server {
    app: Arc<App>,
    proxy_listener: TcpListener,
    status_listener: TcpListener,
    tls_listener: Option<TcpListener>,
    control_listener: tokio::net::UnixListener,
    control_path: PathBuf,
    stats_listener: tokio::net::UnixListener,
    stats_path: PathBuf,
    max_connections: usize,
}

fn config_specs(cfg: &Config) -> Vec<BackendSpec> {
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
fn local_gear_spec(cfg: &Config) -> Option<BackendSpec> {
    let addr = cfg.local_gear.clone()?;
    let cookie = own_label(cfg);
    Some(BackendSpec {
        name: "local-gear".into(),
        addr,
        gear_dns: cfg.gear.dns.clone(),
        cookie,
    })
}

impl Server {
    /// Restore state and bind every listener. Fails (without side effects on the state
    /// file) when an address is taken or the control socket belongs to a running
    /// balancer.
    pub async fn bind(cfg: Config) -> anyhow::Result<Server> {
        let router = Arc::new(Router::new(cfg.limits.max_idle_per_backend));
        let store = StateStore::new(&cfg.state.dir);
        let fingerprint = backends_fingerprint(&cfg.backends);
        // A live balancer on the same control socket is refused first; then the state
        // directory is ours (a caller recording a call while we were stopped holds it
        // for a moment: wait for it).
        let control_path = cfg.control.socket.clone();
        let control_listener = control::bind(&control_path).await?;
        let stats_path = cfg.control.stats_socket_path();
        let stats_listener = control::bind_socket(&stats_path, "stats socket").await?;
        let state_lock = take_state_lock(&store).await?;
        let pending = match store.load_pending() {
            Ok(p) => p.filter(|p| !p.is_empty()),
            Err(e) => {
                error!(error = %e, "calls recorded while stopped cannot be read: ignored");
                None
            }
        };
        let mut saved_peers = Vec::new();
        let mut saved_peers_config = None;
        let mut saved_rotations = Vec::new();
        let (specs, from_state) = match store.load() {
            Ok(Some(st)) if st.config_backends == fingerprint => {
                saved_peers = st.peers;
                saved_peers_config = st.peers_config;
                saved_rotations = st.rotations;
                (st.backends, true)
            }
            Ok(Some(st)) => {
                saved_peers = st.peers;
                saved_peers_config = st.peers_config;
                saved_rotations = st.rotations;
                info!("[[backends]] in the configuration changed since the state was saved: using the configuration");
                (config_specs(&cfg), false)
            }
            Ok(None) => (config_specs(&cfg), false),
            Err(e) => {
                error!(error = %e, "cannot use the saved state: starting from the configuration");
                match store.set_aside() {
                    Ok(p) => {
                        warn!(path = %p.display(), "unreadable state file kept for inspection")
                    }
                    Err(e) => warn!(error = %e, "could not move the unreadable state file aside"),
                }
                (config_specs(&cfg), false)
            }
        };

        let proxy_listener = TcpListener::bind(cfg.listen.proxy)
            .await
            .with_context(|| format!("cannot listen on {} (listen.proxy)", cfg.listen.proxy))?;
        let status_listener = TcpListener::bind(cfg.listen.status)
            .await
            .with_context(|| format!("cannot listen on {} (listen.status)", cfg.listen.status))?;
        let (tls_listener, tls) = match cfg.listen.tls {
            None => (None, None),
            Some(addr) => {
                let resumption = crate::tls::Resumption::new()
                    .context("TLS session tickets cannot be set up")?;
                let tls = crate::tls::load_with(&cfg.tls, cfg.proxy.h2c, &resumption).map_err(
                    |problems| {
                        let list: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
                        anyhow::anyhow!("TLS certificates unusable:\n{}", list.join("\n"))
                    },
                )?;
                let l = TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr} (listen.tls)"))?;
                (
                    Some(l),
                    Some(Arc::new(crate::tls::TlsAcceptor::new(tls, resumption))),
                )
            }
        };

        let gossip_listen = match cfg.cluster.listen {
            Some(l) => Some(l),
            None if cfg.cluster.gossip() => Some(proxy_listener.local_addr()?),
            None => None,
        };
        let peers_config = cluster::peers_fingerprint(&cfg.cluster.peers);
        let cluster = match gossip_listen {
            None => None,
            Some(listen) => {
                let (known, source) = cluster::combine_peers(
                    &cfg.cluster.peers,
                    &saved_peers,
                    saved_peers_config.as_deref(),
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
                Some(Cluster::start(&cfg.cluster, listen, known, cfg.gear.name.clone()).await?)
            }
        };
        // Rotations recorded while stopped merge with the saved ones (the latest op per
        // gear wins).
        if let Some(p) = &pending {
            for op in &p.rotations {
                info!(gear = %op.gear, op = ?op.op, "rotation recorded while stopped applied");
            }
            saved_rotations.extend(p.rotations.iter().cloned());
        }
        // Rotated-out gears come back out of rotation, before anything is served.
        let rotations = Arc::new(Rotations::new(saved_rotations));
        router.set_rotated_out(
            rotations
                .ops()
                .values()
                .filter(|o| o.op == Op::Out)
                .map(|o| o.gear.clone())
                .collect(),
        );
        let mut specs = specs;
        if let Some(l) = local_gear_spec(&cfg) {
            specs.retain(|s| s.name != l.name);
            specs.push(l);
        }
        let change = router.replace_backends(specs);
        info!(
            backends = change.added.len(),
            source = if from_state {
                "state file"
            } else {
                "configuration"
            },
            "backends loaded"
        );
        for name in &change.added {
            info!(backend = %name, "backend added");
        }
        if !from_state {
            let st = PersistedState {
                format: FORMAT,
                config_backends: fingerprint.clone(),
                backends: router.specs(),
                peers: cluster.as_ref().map(|c| c.known()).unwrap_or_default(),
                peers_config: Some(peers_config.clone()),
                rotations: rotations.ops().into_values().collect(),
            };
            if let Err(e) = store.save(&st) {
                warn!(error = %e, "could not save state; serving anyway");
            }
        }

        let frontend = Arc::new(FrontendStats::default());
        frontend
            .connections_limit
            .store(cfg.limits.max_connections as u64, Ordering::Relaxed);
        let metrics =
            crate::metrics::Metrics::new(router.clone(), frontend.clone(), stats::unix_now());
        let (eject_tx, eject_rx) = mpsc::unbounded_channel();
        let stopping = CancellationToken::new();
        let proxy = Arc::new(
            ProxyCtx::new(
                router.clone(),
                frontend.clone(),
                Settings::from_config(&cfg),
                eject_tx,
                stopping.clone(),
            )
            .with_endpoint(cluster.as_ref().and_then(|c| c.upgrade_endpoint())),
        );
        let health = Arc::new(ArcSwap::from_pointee(HealthSettings::from_config(
            &cfg.health,
        )));
        let listen = ListenReport {
            proxy: proxy_listener.local_addr()?.to_string(),
            status: status_listener.local_addr()?.to_string(),
        };
        let max_connections = cfg.limits.max_connections;
        let self_id = cluster
            .as_ref()
            .map(|c| c.self_id().to_string())
            .or_else(|| cfg.gear.uuid.clone())
            .unwrap_or_else(|| "self".into());
        frontend.set_average_window(cfg.scaler.average_window);
        let rotation_counters = Arc::new(crate::metrics::RotationCounters::default());
        let scaler = Scaler::new(
            scaler_settings(&cfg),
            build_broker(&cfg, &self_id),
            self_id.clone(),
        );
        let mut metrics = metrics;
        metrics.register(crate::metrics::ClusterCollector {
            cluster: cluster.clone(),
            scaler: scaler.clone(),
            rotations: rotation_counters.clone(),
        });
        let app = Arc::new(App {
            router,
            rotation_counters,
            scaler,
            self_name: cfg.gear.name.clone(),
            local_gear: local_gear_spec(&cfg),
            own_dns: cfg.gear.dns.clone(),
            coverage: Arc::new(AtomicU32::new(cfg.subset.coverage)),
            cluster,
            health,
            ejections: Mutex::new(Some(eject_rx)),
            stopping,
            frontend,
            proxy,
            store,
            saving: tokio::sync::Mutex::new(()),
            started: Instant::now(),
            listen,
            gear_uuid: cfg.gear.uuid.clone(),
            self_id,
            namespace: cfg.gear.namespace.clone(),
            rotations,
            fingerprint: Mutex::new(fingerprint),
            gear_dns: cfg.gear.dns.clone(),
            status_counters: Arc::new(crate::status::ListenerStats::default()),
            metrics,
            tls,
            names: gear_names(&cfg),
            registry_path: cfg
                .gear
                .homedir
                .as_deref()
                .map(crate::cartridge::registry::path),
            state_lock,
            peers_config,
            config: tokio::sync::Mutex::new(cfg),
        });
        if let Some(p) = pending {
            app.apply_pending(p).await;
        }
        Ok(Server {
            app,
            proxy_listener,
            status_listener,
            tls_listener,
            control_listener,
            control_path,
            stats_listener,
            stats_path,
            max_connections,
        })
    }

    pub fn proxy_addr(&self) -> SocketAddr {
        self.app
            .listen
            .proxy
            .parse()
            .expect("formatted from a SocketAddr")
    }

    pub fn status_addr(&self) -> SocketAddr {
        self.app
            .listen
            .status
            .parse()
            .expect("formatted from a SocketAddr")
    }

    pub fn app(&self) -> Arc<App> {
        self.app.clone()
    }

    /// Serve until `stop` is cancelled, then stop gracefully.
    pub async fn run(self, stop: CancellationToken) {
        let app = self.app;
        let tracker = TaskTracker::new();
        let ejections = app.ejections.lock().ok().and_then(|mut e| e.take());
        let health_task = ejections.map(|rx| {
            tokio::spawn(health::run(
                app.router.clone(),
                Arc::new(HttpChecker),
                app.health.clone(),
                rx,
                stop.clone(),
            ))
        });
        let sampler = tokio::spawn(report::sampler::run(
            app.router.clone(),
            app.frontend.clone(),
            stop.clone(),
        ));
        let gossip = app
            .cluster
            .as_ref()
            .map(|c| c.advertise().to_string())
            .unwrap_or_else(|| "off".into());
        let tls_addr = self
            .tls_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|a| a.to_string())
            .unwrap_or_else(|| "off".into());
        info!(proxy = %app.listen.proxy, status = %app.listen.status, gossip = %gossip, tls = %tls_addr, "gearlb serving");
        let load_src = app.frontend.clone();
        let scaler_task = tokio::spawn(app.scaler.clone().run(
            app.cluster.clone(),
            app.router.clone(),
            Arc::new(move || load_src.inflight_average()),
            app.self_name.clone(),
            stop.clone(),
        ));
        let weak = Arc::downgrade(&app);
        let rotation_task = tokio::spawn(rotation::run(
            app.rotations.clone(),
            app.router.clone(),
            app.cluster.clone(),
            move |_ops| {
                if let Some(app) = weak.upgrade() {
                    tokio::spawn(async move {
                        if let Err(e) = app.persist().await {
                            error!(error = %e, "rotation state not saved");
                        }
                    });
                }
            },
            stop.clone(),
        ));
        if let Some(c) = &app.cluster {
            // Identities learnt from addresses are kept in the state file.
            let mut learned = c.subscribe_learned();
            let weak = Arc::downgrade(&app);
            let stop = stop.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        r = learned.changed() => if r.is_err() { return },
                    }
                    let Some(app) = weak.upgrade() else { return };
                    if let Err(e) = app.persist().await {
                        error!(error = %e, "learnt peer identities not saved");
                    }
                }
            });
        }
        let cluster_tasks = app.cluster.clone().map(|c| {
            (
                tokio::spawn(c.clone().run(stop.clone())),
                tokio::spawn(cluster::sync::run(
                    c,
                    app.router.clone(),
                    app.frontend.clone(),
                    app.coverage.clone(),
                    stop.clone(),
                )),
            )
        });
        let proxy_task = tokio::spawn(proxy::serve(
            self.proxy_listener,
            app.proxy.clone(),
            self.max_connections,
            stop.clone(),
            tracker.clone(),
        ));
        let tls_task = match (self.tls_listener, app.tls.clone()) {
            (Some(l), Some(tls)) => Some(tokio::spawn(proxy::serve_tls(
                l,
                app.proxy.clone(),
                tls,
                self.max_connections,
                stop.clone(),
                tracker.clone(),
            ))),
            _ => None,
        };
        let status_task = tokio::spawn(crate::status::serve(
            self.status_listener,
            app.clone(),
            app.status_counters.clone(),
            stop.clone(),
            tracker.clone(),
        ));
        let stats_socket_task = tokio::spawn(crate::status::socket::serve(
            self.stats_listener,
            self.stats_path,
            app.clone(),
            stop.clone(),
        ));
        let control_task = tokio::spawn(control::serve(
            self.control_listener,
            self.control_path,
            app.clone(),
            stop.clone(),
        ));
        stop.cancelled().await;
        info!("stopping: no new connections; waiting for requests in flight");
        app.stopping.cancel();
        if let Some(t) = health_task {
            let _ = t.await;
        }
        let _ = rotation_task.await;
        let _ = scaler_task.await;
        if let Some((a, b)) = cluster_tasks {
            let _ = a.await;
            let _ = b.await;
        }
        let _ = proxy_task.await;
        if let Some(t) = tls_task {
            let _ = t.await;
        }
        let _ = status_task.await;
        let _ = control_task.await;
        let _ = stats_socket_task.await;
        let _ = sampler.await;
        tracker.close();
        let grace = app.config.lock().await.timeouts.shutdown_grace;
        if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
            warn!(
                connections = tracker.len(),
                "grace period of {grace:?} over: closing remaining connections"
            );
        }
        app.router.close_all();
        info!("stopped");
    }
}

impl App {
    /// The status report.
    pub fn status(&self) -> StatusReport {
        StatusReport {
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            uptime_secs: self.started.elapsed().as_secs(),
            gear_uuid: self.gear_uuid.clone(),
            listen: self.listen.clone(),
            frontend: FrontendReport::read(&self.frontend),
            backends: report::backend_reports(&self.router.snapshot()),
            gear_dns: self.gear_dns.clone(),
            health: Some(HealthReport::from_settings(&self.health.load())),
            peers: self.peer_reports(),
            rotations: self.rotation_reports(),
            scaler: Some(self.scaler.report()),
            availability: Some(self.router.availability()),
            status_listener: Some(FrontendReport::read(&self.status_counters)),
        }
    }

    fn peer_reports(&self) -> Vec<report::PeerReport> {
        self.cluster_view()
            .peers
            .iter()
            .map(|p| report::PeerReport {
                name: p
                    .name
                    .clone()
                    .or_else(|| p.id.clone())
                    .unwrap_or_else(|| p.addr.clone()),
                addr: p.addr.clone(),
                state: if p.live {
                    "alive"
                } else if p.known {
                    "dead"
                } else {
                    "unknown"
                }
                .into(),
                last_seen_secs: None,
                sessions: p.load.as_ref().map(|l| l.sessions),
            })
            .collect()
    }

    /// Rotate-outs in force, and rotate-ins of the last five minutes.
    fn rotation_reports(&self) -> Vec<report::RotationReport> {
        let view = self.cluster_view();
        let own = self.rotations.acks();
        let now_us = rotation::unix_ms() * 1000;
        self.rotations
            .ops()
            .values()
            .filter(|o| o.op == Op::Out || now_us.saturating_sub(o.ts) < 300_000_000)
            .map(|o| {
                let epoch = o.epoch();
                let done = match o.op {
                    Op::Out => AckState::Drained,
                    Op::In => AckState::Active,
                };
                let mut total = 1;
                let mut finished = u32::from(
                    own.get(&o.gear)
                        .is_some_and(|a| a.epoch == epoch && a.state == done),
                );
                for p in view.peers.iter().filter(|p| p.live) {
                    total += 1;
                    let acked =
                        p.id.as_ref()
                            .and_then(|id| view.acks.get(id))
                            .and_then(|m| m.get(&o.gear))
                            .is_some_and(|a| a.epoch == epoch && a.state == done);
                    finished += u32::from(acked);
                }
                let state = match (o.op, finished == total) {
                    (Op::Out, true) => "drained",
                    (Op::Out, false) => "draining",
                    (Op::In, true) => "active",
                    (Op::In, false) => "waiting for peers",
                };
                report::RotationReport {
                    backend: format!("gear-{}", o.gear),
                    action: match o.op {
                        Op::Out => "out".into(),
                        Op::In => "in".into(),
                    },
                    state: state.into(),
                    age_secs: now_us.saturating_sub(o.ts) / 1_000_000,
                    balancers_done: finished,
                    balancers_total: total,
                }
            })
            .collect()
    }

    /// Save the state file: backends, peers, rotations. Written on the blocking pool
    /// (see [`StateStore::save_off_runtime`]): a slow disk holds this call, never the
    /// runtime's worker threads.
    async fn persist(&self) -> Result<(), String> {
        let _ordered = self.saving.lock().await;
        let state = PersistedState {
            format: FORMAT,
            config_backends: self
                .fingerprint
                .lock()
                .map(|f| f.clone())
                .unwrap_or_default(),
            backends: self.router.specs(),
            peers: self.cluster.as_ref().map(|c| c.known()).unwrap_or_default(),
            peers_config: Some(self.peers_config.clone()),
            rotations: self.rotations.ops().into_values().collect(),
        };
        self.store
            .save_off_runtime(state)
            .await
            .map_err(|e| e.to_string())
    }

    /// Apply `update-cluster`: the complete list of web gears.
    pub async fn update_cluster(&self, args: &[String]) -> Reply {
        let _serialised = self.config.lock().await;
        let parsed = gear::parse_entries(args);
        if parsed.valid.is_empty() && !parsed.invalid.is_empty() {
            return Reply {
                exit_code: EXIT_BAD_ENTRIES,
                message: format!(
                    "no valid entry; nothing changed\n{}",
                    describe_bad(&parsed.invalid)
                ),
                data: serde_json::json!({ "invalid": parsed.invalid }),
            };
        }
        let current = self.router.specs();
        let own = self.own_dns.as_deref().map(str::to_ascii_lowercase);
        let mut specs: Vec<BackendSpec> = parsed
            .valid
            .iter()
            // Our own gear is `local-gear`, reached directly rather than through the
            // node's port proxy.
            .filter(|e| self.local_gear.is_none() || own.as_deref() != Some(e.gear_dns.as_str()))
            .map(|e| BackendSpec {
                name: e.server_name(),
                addr: e.addr.clone(),
                gear_dns: Some(e.gear_dns.clone()),
                cookie: None,
            })
            .collect();
        // A gear whose entry was malformed keeps its current address rather than being
        // dropped: bad input changes nothing.
        let mut kept = Vec::new();
        for bad in &parsed.invalid {
            if let Some(label) = gear::entry_label(&bad.entry) {
                let name = format!("gear-{label}");
                if let Some(spec) = current.iter().find(|s| s.name == name) {
                    if !specs.iter().any(|s| s.name == name) {
                        specs.push(spec.clone());
                        kept.push(name);
                    }
                }
            }
        }
        if let Some(l) = &self.local_gear {
            specs.push(l.clone());
        }
        let change = self.router.replace_backends(specs);
        log_change("update-cluster", &change);
        let persist_error = self.persist().await.err();
        if let Some(e) = &persist_error {
            error!(error = %e, "update-cluster applied in memory but not saved");
        }
        let mut message = describe_change(&change);
        // The node's list was empty (its registry has no web gear) and this gear has no
        // web server of its own: nothing is left to route to. Applied, as the platform
        // means it, but said loudly.
        if self.router.specs().is_empty() {
            warn!("update-cluster left no web gear: requests get 503 until a gear is listed");
            message.push_str(
                "\nwarning: no web gear left to route to: requests get 503 until update-cluster lists one",
            );
        }
        if !kept.is_empty() {
            message.push_str(&format!(
                "\nkept with their current address: {}",
                kept.join(", ")
            ));
        }
        if !parsed.invalid.is_empty() {
            message.push('\n');
            message.push_str(&describe_bad(&parsed.invalid));
        }
        if let Some(e) = &persist_error {
            message.push_str(&format!(
                "\nwarning: applied but NOT saved, a restart would lose it: {e}"
            ));
        }
        let exit_code = if !parsed.invalid.is_empty() {
            EXIT_BAD_ENTRIES
        } else if persist_error.is_some() {
            1
        } else {
            0
        };
        Reply {
            exit_code,
            message,
            data: serde_json::json!({
                "change": change,
                "invalid": parsed.invalid,
                "kept": kept,
                "persist_error": persist_error,
            }),
        }
    }

    /// One manual scale event (`gearlb ctl scale up|down`), from any balancer.
    pub async fn scale(&self, event: &str) -> Reply {
        let event = match event {
            "up" | "scale-up" => "scale-up",
            "down" | "scale-down" => "scale-down",
            other => {
                return Reply::error(
                    EXIT_CONFIG,
                    format!("scale {:?}: use up or down", gear::printable(other)),
                )
            }
        };
        let (outcome, text) = self.scaler.manual(event).await;
        match outcome {
            scaler::policy::Outcome::Done | scaler::policy::Outcome::AtLimit => {
                Reply::ok(text, serde_json::Value::Null)
            }
            scaler::policy::Outcome::Failed => Reply::error(1, text),
        }
    }

    /// The cluster as this balancer sees it.
    pub fn cluster_view(&self) -> ClusterView {
        match &self.cluster {
            Some(c) => {
                let mut view = (*c.view()).clone().with_loads();
                view.gossip = c.gossip_counters();
                view
            }
            None => ClusterView::single(self.gear_uuid.as_deref().unwrap_or("self")),
        }
    }

    /// Replace the known peer balancers (subscriber hook).
    pub async fn set_peers(&self, args: &[String]) -> Reply {
        let _serialised = self.config.lock().await;
        let Some(cluster) = &self.cluster else {
            return Reply::error(1, "gossip is off (no cluster.transport = \"http\" or cluster.listen): peers cannot be set");
        };
        let peers = match gear::parse_peers(args) {
            Ok(p) => p,
            Err(bad) => {
                return Reply {
                    exit_code: EXIT_BAD_ENTRIES,
                    message: format!("peer list refused, nothing changed\n{}", describe_bad(&bad)),
                    data: serde_json::json!({ "invalid": bad }),
                }
            }
        };
        let before = cluster.known();
        cluster.set_known(peers.clone());
        if before != peers {
            info!(peers = peers.len(), "known peer balancers replaced");
        }
        let mut message = format!("{} peer balancer(s) known", peers.len());
        let mut exit_code = 0;
        if let Err(e) = self.persist().await {
            error!(error = %e, "peers applied but not saved");
            message.push_str(&format!("\nwarning: applied but NOT saved: {e}"));
            exit_code = 1;
        }
        Reply {
            exit_code,
            message,
            data: serde_json::json!({ "peers": peers }),
        }
    }

    /// The gear a rotate command names: its sticky label. GEAR may be the server name
    /// (`gear-<gearname>-<ns>`, `local-gear`), the label (`<gearname>-<ns>`), a gear uuid
    /// as the node passes it (this balancer's own, the head gear's, one in the node's
    /// gear registry, or any other: `<uuid>-<ns>`), or the gear name alone (unique
    /// prefix of a label before `-<ns>`). A gear no balancer lists yet is named all the
    /// same: its rotation is kept and applies when it appears.
    fn resolve_gear(&self, arg: &str) -> Result<String, String> {
        let table = self.router.snapshot();
        let labels: Vec<&str> = table
            .entries()
            .iter()
            .map(|e| e.backend.sticky.as_str())
            .collect();
        let by_name = table
            .entries()
            .iter()
            .find(|e| e.backend.name() == arg)
            .map(|e| e.backend.sticky.clone());
        if let Some(l) = by_name {
            return Ok(l);
        }
        if labels.contains(&arg) {
            return Ok(arg.to_string());
        }
        use crate::cartridge::registry::{self, label_for_uuid};
        let registry = match &self.registry_path {
            Some(p) if registry::is_uuid(arg) => registry::Registry::load(p).unwrap_or_else(|e| {
                warn!(error = %e, "gear registry unreadable: naming gears without it");
                registry::Registry::default()
            }),
            _ => registry::Registry::default(),
        };
        let n = &self.names;
        let same = |k: &Option<String>| k.as_deref().is_some_and(|k| k.eq_ignore_ascii_case(arg));
        if same(&n.own_uuid) || same(&n.app_uuid) || registry.get(arg).is_some() {
            if let Some(l) = label_for_uuid(arg, n, &registry) {
                return Ok(l);
            }
        }
        let with_ns = self.namespace.as_ref().map(|ns| format!("{arg}-{ns}"));
        if let Some(l) = with_ns.filter(|l| labels.contains(&l.as_str())) {
            return Ok(l);
        }
        let prefixed: Vec<&&str> = labels
            .iter()
            .filter(|l| l.starts_with(&format!("{arg}-")))
            .collect();
        match prefixed.as_slice() {
            [one] => Ok(one.to_string()),
            [] => {
                // A gear another balancer knows but this one does not (yet): a uuid
                // names `<uuid>-<ns>`, and a label-shaped name itself.
                if let Some(l) = label_for_uuid(arg, n, &registry) {
                    Ok(l)
                } else if gear::is_dns_name(arg) && arg.contains('-') && !arg.contains('.') {
                    Ok(arg.to_ascii_lowercase())
                } else {
                    Err(format!("unknown gear {:?}", gear::printable(arg)))
                }
            }
            many => Err(format!(
                "{:?} is ambiguous: {}",
                gear::printable(arg),
                many.iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// Apply the calls recorded while this balancer was stopped, through the same code
    /// as live ones (rotations were merged at start); forget them once saved.
    async fn apply_pending(&self, p: crate::state::Pending) {
        if let Some(args) = &p.set_peers {
            let r = self.set_peers(args).await;
            info!(
                exit_code = r.exit_code,
                "set-peers recorded while stopped applied: {}", r.message
            );
        }
        if let Some(args) = &p.update_cluster {
            let r = self.update_cluster(args).await;
            info!(
                exit_code = r.exit_code,
                "update-cluster recorded while stopped applied: {}", r.message
            );
        }
        match self.persist().await {
            Ok(()) => {
                let cleared = match &self.state_lock {
                    Some(lock) => self.store.clear_pending(lock),
                    None => Ok(()),
                };
                if let Err(e) = cleared {
                    warn!(error = %e, "applied calls recorded while stopped not cleared: they apply again at the next start");
                }
            }
            Err(e) => {
                error!(error = %e, "calls recorded while stopped applied but not saved: kept for the next start")
            }
        }
    }

    /// Rotate a gear out (drain everywhere) or in, and wait until every live balancer
    /// acknowledged. The result is the platform's rotate JSON shape.
    ///
    /// `node` is the node platform's call (`bin/control disable-server|enable-server`),
    /// which asks every balancer itself, in parallel, and aborts the deploy on any
    /// nonzero exit: there the outcome is this balancer's own (success once it has
    /// drained the gear, or put it back; peers that did not acknowledge are reported,
    /// not failed), and no quorum is needed (draining is always safe, and the op reaches
    /// the others when they are back). Either way a rotation of the gear in the same
    /// direction already in force is joined, not repeated.
    pub async fn rotate(
        &self,
        arg: &str,
        op: Op,
        timeout: Option<Duration>,
        progress: &control::Progress,
        node: bool,
    ) -> Reply {
        let default_timeout = self.config.lock().await.rotate.timeout;
        let verb = match op {
            Op::Out => "rotate-out",
            Op::In => "rotate-in",
        };
        let label = match self.resolve_gear(arg) {
            Ok(l) => l,
            Err(e) => return Reply::error(1, format!("{verb}: {e}")),
        };
        let target = match &self.namespace {
            _ if node => arg.to_string(),
            Some(ns) => label
                .strip_suffix(&format!("-{ns}"))
                .unwrap_or(&label)
                .to_string(),
            None => label.clone(),
        };
        let view = self.cluster_view();
        if !node && view.enabled && view.live.len() * 2 < view.known_count {
            let msg = format!(
                "{verb} {label}: only {} of {} known balancers reachable: no quorum, nothing changed",
                view.live.len(),
                view.known_count
            );
            let result = rotate_result(
                &target,
                false,
                BTreeMap::from([(
                    self.self_id.clone(),
                    proxy_result(&self.self_id, &target, "failure", vec![], vec![msg.clone()]),
                )]),
            );
            return Reply {
                exit_code: 1,
                message: msg,
                data: result,
            };
        }
        let timeout = timeout.unwrap_or(default_timeout);
        let started = tokio::time::Instant::now();
        // The node asks every balancer at once: the first op taken wins, the others
        // join it (as does a repeated command).
        let joined = self
            .rotations
            .ops()
            .get(&label)
            .filter(|o| o.op == op)
            .cloned();
        let submitted = match joined {
            Some(o) => o,
            None => {
                let o = self.rotations.submit(&label, op, &self.self_id, timeout);
                // The balancer that took the command hands its op to every live peer
                // at once. Not on the node's path: the node asks every balancer itself,
                // and M balancers each pushing to all would be M² messages.
                if !node {
                    self.rotations.fan_out(o.epoch());
                }
                o
            }
        };
        let mut epoch = submitted.epoch();
        let done_state = match op {
            Op::Out => AckState::Drained,
            Op::In => AckState::Active,
        };
        // rotate-in has no drain: give peers a bounded time to confirm.
        let give_up = match op {
            Op::Out => timeout + Duration::from_secs(5),
            Op::In => Duration::from_secs(10),
        };
        info!(gear = %label, epoch = %epoch, "{verb} started");
        let mut last_line = String::new();
        let mut self_done_at: Option<tokio::time::Instant> = None;
        let mut views = self.cluster.as_ref().map(|c| c.subscribe());
        let mut own_acks = self.rotations.subscribe_acks();
        let (acked, pending, inflight, forced, superseded) = loop {
            // Two balancers took the same command at once: the later op of the same
            // direction wins everywhere, and is the one to wait for.
            if let Some(o) = self.rotations.ops().get(&label) {
                if o.op == op && o.epoch() != epoch {
                    epoch = o.epoch();
                }
            }
            let view = match &self.cluster {
                Some(c) => c.view(),
                None => Arc::new(ClusterView::single(&self.self_id)),
            };
            let own = self.rotations.acks().get(&label).cloned();
            let rotation::Progress {
                acked,
                pending,
                inflight,
                forced,
            } = rotation::progress(
                &self.self_id,
                own.as_ref(),
                view.peers.iter().filter(|p| p.live).filter_map(|p| {
                    let id = p.id.as_deref()?;
                    Some((id, view.acks.get(id).and_then(|m| m.get(&label))))
                }),
                &epoch,
                done_state,
            );
            // Only a later op in the other direction undoes this one (a later one in
            // the same direction is followed at the top of the next round).
            let superseded = self
                .rotations
                .ops()
                .get(&label)
                .filter(|o| o.epoch() != epoch && o.op != op)
                .cloned();
            let left = give_up.saturating_sub(started.elapsed());
            let line = format!(
                "{verb} {label}: acks {}/{}, in flight {inflight}, time left {}s",
                acked.len(),
                acked.len() + pending.len(),
                match op {
                    Op::Out => timeout.saturating_sub(started.elapsed()).as_secs(),
                    Op::In => left.as_secs(),
                }
            );
            if line != last_line {
                let _ = progress.send(line.clone());
                last_line = line;
            }
            // The node's call: once this balancer is done, peers get a few seconds more
            // (the node asks each of them itself).
            let self_done = acked.contains(&self.self_id);
            if node && self_done && self_done_at.is_none() {
                self_done_at = Some(tokio::time::Instant::now());
            }
            let peers_waited_enough = self_done_at.is_some_and(|t| t.elapsed() >= NODE_PEER_GRACE);
            if pending.is_empty() || superseded.is_some() || left.is_zero() || peers_waited_enough {
                break (acked, pending, inflight, forced, superseded);
            }
            // Wake on news (a peer's ack, our own, a change of the live set), or after
            // a tenth of a second for the countdown.
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = own_acks.changed() => {}
                _ = async {
                    match views.as_mut() {
                        Some(v) => { let _ = v.changed().await; }
                        None => std::future::pending::<()>().await,
                    }
                } => {}
            }
        };

        let view = self.cluster_view();
        let mut results = BTreeMap::new();
        let all_acked = pending.is_empty() && superseded.is_none();
        let self_ok = acked.contains(&self.self_id) && superseded.is_none();
        let ok = if node { self_ok } else { all_acked };
        for id in acked.iter().chain(pending.iter()) {
            let mut messages = Vec::new();
            let mut errors = Vec::new();
            let good = acked.contains(id);
            if good {
                messages.push(match op {
                    Op::Out => format!("gear {target} drained"),
                    Op::In => format!("gear {target} active"),
                });
                if let Some(n) = forced.get(id).filter(|n| **n > 0) {
                    messages.push(format!(
                        "forced: {n} request(s) or tunnel(s) cut at the {timeout:?} deadline"
                    ));
                }
            } else if node && self_ok {
                errors.push(format!(
                    "no acknowledgment within {:?} (reported, not failed: the node asks this balancer itself)",
                    started.elapsed()
                ));
            } else {
                errors.push(format!("no acknowledgment within {give_up:?}"));
            }
            if let Some(s) = &superseded {
                errors.push(format!("superseded by a later {:?} from {}", s.op, s.by));
            }
            let status = if good && superseded.is_none() {
                "success"
            } else {
                "failure"
            };
            results.insert(
                id.clone(),
                proxy_result(id, &target, status, messages, errors),
            );
        }
        for p in view.peers.iter().filter(|p| p.known && !p.live) {
            let id = p.id.clone().unwrap_or_else(|| p.addr.clone());
            results.insert(
                id.clone(),
                proxy_result(
                    &id,
                    &target,
                    "unreachable",
                    vec![],
                    vec![format!(
                        "balancer {} unreachable (dead in gossip): not waited for",
                        p.addr
                    )],
                ),
            );
        }
        let total_forced: u64 = forced.values().sum();
        let message = format!(
            "{verb} {label}: {} in {:.1}s; {} balancer(s) acknowledged{}{}",
            if ok { "success" } else { "FAILED" },
            started.elapsed().as_secs_f64(),
            acked.len(),
            if total_forced > 0 {
                format!(", {total_forced} forced")
            } else {
                String::new()
            },
            if inflight > 0 && !ok {
                format!(", {inflight} still in flight")
            } else {
                String::new()
            },
        );
        info!(gear = %label, ok, forced = total_forced, "{verb} finished");
        let rc = &self.rotation_counters;
        let counter = match (op, ok) {
            (Op::Out, true) => &rc.out_ok,
            (Op::Out, false) => &rc.out_failed,
            (Op::In, true) => &rc.in_ok,
            (Op::In, false) => &rc.in_failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        rc.forced.fetch_add(total_forced, Ordering::Relaxed);
        rc.duration_ms
            .fetch_add(started.elapsed().as_millis() as u64, Ordering::Relaxed);
        Reply {
            exit_code: if ok { 0 } else { 1 },
            message,
            data: rotate_result(&target, ok, results),
        }
    }

    /// Rotate the backend whose server name is `server` (as in the CSV: `local-gear`,
    /// `gear-<gearname>-<ns>`, a `[[backends]]` name) out or in on every balancer, and
    /// return at once: the op is stamped, gossiped now and persisted like those of
    /// `rotate-out`/`rotate-in`, but nothing waits for the drain or for acknowledgments
    /// (the stats socket's `disable server` / `enable server`). Returns the gear's sticky
    /// label and whether an op was submitted: none when that op is already in force, or
    /// for `in` when the gear was never rotated out (as HAProxy's `enable server` of a
    /// server not in maintenance).
    pub async fn rotate_server(
        &self,
        server: &str,
        op: Op,
    ) -> Result<(String, bool), RotateServerError> {
        let label = self
            .router
            .snapshot()
            .get(server)
            .map(|e| e.backend.sticky.clone())
            .ok_or_else(|| RotateServerError::NoSuchServer(gear::printable(server)))?;
        let in_force = self.rotations.ops().get(&label).map(|o| o.op);
        if in_force == Some(op) || (in_force.is_none() && op == Op::In) {
            return Ok((label, false));
        }
        let view = self.cluster_view();
        if view.enabled && view.live.len() * 2 < view.known_count {
            return Err(RotateServerError::NoQuorum {
                live: view.live.len(),
                known: view.known_count,
            });
        }
        let timeout = self.config.lock().await.rotate.timeout;
        let submitted = self.rotations.submit(&label, op, &self.self_id, timeout);
        self.rotations.fan_out(submitted.epoch());
        info!(gear = %label, server, epoch = %submitted.epoch(), op = ?op, "rotation submitted (stats socket), not waiting for acknowledgments");
        Ok((label, true))
    }

    /// Re-read the config file with `env`; apply what can change without a restart.
    pub async fn reload(&self, env: &dyn config::Env) -> Reply {
        let mut cfg = self.config.lock().await;
        let mut new = match config::load(cfg.file.as_deref(), env) {
            Ok(c) => c,
            Err(ConfigErrors(problems)) => {
                return reload_refused("configuration has problems; keeping the old one", &problems)
            }
        };
        new.log.requests_forced = cfg.log.requests_forced;
        // New certificates first: a broken one refuses the whole reload, like any other
        // configuration problem (connections already open keep their certificates).
        let new_tls = match &self.tls {
            None => None,
            Some(acceptor) => {
                match crate::tls::load_with(&new.tls, cfg.proxy.h2c, acceptor.resumption()) {
                    Ok(t) => Some(t),
                    Err(problems) => {
                        return reload_refused(
                            "TLS certificates unusable; keeping the old ones",
                            &problems,
                        )
                    }
                }
            }
        };
        let mut notes = Vec::new();
        let restart_only = [
            ("listen", cfg.listen != new.listen),
            ("control (socket, stats_socket)", cfg.control != new.control),
            ("state.dir", cfg.state != new.state),
            ("runtime.threads", cfg.runtime != new.runtime),
            (
                "cluster (listen, advertise, node_id, id, secret, transport, gossip_interval)",
                cfg.cluster.listen != new.cluster.listen
                    || cfg.cluster.advertise != new.cluster.advertise
                    || cfg.cluster.node_id != new.cluster.node_id
                    || cfg.cluster.id != new.cluster.id
                    || cfg.cluster.secret != new.cluster.secret
                    || cfg.cluster.transport != new.cluster.transport
                    || cfg.cluster.gossip_interval != new.cluster.gossip_interval,
            ),
            (
                "limits.max_connections",
                cfg.limits.max_connections != new.limits.max_connections,
            ),
            (
                "limits.max_idle_per_backend",
                cfg.limits.max_idle_per_backend != new.limits.max_idle_per_backend,
            ),
        ];
        for (what, changed) in restart_only {
            if changed {
                notes.push(format!("{what} changed: takes effect on restart"));
            }
        }
        self.proxy
            .settings
            .store(Arc::new(Settings::from_config(&new)));
        if let (Some(tls), Some(new_tls)) = (&self.tls, new_tls) {
            tls.replace(new_tls);
            notes.push("TLS certificates reloaded (for new connections)".into());
        }
        self.health
            .store(Arc::new(HealthSettings::from_config(&new.health)));
        self.coverage.store(new.subset.coverage, Ordering::Relaxed);
        self.scaler.settings.store(Arc::new(scaler_settings(&new)));
        self.frontend.set_average_window(new.scaler.average_window);
        let backends_changed =
            backends_fingerprint(&cfg.backends) != backends_fingerprint(&new.backends);
        let mut reply_data = serde_json::Value::Null;
        // Keep the restart-only values in force until a restart.
        let mut applied = new.clone();
        applied.listen = cfg.listen.clone();
        applied.control = cfg.control.clone();
        applied.state = cfg.state.clone();
        applied.runtime = cfg.runtime.clone();
        applied.cluster = cfg.cluster.clone();
        applied.limits.max_connections = cfg.limits.max_connections;
        applied.limits.max_idle_per_backend = cfg.limits.max_idle_per_backend;
        *cfg = applied;
        if backends_changed {
            if let Ok(mut f) = self.fingerprint.lock() {
                *f = backends_fingerprint(&cfg.backends);
            }
            let change = self.router.replace_backends(config_specs(&cfg));
            log_change("reload", &change);
            notes.push(format!(
                "[[backends]] changed: {}",
                describe_change(&change)
            ));
            reply_data = serde_json::json!({ "change": change });
            if let Err(e) = self.persist().await {
                error!(error = %e, "reloaded backends not saved");
                notes.push(format!("warning: backends applied but NOT saved: {e}"));
            }
        }
        info!("configuration reloaded");
        let mut message = "configuration reloaded".to_string();
        for n in notes {
            message.push_str("\n  ");
            message.push_str(&n);
        }
        Reply::ok(message, reply_data)
    }
}

/// Take the state directory's lock, waiting a little for a caller that holds it to
/// record a call; fails when another balancer holds it. A directory that cannot hold
/// the lock file (read-only, full) is reported and served without it: nothing can be
/// recorded there while stopped either.
async fn take_state_lock(store: &StateStore) -> anyhow::Result<Option<crate::state::StateLock>> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match store.try_lock() {
            Ok(Some(l)) => return Ok(Some(l)),
            Ok(None) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Ok(None) => anyhow::bail!(
                "state directory {} is in use by another running gearlb",
                store
                    .path()
                    .parent()
                    .unwrap_or(store.path().as_path())
                    .display()
            ),
            Err(e) => {
                error!(error = %e, "cannot lock the state directory: calls made while this balancer is stopped will not be kept");
                return Ok(None);
            }
        }
    }
}

/// What this balancer knows of itself and its application to name gears by uuid.
pub fn gear_names(cfg: &Config) -> crate::cartridge::registry::Names {
    crate::cartridge::registry::Names {
        own_uuid: cfg.gear.uuid.clone(),
        own_label: own_label(cfg),
        app_uuid: cfg.gear.app_uuid.clone(),
        app_name: cfg.gear.app_name.clone(),
        namespace: cfg.gear.namespace.clone(),
    }
}

/// The label of this balancer's own gear (`local-gear`'s sticky value).
fn own_label(cfg: &Config) -> Option<String> {
    match (&cfg.gear.dns, &cfg.gear.name, &cfg.gear.namespace) {
        (Some(dns), _, _) => dns.split('.').next().map(str::to_ascii_lowercase),
        (None, Some(name), Some(ns)) => Some(format!("{name}-{ns}").to_ascii_lowercase()),
        _ => None,
    }
}

/// Why [`App::rotate_server`] changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RotateServerError {
    /// The name, made printable.
    #[error("no server \"{0}\"")]
    NoSuchServer(String),
    #[error("only {live} of {known} known balancers reachable: no quorum, nothing changed")]
    NoQuorum { live: usize, known: usize },
}

/// Scaler settings from a configuration.
fn scaler_settings(cfg: &Config) -> ScalerSettings {
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

fn proxy_result(
    proxy: &str,
    target: &str,
    status: &str,
    messages: Vec<String>,
    errors: Vec<String>,
) -> serde_json::Value {
    serde_json::json!({
        "status": status,
        "proxy_gear_uuid": proxy,
        "target_gear_uuid": target,
        "messages": messages,
        "errors": errors,
    })
}

fn rotate_result(
    target: &str,
    ok: bool,
    results: BTreeMap<String, serde_json::Value>,
) -> serde_json::Value {
    serde_json::json!({
        "status": if ok { "success" } else { "failure" },
        "target_gear_uuid": target,
        "proxy_results": results,
    })
}

fn log_change(source: &str, c: &Change) {
    if c.is_empty() {
        info!(source, unchanged = c.unchanged, "backend set unchanged");
        return;
    }
    for name in &c.added {
        info!(source, backend = %name, "backend added");
    }
    for name in &c.readdressed {
        info!(source, backend = %name, "backend address changed");
    }
    for name in &c.removed {
        info!(source, backend = %name, "backend removed (in-flight requests finish)");
    }
}

fn describe_change(c: &Change) -> String {
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(", ")
        }
    };
    format!(
        "added: {}; removed: {}; address changed: {}; unchanged: {}",
        list(&c.added),
        list(&c.removed),
        list(&c.readdressed),
        c.unchanged
    )
}

fn describe_bad(bad: &[BadEntry]) -> String {
    bad.iter()
        .map(|b| format!("invalid entry {:?}: {} (skipped)", b.entry, b.reason))
        .collect::<Vec<_>>()
        .join("\n")
}

impl control::Handler for App {
    async fn handle(&self, req: Request, progress: control::Progress) -> Reply {
        match req {
            Request::Status => match serde_json::to_value(self.status()) {
                Ok(v) => Reply::ok("", v),
                Err(e) => Reply::error(1, e.to_string()),
            },
            Request::UpdateCluster { args } => self.update_cluster(&args).await,
            Request::Peers => Reply::ok(
                "",
                serde_json::to_value(self.cluster_view()).unwrap_or_default(),
            ),
            Request::SetPeers { args } => self.set_peers(&args).await,
            Request::Scale { event } => self.scale(&event).await,
            Request::Rotate {
                gear,
                op,
                timeout_ms,
                node,
            } => {
                self.rotate(
                    &gear,
                    op,
                    timeout_ms.map(Duration::from_millis),
                    &progress,
                    node,
                )
                .await
            }
            Request::Reload { env } => {
                let env: HashMap<String, String> = env.into_iter().collect();
                self.reload(&env).await
            }
        }
    }
}

impl StatusSource for App {
    fn report(&self) -> StatusReport {
        self.status()
    }

    fn healthy(&self) -> bool {
        self.router.load().can_serve()
    }

    fn metrics(&self) -> Result<String, std::fmt::Error> {
        self.metrics.encode()
    }
}

impl crate::status::socket::Source for App {
    async fn set_server(
        &self,
        server: &str,
        enable: bool,
    ) -> Result<(), crate::status::socket::AdminError> {
        use crate::status::socket::AdminError;
        let op = if enable { Op::In } else { Op::Out };
        match self.rotate_server(server, op).await {
            Ok(_) => Ok(()),
            Err(RotateServerError::NoSuchServer(_)) => Err(AdminError::NoSuchServer),
            Err(e) => Err(AdminError::Refused(format!("gearlb: {e}."))),
        }
    }
}

/// A refused reload: every problem logged and listed in the reply (exit 64); the
/// configuration in force stays.
fn reload_refused(why: &str, problems: &[config::Problem]) -> Reply {
    error!(problems = problems.len(), "reload refused: {why}");
    for p in problems {
        error!("  {p}");
    }
    let list: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
    Reply::error(
        EXIT_CONFIG,
        format!(
            "configuration not reloaded, old one kept:\n{}",
            list.join("\n")
        ),
    )
}
