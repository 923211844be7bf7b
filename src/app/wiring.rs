//! Start-up and stop: a [`Server`] binds every listener around a new [`App`] (restoring
//! the persisted backend set, peers and rotations, and applying the calls recorded
//! while stopped), serves until told to stop, then stops gracefully.
//!
//! Start-up order: control and stats sockets (a live balancer on them is refused), the
//! state directory's lock, the saved state, the listeners, the cluster; then accept.
//! Stop: stop accepting, let in-flight requests finish within `timeouts.shutdown_grace`,
//! close idle connections, remove the control and stats sockets.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use super::persist::take_state_lock;
use super::shared::{config_specs, local_gear_spec, scaler_settings, App};
use crate::cluster::{self, Cluster};
use crate::config::{backends_fingerprint, Config};
use crate::control;
use crate::health::{self, HealthSettings, HttpChecker};
use crate::proxy::{self, ProxyCtx, Settings};
use crate::report::{self, ListenReport};
use crate::rotation::{self, Op, Rotations};
use crate::routing::Router;
use crate::scaler::{
    broker::{Broker, BrokerConfig},
    Scaler,
};
use crate::state::{PersistedState, StateStore, FORMAT};
use crate::stats::FrontendStats;

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
        let metrics = crate::metrics::Metrics::new(
            router.clone(),
            frontend.clone(),
            crate::time::unix_secs(),
        );
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
            names: crate::cartridge::registry::Names::of(&cfg.gear),
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
