//! [`Target`]: what the data plane keeps for one backend of the routing table — its
//! connection pool, counters, passive-failure count, open tunnels and latest check —
//! beside the [`Backend`] value it belongs to (same id).

use std::ops::Deref;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use gearlb_core::routing::{Backend, CheckReport};

use crate::stats::BackendStats;
use crate::upstream::Pool;

/// The data plane's state of one backend, carried over from one snapshot to the next
/// while the backend's name and address stay the same. A request holds an
/// `Arc<Target>` for its whole life, so it finishes on the backend it started on even
/// if that backend is removed meanwhile. Derefs to its [`Backend`] (id, spec, sticky
/// value).
#[derive(Debug)]
pub struct Target {
    pub backend: Arc<Backend>,
    pub stats: BackendStats,
    pub pool: Pool,
    /// Consecutive failures seen on real traffic (reset by any answered request).
    pub passive_failures: AtomicU32,
    /// Upgraded connections (WebSocket) open now; each is also one of `outstanding`.
    pub tunnels: AtomicU64,
    /// Latest active check, if any ran.
    pub last_check: ArcSwapOption<CheckReport>,
    /// Slots of a backend with `max_connections`: a request holds one until its
    /// response is over; the others wait in FIFO order (tokio's semaphore is fair).
    pub slots: Option<Arc<tokio::sync::Semaphore>>,
    /// Requests waiting for a slot now (HAProxy's `qcur`).
    pub queued: AtomicU64,
}

impl Target {
    pub fn new(backend: Arc<Backend>, max_idle: usize) -> Arc<Self> {
        Arc::new(Target {
            stats: BackendStats::default(),
            pool: Pool::new(max_idle),
            passive_failures: AtomicU32::new(0),
            tunnels: AtomicU64::new(0),
            slots: backend
                .spec
                .max_connections
                .map(|n| Arc::new(tokio::sync::Semaphore::new(n as usize))),
            queued: AtomicU64::new(0),
            last_check: ArcSwapOption::empty(),
            backend,
        })
    }

    /// A target of a new backend of this spec (fresh id), outside any table.
    pub fn of_spec(spec: gearlb_core::routing::BackendSpec, max_idle: usize) -> Arc<Self> {
        Target::new(Arc::new(Backend::new(spec)), max_idle)
    }

    /// Sessions on this backend: requests sent and not yet answered in full, and open
    /// tunnels (HAProxy's `scur`, what `leastconn` compares).
    pub fn outstanding(&self) -> u64 {
        self.stats.outstanding.load(Ordering::Relaxed)
    }
}

impl Deref for Target {
    type Target = Backend;

    fn deref(&self) -> &Backend {
        &self.backend
    }
}
