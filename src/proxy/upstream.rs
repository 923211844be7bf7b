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
//! A connection returns to the pool only when its response body was read to the end,
//! the request was sent in full, and the response allows another request (see
//! [`UpBody`]); anything else closes it. [`Pool::force_close`] (the drain deadline)
//! cuts busy connections too: each one has a `ConnCell` whose waker is set whenever its
//! owner waits on the socket. A backend named by host name is resolved once per
//! `proxy.dns_ttl` ([`Resolver`]).
//!
//! # The exchange, as a decision table
//!
//! What the balancer does with what a gear sends on an HTTP/1.1 connection. "Test"
//! names the test that holds the row (`tests/proxy.rs` unless said; `u::` is this
//! module's unit tests, many on scripted I/O; `h1::`, `forward::`, `wait::` those
//! modules'; `h2c` is `tests/h2c.rs`).
//!
//! **Response framing** (RFC 9112 §6.3, in its order; the first row that applies wins)
//!
//! | the response | the balancer | test |
//! |---|---|---|
//! | answers `HEAD`, or is `1xx`, `204`, `304` | no body, whatever its head says (§6.3 ¶1–2); a `Content-Length` is passed on, once | `h1::response_heads_and_their_framing`, `h1::a_length_written_several_times_is_passed_on_once` |
//! | `Transfer-Encoding` with `chunked` last | chunked, decoded and re-framed for the client; a `Content-Length` beside it is dropped and the connection not reused (§6.3 ¶3) | `h1::response_heads_and_their_framing`, `backends_closing_idle_keep_alive_connections_fail_no_request` |
//! | `Transfer-Encoding` without `chunked` (`gzip`) | read to the close (§6.3 ¶3), never reused | `h1::response_heads_and_their_framing`, `transfer_codings_other_than_chunked_are_refused_or_passed_faithfully` |
//! | other codings than `chunked` (`gzip, chunked`) | kept for an HTTP/1.1 client (hyper adds the chunked framing, RFC 9112 §6.1); `502` for HTTP/1.0 (§6.1: no Transfer-Encoding to it) and HTTP/2 clients (RFC 9113 §8.2.2) | `transfer_codings_other_than_chunked_are_refused_or_passed_faithfully` |
//! | `chunked` twice, or not last with other codings | `502` (§6.1: chunked at most once, last) | `forward::transfer_codings_other_than_chunked` |
//! | `Content-Length`, one number (perhaps written several times: `3, 3`) | that length; passed on written once (RFC 9110 §8.6) | `host_and_length_are_made_valid_http_1_1` |
//! | `Content-Length` not a number, or several different ones | `502`, connection closed (§6.3 ¶5) | `h1::partial_heads_wait_and_bad_ones_are_errors` |
//! | neither | read to the close (§6.3 ¶8), never reused | `u::chunked_close_delimited_and_closing_responses` |
//! | HTTP/1.0 with `Transfer-Encoding` | framing faulty: closed after it, whatever `Connection` says (§6.1) | `an_http_1_0_response_with_transfer_encoding_closes_its_connection` |
//! | a head larger than 256 KiB, 100 fields, or not HTTP | `502`, connection closed | `h1::partial_heads_wait_and_bad_ones_are_errors` |
//! | a body cut short, or chunks malformed | the client gets the body as far as it went, then a cut (no last chunk, a short length; §8: incomplete); connection closed | `a_cut_or_malformed_response_body_reaches_the_client_as_far_as_it_went`, `h1::malformed_chunked_bodies_are_errors` |
//!
//! **Reuse** (RFC 9112 §9.3, §9.6)
//!
//! | the exchange | the connection | test |
//! |---|---|---|
//! | HTTP/1.1 without `close` (HTTP/1.0 with `keep-alive`), body read to its end, request sent in full | pooled | `u::connections_are_reused_after_a_full_response` |
//! | `Connection: close`, HTTP/1.0 without `keep-alive` | closed after the body (§9.6) | `u::chunked_close_delimited_and_closing_responses` |
//! | a pooled connection the gear closed before one byte came back | a replayable request (idempotent, no body: RFC 9110 §9.2.2) goes again on a new connection, others get `502` | `a_get_on_a_pooled_connection_the_gear_closes_is_sent_again_a_post_is_not` |
//!
//! **Answers before the request body was sent** (RFC 9112 §9.6)
//!
//! While the body waits (on the client's bytes, or on the gear to take them), what
//! the gear sends is read: interim responses go on, and a complete final head ends
//! the wait at once.
//!
//! | the answer | the balancer | test |
//! |---|---|---|
//! | an error (`>= 400`), or `Connection: close`, or not HTTP | the answer is the response, at once; no more body is sent; the connection is closed; the client's connection too, after reading and dropping the rest of its upload (lingering close) | `a_backend_answering_before_the_upload_ends_is_heard`, `a_client_that_sends_its_whole_upload_first_still_gets_the_refusal`, `u::a_refusal_while_the_body_waits_on_the_client_stops_the_upload` |
//! | the gear closed or reset while the body was written | what it answered before is the response; else `502` | `u::an_answer_before_a_broken_upload_is_the_response` |
//! | a success (`2xx`, `3xx`) without `close` | full duplex: the answer goes to the client at once, the rest of the body goes on alongside, and after the response in a task of its own (counted, timed: `client` / `server`); pooled once both are done, closed if the gear stops taking it | `an_early_redirect_from_a_gear_that_stops_reading_reaches_the_client_at_once`, `an_early_answer_from_a_gear_that_reads_on_leaves_both_connections_usable`, `u::a_success_before_the_whole_body_goes_on_at_once_and_the_rest_is_bounded` |
//!
//! **Upgrades** (RFC 9110 §7.8, §15.2.2)
//!
//! | the response | the balancer | test |
//! |---|---|---|
//! | `101` to a request with `Connection: upgrade`, every protocol of its `Upgrade` one the client listed | tunnel; the bytes after the head go first | `open_websockets_are_sessions_until_they_close`, `u::an_upgrade_hands_over_the_socket_and_the_bytes_after_the_head` |
//! | `101` to a request that asked for no upgrade, or switching to another protocol, or without `Upgrade` | `502`, connection closed, no tunnel (HAProxy 2.6 refuses the first) | `a_switch_to_a_protocol_nobody_asked_for_is_a_502_and_opens_no_tunnel`, `forward::a_switch_must_be_to_a_protocol_the_client_asked_for` |
//!
//! **Interim responses** (RFC 9110 §15.2)
//!
//! | the response | the balancer | test |
//! |---|---|---|
//! | `103`, `102`, any `1xx` but `100`, `101` | to an HTTP/1.1 client at once, before the final response (hop-by-hop fields removed); not to HTTP/1.0 (§15.2: MUST NOT), nor HTTP/2 (hyper's server cannot send one); at most 32, then `502` | `interim_responses_reach_http_1_1_clients_ahead_of_the_final_one`, `u::interim_responses_are_handed_on_but_100_continue` |
//! | `100 Continue` | not passed on: the balancer answers `Expect: 100-continue` itself when it starts reading the body, and sends the gear none | `expect_100_continue`, `u::interim_responses_are_handed_on_but_100_continue` |
//!
//! **Trailers** (RFC 9110 §6.5, RFC 9112 §7.1.2)
//!
//! | the message | the balancer | test |
//! |---|---|---|
//! | a request's trailer fields (chunked HTTP/1.1, HTTP/2) | in the last chunk to the gear (none with a `Content-Length` body: nowhere to put them); `TE: trailers` passed on | `trailer_fields_are_forwarded_both_ways` |
//! | a response's trailer fields | to HTTP/2 clients; to HTTP/1.1 clients that sent `TE: trailers`, for the fields its `Trailer` names (hyper's rule); framing, routing, cookie and similar fields dropped (§6.5.1) | `trailer_fields_are_forwarded_both_ways` |
//!
//! **Timeouts** (HAProxy's `timeout client` / `timeout server`: inactivity; see
//! [`super::wait`])
//!
//! | the exchange waits on | limit, and what restarts it | on expiry | test |
//! |---|---|---|---|
//! | the gear taking the request body | `server`, from the last byte it took | `504` | `the_server_timeout_is_backend_inactivity_not_the_length_of_the_upload`, `u::the_server_timeout_counts_from_the_last_byte_sent` |
//! | the response head | `server`, from when the request was sent in full | `504` | `slow_backend_times_out_with_504`, `the_server_timeout_is_backend_inactivity_not_the_length_of_the_upload` |
//! | the gear, for more of the response body | `server`, from the last byte read | the body is cut | `u::a_backend_silent_mid_body_runs_out_the_server_timeout` |
//! | the client's request body | `client`, from its last byte | HTTP/1: the connection closes; HTTP/2: `408` | `idle_clients_are_cut_at_the_client_timeout`, `h2c::a_stream_whose_request_body_stalls_gets_408_after_the_client_timeout` |
//! | the client taking the response | `client`, from its last byte | HTTP/1: the connection closes; HTTP/2: the stream is reset with its gear connection | `h2c::streams_stalled_by_a_zero_window_are_reset_with_their_gear_connections` |
//! | connecting | `connect` | the next gear (the request was not sent) | `dead_backend_gives_502_not_a_hang` |

use std::fmt;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
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
use super::wait::{Phase, Wait};
use crate::gear::Addr;
use crate::stats::Traffic;

/// Body of a request sent to a backend.
#[derive(Debug)]
pub enum ReqBody {
    /// The client's body, streamed as it arrives.
    Incoming(Incoming),
    /// No body (requests rebuilt for a retry, health checks).
    Empty,
    /// A body fed by a unit test.
    #[cfg(test)]
    Test(http_body_util::channel::Channel<Bytes, hyper::Error>),
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ReqBody::Incoming(b) => Pin::new(b).poll_frame(cx),
            ReqBody::Empty => Poll::Ready(None),
            #[cfg(test)]
            ReqBody::Test(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReqBody::Incoming(b) => b.is_end_stream(),
            ReqBody::Empty => true,
            #[cfg(test)]
            ReqBody::Test(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ReqBody::Incoming(b) => b.size_hint(),
            ReqBody::Empty => SizeHint::with_exact(0),
            #[cfg(test)]
            ReqBody::Test(_) => SizeHint::default(),
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
    /// A wait ran out ([`Wait`]): on the backend (`504`), or on the client's body.
    #[error("no progress within the {0:?} timeout")]
    Timeout(Phase),
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

/// Most interim (`1xx`) responses read before a final one: each is forwarded, and a
/// backend sending them for ever would otherwise hold the exchange within its timeout.
const MAX_INTERIM: usize = 32;

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
    io: ConnIo,
    buf: BytesMut,
    read_size: usize,
    /// A byte arrived since the last request was sent (see [`Conn::answered_nothing`]).
    heard: bool,
    cell: Arc<ConnCell>,
    _open: OpenGuard,
}

/// A backend connection's socket: TCP, or in unit tests a scripted one
/// (`tokio_test::io::Mock`) for the exchanges real sockets make awkward to stage.
enum ConnIo {
    Tcp(Counted<TcpStream>),
    #[cfg(test)]
    Mock(Box<tokio_test::io::Mock>),
}

impl ConnIo {
    fn tcp(&self) -> Option<&TcpStream> {
        match self {
            ConnIo::Tcp(io) => Some(io.get_ref()),
            #[cfg(test)]
            ConnIo::Mock(_) => None,
        }
    }
}

impl tokio::io::AsyncRead for ConnIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnIo::Tcp(io) => Pin::new(io).poll_read(cx, buf),
            #[cfg(test)]
            ConnIo::Mock(io) => Pin::new(io).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ConnIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ConnIo::Tcp(io) => Pin::new(io).poll_write(cx, buf),
            #[cfg(test)]
            ConnIo::Mock(io) => Pin::new(io).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnIo::Tcp(io) => Pin::new(io).poll_flush(cx),
            #[cfg(test)]
            ConnIo::Mock(io) => Pin::new(io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnIo::Tcp(io) => Pin::new(io).poll_shutdown(cx),
            #[cfg(test)]
            ConnIo::Mock(io) => Pin::new(io).poll_shutdown(cx),
        }
    }
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
        let Some(tcp) = self.io.tcp() else {
            return false;
        };
        matches!(tcp.try_read(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Asks the kernel, whatever the runtime recorded: is the socket still open, with
    /// nothing to read? A close that reached the socket after the runtime last polled
    /// its events (a busy worker polls them every few dozen tasks) is seen here, and
    /// [`Self::idle_ok`] would miss it. One `recv(MSG_PEEK | MSG_DONTWAIT)`.
    fn open_now(&self) -> bool {
        use rustix::net::{recv, RecvFlags};
        let mut b = [0u8; 1];
        let Some(tcp) = self.io.tcp() else {
            return false;
        };
        matches!(
            recv(tcp, &mut b[..], RecvFlags::PEEK | RecvFlags::DONTWAIT),
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
    pub fn into_upgraded(self) -> Option<(Counted<TcpStream>, Bytes)> {
        match self.io {
            ConnIo::Tcp(io) => Some((io, self.buf.freeze())),
            #[cfg(test)]
            ConnIo::Mock(_) => None,
        }
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

/// A backend's final response head, and the rest of the request body when the backend
/// answered before it had all of it (rows 5 and 6 of the table in the module docs): it
/// goes on alongside the response body ([`UpBody`]).
#[derive(Debug)]
pub struct Answer {
    pub head: Head,
    pub upload: Option<Box<Upload>>,
}

/// Where interim responses go (`1xx` other than `100` and `101`), if anywhere.
pub type Interim<'a> = Option<&'a (dyn Fn(&Head) + Sync)>;

/// Send `req` on `conn` and read the response head. Interim responses are handed to
/// `interim` (`100 Continue` excepted: the balancer answers `Expect` itself); `wait`
/// says what the exchange waits on, for its timekeeper (see [`Wait`]). The body, if
/// any, is then read with [`UpBody`].
pub async fn send(
    conn: &mut Conn,
    req: Outgoing,
    wait: &Wait,
    interim: Interim<'_>,
) -> Result<Answer, SendFailure> {
    wait.reset();
    conn.heard = false;
    // Behind the other reads of this turn (`phase`).
    super::phase::rest_of_turn().await;
    // Waiting on the backend from now: to take the request, and, for a request without
    // a body (sent at once), to answer it.
    wait.enter(Phase::Server);
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
        body,
        ..
    } = req;
    let mut interims = 0;
    let mut upload = None;
    let mut keep = true;
    if framing != ReqFraming::Empty {
        let mut up = Upload::new(body, framing);
        match drive(conn, &mut up, wait, &method, interim, &mut interims).await {
            // The request is sent: the wait for its answer starts now.
            Driven::Sent => wait.enter(Phase::Server),
            // A final answer while the body still flows. A refusal (an error, or a
            // closing answer: RFC 9112 §9.6) wants no more of it, and the connection
            // cannot carry another request; a success goes to the client at once and
            // the body goes on alongside (full duplex, as HAProxy forwards).
            Driven::Answered { refused: false } => upload = Some(Box::new(up)),
            Driven::Answered { refused: true } => keep = false,
            Driven::Failed(e @ (SendError::ClientBody(_) | SendError::BodyLength)) => {
                return Err(SendFailure::Sent(e))
            }
            // The backend stopped the upload (closed, reset): what it said before is the
            // response (what a client talking to it directly would see), not a 502.
            Driven::Failed(_) if conn.read_early_answer().await => keep = false,
            Driven::Failed(e) => return Err(SendFailure::Sent(e)),
        }
    }

    loop {
        if !conn.buf.is_empty() {
            match h1::parse_response(&mut conn.buf, &method) {
                Ok(Some(h)) if is_interim(&h) => {
                    interims += 1;
                    if interims > MAX_INTERIM {
                        return Err(SendFailure::Sent(SendError::Parse(h1::ParseError::Head(
                            "too many interim responses",
                        ))));
                    }
                    forward_interim(interim, &h);
                    continue;
                }
                Ok(Some(mut head)) => {
                    head.keep_alive &= keep;
                    return Ok(Answer { head, upload });
                }
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

/// An interim response to pass on: `1xx`, but not `101` (final for the exchange) nor
/// `100` (the balancer sends its own when it starts reading the client's body).
fn is_interim(h: &Head) -> bool {
    h.parts.status.is_informational() && h.parts.status != http::StatusCode::SWITCHING_PROTOCOLS
}

fn forward_interim(interim: Interim<'_>, h: &Head) {
    if let Some(f) = interim {
        if h.parts.status != http::StatusCode::CONTINUE {
            f(h);
        }
    }
}

/// Take the complete interim responses at the start of `buf` out of it, passing them on.
fn take_interims(
    buf: &mut BytesMut,
    method: &http::Method,
    interim: Interim<'_>,
    count: &mut usize,
) -> Result<(), h1::ParseError> {
    while early_is_interim(buf) {
        match h1::parse_response(buf, method)? {
            Some(h) => {
                *count += 1;
                if *count > MAX_INTERIM {
                    return Err(h1::ParseError::Head("too many interim responses"));
                }
                forward_interim(interim, &h);
            }
            None => break,
        }
    }
    Ok(())
}

/// `buf` starts with a complete interim head.
fn early_is_interim(buf: &[u8]) -> bool {
    let mut slots = [httparse::EMPTY_HEADER; h1::MAX_HEADERS];
    let mut r = httparse::Response::new(&mut slots);
    matches!(r.parse(buf), Ok(httparse::Status::Complete(_)))
        && r.code.is_some_and(|c| (100..200).contains(&c) && c != 101)
}

/// How sending a request body ended.
enum Driven {
    /// All of it went.
    Sent,
    /// A final response head arrived first (it is in the connection's buffer).
    Answered {
        refused: bool,
    },
    Failed(SendError),
}

/// Send `up`'s body, listening to the backend meanwhile: whenever the body waits (for
/// the client's next bytes, or for the backend to take more), whatever the backend sent
/// is read, interim responses passed on, and a complete final response head ends the
/// wait at once.
async fn drive(
    conn: &mut Conn,
    up: &mut Upload,
    wait: &Wait,
    method: &http::Method,
    interim: Interim<'_>,
    interims: &mut usize,
) -> Driven {
    poll_fn(|cx| loop {
        match up.poll_send(conn, cx) {
            Poll::Ready(Ok(())) => return Poll::Ready(Driven::Sent),
            Poll::Ready(Err(e)) => return Poll::Ready(Driven::Failed(e)),
            Poll::Pending => up.note_wait(wait),
        }
        let read = conn.poll_fill(cx);
        if let Poll::Ready(Err(e)) = read {
            return Poll::Ready(Driven::Failed(e.into()));
        }
        if take_interims(&mut conn.buf, method, interim, interims).is_err() {
            // The response parser says what is wrong with it.
            return Poll::Ready(Driven::Answered { refused: true });
        }
        match early(&conn.buf) {
            Early::Nothing => {}
            e => {
                return Poll::Ready(Driven::Answered {
                    refused: e.refuses(),
                })
            }
        }
        match read {
            Poll::Ready(Ok(0)) => return Poll::Ready(Driven::Failed(SendError::Closed)),
            // Part of an answer: read on until it would block. (Not progress: a head
            // trickled in byte by byte must not hold the exchange for ever.)
            Poll::Ready(Ok(_)) => {}
            _ => return Poll::Pending,
        }
    })
    .await
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

/// A request body on its way to a backend, written as it arrives from the client with
/// the framing of its head (trailer fields of a chunked body included).
#[derive(Debug)]
pub struct Upload {
    body: ReqBody,
    framing: ReqFraming,
    /// Body bytes taken from the client so far.
    taken: u64,
    /// What goes on the wire next, in order (a chunk's size line, its data, its CRLF),
    /// from `out[next]` at byte `at`.
    out: [Bytes; 3],
    next: usize,
    at: usize,
    /// The client's body ended: what is in `out` is the last of it.
    ended: bool,
    trailers: Option<http::HeaderMap>,
    /// What the last [`Upload::poll_send`] waited on, and whether it moved bytes.
    waits_on: Phase,
    moved: bool,
}

impl Upload {
    fn new(body: ReqBody, framing: ReqFraming) -> Self {
        Upload {
            body,
            framing,
            taken: 0,
            out: Default::default(),
            next: 3,
            at: 0,
            ended: false,
            trailers: None,
            waits_on: Phase::Idle,
            moved: false,
        }
    }

    fn queue(&mut self, out: [Bytes; 3]) {
        self.out = out;
        self.next = 0;
        self.at = 0;
    }

    /// Send what can go without waiting: `Ready(Ok)` once the whole body went,
    /// `Pending` while waiting on the client or the backend (both wakers registered).
    fn poll_send(&mut self, conn: &mut Conn, cx: &mut Context<'_>) -> Poll<Result<(), SendError>> {
        self.moved = false;
        loop {
            while self.next < self.out.len() {
                let Upload { out, next, at, .. } = self;
                let part = &out[*next];
                if *at >= part.len() {
                    *next += 1;
                    *at = 0;
                    continue;
                }
                let before = *at;
                match conn.poll_write_all(cx, part, at) {
                    Poll::Pending => {
                        self.moved |= self.at > before;
                        self.waits_on = Phase::Server;
                        return Poll::Pending;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                    Poll::Ready(Ok(())) => {
                        self.moved = true;
                        self.next += 1;
                        self.at = 0;
                    }
                }
            }
            if self.ended {
                return Poll::Ready(Ok(()));
            }
            // A body with a length is whole once that much came: its end is not waited
            // for (hyper says it only with the next request head when the response was
            // complete first).
            if matches!(self.framing, ReqFraming::Length(n) if self.taken == n) {
                self.ended = true;
                continue;
            }
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Pending => {
                    self.waits_on = Phase::Client;
                    return Poll::Pending;
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(SendError::ClientBody(e))),
                Poll::Ready(None) => {
                    self.ended = true;
                    match self.last() {
                        Ok(last) => self.queue([last, Bytes::new(), Bytes::new()]),
                        Err(e) => return Poll::Ready(Err(e)),
                    }
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) if data.is_empty() => {}
                    Ok(data) => {
                        self.taken += data.len() as u64;
                        match self.framing {
                            ReqFraming::Length(n) if self.taken > n => {
                                return Poll::Ready(Err(SendError::BodyLength))
                            }
                            ReqFraming::Length(_) => self.queue([data, Bytes::new(), Bytes::new()]),
                            ReqFraming::Chunked => {
                                let line = Bytes::from(format!("{:x}\r\n", data.len()));
                                self.queue([line, data, Bytes::from_static(b"\r\n")]);
                            }
                            ReqFraming::Empty => {}
                        }
                    }
                    // Trailer fields (HTTP/2, or a chunked HTTP/1.1 body): they go in
                    // the last chunk (RFC 9112 §7.1.2); a body sent with a length has
                    // nowhere to carry them.
                    Err(frame) => {
                        if let Ok(t) = frame.into_trailers() {
                            self.trailers = Some(t);
                        }
                    }
                },
            }
        }
    }

    /// The end of the body on the wire.
    fn last(&mut self) -> Result<Bytes, SendError> {
        match self.framing {
            ReqFraming::Length(n) if self.taken != n => Err(SendError::BodyLength),
            ReqFraming::Chunked => Ok(match self.trailers.take() {
                Some(t) => h1::last_chunk(&t),
                None => Bytes::from_static(h1::LAST_CHUNK),
            }),
            _ => Ok(Bytes::new()),
        }
    }

    /// Tell `wait` what the last [`Upload::poll_send`] waits on.
    fn note_wait(&self, wait: &Wait) {
        if self.moved {
            wait.enter(self.waits_on);
        } else {
            wait.enter_if_new(self.waits_on);
        }
    }

    /// The body's end was written.
    pub fn is_sent(&self) -> bool {
        self.ended && self.next >= self.out.len()
    }
}

/// The rest of an upload whose response is complete (a backend that answered early and
/// reads on), sent under `wait`'s timeouts (`timeouts.client` for the client's bytes,
/// `timeouts.server` for the backend taking them). The connection when it may carry
/// another request.
pub async fn finish_upload(
    mut conn: Conn,
    mut up: Box<Upload>,
    wait: &Wait,
    keep_alive: bool,
) -> Option<Conn> {
    wait.reset();
    let sending = poll_fn(|cx| {
        let r = up.poll_send(&mut conn, cx);
        if r.is_pending() {
            up.note_wait(wait);
        }
        r
    });
    match super::wait::watched(wait, sending).await {
        Ok(Ok(())) if keep_alive => Some(conn),
        _ => None,
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

/// A backend's response body, read from its connection as the client takes it, and
/// the rest of the request body when the backend answered early (sent alongside). Once
/// both are done, [`UpBody::take_reusable`] gives the connection back for the pool.
#[derive(Debug)]
pub struct UpBody {
    conn: Option<Conn>,
    left: Left,
    keep_alive: bool,
    upload: Option<Box<Upload>>,
    /// The backend stopped taking the upload: its connection is not used again.
    upload_broken: bool,
    /// Where the exchange waits, for the timeouts: on the backend while a read waits,
    /// on the client once data was handed on and not asked for again.
    wait: Option<Arc<Wait>>,
    /// Trailer fields of a chunked body, handed on after its data (boxed: rare, and
    /// every response body carries this).
    trailers: Option<Box<http::HeaderMap>>,
    /// The body failed (cut, malformed, timed out): reported at the next poll, once
    /// what was handed on before went out (see [`UpBody::poll_frame`]).
    failed: Option<Box<SendError>>,
    /// Whether that delay was taken already.
    delayed: bool,
}

impl UpBody {
    pub fn new(
        conn: Conn,
        head: &Head,
        upload: Option<Box<Upload>>,
        wait: Option<Arc<Wait>>,
    ) -> Self {
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
            upload,
            upload_broken: false,
            wait,
            trailers: None,
            failed: None,
            delayed: false,
        }
    }

    /// The whole body was read and handed on.
    pub fn is_done(&self) -> bool {
        matches!(self.left, Left::Done) && self.trailers.is_none()
    }

    /// The connection, when the body was read to its end, the request was sent in full,
    /// and the connection may carry another request.
    pub fn take_reusable(&mut self) -> Option<Conn> {
        if self.is_done() && self.keep_alive && self.upload.is_none() && !self.upload_broken {
            self.conn.take().filter(|c| c.buf.is_empty())
        } else {
            None
        }
    }

    /// The connection and the rest of the upload, once the response is complete while
    /// the backend still takes the request body (see [`finish_upload`]); and whether
    /// the connection may carry another request after it.
    pub fn take_unfinished_upload(&mut self) -> Option<(Conn, Box<Upload>, bool)> {
        if !self.is_done() || self.upload_broken {
            return None;
        }
        let up = self.upload.take()?;
        let conn = self.conn.take()?;
        Some((conn, up, self.keep_alive))
    }

    /// The connection whatever its state (a `101` response hands it to a tunnel).
    pub fn take_conn(&mut self) -> Option<Conn> {
        self.left = Left::Done;
        self.keep_alive = false;
        self.upload = None;
        self.conn.take()
    }

    /// What is awaited now is the client taking what it was given.
    pub fn wait_on_client(&self) {
        if let Some(w) = &self.wait {
            w.enter(Phase::Client);
        }
    }

    /// Data was handed on: until asked for more, the client is what is awaited.
    fn handed(&self) {
        if let Some(w) = &self.wait {
            if matches!(self.left, Left::Done) {
                w.idle();
            } else {
                w.enter(Phase::Client);
            }
        }
    }

    /// The next frame of the body. A failure (the backend cut the body short, framed it
    /// badly, or went silent) is reported one poll late: hyper drops a response whose
    /// body fails with what it has not written yet (its head, the last data), so the
    /// client would get nothing at all; the delay lets it write them first, and the
    /// client gets the body as far as it went, then a cut (RFC 9112 §8: an incomplete
    /// message, which a client can tell).
    pub fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, SendError>>> {
        if let Some(e) = self.failed.take() {
            return Poll::Ready(Some(Err(*e)));
        }
        match self.poll_next(cx) {
            Poll::Ready(Some(Err(e))) if !self.delayed => {
                self.delayed = true;
                self.failed = Some(Box::new(e));
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            r => r,
        }
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, SendError>>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(None);
        };
        if let Some(p) = self.wait.as_ref().and_then(|w| w.expired()) {
            return Poll::Ready(Some(Err(SendError::Timeout(p))));
        }
        // The rest of the request body goes on alongside.
        let mut upload_waits_on_client = false;
        let mut upload_moved = false;
        if let Some(up) = self.upload.as_mut() {
            match up.poll_send(conn, cx) {
                Poll::Ready(Ok(())) => self.upload = None,
                Poll::Ready(Err(e @ (SendError::ClientBody(_) | SendError::BodyLength))) => {
                    return Poll::Ready(Some(Err(e)))
                }
                // The backend stopped taking it: its answer still goes on.
                Poll::Ready(Err(_)) => {
                    self.upload = None;
                    self.upload_broken = true;
                }
                Poll::Pending => {
                    upload_waits_on_client = up.waits_on == Phase::Client;
                    upload_moved = up.moved;
                }
            }
        }
        loop {
            match &mut self.left {
                Left::Done => {
                    if let Some(t) = self.trailers.take() {
                        return Poll::Ready(Some(Ok(Frame::trailers(*t))));
                    }
                    return Poll::Ready(None);
                }
                Left::Length(left) => {
                    if !conn.buf.is_empty() {
                        let n = (conn.buf.len() as u64).min(*left) as usize;
                        *left -= n as u64;
                        let data = conn.buf.split_to(n).freeze();
                        if *left == 0 {
                            self.left = Left::Done;
                        }
                        self.handed();
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
                Left::Chunked(c) => match c.decode(&mut conn.buf) {
                    Ok(h1::Step::Data(d)) => {
                        self.handed();
                        return Poll::Ready(Some(Ok(Frame::data(d))));
                    }
                    Ok(h1::Step::End) => {
                        self.trailers = c.take_trailers().map(Box::new);
                        self.left = Left::Done;
                        continue;
                    }
                    Ok(h1::Step::More) => {}
                    Err(e) => return Poll::Ready(Some(Err(e.into()))),
                },
                Left::Close => {
                    if !conn.buf.is_empty() {
                        let data = conn.buf.split().freeze();
                        self.handed();
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
            }
            match conn.poll_fill(cx) {
                Poll::Pending => {
                    if let Some(w) = &self.wait {
                        // A backend waiting for the rest of the upload is not idle; one
                        // taking it is not silent.
                        let on = if upload_waits_on_client {
                            Phase::Client
                        } else {
                            Phase::Server
                        };
                        if upload_moved {
                            w.enter(on);
                        } else {
                            w.enter_if_new(on);
                        }
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Ok(0)) if matches!(self.left, Left::Close) => {
                    self.left = Left::Done;
                    self.handed();
                    return Poll::Ready(None);
                }
                Poll::Ready(Ok(0)) => return Poll::Ready(Some(Err(SendError::Closed))),
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
            }
        }
    }

    pub fn size_hint(&self) -> SizeHint {
        match &self.left {
            Left::Done if self.trailers.is_none() => SizeHint::with_exact(0),
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

/// A backend's host name, resolved: its addresses and when they were looked up.
#[derive(Debug)]
struct Resolved {
    addrs: Vec<std::net::SocketAddr>,
    at_ms: u64,
}

/// Longest a looked-up address list is used, until `proxy.dns_ttl` says otherwise.
const DEFAULT_DNS_TTL: Duration = Duration::from_secs(10);

/// Resolves one backend's host name, for its connections and its health checks alike:
/// once, then again in the background once the answer is older than `proxy.dns_ttl`
/// (HAProxy's resolvers `hold valid`), and at once when connecting to every address
/// failed (the gear may have moved). Each lookup is `getaddrinfo` on the blocking pool:
/// once per TTL per backend, not once per connection or health check.
#[derive(Debug)]
pub struct Resolver {
    cached: arc_swap::ArcSwapOption<Resolved>,
    /// A background refresh is under way.
    refreshing: AtomicBool,
    ttl_ms: AtomicU64,
    lookups: AtomicU64,
}

impl Default for Resolver {
    fn default() -> Self {
        Resolver {
            cached: arc_swap::ArcSwapOption::empty(),
            refreshing: AtomicBool::new(false),
            ttl_ms: AtomicU64::new(DEFAULT_DNS_TTL.as_millis() as u64),
            lookups: AtomicU64::new(0),
        }
    }
}

impl Resolver {
    /// How long an answer is used (`proxy.dns_ttl`; the proxy sets it as it connects).
    pub fn set_ttl(&self, ttl: Duration) {
        self.ttl_ms.store(ttl.as_millis() as u64, Ordering::Relaxed);
    }

    /// Lookups made so far.
    pub fn lookups(&self) -> u64 {
        self.lookups.load(Ordering::Relaxed)
    }

    /// The addresses of `host`: the cached answer (refreshed in the background when it
    /// is older than the TTL), or a lookup now when there is none.
    async fn addrs(self: &Arc<Self>, host: &str, port: u16) -> io::Result<Arc<Resolved>> {
        let Some(r) = self.cached.load_full() else {
            return self.lookup(host, port).await;
        };
        let old = coarse_ms().saturating_sub(r.at_ms) >= self.ttl_ms.load(Ordering::Relaxed);
        if old && !self.refreshing.swap(true, Ordering::AcqRel) {
            let me = self.clone();
            let host = host.to_string();
            tokio::spawn(async move {
                if let Err(e) = me.lookup(&host, port).await {
                    tracing::debug!(%host, error = %e, "backend name lookup failed; the last answer is kept");
                }
                me.refreshing.store(false, Ordering::Release);
            });
        }
        Ok(r)
    }

    async fn lookup(&self, host: &str, port: u16) -> io::Result<Arc<Resolved>> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let addrs: Vec<std::net::SocketAddr> =
            tokio::net::lookup_host((host, port)).await?.collect();
        if addrs.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{host}: no address"),
            ));
        }
        let r = Arc::new(Resolved {
            addrs,
            at_ms: coarse_ms(),
        });
        self.cached.store(Some(r.clone()));
        Ok(r)
    }

    /// A TCP connection to `addr`: an IP address as is; a name through the cache, each
    /// of its addresses in turn, and, when none answers, looked up again at once and
    /// tried again if the answer changed.
    pub async fn dial(self: &Arc<Self>, addr: &Addr) -> io::Result<TcpStream> {
        if let Some(sa) = addr.socket_addr() {
            return TcpStream::connect(sa).await;
        }
        let (host, port) = (addr.host(), addr.port());
        let known = self.addrs(&host, port).await?;
        let first = connect_any(&known.addrs).await;
        if first.is_ok() {
            return first;
        }
        match self.lookup(&host, port).await {
            Ok(fresh) if fresh.addrs != known.addrs => connect_any(&fresh.addrs).await,
            _ => first,
        }
    }
}

/// Connect to the first of `addrs` that accepts (the last error otherwise).
async fn connect_any(addrs: &[std::net::SocketAddr]) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for a in addrs {
        match TcpStream::connect(a).await {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A wait with the default limits, for exchanges nobody keeps time for.
    fn w() -> Wait {
        Wait::new(
            super::super::io::Clock::new(),
            Duration::from_secs(60),
            Duration::from_secs(60),
        )
    }

    /// The data of a response body frame (trailers are not data).
    async fn next_data(body: &mut UpBody) -> Option<Result<Bytes, SendError>> {
        loop {
            match poll_fn(|cx| body.poll_frame(cx)).await? {
                Ok(f) => match f.into_data() {
                    Ok(d) => return Some(Ok(d)),
                    Err(_) => continue,
                },
                Err(e) => return Some(Err(e)),
            }
        }
    }
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
        let head = send(&mut conn, outgoing(req), &w(), None)
            .await
            .unwrap()
            .head;
        let mut body = UpBody::new(conn, &head, None, None);
        let mut got = BytesMut::new();
        while let Some(d) = next_data(&mut body).await {
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
            send(&mut busy, outgoing(req), &w(), None).await.map(|_| ())
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
        let head = send(&mut s, outgoing(req), &w(), None).await.unwrap().head;
        let mut body = UpBody::new(s, &head, None, None);
        let first = next_data(&mut body).await.unwrap().unwrap();
        assert_eq!(&first[..], b"abc");
        let cut = next_data(&mut body).await.unwrap();
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
        let head = send(&mut s, outgoing(req), &w(), None).await.unwrap().head;
        assert_eq!(head.parts.status, 101);
        // The greeting may come in the same read as the head, or later.
        let (_, early) = s.into_upgraded().unwrap();
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

    /// Issue 25, point 7: a backend named by host name is looked up once per TTL (then
    /// in the background, the last answer used meanwhile), and at once when no address
    /// answers; not once per connection (nor per health check: they dial through the
    /// same resolver).
    #[tokio::test]
    async fn host_names_are_looked_up_once_per_ttl_and_again_when_connecting_fails() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let accepting = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = l.accept().await {
                held.push(s);
            }
        });
        let pool = Pool::new(4);
        let r = pool.resolver().clone();
        r.set_ttl(Duration::from_secs(60));
        let addr: Addr = format!("localhost:{port}").parse().unwrap();
        for _ in 0..20 {
            pool.connect(&addr, Duration::from_secs(5)).await.unwrap();
        }
        assert_eq!(r.lookups(), 1, "one lookup for 20 connections");

        // An answer older than the TTL is refreshed in the background.
        r.set_ttl(Duration::from_millis(1));
        tokio::time::sleep(Duration::from_millis(20)).await;
        pool.connect(&addr, Duration::from_secs(5)).await.unwrap();
        r.set_ttl(Duration::from_secs(60));
        for _ in 0..200 {
            if r.lookups() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(r.lookups(), 2);

        // Nothing listens any more: each failed connect looks the name up again.
        accepting.abort();
        let _ = accepting.await;
        assert!(pool.connect(&addr, Duration::from_secs(5)).await.is_err());
        assert_eq!(r.lookups(), 3);

        // An IP address is never looked up.
        let ip: Addr = format!("127.0.0.1:{port}").parse().unwrap();
        assert!(pool.connect(&ip, Duration::from_secs(5)).await.is_err());
        assert_eq!(r.lookups(), 3);
    }

    // --- The exchange on scripted I/O (the decision table's rows that real sockets
    // --- make awkward to stage: what arrives when, and what is never read).

    fn mock_conn(io: tokio_test::io::Mock) -> Conn {
        Conn {
            io: ConnIo::Mock(Box::new(io)),
            buf: BytesMut::new(),
            read_size: READ_MIN,
            heard: false,
            cell: Arc::default(),
            _open: OpenGuard(Arc::new(AtomicU64::new(1))),
        }
    }

    const POST6: &[u8] = b"POST /f HTTP/1.1\r\nhost: x\r\ncontent-length: 6\r\n\r\n";

    /// A POST of 6 body bytes, fed through the returned sender.
    fn post6() -> (
        http_body_util::channel::Sender<Bytes, hyper::Error>,
        Outgoing,
    ) {
        let (tx, body) = http_body_util::channel::Channel::new(4);
        let out = Outgoing {
            head: Bytes::from_static(POST6),
            method: http::Method::POST,
            framing: ReqFraming::Length(6),
            body: ReqBody::Test(body),
        };
        (tx, out)
    }

    fn limits(client_s: u64, server_s: u64) -> Wait {
        Wait::new(
            super::super::io::Clock::new(),
            Duration::from_secs(client_s),
            Duration::from_secs(server_s),
        )
    }

    /// Row "interim responses": 1xx other than 100 and 101 are handed on in order,
    /// `100 Continue` is the balancer's own; more than `MAX_INTERIM` is a bad answer.
    #[tokio::test]
    async fn interim_responses_are_handed_on_but_100_continue() {
        let io = tokio_test::io::Builder::new()
            .write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .read(
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n",
            )
            .read(b"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .build();
        let mut conn = mock_conn(io);
        let seen = std::sync::Mutex::new(Vec::new());
        let sink = |h: &Head| seen.lock().unwrap().push(h.parts.status.as_u16());
        let req = hyper::Request::get("/")
            .header("host", "x")
            .body(ReqBody::Empty)
            .unwrap();
        let a = send(&mut conn, outgoing(req), &limits(60, 60), Some(&sink))
            .await
            .unwrap();
        assert_eq!(a.head.parts.status, 200);
        assert_eq!(*seen.lock().unwrap(), [103, 102]);

        let flood: Vec<u8> = b"HTTP/1.1 103 Early Hints\r\n\r\n".repeat(MAX_INTERIM + 1);
        let io = tokio_test::io::Builder::new()
            .write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .read(&flood)
            .build();
        let mut conn = mock_conn(io);
        let req = hyper::Request::get("/")
            .header("host", "x")
            .body(ReqBody::Empty)
            .unwrap();
        let r = send(&mut conn, outgoing(req), &limits(60, 60), Some(&sink)).await;
        assert!(
            matches!(r, Err(SendFailure::Sent(SendError::Parse(_)))),
            "{r:?}"
        );
    }

    /// Row "refusal before the whole body": an error answer while the body waits on the
    /// client ends the upload at once (no byte more is written: the mock would fail),
    /// and the connection is not used again (RFC 9112 §9.6).
    #[tokio::test]
    async fn a_refusal_while_the_body_waits_on_the_client_stops_the_upload() {
        let io = tokio_test::io::Builder::new()
            .write(POST6)
            .read(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n")
            .build();
        let mut conn = mock_conn(io);
        let (_client, req) = post6();
        let a = send(&mut conn, req, &limits(60, 60), None).await.unwrap();
        assert_eq!(a.head.parts.status, 413);
        assert!(!a.head.keep_alive);
        assert!(a.upload.is_none());
    }

    /// Row "refusal that closes": the backend stops the upload with a reset; what it
    /// answered before is the response, and the connection is done.
    #[tokio::test]
    async fn an_answer_before_a_broken_upload_is_the_response() {
        let io = tokio_test::io::Builder::new()
            .write(POST6)
            .write_error(io::Error::new(io::ErrorKind::BrokenPipe, "reset"))
            .read(b"HTTP/1.1 401 Unauthorized\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
            .build();
        let mut conn = mock_conn(io);
        let (mut client, req) = post6();
        client
            .send_data(Bytes::from_static(b"abcdef"))
            .await
            .unwrap();
        let a = send(&mut conn, req, &limits(60, 60), None).await.unwrap();
        assert_eq!(a.head.parts.status, 401);
        assert!(!a.head.keep_alive && a.upload.is_none());
    }

    /// Rows "success before the whole body" and "the rest of the upload": a 302 while
    /// the body is half sent is the answer at once, with the rest of the body to send
    /// alongside; a backend that then takes none of it is cut after `timeouts.server`
    /// of silence, and its connection is not pooled.
    #[tokio::test(start_paused = true)]
    async fn a_success_before_the_whole_body_goes_on_at_once_and_the_rest_is_bounded() {
        let io = tokio_test::io::Builder::new()
            .write(POST6)
            .write(b"abc")
            .read(b"HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n")
            // Reads no more: a write now waits (an hour).
            .wait(Duration::from_secs(3600))
            .build();
        let mut conn = mock_conn(io);
        let (mut client, req) = post6();
        client.send_data(Bytes::from_static(b"abc")).await.unwrap();
        let wait = Arc::new(limits(60, 2));
        let a = send(&mut conn, req, &wait, None).await.unwrap();
        assert_eq!(a.head.parts.status, 302);
        assert!(a.head.keep_alive, "the head allows reuse ...");
        let mut body = UpBody::new(conn, &a.head, a.upload, Some(wait.clone()));
        assert!(next_data(&mut body).await.is_none());
        assert!(
            body.take_reusable().is_none(),
            "... not with the body unsent"
        );
        let (conn, up, keep) = body.take_unfinished_upload().expect("the rest to send");
        client.send_data(Bytes::from_static(b"def")).await.unwrap();
        let t = tokio::time::Instant::now();
        let rest = limits(60, 2);
        assert!(finish_upload(conn, up, &rest, keep).await.is_none());
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(1_900) && took <= Duration::from_millis(2_200),
            "{took:?}"
        );
    }

    /// Rows "server timeout": it is inactivity while the body goes, and the wait for
    /// the response head starts when the request was sent. A client taking 5 s over its
    /// body (the backend taking each piece) with `server` = 2 s: the backend's silence
    /// after the last byte runs out at 7 s, not at 2.
    #[tokio::test(start_paused = true)]
    async fn the_server_timeout_counts_from_the_last_byte_sent() {
        let io = tokio_test::io::Builder::new()
            .write(POST6)
            .write(b"abc")
            .write(b"def")
            .wait(Duration::from_secs(3600))
            .build();
        let mut conn = mock_conn(io);
        let (mut client, req) = post6();
        let feeding = tokio::spawn(async move {
            client.send_data(Bytes::from_static(b"abc")).await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
            client.send_data(Bytes::from_static(b"def")).await.unwrap();
            client
        });
        let wait = limits(60, 2);
        let t = tokio::time::Instant::now();
        let r = crate::proxy::wait::watched(&wait, send(&mut conn, req, &wait, None)).await;
        assert!(matches!(r, Err(Phase::Server)), "{r:?}");
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(6_900) && took <= Duration::from_millis(7_200),
            "{took:?}"
        );
        drop(feeding.await.unwrap());
    }

    /// A gear that takes none of the body and trickles a response head meanwhile, a byte
    /// at a time within `server`: the head's bytes are no progress, the body's wait on
    /// the gear runs out after `server` all the same.
    #[tokio::test(start_paused = true)]
    async fn a_trickled_head_does_not_keep_a_stalled_upload_alive() {
        let mut b = tokio_test::io::Builder::new();
        b.write(POST6).write(b"abc");
        for byte in b"HTTP/1.1 200" {
            b.read(&[*byte]).wait(Duration::from_millis(1_500));
        }
        let mut conn = mock_conn(b.wait(Duration::from_secs(3600)).build());
        let (mut client, req) = post6();
        client.send_data(Bytes::from_static(b"abc")).await.unwrap();
        client.send_data(Bytes::from_static(b"def")).await.unwrap();
        let wait = limits(60, 2);
        let t = tokio::time::Instant::now();
        let r = crate::proxy::wait::watched(&wait, send(&mut conn, req, &wait, None)).await;
        assert!(matches!(r, Err(Phase::Server)), "{r:?}");
        let took = t.elapsed();
        assert!(took <= Duration::from_millis(2_200), "{took:?}");
        // The gear's script is cut short, as the connection is: its mock would assert
        // on drop that every byte was read.
        std::mem::forget(conn);
    }

    /// Row "response body, backend silent": a backend that stops mid-body is the
    /// server timeout's (not the client's), after `server` of silence.
    #[tokio::test(start_paused = true)]
    async fn a_backend_silent_mid_body_runs_out_the_server_timeout() {
        let io = tokio_test::io::Builder::new()
            .write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .read(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello")
            .wait(Duration::from_secs(3600))
            .build();
        let mut conn = mock_conn(io);
        let wait = Arc::new(limits(60, 2));
        let req = hyper::Request::get("/")
            .header("host", "x")
            .body(ReqBody::Empty)
            .unwrap();
        let a = send(&mut conn, outgoing(req), &wait, None).await.unwrap();
        let mut body = UpBody::new(conn, &a.head, None, Some(wait.clone()));
        assert_eq!(&next_data(&mut body).await.unwrap().unwrap()[..], b"hello");
        let t = tokio::time::Instant::now();
        let r = crate::proxy::wait::watched(&wait, next_data(&mut body)).await;
        let took = t.elapsed();
        assert!(
            matches!(
                r,
                Err(Phase::Server) | Ok(Some(Err(SendError::Timeout(Phase::Server))))
            ),
            "{r:?}"
        );
        assert!(took <= Duration::from_millis(2_200), "{took:?}");
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
