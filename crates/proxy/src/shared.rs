//! What the proxy's modules share: the settings read per connection or request
//! ([`Settings`], swapped on reload), the context every connection holds ([`ProxyCtx`]),
//! and a request's in-flight count on its backend ([`InFlight`]).
//!
//! A leaf of the proxy: it imports no other module of it but [`super::io`]'s clock and
//! the [`super::upgrade`] trait, so that the listener, the downstream connection, the
//! request path, response bodies and tunnels all depend on it and not on each other.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::io::Clock;
use super::upgrade::UpgradeEndpoint;
use crate::health::EjectSender;
use crate::router::{Router, Target};
use crate::services::Services;
use crate::stats::FrontendStats;
use gearlb_core::config::Config;
use gearlb_core::routing::sticky::Sticky;

/// Settings the proxy reads per connection or request; swapped on reload.
#[derive(Clone, Debug)]
pub struct Settings {
    pub timeouts: gearlb_core::config::Timeouts,
    pub trust_forwarded: bool,
    pub forwarded_headers: gearlb_core::config::ForwardedHeaders,
    pub h2c: bool,
    pub max_header_size: usize,
    pub retries: u32,
    /// Requests in a row a client connection may send to the backend of its previous
    /// request (see [`gearlb_core::routing::affinity`]); 0 = every request chosen afresh.
    pub connection_affinity: u32,
    /// Streams an HTTP/2 client connection may have open at once.
    pub h2_max_concurrent_streams: u32,
    /// How long a backend host name's addresses are used (`proxy.dns_ttl`).
    pub dns_ttl: Duration,
    /// Consecutive failures on live traffic that eject a backend; 0 = never.
    pub eject_after: u32,
    pub sticky: Option<Sticky>,
    /// How long a request waits for a slot on a backend at its `max_connections`
    /// before a 503 (HAProxy's `timeout queue`; default `timeouts.connect`).
    pub queue_timeout: Duration,
    /// One info line per request (`[log] requests`, `--log-requests`).
    pub log_requests: bool,
    /// hyper's HTTP/1 server settings, built once (not per connection).
    pub h1: hyper::server::conn::http1::Builder,
}

impl Settings {
    pub fn from_config(c: &Config) -> Self {
        let sticky = c
            .sticky
            .enabled
            .then(|| match (&c.cluster.secret, c.sticky.seal) {
                (Some(secret), true) => Sticky::sealed(
                    &c.sticky.cookie,
                    secret.as_bytes(),
                    c.sticky.max_age.as_secs(),
                ),
                _ => Sticky::plain(&c.sticky.cookie),
            });
        let mut h1 = hyper::server::conn::http1::Builder::new();
        // The request head timeout is the connection's own (see `downstream::watchdog`): no timer
        // per request.
        h1.header_read_timeout(None)
            .max_buf_size(c.limits.max_header_size)
            .max_header_size(c.limits.max_header_size)
            .writev(false)
            .keep_alive(true);
        Settings {
            h1,
            timeouts: c.timeouts.clone(),
            trust_forwarded: c.proxy.trust_forwarded,
            forwarded_headers: c.proxy.forwarded_headers,
            h2c: c.proxy.h2c,
            max_header_size: c.limits.max_header_size,
            retries: c.proxy.retries,
            connection_affinity: c.proxy.connection_affinity,
            h2_max_concurrent_streams: c.proxy.h2_max_concurrent_streams,
            dns_ttl: c.proxy.dns_ttl,
            eject_after: if c.health.enabled { c.health.fall } else { 0 },
            sticky,
            queue_timeout: c.timeouts.connect,
            log_requests: c.log.requests || c.log.requests_forced,
        }
    }
}

/// Everything a connection needs, shared by all of them.
pub struct ProxyCtx {
    pub router: Arc<Router>,
    /// The services of this listener by host and path; none: every request goes to
    /// `router` (one service).
    pub services: ArcSwapOption<Services>,
    pub stats: Arc<FrontendStats>,
    pub settings: ArcSwap<Settings>,
    /// Backends that failed `eject_after` times in a row on live traffic.
    pub(super) ejections: EjectSender,
    pub(super) clock: Clock,
    /// Cancelled when the balancer stops: closes tunnels.
    pub(super) stopping: CancellationToken,
    /// The pool sweeper runs (started by the first listener).
    pub(super) sweeping: std::sync::atomic::AtomicBool,
    /// `limits.max_connections`, shared by the HTTP and HTTPS listeners.
    pub(super) permits: std::sync::OnceLock<Arc<Semaphore>>,
    /// The balancer's own upgrade protocol on this port (gossip), if any.
    pub(super) endpoint: Option<Arc<dyn UpgradeEndpoint>>,
}

impl ProxyCtx {
    pub fn new(
        router: Arc<Router>,
        stats: Arc<FrontendStats>,
        settings: Settings,
        ejections: EjectSender,
        stopping: CancellationToken,
    ) -> Self {
        ProxyCtx {
            router,
            services: ArcSwapOption::empty(),
            stats,
            settings: ArcSwap::from_pointee(settings),
            ejections,
            clock: Clock::new(),
            stopping,
            sweeping: std::sync::atomic::AtomicBool::new(false),
            permits: std::sync::OnceLock::new(),
            endpoint: None,
        }
    }

    /// Serve `endpoint`'s protocol on the proxy port (see [`UpgradeEndpoint`]).
    pub fn with_endpoint(mut self, endpoint: Option<Arc<dyn UpgradeEndpoint>>) -> Self {
        self.endpoint = endpoint;
        self
    }

    /// A failure on live traffic; the request that makes it `eject_after` in a row
    /// reports the backend for ejection.
    /// (`ejections`: the supervisor of the backend's service.)
    pub(super) fn passive_failure(
        &self,
        ejections: &EjectSender,
        b: &Arc<Target>,
        eject_after: u32,
    ) {
        let n = b.passive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if eject_after > 0 && n == eject_after {
            let _ = ejections.send(b.clone());
        }
    }

    /// The ejection channel of this context's own router.
    pub fn ejections(&self) -> &EjectSender {
        &self.ejections
    }

    pub(super) fn passive_success(&self, b: &Target) {
        // Load first: a store on every response would bounce the cache line.
        if b.passive_failures.load(Ordering::Relaxed) != 0 {
            b.passive_failures.store(0, Ordering::Relaxed);
        }
    }
}

/// Counts a request as outstanding on a backend until dropped. On a backend with
/// `max_connections` it also holds one of its slots, taken by the caller (see
/// `request::take_slot`) and given back when dropped.
pub struct InFlight(Arc<Target>);

impl InFlight {
    pub(crate) fn start(backend: Arc<Target>) -> Self {
        backend.stats.request_started();
        InFlight(backend)
    }

    pub fn backend(&self) -> &Arc<Target> {
        &self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.stats.request_finished();
        if let Some(slots) = &self.0.slots {
            slots.add_permits(1);
        }
    }
}
