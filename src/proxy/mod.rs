//! The data plane: accept client connections, forward each request to a backend, stream
//! the answer back.
//!
//! Owns the accept loop and its connection limit, per-connection timeouts, request
//! handling, and graceful stop. Per request: load the routing snapshot (lock-free),
//! select a backend, take a pooled connection or open one, send, and stream the response
//! body back without buffering it; the backend's in-flight count covers the whole
//! exchange, up to the last byte of the response.
//!
//! Timeouts: `request_header` (hyper's header read timeout, which also bounds how long
//! an idle keep-alive connection waits for its next request); `client` (no byte moved
//! on the connection while the balancer is not waiting on a backend); `connect` and
//! `server` (time to the backend's response head, answered with 504).

pub mod forward;
pub mod upstream;

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::config::Config;
use crate::routing::{Backend, Router};
use crate::stats::FrontendStats;
use forward::ClientInfo;
use upstream::{ReqBody, Sender};

/// Settings the proxy reads per connection or request; swapped on reload.
#[derive(Clone, Debug)]
pub struct Settings {
    pub timeouts: crate::config::Timeouts,
    pub trust_forwarded: bool,
    pub h2c: bool,
    pub max_header_size: usize,
}

impl Settings {
    pub fn from_config(c: &Config) -> Self {
        Settings {
            timeouts: c.timeouts.clone(),
            trust_forwarded: c.proxy.trust_forwarded,
            h2c: c.proxy.h2c,
            max_header_size: c.limits.max_header_size,
        }
    }
}

/// Everything a connection needs, shared by all of them.
pub struct ProxyCtx {
    pub router: Arc<Router>,
    pub stats: Arc<FrontendStats>,
    pub settings: ArcSwap<Settings>,
    /// Reference point of the coarse activity clock.
    epoch: Instant,
}

impl ProxyCtx {
    pub fn new(router: Arc<Router>, stats: Arc<FrontendStats>, settings: Settings) -> Self {
        ProxyCtx {
            router,
            stats,
            settings: ArcSwap::from_pointee(settings),
            epoch: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}

/// Accept client connections until `shutdown` is cancelled. Connections over
/// `max_connections` are closed at once (counted as refused). Each connection runs on
/// `tracker`, so the caller can wait for them to finish.
pub async fn serve(
    listener: TcpListener,
    ctx: Arc<ProxyCtx>,
    max_connections: usize,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    let permits = Arc::new(Semaphore::new(max_connections));
    let local_port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = listener.accept() => r,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: back off briefly instead of spinning.
                warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            ctx.stats
                .connections_refused
                .fetch_add(1, Ordering::Relaxed);
            drop(stream);
            continue;
        };
        let ctx = ctx.clone();
        let shutdown = shutdown.clone();
        tracker.spawn(async move {
            ctx.stats.connection_opened();
            serve_connection(&ctx, stream, peer, local_port, shutdown).await;
            ctx.stats.connection_closed();
            drop(permit);
        });
    }
}

/// Per-connection state shared between the connection task and its requests.
struct ConnState {
    client: ClientInfo,
    /// Coarse time (ms since `ProxyCtx::epoch`) of the last byte moved.
    last_io: AtomicU64,
    /// Requests on this connection waiting for a backend's response head: while any
    /// is, and no upload is unfinished, the backend's timeout applies, not the client's.
    waiting_upstream: AtomicU32,
    /// Request bodies still arriving from the client.
    uploads: Arc<AtomicU32>,
}

async fn serve_connection(
    ctx: &Arc<ProxyCtx>,
    stream: TcpStream,
    peer: SocketAddr,
    local_port: u16,
    shutdown: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let settings = ctx.settings.load_full();
    let conn_state = Arc::new(ConnState {
        client: ClientInfo {
            peer,
            local_port,
            scheme: "http",
        },
        last_io: AtomicU64::new(ctx.now_ms()),
        waiting_upstream: AtomicU32::new(0),
        uploads: Arc::new(AtomicU32::new(0)),
    });
    let io = TokioIo::new(ActivityIo {
        inner: stream,
        ctx: ctx.clone(),
        state: conn_state.clone(),
    });

    let svc_ctx = ctx.clone();
    let svc_state = conn_state.clone();
    let service = service_fn(move |req| {
        let ctx = svc_ctx.clone();
        let state = svc_state.clone();
        async move { Ok::<_, Infallible>(handle(&ctx, &state, req).await) }
    });

    let mut builder = auto::Builder::new(TokioExecutor::new());
    if !settings.h2c {
        builder = builder.http1_only();
    }
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(settings.timeouts.request_header)
        .max_buf_size(settings.max_header_size)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(settings.max_header_size as u32);

    let conn = builder.serve_connection_with_upgrades(io, service);
    tokio::pin!(conn);
    let client_timeout = settings.timeouts.client;
    let idle_check = tokio::time::sleep(client_timeout);
    tokio::pin!(idle_check);
    let mut stopping = false;
    loop {
        tokio::select! {
            res = conn.as_mut() => {
                if let Err(e) = res {
                    debug!(client = %peer, error = %e, "client connection ended with an error");
                }
                break;
            }
            _ = shutdown.cancelled(), if !stopping => {
                // Finish the request in flight, close when idle (idle ones close now).
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = &mut idle_check => {
                let last = conn_state.last_io.load(Ordering::Relaxed);
                let idle_ms = ctx.now_ms().saturating_sub(last);
                let waiting = conn_state.waiting_upstream.load(Ordering::Relaxed) > 0
                    && conn_state.uploads.load(Ordering::Relaxed) == 0;
                let limit_ms = client_timeout.as_millis() as u64;
                if !waiting && idle_ms >= limit_ms {
                    ctx.stats.client_timeouts.fetch_add(1, Ordering::Relaxed);
                    debug!(client = %peer, "client inactive for {client_timeout:?}, closing");
                    break;
                }
                let next = if waiting { limit_ms } else { limit_ms - idle_ms };
                idle_check.as_mut().reset(Instant::now() + Duration::from_millis(next.max(1)));
            }
        }
    }
}

/// The client socket, noting the time whenever bytes move.
struct ActivityIo {
    inner: TcpStream,
    ctx: Arc<ProxyCtx>,
    state: Arc<ConnState>,
}

impl ActivityIo {
    fn touch(&self) {
        self.state
            .last_io
            .store(self.ctx.now_ms(), Ordering::Relaxed);
    }
}

impl AsyncRead for ActivityIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.touch();
        }
        r
    }
}

impl AsyncWrite for ActivityIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.touch();
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Counts a request as in flight on the frontend until dropped.
struct FrontendRequest(Arc<ProxyCtx>);

impl FrontendRequest {
    fn start(ctx: &Arc<ProxyCtx>) -> Self {
        ctx.stats.requests_total.fetch_add(1, Ordering::Relaxed);
        ctx.stats.requests_current.fetch_add(1, Ordering::Relaxed);
        FrontendRequest(ctx.clone())
    }
}

impl Drop for FrontendRequest {
    fn drop(&mut self) {
        self.0
            .stats
            .requests_current
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts a request as outstanding on a backend until dropped.
pub struct InFlight(Arc<Backend>);

impl InFlight {
    pub fn start(backend: Arc<Backend>) -> Self {
        backend.stats.request_started();
        InFlight(backend)
    }

    pub fn backend(&self) -> &Arc<Backend> {
        &self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.stats.request_finished();
    }
}

/// Marks the connection as waiting on a backend until dropped.
struct WaitingUpstream<'a>(&'a ConnState);

impl<'a> WaitingUpstream<'a> {
    fn new(s: &'a ConnState) -> Self {
        s.waiting_upstream.fetch_add(1, Ordering::Relaxed);
        WaitingUpstream(s)
    }
}

impl Drop for WaitingUpstream<'_> {
    fn drop(&mut self) {
        self.0.waiting_upstream.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why a request could not be forwarded; mapped to a status in one place.
#[derive(Debug, thiserror::Error)]
enum ForwardError {
    #[error("no backend available")]
    NoBackend,
    #[error(transparent)]
    Connect(upstream::ConnectError),
    /// Sent (at least partly) and failed before a response head.
    #[error("backend failed before answering: {0}")]
    Upstream(hyper::Error),
    #[error("no response head within {0:?}")]
    Timeout(Duration),
}

impl ForwardError {
    fn status(&self) -> StatusCode {
        match self {
            ForwardError::NoBackend => StatusCode::SERVICE_UNAVAILABLE,
            ForwardError::Connect(_) | ForwardError::Upstream(_) => StatusCode::BAD_GATEWAY,
            ForwardError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    fn body(&self) -> &'static str {
        match self {
            ForwardError::NoBackend => {
                "503 Service Unavailable: no web gear is available to serve this request.\n"
            }
            ForwardError::Connect(_) | ForwardError::Upstream(_) => {
                "502 Bad Gateway: the web gear did not answer properly.\n"
            }
            ForwardError::Timeout(_) => {
                "504 Gateway Timeout: the web gear did not answer in time.\n"
            }
        }
    }
}

async fn handle(
    ctx: &Arc<ProxyCtx>,
    conn: &ConnState,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let started = Instant::now();
    let frontend = FrontendRequest::start(ctx);
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let result = forward(ctx, conn, req).await;
    let (resp, backend_name) = match result {
        Ok((resp, name)) => (resp, name),
        Err((e, name)) => {
            if let ForwardError::NoBackend = e {
                ctx.stats.no_backend.fetch_add(1, Ordering::Relaxed);
            } else {
                debug!(backend = %name, error = %e, "forwarding failed");
            }
            (error_response(&e), name)
        }
    };
    let status = resp.status().as_u16();
    ctx.stats.response(status);
    debug!(
        client = %conn.client.peer,
        %method,
        path = %path,
        status,
        backend = %backend_name,
        ms = started.elapsed().as_millis() as u64,
        "request"
    );
    let (parts, body) = resp.into_parts();
    Response::from_parts(parts, body.with_frontend(frontend))
}

type ForwardResult = Result<(Response<ProxyBody>, String), (ForwardError, String)>;

async fn forward(ctx: &Arc<ProxyCtx>, conn: &ConnState, req: Request<Incoming>) -> ForwardResult {
    let settings = ctx.settings.load();
    let backend = match ctx.router.load().select() {
        Some(b) => b.clone(),
        None => return Err((ForwardError::NoBackend, "-".into())),
    };
    let name = backend.spec.name.clone();
    let (mut parts, body) = req.into_parts();
    forward::prepare_request(&mut parts, &conn.client, settings.trust_forwarded);
    let flight = InFlight::start(backend.clone());
    let pending = (!body.is_end_stream()).then(|| upstream::Pending::new(&conn.uploads));
    let mut req = Request::from_parts(parts, ReqBody::Incoming(body, pending));
    let t = &settings.timeouts;

    // Pooled connections first; one that turns out closed hands the request back
    // untouched, so try the next, then a fresh connection.
    loop {
        let (mut sender, fresh) = match backend.pool.checkout_idle(t.upstream_idle) {
            Some(s) => (s, false),
            None => match backend.pool.connect(&backend.spec.addr, t.connect).await {
                Ok(s) => (s, true),
                Err(e) => {
                    backend.stats.connect_errors.fetch_add(1, Ordering::Relaxed);
                    return Err((ForwardError::Connect(e), name));
                }
            },
        };
        if fresh {
            backend
                .stats
                .connections_opened
                .fetch_add(1, Ordering::Relaxed);
        }
        let waiting = WaitingUpstream::new(conn);
        let sent = tokio::time::timeout(t.server, sender.try_send_request(req)).await;
        drop(waiting);
        match sent {
            Err(_) => {
                backend.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                return Err((ForwardError::Timeout(t.server), name));
            }
            Ok(Ok(resp)) => {
                let status = resp.status().as_u16();
                backend.stats.response(status);
                let (mut parts, body) = resp.into_parts();
                forward::prepare_response(&mut parts);
                let body = ProxyBody::upstream(body, sender, flight);
                return Ok((Response::from_parts(parts, body), name));
            }
            Ok(Err(mut e)) => match e.take_message() {
                Some(back) if !fresh => {
                    req = back; // stale pooled connection: the request never left
                }
                _ => {
                    backend
                        .stats
                        .response_errors
                        .fetch_add(1, Ordering::Relaxed);
                    return Err((ForwardError::Upstream(e.into_error()), name));
                }
            },
        }
    }
}

fn error_response(e: &ForwardError) -> Response<ProxyBody> {
    let mut resp = Response::new(ProxyBody::text(e.body()));
    *resp.status_mut() = e.status();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// Response body sent to clients: a backend's body streamed through, or a short text
/// written by the balancer.
pub struct ProxyBody {
    kind: BodyKind,
    _frontend: Option<FrontendRequest>,
}

enum BodyKind {
    Text(Option<Bytes>),
    Upstream(UpstreamBody),
}

impl ProxyBody {
    pub fn text(s: &'static str) -> Self {
        ProxyBody {
            kind: BodyKind::Text(Some(Bytes::from_static(s.as_bytes()))),
            _frontend: None,
        }
    }

    fn upstream(inner: Incoming, sender: Sender, flight: InFlight) -> Self {
        ProxyBody {
            kind: BodyKind::Upstream(UpstreamBody {
                inner,
                sender: Some(sender),
                flight,
                done: false,
            }),
            _frontend: None,
        }
    }

    fn with_frontend(mut self, f: FrontendRequest) -> Self {
        self._frontend = Some(f);
        self
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match &mut self.get_mut().kind {
            BodyKind::Text(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            BodyKind::Upstream(u) => {
                let r = Pin::new(&mut u.inner).poll_frame(cx);
                if let Poll::Ready(None) = r {
                    u.done = true;
                }
                r
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            BodyKind::Text(b) => b.is_none(),
            BodyKind::Upstream(u) => u.done || u.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            BodyKind::Text(Some(b)) => SizeHint::with_exact(b.len() as u64),
            BodyKind::Text(None) => SizeHint::with_exact(0),
            BodyKind::Upstream(u) => u.inner.size_hint(),
        }
    }
}

/// A backend's response body. Holds the backend connection and the in-flight count
/// until the body is finished; then the connection goes back to the pool.
struct UpstreamBody {
    inner: Incoming,
    sender: Option<Sender>,
    flight: InFlight,
    /// The body was read to its end (hyper's `is_end_stream` stays false after a
    /// chunked body ends, so this is tracked here).
    done: bool,
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take() {
            if self.done || self.inner.is_end_stream() {
                self.flight.backend().pool.checkin(sender);
            }
        }
    }
}
