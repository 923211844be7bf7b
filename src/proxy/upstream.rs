//! Connections to backends: one pool per backend, and the HTTP/1.1 exchange on them.
//!
//! Owns connecting (with `timeouts.connect`), a lock-free queue of idle keep-alive
//! connections per backend, and sending a request and reading its response over a
//! [`Conn`] with the wire format of [`super::h1`]. The exchange runs in the task of the
//! client's request: no task per backend connection, no channel between the request and
//! the socket (hyper's client connection would add both to every request). A pooled
//! connection is owned by nobody while idle; that the backend closed it is seen when it
//! is taken again, from the readiness the runtime already recorded (no system call for a
//! healthy one; a request that cannot be replayed also asks the kernel, see [`Check`]),
//! or by the background sweep.
//!
//! Why not hyper-util's pooled client: it keys one shared pool by host with no way to
//! close one backend's idle connections (drain needs that), and it merges "could not
//! connect" with "sent and failed", while a balancer must know whether a request left
//! the building before it retries it elsewhere: [`send`] hands back a request of which
//! no byte was written.
//!
//! A connection returns to the pool only when its response body was read to the end and
//! the response allows another request (see [`UpBody`]); anything else closes it.
//! [`Pool::force_close`] (the drain deadline) cuts busy connections too: each one has a
//! `ConnCell` whose waker is set whenever its owner waits on the socket.

use std::fmt;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use atomic_waker::AtomicWaker;
use bytes::{Bytes, BytesMut};
use crossbeam_queue::{ArrayQueue, SegQueue};
use http::Request;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::io::AsyncWrite;
use tokio::net::TcpStream;

use super::h1::{self, BodyLen, Head, ReqFraming};
use super::io::{coarse_ms, Counted};
use crate::gear::Addr;
use crate::stats::Traffic;

/// Body of a request sent to a backend.
#[derive(Debug)]
pub enum ReqBody {
    /// The client's body, streamed as it arrives, with a token held until it ends.
    Incoming(Incoming, Option<Pending>),
    /// No body (requests rebuilt for a retry, health checks).
    Empty,
}

/// Counts one unfinished upload on a shared counter until dropped. The proxy uses it
/// to tell "waiting on the client's body" from "waiting on the backend".
#[derive(Debug)]
pub struct Pending(Arc<std::sync::atomic::AtomicU32>);

impl Pending {
    pub fn new(counter: &Arc<std::sync::atomic::AtomicU32>) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Pending(counter.clone())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ReqBody::Incoming(b, pending) => {
                let r = Pin::new(b).poll_frame(cx);
                if matches!(r, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
                    pending.take();
                }
                r
            }
            ReqBody::Empty => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReqBody::Incoming(b, _) => b.is_end_stream(),
            ReqBody::Empty => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ReqBody::Incoming(b, _) => b.size_hint(),
            ReqBody::Empty => SizeHint::with_exact(0),
        }
    }
}

/// Why a new connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connect timed out after {0:?}")]
    Timeout(Duration),
    #[error("connect failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Why an exchange with a backend failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("connection to the backend failed: {0}")]
    Io(#[from] io::Error),
    #[error("the backend closed the connection before the response was complete")]
    Closed,
    #[error(transparent)]
    Parse(#[from] h1::ParseError),
    /// The client's request body failed (malformed chunked framing, or the client went
    /// away mid-upload): the client's fault, never the backend's.
    #[error("request body from the client failed: {0}")]
    ClientBody(hyper::Error),
    #[error("request body longer or shorter than its Content-Length")]
    BodyLength,
    /// The backend refused the request (an error or closing response head arrived)
    /// before it took the whole body: [`send`] hands that answer on, never this error.
    #[error("the backend answered before the request body was sent")]
    Answered,
}

/// A failed [`send`].
#[derive(Debug)]
pub enum SendFailure {
    /// Not one byte was written: the request is handed back, untouched.
    NotSent(Box<Outgoing>, SendError),
    /// It was (at least partly) sent.
    Sent(SendError),
}

/// Read buffer sizes: start small (most responses are), double while reads fill the
/// space, halve after a read that used less than a quarter of it. Large bodies move in
/// large reads: fewer system calls, and the backend's socket is drained sooner, so it
/// can keep sending (128 KiB at most cost ~10% of the throughput of 1 MiB responses).
const READ_MIN: usize = 8 * 1024;
const READ_MAX: usize = 512 * 1024;

/// Longest wait for the rest of a backend's answer after a request body could not be
/// written (see [`Conn::read_early_answer`]).
const EARLY_ANSWER_WAIT: Duration = Duration::from_secs(1);

/// What [`Pool::force_close`] needs of a connection, wherever it is: a flag, and the
/// waker of whoever waits on its socket.
#[derive(Default)]
struct ConnCell {
    killed: AtomicBool,
    waker: AtomicWaker,
}

/// Decrements the pool's count of open connections when the connection is gone.
struct OpenGuard(Arc<AtomicU64>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One connection to a backend, with the bytes read from it and not consumed yet.
pub struct Conn {
    io: Counted<TcpStream>,
    buf: BytesMut,
    read_size: usize,
    /// A byte arrived since the last request was sent (see [`Conn::answered_nothing`]).
    heard: bool,
    cell: Arc<ConnCell>,
    _open: OpenGuard,
}

fn cut() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "backend connection cut (drain deadline)",
    )
}

impl Conn {
    fn killed(&self) -> bool {
        self.cell.killed.load(Ordering::Acquire)
    }

    /// Wait for the socket on behalf of the task in `cx`; a cut wakes it.
    fn pending<T>(&self, cx: &Context<'_>) -> Poll<io::Result<T>> {
        self.cell.waker.register(cx.waker());
        if self.killed() {
            return Poll::Ready(Err(cut()));
        }
        Poll::Pending
    }

    /// Read more bytes into the buffer; `Ok(0)` at the end of the stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.killed() {
            return Poll::Ready(Err(cut()));
        }
        let spare = self.buf.capacity() - self.buf.len();
        if spare < self.read_size / 2 {
            self.buf.reserve(self.read_size);
        }
        let spare = self.buf.capacity() - self.buf.len();
        match tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf) {
            Poll::Pending => self.pending(cx),
            Poll::Ready(Ok(n)) => {
                self.heard |= n > 0;
                if n == spare && self.read_size < READ_MAX {
                    self.read_size *= 2;
                } else if n > 0 && n < self.read_size / 4 && self.read_size > READ_MIN {
                    self.read_size /= 2;
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        }
    }

    /// Write `data[*at..]`, advancing `at`.
    fn poll_write_all(
        &mut self,
        cx: &mut Context<'_>,
        data: &[u8],
        at: &mut usize,
    ) -> Poll<io::Result<()>> {
        while *at < data.len() {
            if self.killed() {
                return Poll::Ready(Err(cut()));
            }
            match Pin::new(&mut self.io).poll_write(cx, &data[*at..]) {
                Poll::Pending => return self.pending(cx),
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *at += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Write part of a request body. While the backend takes none of it (its socket is
    /// full), whatever it sends is read: a backend that refuses the request before it
    /// has read the whole body (`413`, `401`, or any answer that closes) and then
    /// stops reading must not leave the request hanging until `timeouts.server`. Such
    /// an answer ends the write with [`SendError::Answered`].
    async fn write_body(&mut self, data: &[u8]) -> Result<(), SendError> {
        let mut at = 0;
        poll_fn(|cx| match self.poll_write_all(cx, data, &mut at) {
            Poll::Ready(r) => Poll::Ready(r.map_err(SendError::from)),
            // A final answer that is no refusal (a full-duplex backend's success) is
            // already here: its body waits in the backend's socket, not in this buffer,
            // until the request body is sent and the response is read as usual.
            Poll::Pending if early(&self.buf) != Early::Nothing => Poll::Pending,
            Poll::Pending => match self.poll_fill(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Err(e)) => Poll::Ready(Err(e.into())),
                Poll::Ready(Ok(0)) => Poll::Ready(Err(SendError::Closed)),
                Poll::Ready(Ok(_)) if early(&self.buf).refuses() => {
                    Poll::Ready(Err(SendError::Answered))
                }
                Poll::Ready(Ok(_)) => {
                    // An interim response (`100 Continue`), or part of a head: keep
                    // writing, and look again (both wakers registered anew).
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            },
        })
        .await
    }

    /// After writing the request failed: read what the backend sent before it went
    /// away. A response precedes the close that broke the write, so the socket is
    /// readable at once; the wait is bounded all the same. True when a final response
    /// head is complete.
    async fn read_early_answer(&mut self) -> bool {
        let deadline = tokio::time::Instant::now() + EARLY_ANSWER_WAIT;
        loop {
            if early(&self.buf) != Early::Nothing {
                return true;
            }
            let fill = tokio::time::timeout_at(deadline, poll_fn(|cx| self.poll_fill(cx)));
            if !matches!(fill.await, Ok(Ok(n)) if n > 0) {
                return false;
            }
        }
    }

    /// Still usable after sitting idle: nothing unread, not closed nor failed. Only
    /// when the runtime saw the socket become readable does this cost a system call.
    fn idle_ok(&mut self) -> bool {
        if !self.buf.is_empty() || self.killed() {
            return false;
        }
        let mut b = [0u8; 1];
        matches!(self.io.get_ref().try_read(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Asks the kernel, whatever the runtime recorded: is the socket still open, with
    /// nothing to read? A close that reached the socket after the runtime last polled
    /// its events (a busy worker polls them every few dozen tasks) is seen here, and
    /// [`Self::idle_ok`] would miss it. One `recv(MSG_PEEK | MSG_DONTWAIT)`.
    fn open_now(&self) -> bool {
        use rustix::net::{recv, RecvFlags};
        let mut b = [0u8; 1];
        matches!(
            recv(self.io.get_ref(), &mut b[..], RecvFlags::PEEK | RecvFlags::DONTWAIT),
            Err(e) if e == rustix::io::Errno::WOULDBLOCK
        )
    }

    /// Not one byte came back since the last request was sent: when [`send`] then
    /// fails on a pooled connection, the backend closed it as the request went out (its
    /// keep-alive timeout, a restart), not while it was answering.
    pub fn answered_nothing(&self) -> bool {
        !self.heard
    }

    /// The socket, and the bytes already read from it, for a tunnel after `101`.
    pub fn into_upgraded(self) -> (Counted<TcpStream>, Bytes) {
        (self.io, self.buf.freeze())
    }
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn")
            .field("buffered", &self.buf.len())
            .field("killed", &self.killed())
            .finish()
    }
}

/// A request ready for the wire. The head is encoded once (see [`h1`]) and is the same
/// whichever backend gets it, so that a retry sends the very same bytes.
#[derive(Debug)]
pub struct Outgoing {
    pub head: Bytes,
    /// The request's method: a response to `HEAD` has no body.
    pub method: http::Method,
    pub framing: ReqFraming,
    pub body: ReqBody,
}

/// Send `req` on `conn` and read the response head (informational responses other
/// than `101` are skipped). The body, if any, is then read with [`UpBody`].
pub async fn send(conn: &mut Conn, req: Outgoing) -> Result<Head, SendFailure> {
    conn.heard = false;
    // Behind the other reads of this turn (`phase`).
    super::phase::rest_of_turn().await;
    // The head: when not one byte of it could be written, the request goes back.
    let mut at = 0;
    let written = poll_fn(|cx| conn.poll_write_all(cx, &req.head, &mut at)).await;
    if let Err(e) = written {
        if at == 0 {
            return Err(SendFailure::NotSent(Box::new(req), SendError::Io(e)));
        }
        return Err(SendFailure::Sent(SendError::Io(e)));
    }
    let Outgoing {
        method,
        framing,
        mut body,
        ..
    } = req;
    let mut answered_early = false;
    if framing != ReqFraming::Empty {
        match send_body(conn, &mut body, framing).await {
            Ok(()) => {}
            Err(e @ (SendError::ClientBody(_) | SendError::BodyLength)) => {
                return Err(SendFailure::Sent(e))
            }
            // The backend answered before taking the whole body, and stopped reading
            // or closed: that answer is the response (what a client talking to the
            // backend directly would see), not a 502.
            Err(_) if conn.read_early_answer().await => answered_early = true,
            Err(e) => return Err(SendFailure::Sent(e)),
        }
    }
    drop(body);

    loop {
        if !conn.buf.is_empty() {
            match h1::parse_response(&mut conn.buf, &method) {
                Ok(Some(h))
                    if h.parts.status.is_informational()
                        && h.parts.status != http::StatusCode::SWITCHING_PROTOCOLS =>
                {
                    continue
                }
                // Part of the request body was never sent: the connection cannot
                // carry another request.
                Ok(Some(h)) if answered_early => {
                    return Ok(Head {
                        keep_alive: false,
                        ..h
                    })
                }
                Ok(Some(h)) => return Ok(h),
                Ok(None) => {}
                Err(e) => return Err(SendFailure::Sent(e.into())),
            }
        }
        match poll_fn(|cx| conn.poll_fill(cx)).await {
            Ok(0) => return Err(SendFailure::Sent(SendError::Closed)),
            Ok(_) => {}
            Err(e) => return Err(SendFailure::Sent(e.into())),
        }
    }
}

/// `req` made ready for the wire (tests, and callers without a retry to prepare).
pub fn outgoing(req: Request<ReqBody>) -> Outgoing {
    let (mut parts, body) = req.into_parts();
    let framing = h1::request_framing(
        &mut parts.headers,
        body.is_end_stream(),
        body.size_hint().exact(),
    );
    let mut head = BytesMut::new();
    h1::encode_request_head(&parts, framing, &mut head);
    Outgoing {
        head: head.freeze(),
        method: parts.method,
        framing,
        body,
    }
}

/// What a backend sent while the request body was still being written.
#[derive(Debug, PartialEq, Eq)]
enum Early {
    /// Nothing, interim `1xx` responses, or part of a head.
    Nothing,
    /// A complete final response head: its status, and whether it closes.
    Final { status: u16, close: bool },
    /// Not a response, or longer than a head may be: the response parser says why.
    Bad,
}

impl Early {
    /// A backend refusing the request: it answered with an error or is closing, so
    /// the rest of the body is not wanted. (A success while the body still flows may
    /// come from a full-duplex backend that reads on: the body keeps going to it.)
    fn refuses(&self) -> bool {
        match *self {
            Early::Nothing => false,
            Early::Final { status, close } => status >= 400 || close,
            Early::Bad => true,
        }
    }
}

/// What `buf` (bytes a backend sent) starts with, after any interim `1xx` heads.
fn early(buf: &[u8]) -> Early {
    let mut at = 0;
    while at < buf.len() {
        let mut slots = [httparse::EMPTY_HEADER; h1::MAX_HEADERS];
        let mut r = httparse::Response::new(&mut slots);
        match r.parse(&buf[at..]) {
            Ok(httparse::Status::Complete(n)) => match r.code {
                Some(c) if (100..200).contains(&c) && c != 101 => at += n,
                Some(status) => {
                    let close = r.headers.iter().any(|h| {
                        h.name.eq_ignore_ascii_case("connection")
                            && h1::tokens(h.value).any(|t| t.eq_ignore_ascii_case(b"close"))
                    });
                    return Early::Final { status, close };
                }
                None => return Early::Bad,
            },
            Ok(httparse::Status::Partial) if buf.len() - at < h1::MAX_HEAD => break,
            _ => return Early::Bad,
        }
    }
    Early::Nothing
}

/// Stream the client's body to the backend with the framing of its head.
async fn send_body(
    conn: &mut Conn,
    body: &mut ReqBody,
    framing: ReqFraming,
) -> Result<(), SendError> {
    let mut sent: u64 = 0;
    let mut out = BytesMut::new();
    loop {
        let frame = poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await;
        let data = match frame {
            None => break,
            Some(Err(e)) => return Err(SendError::ClientBody(e)),
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => d,
                Err(_) => continue, // trailers are not forwarded
            },
        };
        sent += data.len() as u64;
        match framing {
            ReqFraming::Length(n) => {
                if sent > n {
                    return Err(SendError::BodyLength);
                }
                conn.write_body(&data).await?;
            }
            ReqFraming::Chunked => {
                out.clear();
                h1::encode_chunk(&data, &mut out);
                conn.write_body(&out).await?;
            }
            ReqFraming::Empty => {}
        }
    }
    match framing {
        ReqFraming::Length(n) if sent != n => Err(SendError::BodyLength),
        ReqFraming::Chunked => conn.write_body(h1::LAST_CHUNK).await,
        _ => Ok(()),
    }
}

/// How much of a response body is left.
#[derive(Debug)]
enum Left {
    Length(u64),
    Chunked(h1::Chunked),
    Close,
    Done,
}

/// A backend's response body, read from its connection as the client takes it. Once
/// it is read to the end, [`UpBody::take_reusable`] gives the connection back for the
/// pool.
#[derive(Debug)]
pub struct UpBody {
    conn: Option<Conn>,
    left: Left,
    keep_alive: bool,
}

impl UpBody {
    pub fn new(conn: Conn, head: &Head) -> Self {
        let left = match head.body {
            BodyLen::Empty => Left::Done,
            BodyLen::Length(n) => Left::Length(n),
            BodyLen::Chunked => Left::Chunked(h1::Chunked::default()),
            BodyLen::Close => Left::Close,
        };
        UpBody {
            conn: Some(conn),
            left,
            keep_alive: head.keep_alive,
        }
    }

    /// The whole body was read.
    pub fn is_done(&self) -> bool {
        matches!(self.left, Left::Done)
    }

    /// The connection, when the body was read to its end and the connection may carry
    /// another request.
    pub fn take_reusable(&mut self) -> Option<Conn> {
        if self.is_done() && self.keep_alive {
            self.conn.take().filter(|c| c.buf.is_empty())
        } else {
            None
        }
    }

    /// The connection whatever its state (a `101` response hands it to a tunnel).
    pub fn take_conn(&mut self) -> Option<Conn> {
        self.left = Left::Done;
        self.keep_alive = false;
        self.conn.take()
    }

    pub fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, SendError>>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(None);
        };
        loop {
            match &mut self.left {
                Left::Done => return Poll::Ready(None),
                Left::Length(left) => {
                    if !conn.buf.is_empty() {
                        let n = (conn.buf.len() as u64).min(*left) as usize;
                        *left -= n as u64;
                        let data = conn.buf.split_to(n).freeze();
                        if *left == 0 {
                            self.left = Left::Done;
                        }
                        return Poll::Ready(Some(Ok(data)));
                    }
                }
                Left::Chunked(c) => match c.decode(&mut conn.buf) {
                    Ok(h1::Step::Data(d)) => return Poll::Ready(Some(Ok(d))),
                    Ok(h1::Step::End) => {
                        self.left = Left::Done;
                        return Poll::Ready(None);
                    }
                    Ok(h1::Step::More) => {}
                    Err(e) => return Poll::Ready(Some(Err(e.into()))),
                },
                Left::Close => {
                    if !conn.buf.is_empty() {
                        let data = conn.buf.split().freeze();
                        return Poll::Ready(Some(Ok(data)));
                    }
                }
            }
            match ready!(conn.poll_fill(cx)) {
                Ok(0) if matches!(self.left, Left::Close) => {
                    self.left = Left::Done;
                    return Poll::Ready(None);
                }
                Ok(0) => return Poll::Ready(Some(Err(SendError::Closed))),
                Ok(_) => {}
                Err(e) => return Poll::Ready(Some(Err(e.into()))),
            }
        }
    }

    pub fn size_hint(&self) -> SizeHint {
        match &self.left {
            Left::Done => SizeHint::with_exact(0),
            Left::Length(n) => SizeHint::with_exact(*n),
            _ => SizeHint::default(),
        }
    }
}

struct Idle {
    conn: Conn,
    /// When it was pooled, on the coarse clock (ms): cheaper to read than `Instant`,
    /// and idle ages are kept to seconds.
    since_ms: u64,
}

/// A TCP connection to a backend address (an IP address, or a name resolved now).
pub async fn dial(addr: &Addr) -> std::io::Result<TcpStream> {
    match addr.socket_addr() {
        Some(sa) => TcpStream::connect(sa).await,
        None => TcpStream::connect((addr.host(), addr.port())).await,
    }
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
        }
    }

    /// Bytes moved on this pool's connections (tunnels included).
    pub fn traffic(&self) -> &Traffic {
        &self.traffic
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
        let stream = tokio::time::timeout(timeout, dial(addr))
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
            io: Counted::new(stream, self.traffic.clone()),
            buf: BytesMut::new(),
            read_size: READ_MIN,
            heard: false,
            cell,
            _open: OpenGuard(self.open.clone()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A backend that answers every request on a connection with a fixed response.
    async fn backend() -> (std::net::SocketAddr, Arc<AtomicU64>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let accepted = Arc::new(AtomicU64::new(0));
        let a = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                a.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let r = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if s.write_all(r).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }

    /// GET / on `conn`, the body read in full; the connection if it may be reused.
    async fn get(mut conn: Conn) -> (Bytes, Option<Conn>) {
        let req = hyper::Request::get("/")
            .header("host", "x")
            .body(ReqBody::Empty)
            .unwrap();
        let head = send(&mut conn, outgoing(req)).await.unwrap();
        let mut body = UpBody::new(conn, &head);
        let mut got = BytesMut::new();
        while let Some(d) = poll_fn(|cx| body.poll_data(cx)).await {
            got.extend_from_slice(&d.unwrap());
        }
        (got.freeze(), body.take_reusable())
    }

    /// A new connection to `addr` that answered one GET with `ok`, put back in `pool`.
    async fn pool_one(pool: &Pool, addr: std::net::SocketAddr) {
        let s = pool
            .connect(&addr.into(), Duration::from_secs(1))
            .await
            .unwrap();
        let (got, s) = get(s).await;
        assert_eq!(&got[..], b"ok");
        pool.checkin(s.expect("the response allowed reuse"));
    }

    #[tokio::test]
    async fn connections_are_reused_after_a_full_response() {
        let (addr, accepted) = backend().await;
        let pool = Pool::new(4);
        pool_one(&pool, addr).await;
        let s = pool
            .checkout_idle(Duration::from_secs(10), Check::Recorded)
            .expect("pooled connection");
        let (got, s) = get(s).await;
        assert_eq!(&got[..], b"ok");
        assert!(s.is_some());
        assert_eq!(accepted.load(Ordering::Relaxed), 1);
        assert_eq!(pool.open_connections(), 1);
    }

    #[tokio::test]
    async fn read_size_grows_with_large_bodies_and_shrinks_back() {
        // One connection: a 4 MiB body, then small ones.
        let big: Vec<u8> = (0..4 << 20).map(|i: u32| (i % 251) as u8).collect();
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let body = big.clone();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let mut first = true;
            while let Ok(n) = s.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let r = if first {
                    let mut r =
                        format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len())
                            .into_bytes();
                    r.extend_from_slice(&body);
                    r
                } else {
                    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec()
                };
                first = false;
                if s.write_all(&r).await.is_err() {
                    break;
                }
            }
        });
        let pool = Pool::new(4);
        let s = pool
            .connect(&addr.into(), Duration::from_secs(1))
            .await
            .unwrap();
        let (got, s) = get(s).await;
        assert!(got[..] == big[..], "the large body arrives intact");
        let mut s = s.expect("reusable");
        let grown = s.read_size;
        assert!(grown > READ_MIN && grown <= READ_MAX, "read size {grown}");
        for _ in 0..12 {
            let (got, next) = get(s).await;
            assert_eq!(&got[..], b"ok");
            s = next.expect("reusable");
        }
        assert_eq!(s.read_size, READ_MIN, "small responses shrink it back");
    }

    #[tokio::test]
    async fn close_drops_idle_connections_and_refuses_checkins() {
        let (addr, _) = backend().await;
        let pool = Pool::new(4);
        let s = pool
            .connect(&addr.into(), Duration::from_secs(1))
            .await
            .unwrap();
        let (_, s) = get(s).await;
        pool.checkin(s.unwrap());
        assert_eq!(pool.idle_connections(), 1);
        pool.close();
        assert_eq!(pool.idle_connections(), 0);
        for _ in 0..100 {
            if pool.open_connections() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            pool.open_connections(),
            0,
            "closing the pool closes idle sockets"
        );
        let s = pool
            .connect(&addr.into(), Duration::from_secs(1))
            .await
            .unwrap();
        pool.checkin(s);
        assert_eq!(pool.idle_connections(), 0);
    }

    /// A backend that reads requests and never answers.
    async fn silent_backend() -> std::net::SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    /// A backend that writes `raw` as the answer to the first request, then does what
    /// `then` says: keep the connection open, or close it.
    async fn scripted_backend(raw: &'static [u8], close_after: bool) -> std::net::SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    if s.read(&mut buf).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let _ = s.write_all(raw).await;
                    if close_after {
                        return;
                    }
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn wait_open(pool: &Pool, n: u64) {
        for _ in 0..200 {
            if pool.open_connections() == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(pool.open_connections(), n);
    }

    #[tokio::test]
    async fn force_close_cuts_busy_connections_and_reopen_pools_again() {
        let silent = silent_backend().await;
        let pool = Arc::new(Pool::new(4));
        let mut busy = pool
            .connect(&silent.into(), Duration::from_secs(1))
            .await
            .unwrap();
        let waiting = tokio::spawn(async move {
            let req = hyper::Request::get("/")
                .header("host", "x")
                .body(ReqBody::Empty)
                .unwrap();
            send(&mut busy, outgoing(req)).await.map(|_| ())
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(pool.open_connections(), 1);
        pool.force_close();
        let r = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the waiting request is woken")
            .unwrap();
        assert!(
            matches!(r, Err(SendFailure::Sent(SendError::Io(ref e))) if e.kind() == io::ErrorKind::ConnectionAborted),
            "{r:?}"
        );
        wait_open(&pool, 0).await;

        let (addr, _) = backend().await;
        pool.reopen();
        assert!(!pool.is_closed());
        let s = pool
            .connect(&addr.into(), Duration::from_secs(1))
            .await
            .unwrap();
        pool.checkin(s);
        assert_eq!(pool.idle_connections(), 1);
        assert_eq!(
            pool.open_connections(),
            1,
            "new connections survive the old kill"
        );
        let s = pool
            .checkout_idle(Duration::from_secs(10), Check::Recorded)
            .unwrap();
        let (got, _) = get(s).await;
        assert_eq!(&got[..], b"ok");
    }

    #[tokio::test]
    async fn a_pooled_connection_the_backend_closed_is_not_handed_out() {
        let addr = scripted_backend(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", true).await;
        let pool = Pool::new(4);
        pool_one(&pool, addr).await;
        // The backend's close reaches the runtime's readiness for the socket.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(pool
            .checkout_idle(Duration::from_secs(10), Check::Recorded)
            .is_none());
        wait_open(&pool, 0).await;
    }

    #[tokio::test]
    async fn a_close_the_runtime_has_not_seen_yet_is_caught_by_asking_the_kernel() {
        // A backend on a thread of its own, so that it closes while this test's runtime
        // (one thread) is not polling its events.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (close, closing) = std::sync::mpsc::channel::<()>();
        let backend = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .unwrap();
            closing.recv().unwrap();
        });
        let pool = Pool::new(4);
        pool_one(&pool, addr).await;
        // Taken and returned: the readiness left by the response is used up.
        let s = pool.checkout_idle(Duration::from_secs(10), Check::Kernel);
        pool.checkin(s.expect("open, idle"));

        close.send(()).unwrap();
        backend.join().unwrap();
        // No `.await` since the close: the runtime has not seen it, the kernel has.
        assert!(pool
            .checkout_idle(Duration::from_secs(10), Check::Kernel)
            .is_none());
        assert_eq!(pool.open_connections(), 0, "the closed one was dropped");
    }

    #[tokio::test]
    async fn chunked_close_delimited_and_closing_responses() {
        let chunked = scripted_backend(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
            false,
        )
        .await;
        let pool = Pool::new(4);
        let s = pool
            .connect(&chunked.into(), Duration::from_secs(1))
            .await
            .unwrap();
        let (got, s) = get(s).await;
        assert_eq!(&got[..], b"abcde");
        assert!(
            s.is_some(),
            "a chunked body read to its end leaves the connection usable"
        );

        let eof = scripted_backend(b"HTTP/1.1 200 OK\r\n\r\nuntil the end", true).await;
        let s = pool
            .connect(&eof.into(), Duration::from_secs(1))
            .await
            .unwrap();
        let (got, s) = get(s).await;
        assert_eq!(&got[..], b"until the end");
        assert!(s.is_none(), "a body ended by the close ends the connection");

        let closing = scripted_backend(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 1\r\n\r\nx",
            false,
        )
        .await;
        let s = pool
            .connect(&closing.into(), Duration::from_secs(1))
            .await
            .unwrap();
        let (got, s) = get(s).await;
        assert_eq!(&got[..], b"x", "100 Continue is skipped");
        assert!(s.is_none(), "connection: close is honoured");

        let short =
            scripted_backend(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", true).await;
        let mut s = pool
            .connect(&short.into(), Duration::from_secs(1))
            .await
            .unwrap();
        let req = hyper::Request::get("/")
            .header("host", "x")
            .body(ReqBody::Empty)
            .unwrap();
        let head = send(&mut s, outgoing(req)).await.unwrap();
        let mut body = UpBody::new(s, &head);
        let first = poll_fn(|cx| body.poll_data(cx)).await.unwrap().unwrap();
        assert_eq!(&first[..], b"abc");
        let cut = poll_fn(|cx| body.poll_data(cx)).await.unwrap();
        assert!(matches!(cut, Err(SendError::Closed)), "{cut:?}");
        assert!(body.take_reusable().is_none());
    }

    #[tokio::test]
    async fn an_upgrade_hands_over_the_socket_and_the_bytes_after_the_head() {
        let addr = scripted_backend(
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\nconnection: upgrade\r\n\r\nhello",
            false,
        )
        .await;
        let pool = Pool::new(4);
        let mut s = pool
            .connect(&addr.into(), Duration::from_secs(1))
            .await
            .unwrap();
        let req = hyper::Request::get("/")
            .header("host", "x")
            .header("connection", "upgrade")
            .header("upgrade", "x")
            .body(ReqBody::Empty)
            .unwrap();
        let head = send(&mut s, outgoing(req)).await.unwrap();
        assert_eq!(head.parts.status, 101);
        // The greeting may come in the same read as the head, or later.
        let (_, early) = s.into_upgraded();
        assert!(b"hello".starts_with(&early), "{early:?}");
    }

    #[tokio::test]
    async fn stale_idle_connections_are_not_handed_out() {
        let (addr, _) = backend().await;
        let pool = Pool::new(4);
        let s = pool
            .connect(&addr.into(), Duration::from_secs(1))
            .await
            .unwrap();
        pool.checkin(s);
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(pool
            .checkout_idle(Duration::from_millis(10), Check::Recorded)
            .is_none());
        assert_eq!(pool.idle_connections(), 0);
    }

    #[tokio::test]
    async fn sweep_closes_stale_idle_connections_only() {
        let (addr, _) = backend().await;
        let pool = Pool::new(4);
        let old = pool
            .connect(&addr.into(), Duration::from_secs(1))
            .await
            .unwrap();
        pool.checkin(old);
        tokio::time::sleep(Duration::from_millis(60)).await;
        let new = pool
            .connect(&addr.into(), Duration::from_secs(1))
            .await
            .unwrap();
        pool.checkin(new);
        pool.sweep(Duration::from_millis(40));
        assert_eq!(pool.idle_connections(), 1, "the fresh one stays");
        for _ in 0..100 {
            if pool.open_connections() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(pool.open_connections(), 1, "the stale one is closed");
    }

    #[test]
    fn early_answers_are_told_apart() {
        assert_eq!(early(b""), Early::Nothing);
        assert_eq!(
            early(b"HTTP/1.1 413 Payload"),
            Early::Nothing,
            "part of a head"
        );
        assert_eq!(
            early(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 2"),
            Early::Nothing,
            "interim responses are skipped"
        );
        let e = early(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 413 Too Big\r\n\r\n");
        assert_eq!(
            e,
            Early::Final {
                status: 413,
                close: false
            }
        );
        assert!(e.refuses());
        let ok = early(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        assert_eq!(
            ok,
            Early::Final {
                status: 200,
                close: false
            }
        );
        assert!(!ok.refuses(), "a full-duplex backend may read on");
        let closing = early(b"HTTP/1.1 302 Found\r\nConnection: keep-alive, Close\r\n\r\n");
        assert_eq!(
            closing,
            Early::Final {
                status: 302,
                close: true
            }
        );
        assert!(closing.refuses());
        assert_eq!(early(b"SSH-2.0-OpenSSH\r\n\r\n"), Early::Bad);
        let huge = [b"HTTP/1.1 200 OK\r\nX: ".as_slice(), &[b'a'; h1::MAX_HEAD]].concat();
        assert_eq!(early(&huge), Early::Bad, "no end of head in sight");
    }

    #[tokio::test]
    async fn connect_refused_is_an_error() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let pool = Pool::new(4);
        let err = pool
            .connect(&addr.into(), Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(matches!(err, ConnectError::Io(_)), "{err}");
    }
}
