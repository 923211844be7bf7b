//! One client connection: protocol detection, the connection's timeouts, and parking.
//!
//! Owns the life of an accepted connection. HTTP/1 connections are served by hyper's
//! HTTP/1 server directly (built once per settings, not per connection); a connection
//! whose first bytes are, or may be, the HTTP/2 preface (h2c prior knowledge) goes to
//! hyper-util's protocol-detecting builder instead. Detection peeks at the socket, so
//! the HTTP/1 parser later reads the request in one piece.
//!
//! Timeouts are kept by one timer per connection (not one per request):
//! - `client`: no byte moved while the balancer waits on the client (not while its
//!   request waits on a backend);
//! - `server`: an HTTP/1 request's wait on its backend (see [`super::wait::Wait`]),
//!   marked expired here and answered `504` by the request;
//! - `request_header`: from the moment the connection waits for a request head (accept,
//!   or the end of the previous response) until a complete head arrived; this also bounds
//!   how long an idle keep-alive connection is kept. Closed without a response, as
//!   hyper's own header timeout would. An HTTP/2 connection is bounded so while it has
//!   no stream open (then GOAWAY), PINGs or not; its streams keep their own `client`
//!   and `server` timeouts, each with a timer ([`StreamExec`]), and it has at most
//!   `proxy.h2_max_concurrent_streams` of them.
//!
//! Interim responses (`103 Early Hints`) to HTTP/1.1 requests are written by the socket
//! wrapper, hyper's server having no way to: at a moment hyper has nothing buffered
//! ([`ConnState::push_interim`]).
//!
//! Parking: an HTTP/1 keep-alive connection idle for [`PARK_AFTER_MS`] gives back its
//! HTTP state (hyper's read and write buffers, about 16 KiB, and the dispatcher): the
//! socket wrapper reports end-of-stream to hyper at a moment hyper is waiting for a new
//! head with nothing buffered, hyper closes its side gracefully without touching the
//! socket, and the socket waits for readability with no buffer at all. Its next bytes
//! start a fresh HTTP/1 connection object on the same socket. "Nothing buffered" is made
//! sure of without looking into hyper: no request in flight, the response flushed, the
//! last request had no body, and the bytes read last ended a request head (`\r\n\r\n`):
//! a connection where any of this does not hold is simply not parked. TLS connections
//! are never parked.
//!
//! Lingering close (as nginx's `lingering_close`): when hyper closes an HTTP/1
//! connection whose last request had a body, that body may not have been read to its end
//! (a gear refused the upload early, say). Closing a socket with unread bytes in it sends
//! a reset, and a client still writing its upload, which reads the answer only once the
//! upload is sent, would then lose the answer. So the write side is shut (the answer and
//! a FIN go out), and whatever the client still sends is read and thrown away until it
//! closes, or is silent for [`LINGER_READ`], or [`LINGER_TOTAL`] passed, or the balancer
//! stops. TLS and HTTP/2 connections close at once.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use http_body::Body as _;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::debug;

use super::forward::ClientInfo;
use super::phase::WriteTurn;
use super::wait::{watched, Phase, Wait};
use super::{handle, FrontendRequest, ProxyCtx, Settings};
use crate::config::Timeouts;
use crate::routing::Affinity;
use crate::stats::FrontendStats;

/// Idle time after which an HTTP/1 keep-alive connection gives back its HTTP state.
pub const PARK_AFTER_MS: u64 = 500;

/// How often a running connection's watchdog looks at it (parking, the stop).
const TICK_MS: u64 = 500;

/// How long an idle HTTP/2 connection sent GOAWAY has to let it go out before it closes.
const GOAWAY_GRACE_MS: u64 = 1000;

/// Lingering close: the longest wait for the client's next bytes, and for all of them
/// (nginx's `lingering_timeout` and `lingering_time`).
const LINGER_READ: Duration = Duration::from_secs(5);
const LINGER_TOTAL: Duration = Duration::from_secs(30);

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// One client connection as HAProxy counts a session: from accept to close, the tunnel
/// of an upgraded connection included, and once, whatever happens on the connection
/// (keep-alive requests, parking, an upgrade). While it lives it is in
/// `connections_current` (FRONTEND `scur`), holds one of the `limits.max_connections`
/// permits, and keeps the graceful stop waiting (a token of the server's task tracker).
///
/// It lives in the connection's [`ConnState`], shared by the connection task, its
/// requests and, after an upgrade, the tunnel: the session ends when the last of them
/// lets go, not when hyper hands an upgraded socket over and the connection task returns.
pub(super) struct Session {
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

/// Per-connection state shared between the connection task, its socket wrapper, its
/// requests and an upgraded connection's tunnel. Plain atomics: written and read by one
/// task at a time in practice.
pub(super) struct ConnState {
    pub ctx: Arc<ProxyCtx>,
    /// The connection as a session: counted, permitted and tracked while this lives,
    /// unless handed to the balancer's own protocol ([`ConnState::end_session`]). Locked
    /// only there: dropping it with the state takes no lock.
    session: std::sync::Mutex<Option<Session>>,
    pub client: ClientInfo,
    /// Where this connection's previous request went (connection affinity).
    pub affinity: Affinity,
    /// Coarse time (ms, `ProxyCtx::clock`) of the last byte moved.
    last_io: AtomicU64,
    /// What this connection's HTTP/1 request waits on (one at a time), for the
    /// `timeouts.server` deadline the connection's watchdog keeps: no timer per request.
    /// HTTP/2 streams have one each, kept by their own timer (see [`StreamExec`]).
    pub wait: Arc<Wait>,
    /// An HTTP/2 stream's wait, from the service that made it to the executor that
    /// spawns the stream (hyper calls one right after the other).
    handoff: arc_swap::ArcSwapOption<Wait>,
    /// Requests handed to the proxy and not yet answered in full (response body ended).
    in_flight: AtomicU32,
    /// When `in_flight` last fell to zero (or the connection was accepted): the start of
    /// the wait for the next request head.
    idle_since: AtomicU64,
    /// The latest request had a body: its connection is not parked (see module docs).
    last_had_body: AtomicBool,
    /// Set by the connection task: park at the next safe moment.
    park: AtomicBool,
    /// HTTP/2 requests arrived on this connection.
    h2: AtomicBool,
    /// Interim responses (`103 Early Hints`, …) to the current HTTP/1.1 request,
    /// encoded, until the socket wrapper writes them (see [`ClientIo::poll_interim`]);
    /// `has_interim` is what the write path looks at.
    interim: arc_swap::ArcSwapOption<bytes::BytesMut>,
    has_interim: AtomicBool,
    /// The socket wrapper took bytes (or hyper asked it to, and the write waits for the
    /// rest of the turn) since its last completed flush: hyper may still hold some.
    unflushed: AtomicBool,
    /// Who waits for the next completed flush ([`ConnState::flushed_or_wait`]).
    flushed: atomic_waker::AtomicWaker,
    flush_wanted: AtomicBool,
    /// How often the watchdog looks at a busy connection.
    tick_ms: u64,
}

impl ConnState {
    /// The connection leaves the proxy's sessions: it was upgraded to the balancer's own
    /// protocol (gossip), which keeps its own limits and stops on its own.
    pub fn end_session(&self) {
        let taken = self
            .session
            .lock()
            .map(|mut s| s.take())
            .unwrap_or_else(|p| p.into_inner().take());
        drop(taken);
    }

    fn new(ctx: Arc<ProxyCtx>, session: Session, client: ClientInfo, t: &Timeouts) -> Self {
        let now = ctx.clock.now_ms();
        let server_ms = t.server.as_millis() as u64;
        ConnState {
            wait: Arc::new(Wait::new(ctx.clock, t.client, t.server)),
            handoff: arc_swap::ArcSwapOption::empty(),
            ctx,
            session: std::sync::Mutex::new(Some(session)),
            client,
            affinity: Affinity::default(),
            last_io: AtomicU64::new(now),
            in_flight: AtomicU32::new(0),
            idle_since: AtomicU64::new(now),
            last_had_body: AtomicBool::new(false),
            park: AtomicBool::new(false),
            h2: AtomicBool::new(false),
            interim: arc_swap::ArcSwapOption::empty(),
            has_interim: AtomicBool::new(false),
            unflushed: AtomicBool::new(false),
            flushed: atomic_waker::AtomicWaker::new(),
            flush_wanted: AtomicBool::new(false),
            // A quarter of the response timeout when that is short, so that it is kept
            // to within a quarter.
            tick_ms: TICK_MS.min(server_ms / 4).max(1),
        }
    }

    /// The wait of a request arriving on this connection: the connection's own for
    /// HTTP/1 (one request at a time), a new one for an HTTP/2 stream, handed to the
    /// executor that spawns the stream (see [`StreamExec`]).
    fn request_wait(&self, req: &Request<Incoming>) -> (Arc<Wait>, bool) {
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
    fn is_h2(&self) -> bool {
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
    pub fn push_interim(&self, head: &super::h1::Head) {
        let mut headers = head.parts.headers.clone();
        super::forward::remove_hop_headers(&mut headers);
        let mut out = match self.interim.swap(None) {
            // Several in a row before the socket took the first.
            Some(prev) => Arc::unwrap_or_clone(prev),
            None => bytes::BytesMut::new(),
        };
        super::h1::encode_interim(head.parts.status, &headers, &mut out);
        self.interim.store(Some(Arc::new(out)));
        self.has_interim.store(true, Ordering::Release);
    }

    /// A request arrived (its head is complete): called when hyper hands it over, before
    /// its handler first runs, so that the connection never looks idle in between.
    pub fn request_started(&self, has_body: bool) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.last_had_body.store(has_body, Ordering::Relaxed);
        // Busy again: parking waits for a new idle period.
        self.park.store(false, Ordering::Relaxed);
    }

    /// A request was answered in full (or abandoned).
    pub fn request_finished(&self) {
        if self.in_flight.fetch_sub(1, Ordering::Relaxed) == 1 {
            // The last byte moved is when the response ended, to a few microseconds:
            // no clock read needed.
            self.idle_since
                .store(self.last_io.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

/// Why a socket wrapper handed its socket back to the connection task.
enum Handback {
    /// Idle: served again by a fresh HTTP/1 connection object on its next bytes.
    Parked,
    /// hyper closed the connection (its write side is shut): it closes, perhaps after a
    /// lingering read (see the module docs).
    Closed,
}

/// The client socket as hyper sees it: counts bytes, notes activity, and can hand the
/// socket back ("park") when the connection is idle.
pub(super) struct ClientIo<S> {
    inner: Option<S>,
    state: Arc<ConnState>,
    /// Where the socket goes when hyper lets go of it (parked or closed); `None`: this
    /// connection never parks, and closes when hyper drops it.
    slot: Option<Arc<OnceLock<(S, Handback)>>>,
    /// The last four bytes read.
    tail: [u8; 4],
    /// End-of-stream was reported to hyper to park the connection.
    parked: bool,
    /// hyper shut the connection's write side: it is closing.
    closed: bool,
    /// A response's first write waits for the rest of the turn (`phase`).
    turn: WriteTurn,
    /// An interim response being written, and how much of it went.
    interim: Option<(bytes::Bytes, usize)>,
}

impl<S> ClientIo<S> {
    fn new(inner: S, state: Arc<ConnState>, slot: Option<Arc<OnceLock<(S, Handback)>>>) -> Self {
        ClientIo {
            inner: Some(inner),
            state,
            slot,
            // Nothing read yet: nothing half-read either.
            tail: *b"\r\n\r\n",
            parked: false,
            closed: false,
            turn: WriteTurn::default(),
            interim: None,
        }
    }

    fn touch(&self) {
        self.state
            .last_io
            .store(self.state.ctx.clock.now_ms(), Ordering::Relaxed);
    }

    fn wrote(&mut self, n: usize) {
        if n > 0 {
            self.state.unflushed.store(true, Ordering::Relaxed);
            self.touch();
            self.state
                .ctx
                .stats
                .traffic
                .sent
                .fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// hyper holds no half-read request and no unsent response, and the task asked to
    /// park (see the module docs).
    fn may_park(&self) -> bool {
        let st = &self.state;
        self.slot.is_some()
            && st.park.load(Ordering::Relaxed)
            && st.in_flight.load(Ordering::Relaxed) == 0
            && !st.last_had_body.load(Ordering::Relaxed)
            && !st.unflushed.load(Ordering::Relaxed)
            && ends_head(&self.tail)
    }

    /// A write waits for the rest of the turn (`phase`). While it does, hyper holds bytes
    /// for the client: they count as unflushed, so the connection cannot park.
    fn wait_turn(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let r = self.turn.poll_ready(cx);
        if r.is_pending() {
            self.state.unflushed.store(true, Ordering::Relaxed);
        }
        r
    }

    fn inner(&mut self) -> io::Result<&mut S> {
        self.inner
            .as_mut()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "connection parked"))
    }
}

/// Keep the last four bytes read in `tail`.
fn push_tail(tail: &mut [u8; 4], got: &[u8]) {
    let n = got.len();
    if n >= 4 {
        tail.copy_from_slice(&got[n - 4..]);
    } else {
        tail.rotate_left(n);
        tail[4 - n..].copy_from_slice(got);
    }
}

/// The bytes read last end a request head (CRLF CRLF, or bare LF LF).
fn ends_head(tail: &[u8; 4]) -> bool {
    tail == b"\r\n\r\n" || tail[2..] == *b"\n\n"
}

impl<S> Drop for ClientIo<S> {
    fn drop(&mut self) {
        let why = if self.parked {
            Handback::Parked
        } else if self.closed {
            Handback::Closed
        } else {
            return;
        };
        if let (Some(slot), Some(inner)) = (&self.slot, self.inner.take()) {
            let _ = slot.set((inner, why));
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ClientIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.parked {
            return Poll::Ready(Ok(()));
        }
        if this.may_park() {
            // End-of-stream for hyper; the bytes the client may have sent meanwhile stay
            // in the socket for the next connection object.
            this.parked = true;
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(this.inner()?).poll_read(cx, buf);
        let got = &buf.filled()[before..];
        if !got.is_empty() {
            let n = got.len();
            this.turn.read();
            push_tail(&mut this.tail, got);
            this.touch();
            this.state
                .ctx
                .stats
                .traffic
                .received
                .fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> ClientIo<S> {
    /// Write the interim responses the exchange queued, in full, before anything else.
    /// `Ready(Ok)` when none is left. Only called when what hyper wrote before was all
    /// flushed (from `poll_flush`, or a write that follows a flush): an interim response
    /// then goes after the previous response and before this request's final one.
    fn poll_interim(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.interim.is_none() && self.state.has_interim.swap(false, Ordering::Acquire) {
            if let Some(b) = self.state.interim.swap(None) {
                self.interim = Some((Arc::unwrap_or_clone(b).freeze(), 0));
            }
        }
        while let Some((b, at)) = self.interim.as_mut() {
            if *at >= b.len() {
                self.interim = None;
                break;
            }
            let inner = self
                .inner
                .as_mut()
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "parked"))?;
            match Pin::new(inner).poll_write(cx, &b[*at..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    *at += n;
                    self.wrote(n);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Before hyper writes: an interim response already started is finished; one not
    /// started goes first only if everything hyper wrote before was flushed (else these
    /// bytes may still be the previous response's, and it is too late for a hint).
    fn poll_interim_before_write(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.interim.is_none()
            && self.state.has_interim.load(Ordering::Relaxed)
            && self.state.unflushed.load(Ordering::Relaxed)
        {
            self.state.has_interim.store(false, Ordering::Relaxed);
            self.state.interim.store(None);
        }
        self.poll_interim(cx)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ClientIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.interim.is_some() || this.state.has_interim.load(Ordering::Relaxed) {
            ready!(this.poll_interim_before_write(cx))?;
        }
        if this.wait_turn(cx).is_pending() {
            return Poll::Pending;
        }
        let r = Pin::new(this.inner()?).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            this.wrote(n);
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.interim.is_some() || this.state.has_interim.load(Ordering::Relaxed) {
            ready!(this.poll_interim_before_write(cx))?;
        }
        if this.wait_turn(cx).is_pending() {
            return Poll::Pending;
        }
        let r = Pin::new(this.inner()?).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            this.wrote(n);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // hyper flushes after each turn of its loop, with its own buffer written out:
        // the moment for an interim response the exchange queued meanwhile.
        if this.interim.is_some() || this.state.has_interim.load(Ordering::Relaxed) {
            ready!(this.poll_interim(cx))?;
        }
        let r = Pin::new(this.inner()?).poll_flush(cx);
        if let Poll::Ready(Ok(())) = r {
            let st = &this.state;
            st.unflushed.store(false, Ordering::Relaxed);
            if st.flush_wanted.load(Ordering::Relaxed) {
                st.flush_wanted.store(false, Ordering::Relaxed);
                st.flushed.wake();
            }
        }
        r
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.parked {
            // hyper closing its side of a parked connection: the socket stays open.
            return Poll::Ready(Ok(()));
        }
        let r = Pin::new(this.inner()?).poll_shutdown(cx);
        if let Poll::Ready(Ok(())) = r {
            this.closed = true;
        }
        r
    }
}

/// Counts a connection in `connections_parked` while it lives.
struct ParkedGauge<'a>(&'a AtomicU64);

impl<'a> ParkedGauge<'a> {
    fn new(g: &'a AtomicU64) -> Self {
        g.fetch_add(1, Ordering::Relaxed);
        ParkedGauge(g)
    }
}

impl Drop for ParkedGauge<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Read and throw away what the peer still sends, until it closes, is silent for
/// `read_wait`, or `total` passed (the lingering close, see the module docs). Returns
/// the bytes thrown away.
async fn linger<S: AsyncRead + Unpin>(s: &mut S, read_wait: Duration, total: Duration) -> u64 {
    use tokio::io::AsyncReadExt;
    let end = Instant::now() + total;
    // Small: a lingering connection holds it for up to `total`, and there may be as
    // many of them as `limits.max_connections`.
    let mut buf = vec![0u8; 8 * 1024];
    let mut got = 0;
    loop {
        let wait = read_wait.min(end.saturating_duration_since(Instant::now()));
        if wait.is_zero() {
            return got;
        }
        match tokio::time::timeout(wait, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got += n as u64,
            _ => return got,
        }
    }
}

/// What the connection's first bytes say.
enum Detected {
    Http1,
    /// The HTTP/2 preface, or a prefix of it too short to tell.
    Other,
    Closed,
}

async fn detect(stream: &TcpStream) -> io::Result<Detected> {
    let mut buf = [0u8; 24];
    let n = stream.peek(&mut buf).await?;
    Ok(if n == 0 {
        Detected::Closed
    } else if buf[..n] == H2_PREFACE[..n] {
        Detected::Other
    } else {
        Detected::Http1
    })
}

/// The client's inactivity and head timeouts at `now`: `Err(counted)` when the
/// connection must close (`counted`: it was the client timeout), else the next time to
/// look again. Also marks an HTTP/1 request's wait on a backend as expired when it
/// passed `timeouts.server` (see [`Wait`]): the connection task polls the request right
/// after this, and it answers `504`.
///
/// - `client` (HAProxy's `timeout client`): no byte moved from or to the client, while
///   nothing waits on a backend. An HTTP/2 connection with streams open is left to its
///   streams' own timeouts (as HAProxy's h2 mux does): the connection is bounded once
///   it has none.
/// - `request_header` (`head_ms`; HAProxy's `timeout http-request`, and
///   `http-keep-alive`): no request in flight for that long since the last one ended
///   (or the accept): no complete head arrived. For HTTP/2 this bounds an idle
///   connection however many PINGs keep it busy, and a HEADERS never completed.
fn check_deadlines(
    st: &ConnState,
    now: u64,
    client_ms: u64,
    head_ms: u64,
    streams: bool,
) -> Result<u64, bool> {
    let last = st.last_io.load(Ordering::Relaxed);
    let busy = st.in_flight.load(Ordering::Relaxed) > 0;
    let on_server = st.wait.phase() == Phase::Server;
    let exempt = on_server || (streams && busy);
    let idle_ms = now.saturating_sub(last);
    if !exempt && idle_ms >= client_ms {
        return Err(true);
    }
    let mut next = now
        + if exempt {
            client_ms
        } else {
            client_ms - idle_ms
        };
    if on_server {
        if let Some(deadline) = st.wait.deadline() {
            if now >= deadline {
                st.wait.expire();
            } else {
                next = next.min(deadline);
            }
        }
    }
    if busy {
        // A request may start waiting at any time: look again within a tick.
        next = next.min(now + st.tick_ms);
    } else {
        let since = st.idle_since.load(Ordering::Relaxed);
        let waited = now.saturating_sub(since);
        if waited >= head_ms {
            return Err(false);
        }
        next = next.min(now + head_ms - waited);
    }
    Ok(next)
}

/// The executor of a client connection's HTTP/2 streams: each stream is spawned under
/// its own [`Wait`] (handed over by the service that made it), kept by one timer
/// ([`watched`]): a stream waiting too long on the client (its request body, or a
/// window to send the response in) or on the backend is answered `504`/`408` if it
/// can still be, and otherwise reset (`RST_STREAM`), which closes its backend
/// connection. Without it, a client granting no window would hold a backend connection
/// per stream for as long as it keeps the connection.
#[derive(Clone)]
pub(super) struct StreamExec(Arc<ConnState>);

impl<F> hyper::rt::Executor<F> for StreamExec
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        let Some(wait) = self.0.handoff.swap(None) else {
            tokio::spawn(fut);
            return;
        };
        let stats = self.0.ctx.stats.clone();
        let peer = self.0.client.peer;
        tokio::spawn(async move {
            if let Err(phase) = watched(&wait, fut).await {
                if phase == Phase::Client {
                    stats.client_timeouts.fetch_add(1, Ordering::Relaxed);
                }
                debug!(client = %peer, ?phase, "HTTP/2 stream reset: no progress in time");
            }
        });
    }
}

/// One request of a client connection, as hyper hands it over: counted at once (so the
/// connection never looks idle before its handler runs), with its [`Wait`]. An HTTP/2
/// stream's response then waits on the client to take it.
fn serve_request(
    state: &Arc<ConnState>,
    req: Request<Incoming>,
) -> impl std::future::Future<Output = Result<hyper::Response<super::ProxyBody>, Infallible>> {
    let frontend = FrontendRequest::start(state, !req.body().is_end_stream());
    let (wait, stream) = state.request_wait(&req);
    let after = stream.then(|| wait.clone());
    async move {
        let resp = handle(frontend, req, wait).await;
        if let Some(w) = after {
            w.enter(Phase::Client);
        }
        Ok(resp)
    }
}

/// HTTP/2 server settings: hyper's timer, the head size limit, and the streams a
/// connection may have open at once (`proxy.h2_max_concurrent_streams`, HAProxy's
/// `tune.h2.max-concurrent-streams`).
fn h2_settings(mut b: auto::Http2Builder<'_, StreamExec>, settings: &Settings) {
    b.timer(TokioTimer::new())
        .max_header_list_size(settings.max_header_size as u32)
        .max_concurrent_streams(settings.h2_max_concurrent_streams);
}

/// Serve one accepted client connection until it closes, times out or the balancer
/// stops (`shutdown`: requests in flight finish, idle connections close at once). An
/// upgraded connection's `session` outlives this, in its tunnel.
pub(super) fn serve_connection(
    ctx: &Arc<ProxyCtx>,
    session: Session,
    stream: TcpStream,
    peer: SocketAddr,
    local_port: u16,
    shutdown: CancellationToken,
) -> impl std::future::Future<Output = ()> + Send + '_ {
    let _ = stream.set_nodelay(true);
    let settings: Arc<Settings> = ctx.settings.load_full();
    // Built before the connection's future: what only goes into it is not kept in the
    // future for the connection's whole life (see `connection_task_state_stays_small`).
    let state = Arc::new(ConnState::new(
        ctx.clone(),
        session,
        ClientInfo::new(peer, local_port, "http"),
        &settings.timeouts,
    ));
    serve_http(ctx, state, settings, stream, shutdown)
}

async fn serve_http(
    ctx: &Arc<ProxyCtx>,
    state: Arc<ConnState>,
    settings: Arc<Settings>,
    stream: TcpStream,
    shutdown: CancellationToken,
) {
    let client_ms = settings.timeouts.client.as_millis() as u64;
    let head_ms = settings.timeouts.request_header.as_millis() as u64;
    let clock = ctx.clock;
    let epoch = Instant::now() - Duration::from_millis(clock.now_ms());
    let at = |ms: u64| epoch + Duration::from_millis(ms);

    let svc_state = state.clone();
    let service = move |req: Request<Incoming>| serve_request(&svc_state, req);
    let h1 = &settings.h1;
    let new_h1 = |io: ClientIo<TcpStream>| {
        Box::pin(
            h1.serve_connection(TokioIo::new(io), service_fn(service.clone()))
                .with_upgrades(),
        )
    };
    // HTTP/2 (or undecided) connections only: built on first use, out of line (it is
    // large, and the connection's state is kept small for idle connections).
    let auto_builder = std::cell::OnceCell::new();
    let new_auto = || {
        let mut b = auto::Builder::new(StreamExec(state.clone()));
        b.http1()
            .timer(TokioTimer::new())
            .header_read_timeout(settings.timeouts.request_header)
            .max_buf_size(settings.max_header_size)
            .keep_alive(true);
        h2_settings(b.http2(), &settings);
        Box::new(b)
    };

    let mut parked = Some(stream);
    let mut _parked_gauge = Some(ParkedGauge::new(&ctx.stats.connections_parked));
    let mut detected = !settings.h2c;
    let mut h1_conn = None;
    let mut h1_slot: Option<Arc<OnceLock<(TcpStream, Handback)>>> = None;
    let mut other_conn = None;
    let watchdog = tokio::time::sleep_until(at(clock.now_ms() + head_ms.min(client_ms)));
    tokio::pin!(watchdog);
    let mut stopping = false;
    // An idle HTTP/2 connection was sent GOAWAY: closed at the next look.
    let mut going_away = false;

    loop {
        if let Some(stream) = parked.as_ref() {
            // No HTTP state: wait for the next bytes (no buffer held), a deadline, or
            // the stop.
            let woke = tokio::select! {
                biased;
                r = stream.readable(), if detected => r.map(|_| None),
                r = detect(stream), if !detected => r.map(Some),
                _ = shutdown.cancelled() => return,
                _ = &mut watchdog => {
                    match check_deadlines(&state, clock.now_ms(), client_ms, head_ms, false) {
                        Ok(next) => watchdog.as_mut().reset(at(next)),
                        Err(counted) => {
                            if counted {
                                ctx.stats.client_timeouts.fetch_add(1, Ordering::Relaxed);
                            }
                            debug!(client = %state.client.peer, "idle client connection closed");
                            return;
                        }
                    }
                    continue;
                }
            };
            let stream = parked.take().expect("checked above");
            _parked_gauge = None;
            match woke {
                Err(e) => {
                    debug!(client = %state.client.peer, error = %e, "client connection failed");
                    return;
                }
                Ok(Some(Detected::Closed)) => return,
                Ok(Some(Detected::Other)) => {
                    let io = TokioIo::new(ClientIo::new(stream, state.clone(), None));
                    let builder = auto_builder.get_or_init(new_auto);
                    other_conn = Some(Box::pin(
                        builder.serve_connection_with_upgrades(io, service_fn(service.clone())),
                    ));
                    detected = true;
                    let soon = at(clock.now_ms() + state.tick_ms).min(watchdog.deadline());
                    watchdog.as_mut().reset(soon);
                    continue;
                }
                Ok(Some(Detected::Http1)) | Ok(None) => {
                    detected = true;
                    state.park.store(false, Ordering::Relaxed);
                    let slot = Arc::new(OnceLock::new());
                    h1_conn = Some(new_h1(ClientIo::new(
                        stream,
                        state.clone(),
                        Some(slot.clone()),
                    )));
                    h1_slot = Some(slot);
                    // Look again soon: to park once the request is answered.
                    let soon = at(clock.now_ms() + state.tick_ms).min(watchdog.deadline());
                    watchdog.as_mut().reset(soon);
                    continue;
                }
            }
        }

        // An HTTP connection object is running.
        let is_h1 = h1_conn.is_some();
        let done = tokio::select! {
            biased;
            res = async {
                match (h1_conn.as_mut(), other_conn.as_mut()) {
                    (Some(c), _) => c.as_mut().await.map_err(|e| e.to_string()),
                    (None, Some(c)) => c.as_mut().await.map_err(|e| e.to_string()),
                    (None, None) => Ok(()),
                }
            } => Some(res),
            _ = &mut watchdog => {
                // The stop is looked at here, not polled on every wake-up of a busy
                // connection (a cancellation future takes a lock when polled).
                if !stopping && shutdown.is_cancelled() {
                    // Finish the request in flight, close when idle.
                    stopping = true;
                    if let Some(c) = h1_conn.as_mut() {
                        c.as_mut().graceful_shutdown();
                    }
                    if let Some(c) = other_conn.as_mut() {
                        c.as_mut().graceful_shutdown();
                    }
                }
                if going_away {
                    return;
                }
                let now = clock.now_ms();
                match check_deadlines(&state, now, client_ms, head_ms, state.is_h2()) {
                    Err(false) if !is_h1 => {
                        // An idle HTTP/2 connection: GOAWAY (no stream is lost), and a
                        // moment for it to go out.
                        debug!(client = %state.client.peer, "idle HTTP/2 connection for {:?}, closing", settings.timeouts.request_header);
                        if let Some(c) = other_conn.as_mut() {
                            c.as_mut().graceful_shutdown();
                        }
                        going_away = true;
                        watchdog.as_mut().reset(at(now + GOAWAY_GRACE_MS));
                    }
                    Err(counted) => {
                        if counted {
                            ctx.stats.client_timeouts.fetch_add(1, Ordering::Relaxed);
                            debug!(client = %state.client.peer, "client inactive for {:?}, closing", settings.timeouts.client);
                        } else {
                            debug!(client = %state.client.peer, "no request head within {:?}, closing", settings.timeouts.request_header);
                        }
                        return;
                    }
                    Ok(mut next) => {
                        if is_h1 && !stopping {
                            let idle = state.in_flight.load(Ordering::Relaxed) == 0;
                            let since = state.idle_since.load(Ordering::Relaxed);
                            if idle && now.saturating_sub(since) >= PARK_AFTER_MS {
                                // hyper sees it when the connection is polled again,
                                // right after this (or, if it cannot park yet, later).
                                state.park.store(true, Ordering::Relaxed);
                            }
                        }
                        // Until it parks or closes, look again every so often (for the
                        // stop too).
                        next = next.min(now + state.tick_ms);
                        watchdog.as_mut().reset(at(next));
                    }
                }
                None
            }
        };
        let Some(res) = done else { continue };
        if let Err(e) = res {
            debug!(client = %state.client.peer, error = %e, "client connection ended with an error");
        }
        // Dropping the connection object drops the socket wrapper, which hands a parked
        // or closed socket back through the slot.
        h1_conn = None;
        other_conn = None;
        match h1_slot
            .take()
            .as_mut()
            .and_then(Arc::get_mut)
            .and_then(OnceLock::take)
        {
            Some((mut stream, Handback::Closed)) if state.last_had_body.load(Ordering::Relaxed) => {
                // Boxed: the connection's own future stays small.
                let thrown = tokio::select! {
                    n = Box::pin(linger(&mut stream, LINGER_READ, LINGER_TOTAL)) => n,
                    _ = shutdown.cancelled() => 0,
                };
                if thrown > 0 {
                    ctx.stats
                        .traffic
                        .received
                        .fetch_add(thrown, Ordering::Relaxed);
                    debug!(client = %state.client.peer, bytes = thrown, "lingering close: the rest of an upload read and dropped");
                }
                return;
            }
            Some((stream, Handback::Parked)) if !stopping => {
                parked = Some(stream);
                _parked_gauge = Some(ParkedGauge::new(&ctx.stats.connections_parked));
                let next = check_deadlines(&state, clock.now_ms(), client_ms, head_ms, false);
                match next {
                    Ok(next) => watchdog.as_mut().reset(at(next)),
                    Err(_) => return,
                }
            }
            _ => return,
        }
    }
}

/// Serve one HTTPS client connection: TLS handshake (bounded by `request_header`), then
/// HTTP/1.1 or HTTP/2 (by ALPN or preface) through hyper-util's auto builder, with the
/// client inactivity timeout kept here. TLS connections are not parked. The `session`
/// counts from before the handshake.
pub(super) async fn serve_tls_connection(
    ctx: &Arc<ProxyCtx>,
    session: Session,
    acceptor: tokio_rustls::TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
    local_port: u16,
    shutdown: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let settings: Arc<Settings> = ctx.settings.load_full();
    let head = settings.timeouts.request_header;
    let stream = tokio::select! {
        _ = shutdown.cancelled() => return,
        r = tokio::time::timeout(head, acceptor.accept(stream)) => match r {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                debug!(client = %peer, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                debug!(client = %peer, "no TLS handshake within {head:?}");
                return;
            }
        },
    };
    let state = Arc::new(ConnState::new(
        ctx.clone(),
        session,
        ClientInfo::new(peer, local_port, "https"),
        &settings.timeouts,
    ));
    let svc_state = state.clone();
    let service = move |req: Request<Incoming>| serve_request(&svc_state, req);
    let clock = ctx.clock;
    let client_ms = settings.timeouts.client.as_millis() as u64;
    let head_ms = head.as_millis() as u64;
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let watchdog = tokio::time::sleep(head.min(settings.timeouts.client));
    tokio::pin!(watchdog);
    // The same loop for both connection types (they share no trait for graceful stop).
    macro_rules! drive {
        ($conn:expr) => {{
            let conn = $conn;
            tokio::pin!(conn);
            let mut stopping = false;
            let mut going_away = false;
            loop {
                tokio::select! {
                    biased;
                    res = conn.as_mut() => {
                        if let Err(e) = res {
                            debug!(client = %peer, error = %e, "client connection ended with an error");
                        }
                        return;
                    }
                    _ = shutdown.cancelled(), if !stopping => {
                        stopping = true;
                        conn.as_mut().graceful_shutdown();
                    }
                    _ = &mut watchdog => {
                        if going_away {
                            return;
                        }
                        let now = clock.now_ms();
                        match check_deadlines(&state, now, client_ms, head_ms, state.is_h2()) {
                            Err(false) if h2 => {
                                // Idle: GOAWAY, and a moment for it to go out.
                                conn.as_mut().graceful_shutdown();
                                going_away = true;
                                watchdog.as_mut().reset(
                                    Instant::now() + Duration::from_millis(GOAWAY_GRACE_MS),
                                );
                            }
                            Ok(next) => {
                                let wait = Duration::from_millis(next.saturating_sub(now).max(1));
                                watchdog.as_mut().reset(Instant::now() + wait);
                            }
                            Err(counted) => {
                                if counted {
                                    ctx.stats.client_timeouts.fetch_add(1, Ordering::Relaxed);
                                }
                                debug!(client = %peer, "idle or slow client connection closed");
                                return;
                            }
                        }
                    }
                }
            }
        }};
    }
    let io = TokioIo::new(ClientIo::new(stream, state.clone(), None));
    if h2 {
        let mut b = auto::Builder::new(StreamExec(state.clone()));
        h2_settings(b.http2(), &settings);
        drive!(b.serve_connection_with_upgrades(io, service_fn(service)))
    } else {
        // HTTP/1.1: hyper's server as for plain connections, the request head timeout
        // kept by the watchdog.
        drive!(settings
            .h1
            .serve_connection(io, service_fn(service))
            .with_upgrades())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What every open connection costs while idle (parked) is mostly this future:
    /// keep it small (see the module docs; hyper's state is boxed and dropped).
    #[tokio::test]
    async fn connection_task_state_stays_small() {
        let ctx = test_ctx();
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let peer = "192.0.2.1:5".parse().unwrap();
        let fut = serve_connection(
            &ctx,
            test_session(&ctx),
            s,
            peer,
            80,
            CancellationToken::new(),
        );
        let size = std::mem::size_of_val(&fut);
        assert!(size <= 1024, "connection future is {size} bytes");
    }

    fn test_session(ctx: &ProxyCtx) -> Session {
        let permit = Arc::new(tokio::sync::Semaphore::new(1))
            .try_acquire_owned()
            .unwrap();
        let tracker = tokio_util::task::TaskTracker::new();
        Session::open(ctx.stats.clone(), permit, tracker.token())
    }

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

    fn test_ctx() -> Arc<ProxyCtx> {
        Arc::new(ProxyCtx::new(
            Arc::new(crate::routing::Router::new(4)),
            Arc::default(),
            Settings::from_config(&crate::config::Config::default()),
            tokio::sync::mpsc::unbounded_channel().0,
            CancellationToken::new(),
        ))
    }

    /// A connection asked to park (idle too long: a slow backend) whose response is
    /// ready but waits for the rest of the turn must not park: that would end hyper's
    /// connection with the response unsent.
    #[tokio::test]
    async fn a_response_waiting_for_its_turn_keeps_the_connection_from_parking() {
        let ctx = test_ctx();
        let state = Arc::new(ConnState::new(
            ctx.clone(),
            test_session(&ctx),
            ClientInfo::new("192.0.2.1:5".parse().unwrap(), 80, "http"),
            &crate::config::Config::default().timeouts,
        ));
        let (ours, mut client) = tokio::io::duplex(1024);
        let mut io = ClientIo::new(ours, state.clone(), Some(Arc::new(OnceLock::new())));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut buf = [0u8; 64];

        tokio::io::AsyncWriteExt::write_all(&mut client, b"GET / HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let mut rb = ReadBuf::new(&mut buf);
        assert!(Pin::new(&mut io).poll_read(&mut cx, &mut rb).is_ready());
        assert_eq!(rb.filled().len(), 18);
        state.park.store(true, Ordering::Relaxed);

        let resp = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        assert!(Pin::new(&mut io).poll_write(&mut cx, resp).is_pending());
        let mut rb = ReadBuf::new(&mut buf);
        assert!(
            Pin::new(&mut io).poll_read(&mut cx, &mut rb).is_pending(),
            "parked (end-of-stream to hyper) with a response waiting to be written"
        );
        assert!(matches!(
            Pin::new(&mut io).poll_write(&mut cx, resp),
            Poll::Ready(Ok(n)) if n == resp.len()
        ));
        assert!(Pin::new(&mut io).poll_flush(&mut cx).is_ready());
        // Written and flushed: now it may park.
        let mut rb = ReadBuf::new(&mut buf);
        assert!(Pin::new(&mut io).poll_read(&mut cx, &mut rb).is_ready());
        assert!(rb.filled().is_empty() && io.parked);
    }

    /// The lingering read ends when the client closes, falls silent, or takes too long,
    /// whichever comes first, and reads everything the client sent meanwhile.
    #[tokio::test(start_paused = true)]
    async fn lingering_ends_on_close_silence_or_the_total_time() {
        use tokio::io::AsyncWriteExt;
        let (read_wait, total) = (Duration::from_secs(5), Duration::from_secs(30));

        // The rest of an upload, then the client's close: all of it read, at once.
        let (mut ours, mut client) = tokio::io::duplex(1024);
        let sender = tokio::spawn(async move {
            for _ in 0..100 {
                client.write_all(&[b'x'; 1000]).await.unwrap();
            }
        });
        let t = Instant::now();
        assert_eq!(linger(&mut ours, read_wait, total).await, 100_000);
        assert!(t.elapsed() < Duration::from_millis(1));
        sender.await.unwrap();

        // A client that keeps the connection open and sends nothing: one read wait.
        let (mut ours, _client) = tokio::io::duplex(1024);
        let t = Instant::now();
        assert_eq!(linger(&mut ours, read_wait, total).await, 0);
        assert_eq!(t.elapsed(), read_wait);

        // A client that trickles bytes for ever (every 4 s, within the read wait): cut
        // at the total time.
        let (mut ours, mut client) = tokio::io::duplex(1024);
        let trickle = tokio::spawn(async move {
            for _ in 0..1000 {
                if client.write_all(b"x").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(4)).await;
            }
        });
        let t = Instant::now();
        let got = linger(&mut ours, read_wait, total).await;
        assert_eq!(t.elapsed(), total);
        assert_eq!(got, 8, "bytes at 0, 4, ... 28 s");
        drop(ours);
        trickle.await.unwrap();
    }

    #[test]
    fn park_needs_a_complete_head_last() {
        let mut tail = *b"\r\n\r\n";
        push_tail(&mut tail, b"GET / HTTP/1.1\r\nHost: x\r\n");
        assert!(!ends_head(&tail));
        push_tail(&mut tail, b"\r");
        assert!(!ends_head(&tail));
        push_tail(&mut tail, b"\n");
        assert!(ends_head(&tail), "a head split across reads");
        push_tail(&mut tail, b"GET /next HTTP/1.1\r\nHo");
        assert!(!ends_head(&tail), "half of a pipelined head");
        push_tail(&mut tail, b"st: x\n\n");
        assert!(ends_head(&tail));
    }
}
