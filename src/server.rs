//! Assembly of a running balancer: listeners, routing, state, control, and their life.
//!
//! Owns start-up order (configuration → restore the persisted backend set → bind every
//! listener → accept), the control-plane operations (`update-cluster`, reload, status),
//! and the graceful stop (stop accepting, let in-flight requests finish within
//! `timeouts.shutdown_grace`, close idle connections, remove the control socket).
//! Control-plane operations are serialised by one async mutex; the request path never
//! sees it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::config::{self, backends_fingerprint, Config, ConfigErrors, EXIT_CONFIG};
use crate::control::{self, Reply, Request};
use crate::gear::{self, BadEntry};
use crate::health::{self, HealthSettings, HttpChecker};
use crate::proxy::{self, ProxyCtx, Settings};
use crate::routing::{Backend, BackendSpec, Change, Router};
use crate::state::{PersistedState, StateStore, FORMAT};
use crate::stats::{self, FrontendReport, FrontendStats, HealthReport, ListenReport, StatusReport};
use crate::status::StatusSource;

/// Exit code of `update-cluster` when some entries were invalid (as the old cartridge).
pub const EXIT_BAD_ENTRIES: i32 = 22;

/// The shared application state behind the listeners.
pub struct App {
    router: Arc<Router>,
    health: Arc<ArcSwap<HealthSettings>>,
    ejections: Mutex<Option<mpsc::UnboundedReceiver<Arc<Backend>>>>,
    stopping: CancellationToken,
    frontend: Arc<FrontendStats>,
    proxy: Arc<ProxyCtx>,
    store: StateStore,
    started: Instant,
    listen: ListenReport,
    gear_uuid: Option<String>,
    gear_dns: Option<String>,
    metrics: crate::metrics::Metrics,
    /// The configuration in force; also serialises control-plane operations.
    config: tokio::sync::Mutex<Config>,
}

/// A balancer with its listeners bound, not yet serving.
pub struct Server {
    app: Arc<App>,
    proxy_listener: TcpListener,
    status_listener: TcpListener,
    control_listener: tokio::net::UnixListener,
    control_path: PathBuf,
    max_connections: usize,
}

fn config_specs(cfg: &Config) -> Vec<BackendSpec> {
    cfg.backends
        .iter()
        .map(|b| BackendSpec {
            name: b.name.clone(),
            addr: b.addr.clone(),
            gear_dns: None,
            cookie: None,
        })
        .collect()
}

impl Server {
    /// Restore state and bind every listener. Fails (without side effects on the state
    /// file) when an address is taken or the control socket belongs to a running
    /// balancer.
    pub async fn bind(cfg: Config) -> anyhow::Result<Server> {
        let router = Arc::new(Router::new(cfg.limits.max_idle_per_backend));
        let store = StateStore::new(&cfg.state.dir);
        let fingerprint = backends_fingerprint(&cfg.backends);
        let (specs, from_state) = match store.load() {
            Ok(Some(st)) if st.config_backends == fingerprint => (st.backends, true),
            Ok(Some(_)) => {
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

        let control_path = cfg.control.socket.clone();
        let control_listener = control::bind(&control_path).await?;
        let proxy_listener = TcpListener::bind(cfg.listen.proxy)
            .await
            .with_context(|| format!("cannot listen on {} (listen.proxy)", cfg.listen.proxy))?;
        let status_listener = TcpListener::bind(cfg.listen.status)
            .await
            .with_context(|| format!("cannot listen on {} (listen.status)", cfg.listen.status))?;

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
                config_backends: fingerprint,
                backends: router.specs(),
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
        let proxy = Arc::new(ProxyCtx::new(
            router.clone(),
            frontend.clone(),
            Settings::from_config(&cfg),
            eject_tx,
            stopping.clone(),
        ));
        let health = Arc::new(ArcSwap::from_pointee(HealthSettings::from_config(
            &cfg.health,
        )));
        let listen = ListenReport {
            proxy: proxy_listener.local_addr()?.to_string(),
            status: status_listener.local_addr()?.to_string(),
        };
        let max_connections = cfg.limits.max_connections;
        let app = Arc::new(App {
            router,
            health,
            ejections: Mutex::new(Some(eject_rx)),
            stopping,
            frontend,
            proxy,
            store,
            started: Instant::now(),
            listen,
            gear_uuid: cfg.gear.uuid.clone(),
            gear_dns: cfg.gear.dns.clone(),
            metrics,
            config: tokio::sync::Mutex::new(cfg),
        });
        Ok(Server {
            app,
            proxy_listener,
            status_listener,
            control_listener,
            control_path,
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
        let sampler = tokio::spawn(stats::sampler::run(
            app.router.clone(),
            app.frontend.clone(),
            stop.clone(),
        ));
        info!(proxy = %app.listen.proxy, status = %app.listen.status, "gearlb serving");
        let proxy_task = tokio::spawn(proxy::serve(
            self.proxy_listener,
            app.proxy.clone(),
            self.max_connections,
            stop.clone(),
            tracker.clone(),
        ));
        let status_task = tokio::spawn(crate::status::serve(
            self.status_listener,
            app.clone(),
            stop.clone(),
            tracker.clone(),
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
        let _ = proxy_task.await;
        let _ = status_task.await;
        let _ = control_task.await;
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
            backends: stats::backend_reports(&self.router.snapshot()),
            gear_dns: self.gear_dns.clone(),
            health: Some(HealthReport::from_settings(&self.health.load())),
            peers: Vec::new(),
            rotations: Vec::new(),
        }
    }

    fn persist(&self, cfg: &Config) -> Result<(), String> {
        let st = PersistedState {
            format: FORMAT,
            config_backends: backends_fingerprint(&cfg.backends),
            backends: self.router.specs(),
        };
        self.store.save(&st).map_err(|e| e.to_string())
    }

    /// Apply `update-cluster`: the complete list of web gears.
    pub async fn update_cluster(&self, args: &[String]) -> Reply {
        let cfg = self.config.lock().await;
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
        let mut specs: Vec<BackendSpec> = parsed
            .valid
            .iter()
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
        let change = self.router.replace_backends(specs);
        log_change("update-cluster", &change);
        let persist_error = self.persist(&cfg).err();
        if let Some(e) = &persist_error {
            error!(error = %e, "update-cluster applied in memory but not saved");
        }
        let mut message = describe_change(&change);
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

    /// Re-read the config file with `env`; apply what can change without a restart.
    pub async fn reload(&self, env: &dyn config::Env) -> Reply {
        let mut cfg = self.config.lock().await;
        let mut new = match config::load(cfg.file.as_deref(), env) {
            Ok(c) => c,
            Err(ConfigErrors(problems)) => {
                let list: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
                error!(
                    problems = problems.len(),
                    "reload refused: configuration has problems; keeping the old one"
                );
                for p in &problems {
                    error!("  {p}");
                }
                return Reply::error(
                    EXIT_CONFIG,
                    format!(
                        "configuration not reloaded, old one kept:\n{}",
                        list.join("\n")
                    ),
                );
            }
        };
        new.log.requests_forced = cfg.log.requests_forced;
        let mut notes = Vec::new();
        let restart_only = [
            ("listen", cfg.listen != new.listen),
            ("control.socket", cfg.control != new.control),
            ("state.dir", cfg.state != new.state),
            ("runtime.threads", cfg.runtime != new.runtime),
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
        let backends_changed =
            backends_fingerprint(&cfg.backends) != backends_fingerprint(&new.backends);
        let mut reply_data = serde_json::Value::Null;
        // Keep the restart-only values in force until a restart.
        let mut applied = new.clone();
        applied.listen = cfg.listen.clone();
        applied.control = cfg.control.clone();
        applied.state = cfg.state.clone();
        applied.runtime = cfg.runtime.clone();
        applied.limits.max_connections = cfg.limits.max_connections;
        applied.limits.max_idle_per_backend = cfg.limits.max_idle_per_backend;
        *cfg = applied;
        if backends_changed {
            let change = self.router.replace_backends(config_specs(&cfg));
            log_change("reload", &change);
            notes.push(format!(
                "[[backends]] changed: {}",
                describe_change(&change)
            ));
            reply_data = serde_json::json!({ "change": change });
            if let Err(e) = self.persist(&cfg) {
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
    async fn handle(&self, req: Request) -> Reply {
        match req {
            Request::Status => match serde_json::to_value(self.status()) {
                Ok(v) => Reply::ok("", v),
                Err(e) => Reply::error(1, e.to_string()),
            },
            Request::UpdateCluster { args } => self.update_cluster(&args).await,
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
        self.router.load().selectable_count() > 0
    }

    fn metrics(&self) -> Result<String, std::fmt::Error> {
        self.metrics.encode()
    }
}
