//! The data plane: accept client connections, forward each request to a backend, stream
//! the answer back.
//!
//! Owns the accept loop and its connection limit, per-connection timeouts, request
//! handling (sticky cookie, selection, retries), and graceful stop. Per request: load the
//! routing snapshot (lock-free), pick the backend the sticky cookie names or the least
//! loaded one, take a pooled connection or open one, send, and stream the response body
//! back without buffering it; the backend's in-flight count covers the whole exchange.
//!
//! Retries: a backend that cannot be reached is replaced by another (any request: its
//! body was not sent), up to `proxy.retries`; an idempotent request without a body is
//! also replayed elsewhere when the backend fails before answering. Everything else gets
//! 502. Failures on real traffic are counted per backend and eject it after
//! `health.fall` in a row (see `health`).
//!
//! Timeouts: `request_header` (hyper's header read timeout, which also bounds how long
//! an idle keep-alive connection waits for its next request); `client` (no byte moved
//! while the balancer waits on the client); `connect`; `server` (time to the backend's
//! response head, answered with 504); `tunnel` (idle upgraded connection).

pub mod body;
pub mod forward;
pub mod io;
pub mod tunnel;
pub mod upstream;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::health::EjectSender;
use crate::routing::sticky::Sticky;
use crate::routing::{Backend, Router};
use crate::stats::FrontendStats;
pub use body::ProxyBody;
use forward::ClientInfo;
use io::{ActivityIo, Clock, Counted};
use upstream::{ReqBody, Sender};

/// Settings the proxy reads per connection or request; swapped on reload.
#[derive(Clone, Debug)]
pub struct Settings {
    pub timeouts: crate::config::Timeouts,
    pub trust_forwarded: bool,
    pub h2c: bool,
    pub max_header_size: usize,
    pub retries: u32,
    /// Consecutive failures on live traffic that eject a backend; 0 = never.
    pub eject_after: u32,
    pub sticky: Option<Sticky>,
    /// One info line per request (`[log] requests`, `--log-requests`).
    pub log_requests: bool,
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
        Settings {
            timeouts: c.timeouts.clone(),
            trust_forwarded: c.proxy.trust_forwarded,
            h2c: c.proxy.h2c,
            max_header_size: c.limits.max_header_size,
            retries: c.proxy.retries,
            eject_after: if c.health.enabled { c.health.fall } else { 0 },
            sticky,
            log_requests: c.log.requests || c.log.requests_forced,
        }
    }
}

/// Everything a connection needs, shared by all of them.
pub struct ProxyCtx {
    pub router: Arc<Router>,
    pub stats: Arc<FrontendStats>,
    pub settings: ArcSwap<Settings>,
    /// Backends that failed `eject_after` times in a row on live traffic.
    ejections: EjectSender,
    clock: Clock,
    /// Cancelled when the balancer stops: closes tunnels.
    stopping: CancellationToken,
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
            stats,
            settings: ArcSwap::from_pointee(settings),
            ejections,
            clock: Clock::new(),
            stopping,
        }
    }

    /// A failure on live traffic; the request that makes it `eject_after` in a row
    /// reports the backend for ejection.
    fn passive_failure(&self, b: &Arc<Backend>, eject_after: u32) {
        let n = b.passive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if eject_after > 0 && n == eject_after {
            let _ = self.ejections.send(b.clone());
        }
    }

    fn passive_success(&self, b: &Backend) {
        // Load first: a store on every response would bounce the cache line.
        if b.passive_failures.load(Ordering::Relaxed) != 0 {
            b.passive_failures.store(0, Ordering::Relaxed);
        }
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
    /// Coarse time (ms, `ProxyCtx::clock`) of the last byte moved.
    last_io: Arc<AtomicU64>,
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
    // The first byte must come within `request_header` too: hyper's head timer starts
    // only once a head is being read (after telling HTTP/1 from h2c), so a connection
    // that sends nothing would otherwise hold its slot until the `client` timeout.
    let mut first = [0u8; 1];
    let peeked = tokio::select! {
        r = tokio::time::timeout(settings.timeouts.request_header, stream.peek(&mut first)) => r,
        _ = shutdown.cancelled() => return,
    };
    match peeked {
        Ok(Ok(n)) if n > 0 => {}
        Ok(_) => return, // closed before sending anything
        Err(_) => {
            ctx.stats.client_timeouts.fetch_add(1, Ordering::Relaxed);
            debug!(client = %peer, "no request within {:?}, closing", settings.timeouts.request_header);
            return;
        }
    }
    let last_io = Arc::new(AtomicU64::new(0));
    let conn_state = Arc::new(ConnState {
        client: ClientInfo {
            peer,
            local_port,
            scheme: "http",
        },
        last_io: last_io.clone(),
        waiting_upstream: AtomicU32::new(0),
        uploads: Arc::new(AtomicU32::new(0)),
    });
    let stream = Counted::new(stream, ctx.stats.traffic.clone());
    let io = TokioIo::new(ActivityIo::new(stream, ctx.clock, last_io));

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
                let idle_ms = ctx.clock.now_ms().saturating_sub(last);
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

/// Counts a request as in flight on the frontend until dropped.
struct FrontendRequest(Arc<ProxyCtx>);

impl FrontendRequest {
    fn start(ctx: &Arc<ProxyCtx>) -> Self {
        ctx.stats.request_started();
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
    /// The client's request body failed (malformed chunked framing, or the client went
    /// away mid-upload): the client's fault, never counted against the backend.
    #[error("request body from the client failed: {0}")]
    ClientBody(hyper::Error),
    /// Refused before forwarding (see `forward::request_problem`).
    #[error("request refused: {1}")]
    Refused(StatusCode, &'static str),
}

impl ForwardError {
    fn status(&self) -> StatusCode {
        match self {
            ForwardError::NoBackend => StatusCode::SERVICE_UNAVAILABLE,
            ForwardError::Connect(_) | ForwardError::Upstream(_) => StatusCode::BAD_GATEWAY,
            ForwardError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ForwardError::ClientBody(_) => StatusCode::BAD_REQUEST,
            ForwardError::Refused(status, _) => *status,
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
            ForwardError::ClientBody(_) => {
                "400 Bad Request: the request body was malformed or incomplete.\n"
            }
            ForwardError::Refused(StatusCode::METHOD_NOT_ALLOWED, _) => {
                "405 Method Not Allowed: CONNECT is not supported.\n"
            }
            ForwardError::Refused(..) => "400 Bad Request: ambiguous request.\n",
        }
    }
}

/// True when an exchange failed because the client's request body did: hyper reports
/// an error of the body it was sending, and that body is the client's `Incoming`.
fn client_body_failed(e: &hyper::Error) -> bool {
    use std::error::Error as _;
    e.is_user()
        && e.source()
            .is_some_and(|s| s.downcast_ref::<hyper::Error>().is_some())
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
    let (resp, backend_name) = match forward(ctx, conn, req).await {
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
    let ms = started.elapsed().as_millis() as u64;
    let client = &conn.client.peer;
    if ctx.settings.load().log_requests {
        info!(%client, %method, %path, status, backend = %backend_name, ms, "request");
    } else {
        debug!(%client, %method, %path, status, backend = %backend_name, ms, "request");
    }
    let (parts, body) = resp.into_parts();
    Response::from_parts(parts, body.with_frontend(frontend))
}

type ForwardResult = Result<(Response<ProxyBody>, String), (ForwardError, String)>;

/// Methods whose requests may be sent twice (RFC 9110 §9.2.2).
fn idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    )
}

/// What is needed to send a body-less request again.
struct Replay {
    method: Method,
    uri: http::Uri,
    headers: http::HeaderMap,
}

impl Replay {
    fn request(&self) -> Request<ReqBody> {
        let mut r = Request::new(ReqBody::Empty);
        *r.method_mut() = self.method.clone();
        *r.uri_mut() = self.uri.clone();
        *r.headers_mut() = self.headers.clone();
        r
    }
}

/// One attempt's outcome when it did not produce a response.
enum Failed {
    /// The request never left: it can go to another backend as is.
    NotSent(Box<Request<ReqBody>>, ForwardError),
    /// It was (at least partly) sent.
    Sent(ForwardError),
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn forward(
    ctx: &Arc<ProxyCtx>,
    conn: &ConnState,
    mut req: Request<Incoming>,
) -> ForwardResult {
    let settings = ctx.settings.load_full();
    let upgrade = forward::is_upgrade(req.headers());
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    if let Some((status, why)) = forward::request_problem(&parts) {
        return Err((ForwardError::Refused(status, why), "-".to_string()));
    }

    // Sticky cookie: taken out of the request whatever it says.
    let sticky = settings.sticky.as_ref();
    let cookie = sticky.and_then(|s| s.take(&mut parts.headers));
    let secure = conn.client.scheme == "https"
        || (settings.trust_forwarded
            && parts
                .headers
                .get("x-forwarded-proto")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https")));
    forward::prepare_request(&mut parts, &conn.client, settings.trust_forwarded);

    let now = unix_now();
    let pinned = {
        let table = ctx.router.load();
        match (sticky, cookie) {
            (Some(s), Some(raw)) => s
                .decode(&raw, now)
                .and_then(|v| table.sticky_target(&v).cloned()),
            _ => None,
        }
    };

    let replay = (idempotent(&parts.method) && body.is_end_stream()).then(|| Replay {
        method: parts.method.clone(),
        uri: parts.uri.clone(),
        headers: parts.headers.clone(),
    });
    let pending = (!body.is_end_stream()).then(|| upstream::Pending::new(&conn.uploads));
    let mut req = Request::from_parts(parts, ReqBody::Incoming(body, pending));
    let mut tried: Vec<Arc<Backend>> = Vec::new();
    let mut last_error = ForwardError::NoBackend;
    let mut last_name = "-".to_string();

    for attempt in 0..=settings.retries {
        let backend = match (&pinned, attempt) {
            (Some(p), 0) => p.clone(),
            _ => match ctx.router.load().select_excluding(&tried) {
                Some(b) => b.clone(),
                None => break,
            },
        };
        last_name = backend.spec.name.clone();
        let flight = InFlight::start(backend.clone());
        let attempt_started = Instant::now();
        match send_once(conn, &settings, &backend, req).await {
            Ok((resp, sender)) => {
                backend.stats.response_head(attempt_started.elapsed());
                ctx.passive_success(&backend);
                let insert_cookie =
                    sticky.filter(|_| pinned.as_ref().is_none_or(|p| !Arc::ptr_eq(p, &backend)));
                let resp = respond(
                    ctx,
                    &settings,
                    resp,
                    sender,
                    flight,
                    insert_cookie,
                    secure,
                    now,
                    client_upgrade,
                );
                return Ok((resp, last_name));
            }
            Err(Failed::NotSent(back, e)) => {
                ctx.passive_failure(&backend, settings.eject_after);
                debug!(backend = %last_name, error = %e, "backend unreachable, trying another");
                backend.stats.redispatches.fetch_add(1, Ordering::Relaxed);
                req = *back;
                last_error = e;
            }
            Err(Failed::Sent(e)) => {
                if matches!(e, ForwardError::Upstream(_)) {
                    ctx.passive_failure(&backend, settings.eject_after);
                }
                match (&replay, &e) {
                    (Some(r), ForwardError::Upstream(_)) => {
                        debug!(backend = %last_name, error = %e, "backend failed, replaying elsewhere");
                        backend.stats.redispatches.fetch_add(1, Ordering::Relaxed);
                        req = r.request();
                        last_error = e;
                    }
                    _ => return Err((e, last_name)),
                }
            }
        }
        tried.push(backend);
    }
    Err((last_error, last_name))
}

/// One attempt on one backend: a pooled connection (a closed one hands the request back
/// untouched, so try the next) or a new one, then the request.
async fn send_once(
    conn: &ConnState,
    settings: &Settings,
    backend: &Arc<Backend>,
    mut req: Request<ReqBody>,
) -> Result<(Response<Incoming>, Sender), Failed> {
    let t = &settings.timeouts;
    loop {
        let (mut sender, fresh) = match backend.pool.checkout_idle(t.upstream_idle) {
            Some(s) => (s, false),
            None => match backend.pool.connect(&backend.spec.addr, t.connect).await {
                Ok(s) => {
                    backend
                        .stats
                        .connections_opened
                        .fetch_add(1, Ordering::Relaxed);
                    (s, true)
                }
                Err(e) => {
                    backend.stats.connect_errors.fetch_add(1, Ordering::Relaxed);
                    return Err(Failed::NotSent(Box::new(req), ForwardError::Connect(e)));
                }
            },
        };
        let waiting = WaitingUpstream::new(conn);
        let sent = tokio::time::timeout(t.server, sender.try_send_request(req)).await;
        drop(waiting);
        match sent {
            Err(_) => {
                backend.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                return Err(Failed::Sent(ForwardError::Timeout(t.server)));
            }
            Ok(Ok(resp)) => return Ok((resp, sender)),
            Ok(Err(mut e)) => match e.take_message() {
                // A stale pooled connection: the request never left.
                Some(back) if !fresh => req = back,
                Some(back) => {
                    backend
                        .stats
                        .response_errors
                        .fetch_add(1, Ordering::Relaxed);
                    return Err(Failed::NotSent(
                        Box::new(back),
                        ForwardError::Upstream(e.into_error()),
                    ));
                }
                None => {
                    let e = e.into_error();
                    if client_body_failed(&e) {
                        return Err(Failed::Sent(ForwardError::ClientBody(e)));
                    }
                    backend
                        .stats
                        .response_errors
                        .fetch_add(1, Ordering::Relaxed);
                    return Err(Failed::Sent(ForwardError::Upstream(e)));
                }
            },
        }
    }
}

/// Turn a backend's response into the client's: headers cleaned, sticky cookie
/// inserted when the client had none for this backend, upgrades wired into a tunnel.
#[allow(clippy::too_many_arguments)]
fn respond(
    ctx: &ProxyCtx,
    settings: &Settings,
    mut resp: Response<Incoming>,
    sender: Sender,
    flight: InFlight,
    insert_cookie: Option<&Sticky>,
    secure: bool,
    now: u64,
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
) -> Response<ProxyBody> {
    let backend = flight.backend().clone();
    backend.stats.response(resp.status().as_u16());
    let switching = resp.status() == StatusCode::SWITCHING_PROTOCOLS;
    let mut sender = Some(sender);
    if switching {
        if let Some(client) = client_upgrade {
            let server = hyper::upgrade::on(&mut resp);
            tokio::spawn(tunnel::run(
                client,
                server,
                backend.clone(),
                settings.timeouts.tunnel,
                ctx.stopping.clone(),
                backend.pool.kill_token(),
            ));
        }
        // The backend connection now belongs to the tunnel, not the pool.
        sender = None;
    }
    let (mut parts, body) = resp.into_parts();
    forward::prepare_response(&mut parts, switching);
    if let Some(sticky) = settings.sticky.as_ref() {
        sticky.strip_set_cookie(&mut parts.headers);
    }
    if let Some(sticky) = insert_cookie {
        if let Some(v) = sticky.set_cookie(&backend.sticky, secure, now) {
            parts.headers.append(header::SET_COOKIE, v);
            // nocache: a shared cache must not hand one client's cookie to everyone.
            if !parts.headers.contains_key(header::CACHE_CONTROL) {
                parts
                    .headers
                    .insert(header::CACHE_CONTROL, HeaderValue::from_static("private"));
            }
        }
    }
    Response::from_parts(parts, ProxyBody::upstream(body, sender, flight))
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
    if matches!(e, ForwardError::Refused(..) | ForwardError::ClientBody(_)) {
        // What follows on this connection cannot be trusted to be framed as we think.
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}
