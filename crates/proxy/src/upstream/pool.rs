//! The connection pool of one backend: a lock-free queue of idle keep-alive
//! connections, the count of open ones, and the cells through which a drain deadline
//! cuts busy ones too.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::BytesMut;
use crossbeam_queue::{ArrayQueue, SegQueue};

use super::connection::{Conn, ConnCell, ConnIo, OpenGuard, READ_MIN};
use super::error::ConnectError;
use super::resolve::Resolver;
use crate::io::{coarse_ms, Counted};
use crate::stats::Traffic;
use gearlb_core::gear::Addr;

struct Idle {
    conn: Conn,
    /// When it was pooled, on the coarse clock (ms): cheaper to read than `Instant`,
    /// and idle ages are kept to seconds.
    since_ms: u64,
}

impl Idle {
    /// Closed by the backend, cut, or pooled longer than `max_age`: to be dropped.
    fn is_stale(&mut self, max_age: Duration) -> bool {
        coarse_ms().saturating_sub(self.since_ms) > max_age.as_millis() as u64
            || !self.conn.idle_ok()
    }
}

/// How closely [`Pool::checkout_idle`] looks at a pooled connection before handing it
/// out. A backend may close an idle connection at any moment (its keep-alive timeout, a
/// restart, a crash); a request written into it then fails with no answer, and only a
/// request that may be sent again survives that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// The readiness the runtime recorded: no system call for a healthy connection, but
    /// a close that arrived since the runtime last polled its events goes unseen. For
    /// requests that can be sent again: one that meets a connection closed this way is
    /// sent again on a new connection.
    Recorded,
    /// Also ask the kernel (one system call): for requests that cannot be sent again (a
    /// `POST`, any request with a body). That narrows the race to the moment between
    /// this check and the write; a close within it still fails the request with `502`.
    Kernel,
}

/// The connection pool of one backend.
pub struct Pool {
    /// `None` when pooling is off (`limits.max_idle_per_backend = 0`).
    idle: Option<ArrayQueue<Idle>>,
    closed: AtomicBool,
    /// Cancelled when the pool's connections are cut: tunnels watch it. Replaced by a
    /// fresh token when the pool is reopened.
    kill: arc_swap::ArcSwap<tokio_util::sync::CancellationToken>,
    /// Every connection made (dead ones are pruned as new ones are added), so that
    /// [`Pool::force_close`] can reach busy ones.
    cells: SegQueue<Weak<ConnCell>>,
    /// Connections currently open (idle or busy).
    open: Arc<AtomicU64>,
    max_idle: usize,
    /// Bytes written to and read from this pool's connections.
    traffic: Arc<Traffic>,
    /// The backend's host name, resolved (see [`Resolver`]).
    resolver: Arc<Resolver>,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("open", &self.open_connections())
            .field("idle", &self.idle_connections())
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl Pool {
    pub fn new(max_idle: usize) -> Self {
        Pool {
            idle: (max_idle > 0).then(|| ArrayQueue::new(max_idle)),
            closed: AtomicBool::new(false),
            kill: arc_swap::ArcSwap::from_pointee(tokio_util::sync::CancellationToken::new()),
            cells: SegQueue::new(),
            open: Arc::new(AtomicU64::new(0)),
            max_idle,
            traffic: Arc::default(),
            resolver: Arc::default(),
        }
    }

    /// The backend's name resolver (for its health checks too).
    pub fn resolver(&self) -> &Arc<Resolver> {
        &self.resolver
    }

    /// Bytes moved on this pool's connections (tunnels included).
    pub fn traffic(&self) -> &Traffic {
        &self.traffic
    }

    /// The pool's byte counters, to count a connection made outside it (TCP mode).
    pub fn traffic_handle(&self) -> Arc<Traffic> {
        self.traffic.clone()
    }

    pub fn max_idle(&self) -> usize {
        self.max_idle
    }

    pub fn open_connections(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }

    pub fn idle_connections(&self) -> usize {
        self.idle.as_ref().map_or(0, ArrayQueue::len)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Stop pooling and close every idle connection. Busy connections finish their
    /// request and are then closed instead of returning.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Some(q) = &self.idle {
            while q.pop().is_some() {}
        }
    }

    /// Cut every connection of the pool now, in flight or idle (their requests fail),
    /// and stop pooling. Tunnels of this backend stop too.
    pub fn force_close(&self) {
        self.close();
        self.kill.load().cancel();
        for _ in 0..self.cells.len() {
            let Some(cell) = self.cells.pop() else { break };
            if let Some(cell) = cell.upgrade() {
                cell.killed.store(true, Ordering::Release);
                cell.waker.wake();
            }
        }
    }

    /// Pool again after a close (rotate-in).
    pub fn reopen(&self) {
        if self.kill.load().is_cancelled() {
            self.kill
                .store(Arc::new(tokio_util::sync::CancellationToken::new()));
        }
        self.closed.store(false, Ordering::Release);
    }

    /// Cancelled when the pool's connections are cut (tunnels stop on it).
    pub fn kill_token(&self) -> tokio_util::sync::CancellationToken {
        (**self.kill.load()).clone()
    }

    /// An idle connection ready for a request, if one is pooled and fresher than
    /// `max_age`, looked at as `check` says. Stale and closed connections met on the
    /// way are dropped.
    pub fn checkout_idle(&self, max_age: Duration, check: Check) -> Option<Conn> {
        let q = self.idle.as_ref()?;
        // Bounded: at most what the queue held when we started.
        for _ in 0..q.len() {
            let mut idle = q.pop()?;
            if !idle.is_stale(max_age) && (check == Check::Recorded || idle.conn.open_now()) {
                return Some(idle.conn);
            }
            // dropped: closes the connection
        }
        None
    }

    /// Close idle connections older than `max_age` (and closed ones): the background
    /// sweep, so that a quiet balancer keeps no stale sockets (checkouts skip stale
    /// connections too, but only when there is traffic). Each idle connection is looked
    /// at once; fresh ones go back in the queue.
    pub fn sweep(&self, max_age: Duration) {
        let Some(q) = &self.idle else { return };
        for _ in 0..q.len() {
            let Some(mut idle) = q.pop() else { break };
            if idle.is_stale(max_age) {
                continue; // dropped: closes the connection
            }
            let _ = q.push(idle);
        }
    }

    /// Return a connection whose response was read in full.
    pub fn checkin(&self, mut conn: Conn) {
        if self.is_closed() || conn.killed() || !conn.buf.is_empty() {
            return;
        }
        // An idle connection holds no buffer (the next response gets a fresh one).
        conn.buf = BytesMut::new();
        // The read size is kept: a backend that sent large bodies is read in large
        // pieces again (small reads shrink it back, see `poll_fill`).
        if let Some(q) = &self.idle {
            // Full queue: the connection is dropped and closed.
            let _ = q.push(Idle {
                conn,
                since_ms: coarse_ms(),
            });
        }
        // A close() racing with this push could leave one connection pooled; it is
        // dropped by the next checkout (closed pools are never checked out from) or when
        // the backend itself is dropped.
        if self.is_closed() {
            if let Some(q) = &self.idle {
                while q.pop().is_some() {}
            }
        }
    }

    /// Open a new connection to `addr`.
    pub async fn connect(&self, addr: &Addr, timeout: Duration) -> Result<Conn, ConnectError> {
        let stream = tokio::time::timeout(timeout, self.resolver.dial(addr))
            .await
            .map_err(|_| ConnectError::Timeout(timeout))??;
        stream.set_nodelay(true)?;
        self.open.fetch_add(1, Ordering::Relaxed);
        let cell = Arc::new(ConnCell::default());
        // Keep the list to about the live connections: look at one older entry per
        // new one and keep it only if its connection lives.
        if let Some(old) = self.cells.pop() {
            if old.strong_count() > 0 {
                self.cells.push(old);
            }
        }
        self.cells.push(Arc::downgrade(&cell));
        Ok(Conn {
            io: ConnIo::Tcp(Counted::new(stream, self.traffic.clone())),
            buf: BytesMut::new(),
            read_size: READ_MIN,
            heard: false,
            cell,
            _open: OpenGuard(self.open.clone()),
        })
    }
}
