//! Services: the [`ServiceSet`] runs every service a balancer serves beside the default
//! one (the top-level backends, `App::router`): for each, a router, a health supervisor
//! and, when it has one, a listener of its own; it publishes the route table the request
//! path looks requests up in (`gearlb_proxy::services`), and drains what goes away.
//!
//! Sources ([`sources::merge`]): the configuration's `[[services]]`, the watched
//! directory ([`watch`]) and registrations with leases ([`ServiceSet::register`]).
//! Every change goes through [`ServiceSet::apply`]: sources merged, routes built (a
//! later claimant of a route is refused, naming both), routers updated, the table
//! published in one swap. A backend that goes away drains as a rotate-out does (no new
//! requests, in-flight ones finish) within `rotate.timeout`, then goes; a service that
//! goes away stops being routed at once and is dropped once drained.

pub mod api;
pub mod etcd;
pub mod gossip;
pub mod sources;
pub mod upstream;
pub mod watch;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::config::{Config, ServiceConfig, DEFAULT_SERVICE};
use crate::health::{self, HttpChecker};
use crate::proxy::services::{Service, Services};
use crate::proxy::ProxyCtx;
use crate::routing::routes::RouteTable;
use crate::routing::{Admin, Router};
pub use sources::registration;
use sources::{merge, Desired, Origin, Refusal, Registration};

/// The balancer's own settings, built once per change, that each service's start from.
struct Bases {
    settings: crate::proxy::Settings,
    health: crate::health::HealthSettings,
}

/// The most instances registered with one balancer at once.
pub const MAX_REGISTRATIONS: usize = 10_000;

/// A service beside the default one, for reports.
#[derive(Clone)]
pub struct ServiceView {
    pub name: Arc<str>,
    pub origin: Origin,
    pub hosts: Vec<String>,
    pub paths: Vec<String>,
    pub listen: Option<std::net::SocketAddr>,
    /// What it speaks (`http` or `tcp`).
    pub mode: crate::config::Mode,
    /// Its own listener's counters.
    pub frontend: Option<Arc<crate::stats::FrontendStats>>,
    pub router: Arc<Router>,
}

/// Every service of a balancer (see the module doc).
pub struct ServiceSet {
    /// This balancer's id in the cluster ("self" alone).
    self_id: String,
    proxy: Arc<ProxyCtx>,
    state: tokio::sync::Mutex<State>,
    /// Every service by name (the default one too), for reports and `/health/<name>`.
    all: ArcSwap<BTreeMap<String, Arc<Service>>>,
    /// The configuration in force (set by [`ServiceSet::apply`]).
    cfg: ArcSwap<Config>,
    /// The services beside the default one, as published (reports).
    views: ArcSwap<Vec<ServiceView>>,
    /// What was refused, as published (reports).
    refused: ArcSwap<Vec<Refusal>>,
    stop: CancellationToken,
    tracker: TaskTracker,
}

impl ServiceSet {
    /// The services of `proxy`'s listener (its router is the default service's).
    pub fn new(proxy: Arc<ProxyCtx>, cfg: &Config, self_id: &str) -> Self {
        ServiceSet {
            self_id: self_id.to_string(),
            proxy,
            state: Default::default(),
            all: ArcSwap::from_pointee(BTreeMap::new()),
            cfg: ArcSwap::from_pointee(cfg.clone()),
            views: ArcSwap::from_pointee(Vec::new()),
            refused: ArcSwap::from_pointee(Vec::new()),
            stop: CancellationToken::new(),
            tracker: TaskTracker::new(),
        }
    }

    /// Stop every service's listener and supervisor, and wait up to `grace` for their
    /// connections.
    pub async fn stop(&self, grace: Duration) {
        self.stop.cancel();
        self.tracker.close();
        let _ = tokio::time::timeout(grace, self.tracker.wait()).await;
        let st = self.state.lock().await;
        for r in st.running.values() {
            r.service.router.close_all();
        }
    }

    /// Whether `name`'s service may take a request now (a backend up and in rotation);
    /// `None`: no such service.
    pub fn healthy(&self, name: &str) -> Option<bool> {
        let all = self.all.load();
        let s = all.get(name)?;
        Some(s.router.load().can_serve())
    }

    /// Take `service`'s backend `backend` out until its checks pass again, as a
    /// failure on live traffic does (a peer router found it down). False when there is
    /// no such backend.
    pub fn eject(&self, service: &str, backend: &str) -> bool {
        let all = self.all.load();
        let Some(s) = all.get(service) else {
            return false;
        };
        let snapshot = s.router.snapshot();
        match snapshot.target(backend) {
            Some(t) => s.ejections.send(t.clone()).is_ok(),
            None => false,
        }
    }

    /// The services beside the default one as last published, for reports (lock-free).
    pub fn views(&self) -> Vec<ServiceView> {
        self.views.load().as_ref().clone()
    }

    /// The routers of the services beside the default one, by name.
    pub fn routers(&self) -> Vec<(Arc<str>, Arc<Router>)> {
        self.all
            .load()
            .values()
            .filter(|s| &*s.name != DEFAULT_SERVICE)
            .map(|s| (s.name.clone(), s.router.clone()))
            .collect()
    }

    /// The router of `name`'s service (the default one's too), lock-free.
    pub fn router_of(&self, name: &str) -> Option<Arc<Router>> {
        self.all.load().get(name).map(|s| s.router.clone())
    }

    /// Replace the watched files' states (the watcher's full scan) and apply.
    pub async fn set_files(&self, files: BTreeMap<PathBuf, FileState>) {
        let cfg = &*self.cfg.load_full();
        let mut st = self.state.lock().await;
        for (path, f) in &files {
            let before = st.files.get(path).and_then(|f| f.problem.clone());
            if let Some(p) = &f.problem {
                if before.as_ref() != Some(p) {
                    let kept = if f.good.is_some() {
                        "; its last good definition is kept"
                    } else {
                        ""
                    };
                    warn!(file = %path.display(), "service file refused{kept}: {p}");
                }
            }
        }
        for (path, f) in &files {
            let Some(g) = &f.good else { continue };
            let new = st.files.get(path).and_then(|o| o.good.as_ref()) != Some(g);
            if new && shared_file_value(path, g).is_none() {
                warn!(service = %g.name, file = %path.display(), "service too large to share by gossip: served by this balancer only");
            }
        }
        for path in st.files.keys() {
            if !files.contains_key(path) {
                info!(file = %path.display(), "service file removed: its service drains");
            }
        }
        st.files = files;
        self.apply_locked(&mut st, cfg).await;
    }

    /// What the other balancers share now (see [`gossip`]); applied when it changed.
    pub async fn set_remote(&self, remote: Remote) {
        let cfg = &*self.cfg.load_full();
        let mut st = self.state.lock().await;
        if st.remote != remote {
            st.remote = remote;
            self.apply_locked(&mut st, cfg).await;
        }
    }

    /// What etcd holds now (see [`etcd`]); applied when it changed.
    pub async fn set_etcd(&self, state: EtcdState) {
        let cfg = &*self.cfg.load_full();
        let mut st = self.state.lock().await;
        if st.etcd != state {
            st.etcd = state;
            self.apply_locked(&mut st, cfg).await;
        }
    }

    /// The routing SPI's applications now (`origin`: the destination they come
    /// from); applied when they changed.
    pub async fn set_spi(&self, origin: &str, services: Vec<ServiceConfig>) {
        let cfg = &*self.cfg.load_full();
        let mut st = self.state.lock().await;
        if st.spi.0 != origin || st.spi.1 != services {
            st.spi = (origin.to_string(), services);
            self.apply_locked(&mut st, cfg).await;
        }
    }

    /// The services refused now, and why, as last published (lock-free).
    pub fn refused(&self) -> Arc<Vec<Refusal>> {
        self.refused.load_full()
    }

    /// What this balancer shares with the others: the gossip keys of its file
    /// services and of the instances registered here.
    pub async fn local_keys(&self) -> BTreeMap<String, String> {
        self.state.lock().await.shared_keys()
    }

    /// Apply the configuration in force (start-up and reload).
    pub async fn apply(&self, cfg: &Config) {
        self.cfg.store(Arc::new(cfg.clone()));
        let mut st = self.state.lock().await;
        self.apply_locked(&mut st, cfg).await;
    }

    /// Lapsed leases and finished drains; applied when something changed. Run every
    /// 200 ms by [`ServiceSet::run`].
    pub async fn tick(&self) {
        let cfg = &*self.cfg.load_full();
        let mut st = self.state.lock().await;
        let now = Instant::now();
        let mut changed = false;
        let lapsed: Vec<_> = st
            .leases
            .iter()
            .filter(|(_, l)| l.expires <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for k in lapsed {
            warn!(service = %k.0, backend = %k.1, "registration lease lapsed: the instance drains");
            st.leases.remove(&k);
            changed = true;
        }
        // Only the services with backends draining: a tick costs what drains, not
        // the number of services (a router serves thousands).
        for r in st.running.values_mut().filter(|r| !r.draining.is_empty()) {
            let table = r.service.router.snapshot();
            let mut done = Vec::new();
            r.draining.retain(|name, (_, deadline)| {
                let busy = table.target(name).is_some_and(|t| t.outstanding() > 0);
                let keep = busy && *deadline > now;
                if !keep {
                    info!(service = %r.config.name, backend = %name, "backend drained: removed");
                    done.push(name.clone());
                }
                keep
            });
            if !done.is_empty() {
                let specs = r.service.router.specs();
                r.service.router.replace_backends(
                    specs
                        .into_iter()
                        .filter(|s| !done.contains(&s.name))
                        .collect(),
                );
            }
        }
        st.retiring.retain(|(r, deadline)| {
            let busy = r
                .service
                .router
                .load()
                .targets()
                .iter()
                .any(|t| t.outstanding() > 0);
            let keep = busy && *deadline > now;
            if !keep {
                info!(service = %r.config.name, "service drained: removed");
                r.stop.cancel();
                r.service.router.close_all();
            }
            keep
        });
        if changed {
            self.apply_locked(&mut st, cfg).await;
        }
    }

    /// The directory of service files, when there is one.
    pub fn dir(&self) -> Option<PathBuf> {
        self.cfg.load().discovery.dir.clone()
    }

    /// Tick until stopped.
    pub async fn run(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            self.tick().await;
        }
    }

    async fn apply_locked(&self, st: &mut State, cfg: &Config) {
        let mut all_files: Vec<(String, PathBuf, ServiceConfig)> = st
            .files
            .iter()
            .filter_map(|(p, f)| Some((self.self_id.clone(), p.clone(), f.good.clone()?)))
            .collect();
        all_files.extend(st.remote.files.iter().cloned());
        let (mut files, mut refused) = sources::order_files(all_files, &self.self_id);
        files.extend(
            st.etcd
                .services
                .iter()
                .map(|(k, s)| (Origin::Etcd(k.clone()), s.clone())),
        );
        files.extend(
            st.spi
                .1
                .iter()
                .map(|s| (Origin::Spi(st.spi.0.clone()), s.clone())),
        );
        let mut all_regs: Vec<(String, Registration)> = st
            .leases
            .values()
            .map(|l| (self.self_id.clone(), l.reg.clone()))
            .collect();
        all_regs.extend(st.remote.regs.iter().cloned());
        all_regs.extend(
            st.etcd
                .instances
                .values()
                .map(|r| ("etcd".to_string(), r.clone())),
        );
        let regs = sources::order_registrations(all_regs);
        let (mut desired, merged_refused) = merge(&cfg.services, &files, &regs);
        refused.extend(merged_refused);
        sources::fit_modes(&mut desired, cfg.listen.mode, &mut refused);
        let default = cfg.default_service();
        sources::resolve_conflicts(
            &mut desired,
            default,
            |name| st.running.get(name).map(|r| r.config.clone()),
            &mut refused,
        );
        // Own listeners: bound before anything is published; one that cannot be bound
        // refuses its service (a running one keeps its listener).
        let mut kept = Vec::new();
        let base = Bases {
            settings: crate::proxy::Settings::from_config(cfg),
            health: crate::health::HealthSettings::of(cfg),
        };
        for d in desired {
            let result = self.ensure(st, cfg, &base, &d).await;
            if let Err(why) = result {
                refused.push(Refusal {
                    service: d.config.name.clone(),
                    origin: d.origin.clone(),
                    backend: None,
                    why,
                });
                // A running service stays as it was.
                if !st.running.contains_key(&d.config.name) {
                    continue;
                }
            }
            kept.push(d);
        }
        let desired = kept;
        // What went away drains.
        let gone: Vec<String> = st
            .running
            .keys()
            .filter(|n| !desired.iter().any(|d| &d.config.name == *n))
            .cloned()
            .collect();
        for name in gone {
            if let Some(r) = st.running.remove(&name) {
                info!(service = %name, "service removed: not routed any more; its requests in flight finish");
                if let Some((_, l, _)) = &r.listener {
                    l.cancel();
                }
                if let Some((_, h)) = &r.health_port {
                    h.cancel();
                }
                for t in r.service.router.load().targets() {
                    r.service.router.set_admin(t.name(), Admin::Draining);
                }
                st.retiring.push((r, Instant::now() + cfg.rotate.timeout));
            }
        }
        for r in &refused {
            if !st.refused.contains(r) {
                warn!(service = %r.service, origin = %r.origin, "service refused: {}", r.why);
            }
        }
        self.refused.store(Arc::new(refused.clone()));
        st.refused = refused;
        self.publish(st, default);
    }

    /// Start `d`'s service or bring it up to date (backends, policy, listener).
    async fn ensure(
        &self,
        st: &mut State,
        cfg: &Config,
        base: &Bases,
        d: &Desired,
    ) -> Result<(), String> {
        let name = d.config.name.clone();
        let ops = st.ops_of(&name, &self.self_id);
        let settings = Arc::new(service_settings(&base.settings, &d.config));
        let health = service_health(&base.health, &base.settings, &d.config);
        if !st.running.contains_key(&name) {
            let router = Arc::new(Router::new(cfg.limits.max_idle_per_backend));
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let health = Arc::new(ArcSwap::from_pointee(health.clone()));
            let stop = self.stop.child_token();
            let service = Arc::new(Service {
                name: name.as_str().into(),
                router: router.clone(),
                settings: settings.clone(),
                ejections: tx,
            });
            tokio::spawn(health::run(
                router,
                Arc::new(HttpChecker),
                health.clone(),
                rx,
                stop.clone(),
            ));
            info!(service = %name, origin = %d.origin, hosts = ?d.config.hosts, paths = ?d.config.paths, "service added");
            st.running.insert(
                name.clone(),
                Running {
                    service,
                    origin: d.origin.clone(),
                    config: d.config.clone(),
                    health,
                    stop,
                    listener: None,
                    health_port: None,
                    draining: HashMap::new(),
                },
            );
        }
        let r = st.running.get_mut(&name).expect("inserted above");
        let wanted = d.config.listen;
        if r.listener.as_ref().map(|l| l.0) != wanted {
            match wanted {
                None => {
                    if let Some((_, l, _)) = r.listener.take() {
                        l.cancel();
                    }
                }
                Some(addr) => {
                    let listener = running::bind_listener(addr, &settings).await?;
                    if let Some((_, old, _)) = r.listener.take() {
                        old.cancel();
                    }
                    r.listener = Some(listener.serve(r, cfg, &self.stop, &self.tracker));
                    info!(service = %name, %addr, "service listener bound");
                }
            }
        }
        running::ensure_health_port(r, d.config.health.listen).await?;
        if let Some((_, _, ctx)) = &r.listener {
            ctx.settings.store(settings.clone());
        }
        r.health.store(Arc::new(health));
        r.origin = d.origin.clone();
        r.config = d.config.clone();
        r.service = Arc::new(Service {
            name: r.service.name.clone(),
            router: r.service.router.clone(),
            settings,
            ejections: r.service.ejections.clone(),
        });
        update_backends(r, cfg);
        r.service
            .router
            .set_versions(ops.policy(&d.config.versions));
        st.adopted.insert(name, ops.at_ms);
        Ok(())
    }

    /// Publish the route table and the report's list.
    fn publish(&self, st: &State, default: bool) {
        let mut list: Vec<Arc<Service>> = st.running.values().map(|r| r.service.clone()).collect();
        let mut all: BTreeMap<String, Arc<Service>> = list
            .iter()
            .map(|s| (s.name.to_string(), s.clone()))
            .collect();
        if default {
            let d = Arc::new(Service {
                name: DEFAULT_SERVICE.into(),
                router: self.proxy.router.clone(),
                settings: self.proxy.settings.load_full(),
                ejections: self.proxy.ejections().clone(),
            });
            all.insert(DEFAULT_SERVICE.into(), d.clone());
            list.insert(0, d);
        }
        let mut specs = Vec::new();
        if default {
            specs.push(crate::config::default_route());
        }
        specs.extend(st.running.values().map(|r| r.config.route_spec()));
        let (table, _) = RouteTable::build(&specs);
        // One service taking every request: no lookup on the request path.
        let single = default && st.running.is_empty();
        self.proxy
            .services
            .store((!single).then(|| Arc::new(Services::new(table, &list))));
        self.all.store(Arc::new(all));
        self.views.store(Arc::new(
            st.running
                .values()
                .map(|r| ServiceView {
                    name: r.service.name.clone(),
                    origin: r.origin.clone(),
                    hosts: r.config.hosts.clone(),
                    paths: r.config.paths.clone(),
                    mode: r.config.mode,
                    listen: r.listener.as_ref().map(|l| l.0),
                    frontend: r.listener.as_ref().map(|l| l.2.stats.clone()),
                    router: r.service.router.clone(),
                })
                .collect(),
        ));
    }

    /// What `gearlb ctl services` shows.
    pub async fn report(&self) -> ServicesReport {
        let default = self.cfg.load().default_service();
        let st = self.state.lock().await;
        report::build(&st, default.then_some(&*self.proxy.router))
    }
}

mod leases;
mod report;
mod running;
mod state;
mod versions;
pub use report::{versions_report, BackendReport, FileReport, ServiceReport, ServicesReport};
use running::{service_health, service_settings, update_backends, Lease, Running};
use state::{shared_file_value, State};
pub use state::{EtcdState, FileState, Remote, VersionOps};
