//! Start-up and stop: a [`Server`] binds every listener around a new [`App`] (restoring
//! the persisted backend set, peers and rotations, and applying the calls recorded
//! while stopped), serves until told to stop, then stops gracefully.
//!
//! Start-up order (each step in `start`): control and stats sockets (a live balancer on
//! them is refused), the state directory's lock, the saved state, the listeners, the
//! cluster, rotations and backends, the [`App`]; then accept.
//! Stop: stop accepting, let in-flight requests finish within `timeouts.shutdown_grace`,
//! close idle connections, remove the control and stats sockets.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use super::parts::{App, Persistence};
use super::persist::take_state_lock;
use super::start::{assemble, load_backends, restore_rotations, save_started_state};
use super::start::{keep_seen_task, start_cluster, Listeners, LocalSockets, Restored};
use crate::cluster;
use crate::config::Config;
use crate::control;
use crate::health::{self, HttpChecker};
use crate::proxy;
use crate::report;
use crate::rotation;
use crate::routing::Router;
use crate::state::StateStore;

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
        // A live balancer on the same control socket is refused first; then the state
        // directory is ours (a caller recording a call while we were stopped holds it
        // for a moment: wait for it).
        let local = LocalSockets::bind(&cfg).await?;
        let store = StateStore::new(&cfg.state.dir);
        let state_lock = take_state_lock(&store).await?;
        let restored = Restored::load(&store, &cfg);
        let listeners = Listeners::bind(&cfg).await?;
        let peers_config = cluster::peers_fingerprint(&cfg.cluster.peers);
        let cluster = start_cluster(&cfg, &listeners, &restored).await?;
        let router = Arc::new(Router::new(cfg.limits.max_idle_per_backend));
        // Rotated-out gears come back out of rotation, before anything is served.
        let rotations = restore_rotations(&router, &restored);
        load_backends(&router, &cfg, &restored);
        let saved = Persistence {
            store,
            saving: tokio::sync::Mutex::new(()),
            fingerprint: Mutex::new(restored.fingerprint.clone()),
            peers_config,
            state_lock,
        };
        if !restored.from_state {
            save_started_state(&saved, &router, &cluster, &rotations);
        }
        let max_connections = cfg.limits.max_connections;
        let app = assemble(cfg, &listeners, router, cluster, rotations, saved)?;
        // The configuration's services, with their own listeners: one that cannot be
        // served stops the start, as listen.proxy would.
        {
            let cfg = app.config.lock().await;
            app.services.apply(&cfg).await;
        }
        let refused = app.services.report().await.refused;
        if let Some(r) = refused
            .iter()
            .find(|r| r.origin == crate::services::sources::Origin::Config)
        {
            anyhow::bail!("service {:?} cannot be served: {}", r.service, r.why);
        }
        if let Some(p) = restored.pending {
            app.apply_pending(p).await;
        }
        Ok(Server {
            app,
            proxy_listener: listeners.proxy,
            status_listener: listeners.status,
            tls_listener: listeners.tls,
            control_listener: local.control,
            control_path: local.control_path,
            stats_listener: local.stats,
            stats_path: local.stats_path,
            max_connections,
        })
    }

    pub fn proxy_addr(&self) -> SocketAddr {
        self.app
            .seen
            .listen
            .proxy
            .parse()
            .expect("formatted from a SocketAddr")
    }

    pub fn status_addr(&self) -> SocketAddr {
        self.app
            .seen
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
        info!(proxy = %app.seen.listen.proxy, status = %app.seen.listen.status, gossip = %gossip, tls = %tls_addr, "gearlb serving");
        let load_src = app.frontend.clone();
        let scaler_task = tokio::spawn(app.scaler.clone().run(
            app.cluster.clone(),
            app.router.clone(),
            Arc::new(move || load_src.inflight_average()),
            app.id.self_name.clone(),
            stop.clone(),
        ));
        let weak = Arc::downgrade(&app);
        let services = app.services.clone();
        let rotation_task = tokio::spawn(rotation::run(
            app.rotations.clone(),
            app.router.clone(),
            move |name| services.router_of(name),
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
        let keep_seen = {
            let cfg = app.config.lock().await;
            keep_seen_task(&app, &cfg, stop.clone())
        };
        let services_task = tokio::spawn(app.services.clone().run());
        let etcd_task = {
            let cfg = app.config.lock().await;
            (!cfg.discovery.etcd.is_empty()).then(|| {
                tokio::spawn(crate::services::etcd::follow(
                    app.services.clone(),
                    cfg.discovery.etcd.clone(),
                    cfg.discovery.etcd_prefix.clone(),
                ))
            })
        };
        let upstream_task = {
            let cfg = app.config.lock().await;
            (!cfg.upstream.balancers.is_empty()).then(|| {
                let advertise = cfg
                    .upstream
                    .advertise
                    .clone()
                    .unwrap_or_else(|| app.seen.listen.proxy.clone());
                tokio::spawn(crate::services::upstream::register_upward(
                    app.services.clone(),
                    cfg.upstream.clone(),
                    advertise,
                    stop.clone(),
                ))
            })
        };
        // A router: its table served at once, then the broker's events.
        let spi_run = {
            let cfg = app.config.lock().await;
            crate::spi::start(
                &cfg,
                app.services.clone(),
                app.tls.as_ref().map(|t| t.aliases().clone()),
                app.cluster.clone(),
                self.status_listener
                    .local_addr()
                    .unwrap_or(cfg.listen.status),
                stop.clone(),
            )
            .await
        };
        if let Some(r) = &spi_run {
            let _ = app.spi.set(r.spi.clone());
        }
        let share_task = app.cluster.clone().map(|c| {
            tokio::spawn(crate::services::gossip::share(
                app.services.clone(),
                c,
                stop.clone(),
            ))
        });
        let watch_task = app
            .services
            .dir()
            .map(|dir| tokio::spawn(crate::services::watch::watch_dir(app.services.clone(), dir)));
        let proxy_task = tokio::spawn(proxy::serve(
            self.proxy_listener,
            app.proxy.clone(),
            self.max_connections,
            stop.clone(),
            tracker.clone(),
        ));
        // Follows the OCSP files while the HTTPS listener serves (returns at once
        // without one); `GEARLB_OCSP_CHECK_MS` shortens the minute for tests.
        let every = std::env::var("GEARLB_OCSP_CHECK_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(
                std::time::Duration::from_secs(60),
                std::time::Duration::from_millis,
            );
        tokio::spawn(app.clone().follow_staples(every, stop.clone()));
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
            app.seen.status_counters.clone(),
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
        // systemd's readiness (`Type=notify`): serving, and a router's table served.
        {
            let app = app.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                loop {
                    if app.spi.get().is_none_or(|s| s.ready()) {
                        crate::systemd::notify("READY=1");
                        return;
                    }
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
                    }
                }
            });
        }
        stop.cancelled().await;
        crate::systemd::notify("STOPPING=1");
        info!("stopping: no new connections; waiting for requests in flight");
        app.stopping.cancel();
        // Withdrawn upward first: the balancers above stop sending here.
        if let Some(t) = upstream_task {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(10), t).await;
        }
        let grace = app.config.lock().await.timeouts.shutdown_grace;
        app.services.stop(grace).await;
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
        if let Some(t) = keep_seen {
            let _ = t.await;
        }
        tracker.close();
        let _ = services_task.await;
        if let Some(t) = share_task {
            let _ = t.await;
        }
        if let Some(t) = etcd_task {
            let _ = t.await;
        }
        if let Some(r) = spi_run {
            r.finish().await;
        }
        if let Some(t) = watch_task {
            let _ = t.await;
        }
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
