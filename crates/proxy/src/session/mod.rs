//! A downstream connection as a session ([`Session`]): counted in
//! `connections_current`, holding one of the `limits.max_connections` permits, and
//! keeping the graceful stop waiting, from accept to the last holder of its state (its
//! tunnel included); that state ([`ConnState`]: what the connection's task, its socket
//! wrapper, its requests and its tunnel share); and a request's count on the frontend
//! and on its connection ([`FrontendRequest`]). A leaf below the connection
//! (`downstream`) and the requests.

use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use gearlb_core::config::Timeouts;
use gearlb_core::routing::Affinity;
use hyper::body::Incoming;
use hyper::Request;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::task::task_tracker::TaskTrackerToken;

use crate::forward::ClientInfo;
use crate::shared::ProxyCtx;
use crate::stats::FrontendStats;
use crate::upstream::BodyNotes;
use crate::wait::Wait;

/// One client connection as HAProxy counts a session: from accept to close, the tunnel
/// of an upgraded connection included, and once, whatever happens on the connection
/// (keep-alive requests, parking, an upgrade). While it lives it is in
/// `connections_current` (FRONTEND `scur`), holds one of the `limits.max_connections`
/// permits, and keeps the graceful stop waiting (a token of the server's task tracker).
///
/// It lives in the connection's [`ConnState`], shared by the connection task, its
/// requests and, after an upgrade, the tunnel: the session ends when the last of them
/// lets go, not when hyper hands an upgraded socket over and the connection task returns.
pub(crate) struct Session {
    /// Taken from the room kept for the balancer's own protocol once every client
    /// place was taken: it may only become that protocol.
    pub(crate) reserved: bool,
    stats: Arc<FrontendStats>,
    _permit: OwnedSemaphorePermit,
    _tracked: TaskTrackerToken,
}

impl Session {
    /// A connection was accepted with `permit`: counted from now.
    pub fn open(
        stats: Arc<FrontendStats>,
        permit: OwnedSemaphorePermit,
        tracked: TaskTrackerToken,
    ) -> Self {
        stats.connection_opened();
        Session {
            reserved: false,
            stats,
            _permit: permit,
            _tracked: tracked,
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Then the permit and the tracker token go, with the fields.
        self.stats.connection_closed();
    }
}

/// How often a running connection's watchdog looks at it (parking, the stop).
const TICK_MS: u64 = 500;

/// Why a deadline closed a connection ([`ConnState::cut`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// The client was inactive for `timeouts.client` (counted).
    Inactive,
    /// A request had begun and was not whole within `timeouts.request_header` (counted).
    Incomplete,
    /// No request came within `timeouts.request_header` (an idle keep-alive
    /// connection: not counted).
    Idle,
}

/// Per-connection state shared between the connection task, its socket wrapper, its
/// requests and an upgraded connection's tunnel. Plain atomics: written and read by one
/// task at a time in practice.
pub(crate) struct ConnState {
    pub ctx: Arc<ProxyCtx>,
    /// The connection as a session: counted, permitted and tracked while this lives,
    /// unless handed to the balancer's own protocol ([`ConnState::end_session`]). Locked
    /// only there: dropping it with the state takes no lock.
    session: std::sync::Mutex<Option<Session>>,
    /// Upgraded to the balancer's own protocol (gossip): its request, its `101` and its
    /// bytes are not client traffic, and are not counted as such.
    pub(crate) own: AtomicBool,
    /// Its session took the room kept for the balancer's own protocol ([`Session`]).
    pub(crate) reserved: bool,
    pub client: ClientInfo,
    /// Where this connection's previous request went (connection affinity).
    pub affinity: Affinity,
    /// Coarse time (ms, `ProxyCtx::clock`) of the last byte moved.
    pub(crate) last_io: AtomicU64,
    /// What this connection's HTTP/1 request waits on (one at a time), for the
    /// `timeouts.server` deadline the connection's watchdog keeps: no timer per request.
    /// HTTP/2 streams have one each, kept by their own timer (see [`super::watchdog::StreamExec`]).
    pub wait: Arc<Wait>,
    /// An HTTP/2 stream's wait, from the service that made it to the executor that
    /// spawns the stream (hyper calls one right after the other).
    pub(crate) handoff: arc_swap::ArcSwapOption<Wait>,
    /// Requests handed to the proxy and not yet answered in full (response body ended).
    pub(crate) in_flight: AtomicU32,
    /// When `in_flight` last fell to zero (or the connection was accepted): the start of
    /// the wait for the next request head.
    pub(crate) idle_since: AtomicU64,
    /// Bytes were read while no request was in flight, and no request began since: a
    /// request is under way (its head, or the small body the byte path reads whole).
    /// A cut at `request_header` then counts as the client's timeout (HAProxy's `cR`):
    /// see [`ConnState::timed_out`]. Bytes hyper read ahead while a request was in
    /// flight (a pipelined head) are not seen here.
    pub(crate) begun: AtomicBool,
    /// The latest request had a body: its connection is not parked (see module docs).
    pub(crate) last_had_body: AtomicBool,
    /// Set by the connection task: park at the next safe moment.
    pub(crate) park: AtomicBool,
    /// HTTP/2 requests arrived on this connection.
    pub(crate) h2: AtomicBool,
    /// The end of a chunked HTTP/1 request body on this connection is unsure (see
    /// [`BodyNotes`]): its response closes the connection, and a request hyper read
    /// after it is refused.
    pub(crate) unsure_end: AtomicBool,
    /// A request waiting in [`ConnState::after_unsure_end`] for the one before it.
    earlier_done: atomic_waker::AtomicWaker,
    /// Interim responses (`103 Early Hints`, …) to the current HTTP/1.1 request,
    /// encoded, until the socket wrapper writes them (see `ClientIo::poll_interim` in
    /// [`super::socket`]); `has_interim` is what the write path looks at.
    pub(crate) interim: arc_swap::ArcSwapOption<bytes::BytesMut>,
    pub(crate) has_interim: AtomicBool,
    /// The socket wrapper took bytes (or hyper asked it to, and the write waits for the
    /// rest of the turn) since its last completed flush: hyper may still hold some.
    pub(crate) unflushed: AtomicBool,
    /// A write found the client's socket full, and no flush emptied hyper's buffer
    /// since: the client takes less than it is sent, and a response body reads its
    /// backend in small steps meanwhile (see [`crate::body`]).
    pub(crate) backlogged: AtomicBool,
    /// Who waits for the next completed flush ([`ConnState::flushed_or_wait`]).
    pub(crate) flushed: atomic_waker::AtomicWaker,
    pub(crate) flush_wanted: AtomicBool,
    /// How often the watchdog looks at a busy connection.
    pub(crate) tick_ms: u64,
}

impl ConnState {
    /// The connection leaves the proxy's sessions: it was upgraded to the balancer's own
    /// protocol (gossip), which keeps its own limits and stops on its own.
    pub fn end_session(&self) {
        // Not a client's connection after all.
        self.ctx
            .stats
            .connections_total
            .fetch_sub(1, Ordering::Relaxed);
        let taken = self
            .session
            .lock()
            .map(|mut s| s.take())
            .unwrap_or_else(|p| p.into_inner().take());
        drop(taken);
    }

    pub(crate) fn new(
        ctx: Arc<ProxyCtx>,
        session: Session,
        client: ClientInfo,
        t: &Timeouts,
    ) -> Self {
        let now = ctx.clock.now_ms();
        let server_ms = t.server.as_millis() as u64;
        ConnState {
            wait: Arc::new(Wait::new(ctx.clock, t.client, t.server)),
            handoff: arc_swap::ArcSwapOption::empty(),
            ctx,
            reserved: session.reserved,
            session: std::sync::Mutex::new(Some(session)),
            own: AtomicBool::new(false),
            client,
            affinity: Affinity::default(),
            last_io: AtomicU64::new(now),
            in_flight: AtomicU32::new(0),
            idle_since: AtomicU64::new(now),
            begun: AtomicBool::new(false),
            last_had_body: AtomicBool::new(false),
            park: AtomicBool::new(false),
            h2: AtomicBool::new(false),
            unsure_end: AtomicBool::new(false),
            earlier_done: atomic_waker::AtomicWaker::new(),
            interim: arc_swap::ArcSwapOption::empty(),
            has_interim: AtomicBool::new(false),
            unflushed: AtomicBool::new(false),
            backlogged: AtomicBool::new(false),
            flushed: atomic_waker::AtomicWaker::new(),
            flush_wanted: AtomicBool::new(false),
            // A quarter of the response timeout when that is short, so that it is kept
            // to within a quarter.
            tick_ms: TICK_MS.min(server_ms / 4).max(1),
        }
    }

    /// The wait of a request arriving on this connection: the connection's own for
    /// HTTP/1 (one request at a time), a new one for an HTTP/2 stream, handed to the
    /// executor that spawns the stream (see [`super::watchdog::StreamExec`]).
    pub(crate) fn request_wait(&self, req: &Request<Incoming>) -> (Arc<Wait>, bool) {
        if req.version() != http::Version::HTTP_2 {
            return (self.wait.clone(), false);
        }
        self.h2.store(true, Ordering::Relaxed);
        let w = Arc::new(Wait::new(
            self.ctx.clock,
            self.wait.client(),
            self.wait.server(),
        ));
        self.handoff.store(Some(w.clone()));
        (w, true)
    }

    /// An HTTP/2 connection (streams keep their own timeouts).
    pub(crate) fn is_h2(&self) -> bool {
        self.h2.load(Ordering::Relaxed)
    }

    /// Everything written to the client so far went out (`true`); else the task in `cx`
    /// is woken at the next completed flush. A response body that failed waits for
    /// this before it says so: hyper drops what it still holds of a response whose body
    /// fails, and the client would get nothing at all instead of a cut.
    pub fn flushed_or_wait(&self, cx: &mut Context<'_>) -> bool {
        if !self.unflushed.load(Ordering::Relaxed) {
            return true;
        }
        self.flushed.register(cx.waker());
        self.flush_wanted.store(true, Ordering::Relaxed);
        !self.unflushed.load(Ordering::Relaxed)
    }

    /// Pass an interim response on to this connection's HTTP/1.1 client (RFC 9110
    /// §15.2: a proxy forwards 1xx responses). hyper's server cannot send one: the
    /// socket wrapper writes it at the next moment hyper has nothing buffered.
    pub fn push_interim(&self, head: &crate::h1::Head) {
        let mut headers = head.headers();
        crate::forward::remove_hop_headers(&mut headers);
        let mut out = match self.interim.swap(None) {
            // Several in a row before the socket took the first.
            Some(prev) => Arc::unwrap_or_clone(prev),
            None => bytes::BytesMut::new(),
        };
        crate::h1::encode_interim(head.status, &headers, &mut out);
        self.interim.store(Some(Arc::new(out)));
        self.has_interim.store(true, Ordering::Release);
    }

    /// A request arrived (its head is complete): called when hyper hands it over, before
    /// its handler first runs, so that the connection never looks idle in between.
    pub fn request_started(&self, has_body: bool) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.begun.store(false, Ordering::Relaxed);
        self.last_had_body.store(has_body, Ordering::Relaxed);
        // Busy again: parking waits for a new idle period.
        self.park.store(false, Ordering::Relaxed);
    }

    /// Bytes came from the client (not the balancer's own protocol): with no request
    /// in flight, they begin one.
    #[inline]
    pub(crate) fn read_some(&self) {
        if !self.begun.load(Ordering::Relaxed) && self.in_flight.load(Ordering::Relaxed) == 0 {
            self.begun.store(true, Ordering::Relaxed);
        }
    }

    /// A deadline closes the connection: whether that is the client's timeout, counted
    /// in `client_timeouts` (HAProxy's `ereq`). The client's inactivity (`inactive`,
    /// `timeouts.client`) always is; so is `request_header` when part of a request had
    /// come and stopped (a slow head or body, HAProxy's `cR`), and not when an idle
    /// keep-alive connection sent nothing.
    pub(crate) fn timed_out(&self, inactive: bool) -> bool {
        inactive || self.begun.load(Ordering::Relaxed)
    }

    /// A deadline closes the connection (`inactive`: `timeouts.client`, else
    /// `request_header`): counted in `client_timeouts` when [`ConnState::timed_out`]
    /// says so, and which cut it is, for the log. Every watchdog (plain, TLS) ends here.
    pub(crate) fn cut(&self, inactive: bool) -> Cut {
        if !self.timed_out(inactive) {
            return Cut::Idle;
        }
        self.ctx
            .stats
            .client_timeouts
            .fetch_add(1, Ordering::Relaxed);
        if inactive {
            Cut::Inactive
        } else {
            Cut::Incomplete
        }
    }

    /// Whether an HTTP/1 request now handed over comes after a chunked body whose end
    /// is unsure ([`BodyNotes`]). The one before may still be in flight: its body's
    /// rest going to a backend that answered early (full duplex), the end of it (the
    /// trailer section's frame, if any) not yet taken. Its end is waited for (the
    /// upload keeps its own timeouts), so that this is known for sure; HTTP/1 is one
    /// request at a time, and only such a request overlaps the next.
    pub(crate) async fn after_unsure_end(&self) -> bool {
        let settled = || {
            self.unsure_end.load(Ordering::Acquire) || self.in_flight.load(Ordering::Acquire) <= 1
        };
        poll_fn(|cx| {
            if settled() {
                return Poll::Ready(());
            }
            self.earlier_done.register(cx.waker());
            if settled() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        self.unsure_end.load(Ordering::Acquire)
    }

    /// A request was answered in full (or abandoned).
    pub fn request_finished(&self) {
        let before = self.in_flight.fetch_sub(1, Ordering::AcqRel);
        if before == 2 {
            // Only an early-answered upload overlaps the next HTTP/1 request.
            self.earlier_done.wake();
        }
        if before == 1 {
            // The last byte moved is when the response ended, to a few microseconds:
            // no clock read needed.
            self.idle_since
                .store(self.last_io.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

impl BodyNotes for ConnState {
    fn unsure_end(&self) {
        self.unsure_end.store(true, Ordering::Release);
        self.earlier_done.wake();
    }
}

/// Counts a request as in flight on the frontend and its connection until dropped
/// (with the response body, when it has been sent in full).
pub(crate) struct FrontendRequest(pub(crate) Arc<ConnState>);

impl FrontendRequest {
    pub(crate) fn start(conn: &Arc<ConnState>, has_body: bool) -> Self {
        conn.ctx.stats.request_started();
        conn.request_started(has_body);
        FrontendRequest(conn.clone())
    }
}

impl Drop for FrontendRequest {
    fn drop(&mut self) {
        self.0
            .ctx
            .stats
            .requests_current
            .fetch_sub(1, Ordering::Relaxed);
        self.0.request_finished();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    /// A session is one connection from accept to its last holder: counted once, its
    /// permit held, the stop kept waiting; all three end together.
    #[test]
    fn a_session_counts_holds_and_is_tracked_until_dropped() {
        let stats = Arc::new(FrontendStats::default());
        let permits = Arc::new(tokio::sync::Semaphore::new(1));
        let tracker = tokio_util::task::TaskTracker::new();
        let s = Session::open(
            stats.clone(),
            permits.clone().try_acquire_owned().unwrap(),
            tracker.token(),
        );
        assert_eq!(stats.connections_current.load(Ordering::Relaxed), 1);
        assert_eq!(permits.available_permits(), 0);
        tracker.close();
        assert_eq!(tracker.len(), 1);
        assert!(!tracker.is_empty());
        drop(s);
        assert_eq!(stats.connections_current.load(Ordering::Relaxed), 0);
        assert_eq!(permits.available_permits(), 1);
        assert!(tracker.is_empty());
    }
}
