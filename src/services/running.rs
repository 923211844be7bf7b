//! A running service ([`Running`]: its service as the request path sees it, its
//! definition, supervisor and listener) and how its definition becomes its router's
//! backends (draining the ones that go), proxy settings and health check.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::sources::Origin;
use crate::config::{Config, ServiceConfig};
use crate::health::HealthSettings;
use crate::proxy::services::Service;
use crate::proxy::{ProxyCtx, Settings};
use crate::routing::{Admin, BackendSpec};

/// A registration and when its lease lapses.
pub(super) struct Lease {
    pub(super) reg: super::sources::Registration,
    pub(super) expires: Instant,
}

/// A service being served (or drained, once it went away).
pub(super) struct Running {
    pub(super) service: Arc<Service>,
    pub(super) origin: Origin,
    pub(super) config: ServiceConfig,
    pub(super) health: Arc<ArcSwap<HealthSettings>>,
    /// Stops its supervisor (and listener).
    pub(super) stop: CancellationToken,
    pub(super) listener: Option<(SocketAddr, CancellationToken, Arc<ProxyCtx>)>,
    /// Its health port (`health.listen`), when it has one.
    pub(super) health_port: Option<(SocketAddr, CancellationToken)>,
    /// Backends that went away, draining until idle or their deadline.
    pub(super) draining: HashMap<String, (BackendSpec, Instant)>,
}

/// The backends of `r`'s router: its definition's, and those draining.
pub(super) fn update_backends(r: &mut Running, cfg: &Config) {
    let wanted: Vec<BackendSpec> = r
        .config
        .backends
        .iter()
        .map(|b| BackendSpec {
            name: b.name.clone(),
            addr: b.addr.clone(),
            gear_dns: None,
            cookie: None,
            backup: b.backup,
            max_connections: b.max_connections,
            version: b.version.clone(),
            compatible: b.compatible.clone(),
            send_proxy: b.send_proxy,
        })
        .collect();
    let deadline = Instant::now() + cfg.rotate.timeout;
    for spec in r.service.router.specs() {
        let still = wanted.iter().any(|w| w.name == spec.name);
        if !still && !r.draining.contains_key(&spec.name) {
            info!(service = %r.config.name, backend = %spec.name, "backend removed: draining");
            r.draining.insert(spec.name.clone(), (spec, deadline));
        }
    }
    let mut revived = Vec::new();
    r.draining.retain(|name, _| {
        let back = wanted.iter().any(|w| &w.name == name);
        if back {
            revived.push(name.clone());
        }
        !back
    });
    let mut specs = wanted.clone();
    specs.extend(r.draining.values().map(|(s, _)| s.clone()));
    // An unchanged set publishes nothing (a new table would reset every connection's
    // affinity).
    let current = r.service.router.specs();
    let by_name: HashMap<&str, &BackendSpec> =
        current.iter().map(|s| (s.name.as_str(), s)).collect();
    let same = current.len() == specs.len()
        && specs
            .iter()
            .all(|s| by_name.get(s.name.as_str()) == Some(&s));
    let change = if same {
        Default::default()
    } else {
        r.service.router.replace_backends(specs)
    };
    for name in &change.added {
        info!(service = %r.config.name, backend = %name, "backend added");
    }
    for name in r.draining.keys() {
        r.service.router.set_admin(name, Admin::Draining);
    }
    // A backend defined again while it drained is back (one rotated out stays out:
    // the router brings it back drained).
    for name in revived {
        r.service.router.set_admin(&name, Admin::Active);
    }
}

/// The proxy settings of a service: the balancer's (`base`), with the service's own.
pub(super) fn service_settings(base: &Settings, s: &ServiceConfig) -> Settings {
    let mut settings = base.clone();
    if let Some(cookie) = &s.sticky_cookie {
        settings.sticky = base.sticky.as_ref().map(|st| st.renamed(cookie));
    }
    if !s.sticky {
        settings.sticky = None;
    }
    if let Some(t) = s.timeouts.connect {
        settings.timeouts.connect = t;
    }
    if let Some(t) = s.timeouts.server {
        settings.timeouts.server = t;
    }
    settings.queue_timeout = s.queue_timeout.unwrap_or(settings.timeouts.connect);
    // A service on a listener of its own speaks its own mode; the others are routed on
    // listen.proxy, in its mode (checked when the service was read).
    if s.listen.is_some() {
        settings.mode = s.mode;
    }
    settings
}

/// A service's health check: the balancer's (`base`), with the service's own.
pub(super) fn service_health(
    base: &HealthSettings,
    settings: &Settings,
    s: &ServiceConfig,
) -> HealthSettings {
    let h = base.clone().with_service(
        s.health.path.as_deref(),
        s.health.expect.as_deref(),
        s.health.port,
    );
    if s.listen.is_some() {
        h.for_mode(s.mode, settings.tcp.check)
    } else {
        h
    }
}

/// A service's own listener, bound and not yet serving.
pub(super) struct Bound {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    settings: Arc<Settings>,
}

/// Bind a service's own listener (the caller keeps serving the old one when it fails).
pub(super) async fn bind_listener(
    addr: SocketAddr,
    settings: &Arc<Settings>,
) -> Result<Bound, String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    Ok(Bound {
        listener,
        addr,
        settings: settings.clone(),
    })
}

impl Bound {
    /// Serve it for `r`'s service until its service stops or it is replaced.
    pub(super) fn serve(
        self,
        r: &Running,
        cfg: &Config,
        stop: &CancellationToken,
        tracker: &tokio_util::task::TaskTracker,
    ) -> (SocketAddr, CancellationToken, Arc<ProxyCtx>) {
        let ctx = Arc::new(ProxyCtx::new(
            r.service.router.clone(),
            Arc::new(crate::stats::FrontendStats::default()),
            (*self.settings).clone(),
            r.service.ejections.clone(),
            stop.clone(),
        ));
        let token = r.stop.child_token();
        tokio::spawn(crate::proxy::serve(
            self.listener,
            ctx.clone(),
            cfg.limits.max_connections,
            token.clone(),
            tracker.clone(),
        ));
        (self.addr, token, ctx)
    }
}

/// Bring `r`'s health port (`health.listen`) in line with its definition: any GET on
/// it is answered 200 while a backend of the service may take a request, else 503.
pub(super) async fn ensure_health_port(
    r: &mut Running,
    wanted: Option<SocketAddr>,
) -> Result<(), String> {
    if r.health_port.as_ref().map(|h| h.0) == wanted {
        return Ok(());
    }
    let Some(addr) = wanted else {
        if let Some((_, stop)) = r.health_port.take() {
            stop.cancel();
        }
        return Ok(());
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} (health.listen): {e}"))?;
    if let Some((_, old)) = r.health_port.take() {
        old.cancel();
    }
    let stop = r.stop.child_token();
    tokio::spawn(health_port(
        listener,
        r.service.router.clone(),
        stop.clone(),
    ));
    info!(service = %r.config.name, %addr, "service health port bound");
    r.health_port = Some((addr, stop));
    Ok(())
}

async fn health_port(
    listener: tokio::net::TcpListener,
    router: Arc<crate::routing::Router>,
    stop: CancellationToken,
) {
    use http_body_util::Full;
    loop {
        let stream = tokio::select! {
            _ = stop.cancelled() => return,
            a = listener.accept() => match a {
                Ok((s, _)) => s,
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let router = router.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |_req| {
                let up = router.load().can_serve();
                let (status, body) = if up {
                    (200, "1\n")
                } else {
                    (503, "no backend of this service is available\n")
                };
                let mut resp =
                    http::Response::new(Full::new(bytes::Bytes::from_static(body.as_bytes())));
                *resp.status_mut() = http::StatusCode::from_u16(status).unwrap_or_default();
                async move { Ok::<_, std::convert::Infallible>(resp) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(10))
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
            tokio::select! {
                _ = conn => {}
                _ = stop.cancelled() => {}
            }
        });
    }
}

/// Requests in flight on the backends of `router` that new sessions may not go to.
pub(super) fn in_flight_outside_active(router: &crate::routing::Router) -> u64 {
    let table = router.snapshot();
    let plan = table.version_plan(&router.versions());
    if !plan.versioned {
        return 0;
    }
    table
        .iter()
        .enumerate()
        .filter(|(i, _)| !plan.active.contains(i) && !plan.canary.contains(i))
        .map(|(_, (_, t))| t.outstanding())
        .sum()
}
