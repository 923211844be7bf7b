//! What the proxy's modules share: the settings read per connection or request
//! ([`Settings`], from [`crate::settings`], swapped on reload), the context every
//! connection holds ([`ProxyCtx`]), and a request's in-flight count on its backend
//! ([`InFlight`]).
//!
//! A leaf of the proxy: it imports no other module of it but [`super::io`]'s clock and
//! the [`super::upgrade`] trait, so that the listener, the downstream connection, the
//! request path, response bodies and tunnels all depend on it and not on each other.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::io::Clock;
use super::upgrade::UpgradeEndpoint;
use crate::health::EjectSender;
use crate::router::{Router, Target};
use crate::services::Services;
pub use crate::settings::Settings;
use crate::stats::FrontendStats;

/// Connections kept apart from `limits.max_connections` for the balancer's own protocol
/// on the port (a peer's gossip upgrade): clients that fill every place cannot keep the
/// balancers from reaching each other.
pub const RESERVED_FOR_OWN_PROTOCOL: usize = 64;

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
    /// Room kept apart from `max_connections` for the balancer's own protocol (peers'
    /// gossip), used only once every client place is taken.
    pub(super) reserve: Arc<Semaphore>,
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
            reserve: Arc::new(Semaphore::new(RESERVED_FOR_OWN_PROTOCOL)),
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
/// `dispatch::take_slot`) and given back when dropped.
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
