//! The data plane: accept client connections, forward each request to a backend, stream
//! the answer back.
//!
//! Owns the accept loop and its connection limit, per-connection timeouts, request
//! handling (sticky cookie, selection, retries), and graceful stop. Per request: load the
//! routing snapshot (lock-free), pick the backend the sticky cookie names, else the
//! connection's previous one while it is no busier (`routing::affinity`), else the least
//! loaded one, take a pooled connection or open one, send, and stream the response body
//! back without buffering it; the backend's in-flight count covers the whole exchange.
//!
//! Retries: a backend that cannot be reached is replaced by another (any request: its
//! body was not sent), up to `proxy.retries`; an idempotent request without a body is
//! also replayed elsewhere when the backend fails before answering. Everything else gets
//! 502, so it only goes into a pooled connection the kernel says is still open. A pooled
//! connection the backend closes just as a request goes out (nothing answered) is not
//! the backend's failure: a request that can be replayed is sent again, once, on a new
//! connection to the same backend. Failures on real traffic are counted per backend and
//! eject it after `health.fall` in a row (see `health`).
//!
//! Timeouts, as HAProxy's (README, "Timeouts"): `request_header` (the request head
//! must arrive within it; this also bounds how long a connection with no request in
//! flight waits for one); `client` and `server`, inactivity while the exchange waits on
//! the client or on the backend ([`wait`]: HTTP/1 connections keep both with their one
//! watchdog, HTTP/2 streams have a timer each); `connect`; `tunnel` (idle upgraded
//! connection). What the exchange does with what a backend sends is the decision table
//! in [`upstream`].
//!
//! Cost per request matters here (a balancer's work is mostly this path): nothing is
//! logged or formatted unless a log line is wanted, no timer is set per HTTP/1 request,
//! and header values are shared rather than copied (see [`forward`]). A loop turn reads
//! every ready socket before it writes to any (see [`phase`]).

pub mod body;
mod client;
pub mod forward;
pub mod h1;
pub mod io;
pub mod phase;
pub mod tunnel;
pub mod upstream;
pub mod wait;

use std::future::Future as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body::Body as _;
use hyper::body::Incoming;
use tokio::net::TcpListener;
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
use client::ConnState;
use h1::ReqFraming;
use io::Clock;
use upstream::{Answer, Check, Conn, Outgoing, ReqBody, SendError, SendFailure, UpBody};
use wait::{Phase, Wait};

/// Settings the proxy reads per connection or request; swapped on reload.
#[derive(Clone, Debug)]
pub struct Settings {
    pub timeouts: crate::config::Timeouts,
    pub trust_forwarded: bool,
    pub forwarded_headers: crate::config::ForwardedHeaders,
    pub h2c: bool,
    pub max_header_size: usize,
    pub retries: u32,
    /// Requests in a row a client connection may send to the backend of its previous
    /// request (see [`crate::routing::affinity`]); 0 = every request chosen afresh.
    pub connection_affinity: u32,
    /// Streams an HTTP/2 client connection may have open at once.
    pub h2_max_concurrent_streams: u32,
    /// How long a backend host name's addresses are used (`proxy.dns_ttl`).
    pub dns_ttl: Duration,
    /// Consecutive failures on live traffic that eject a backend; 0 = never.
    pub eject_after: u32,
    pub sticky: Option<Sticky>,
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
        // The request head timeout is the connection's own (see `client`): no timer
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
            log_requests: c.log.requests || c.log.requests_forced,
        }
    }
}

/// A protocol the balancer itself speaks on the proxy port, reached by an HTTP/1.1
/// upgrade (gossip between balancers: in a gear the HTTP port is the only public one).
/// A request asking to upgrade to [`UpgradeEndpoint::protocol`] never reaches a gear: it
/// is answered `101` when [`UpgradeEndpoint::admit`] accepts its credentials, else `403`.
pub trait UpgradeEndpoint: Send + Sync {
    /// The `Upgrade` token it answers (compared case-insensitively).
    fn protocol(&self) -> &'static str;
    /// Whether the request proves it may use the protocol (checked before the `101`).
    fn admit(&self, headers: &http::HeaderMap) -> bool;
    /// Take the upgraded connection.
    fn accept(&self, io: hyper::upgrade::Upgraded, peer: std::net::SocketAddr);
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
    /// The pool sweeper runs (started by the first listener).
    sweeping: std::sync::atomic::AtomicBool,
    /// `limits.max_connections`, shared by the HTTP and HTTPS listeners.
    permits: std::sync::OnceLock<Arc<Semaphore>>,
    /// The balancer's own upgrade protocol on this port (gossip), if any.
    endpoint: Option<Arc<dyn UpgradeEndpoint>>,
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
/// `max_connections` are closed at once (counted as refused); an open WebSocket (any
/// upgraded connection) keeps its connection's place. Each connection is tracked on
/// `tracker` until it closes, tunnel included, so the caller can wait for them.
pub async fn serve(
    listener: TcpListener,
    ctx: Arc<ProxyCtx>,
    max_connections: usize,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    accept_loop(listener, ctx, max_connections, shutdown, tracker, None).await
}

/// Accept HTTPS client connections until `shutdown` is cancelled: as [`serve`], each
/// connection first completes a TLS handshake (within `timeouts.request_header`) with
/// the certificates `tls` holds when it arrives. Requests get `X-Forwarded-Proto:
/// https` and a `Secure` sticky cookie.
pub async fn serve_tls(
    listener: TcpListener,
    ctx: Arc<ProxyCtx>,
    tls: Arc<crate::tls::TlsAcceptor>,
    max_connections: usize,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    accept_loop(listener, ctx, max_connections, shutdown, tracker, Some(tls)).await
}

async fn accept_loop(
    listener: TcpListener,
    ctx: Arc<ProxyCtx>,
    max_connections: usize,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    tls: Option<Arc<crate::tls::TlsAcceptor>>,
) {
    if !ctx.sweeping.swap(true, Ordering::Relaxed) {
        tokio::spawn(sweep_pools(ctx.clone(), shutdown.clone()));
    }
    let permits = ctx
        .permits
        .get_or_init(|| Arc::new(Semaphore::new(max_connections)))
        .clone();
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
        // Counted, permitted and tracked until the connection closes, its tunnel
        // included (the connection task returns when hyper hands an upgrade over).
        let session = client::Session::open(ctx.stats.clone(), permit, tracker.token());
        let ctx = ctx.clone();
        let shutdown = shutdown.clone();
        match &tls {
            None => tokio::spawn(async move {
                client::serve_connection(&ctx, session, stream, peer, local_port, shutdown).await;
            }),
            Some(tls) => {
                let acceptor = tls.acceptor();
                tokio::spawn(async move {
                    client::serve_tls_connection(
                        &ctx, session, acceptor, stream, peer, local_port, shutdown,
                    )
                    .await;
                })
            }
        };
    }
}

/// Close pooled backend connections idle longer than `timeouts.upstream_idle`, once a
/// second, until `shutdown`.
async fn sweep_pools(ctx: Arc<ProxyCtx>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let max_age = ctx.settings.load().timeouts.upstream_idle;
        for e in ctx.router.load().entries() {
            e.backend.pool.sweep(max_age);
        }
    }
}

/// Counts a request as in flight on the frontend and its connection until dropped
/// (with the response body, when it has been sent in full).
struct FrontendRequest(Arc<ConnState>);

impl FrontendRequest {
    fn start(conn: &Arc<ConnState>, has_body: bool) -> Self {
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

/// Why a request could not be forwarded; mapped to a status in one place.
#[derive(Debug, thiserror::Error)]
enum ForwardError {
    #[error("no backend available")]
    NoBackend,
    #[error(transparent)]
    Connect(upstream::ConnectError),
    /// Sent (at least partly) and failed before a response head.
    #[error("backend failed before answering: {0}")]
    Upstream(SendError),
    #[error("no progress from the backend within {0:?}")]
    Timeout(Duration),
    /// An HTTP/2 stream's request body stalled for `timeouts.client` (an HTTP/1
    /// connection that stalls is closed by its watchdog instead).
    #[error("no request body progress within {0:?}")]
    ClientTimeout(Duration),
    /// The client's request body failed (malformed chunked framing, or the client went
    /// away mid-upload): the client's fault, never counted against the backend.
    #[error("{0}")]
    ClientBody(SendError),
    /// Refused before forwarding (see `forward::request_problem`).
    #[error("request refused: {1}")]
    Refused(StatusCode, &'static str),
    /// The backend answered with something that cannot go to this client as it is (a
    /// `101` to a protocol nobody asked for, a transfer coding the client's protocol
    /// cannot carry): 502, the backend connection closed. Not the backend's failure for
    /// ejection: a client could provoke it.
    #[error("unusable response: {0}")]
    BadResponse(&'static str),
}

impl ForwardError {
    fn status(&self) -> StatusCode {
        match self {
            ForwardError::NoBackend => StatusCode::SERVICE_UNAVAILABLE,
            ForwardError::Connect(_) | ForwardError::Upstream(_) | ForwardError::BadResponse(_) => {
                StatusCode::BAD_GATEWAY
            }
            ForwardError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ForwardError::ClientTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ForwardError::ClientBody(_) => StatusCode::BAD_REQUEST,
            ForwardError::Refused(status, _) => *status,
        }
    }

    fn body(&self) -> &'static str {
        match self {
            ForwardError::NoBackend => {
                "503 Service Unavailable: no web gear is available to serve this request.\n"
            }
            ForwardError::Connect(_) | ForwardError::Upstream(_) | ForwardError::BadResponse(_) => {
                "502 Bad Gateway: the web gear did not answer properly.\n"
            }
            ForwardError::Timeout(_) => {
                "504 Gateway Timeout: the web gear did not answer in time.\n"
            }
            ForwardError::ClientTimeout(_) => {
                "408 Request Timeout: the request body did not arrive in time.\n"
            }
            ForwardError::ClientBody(_) => {
                "400 Bad Request: the request body was malformed or incomplete.\n"
            }
            ForwardError::Refused(StatusCode::METHOD_NOT_ALLOWED, _) => {
                "405 Method Not Allowed: CONNECT is not supported.\n"
            }
            ForwardError::Refused(StatusCode::NOT_IMPLEMENTED, _) => {
                "501 Not Implemented: transfer codings other than chunked are not supported.\n"
            }
            ForwardError::Refused(..) => "400 Bad Request: ambiguous request.\n",
        }
    }
}

/// What a request line in the log needs, taken before the request is consumed.
struct LogLine {
    started: Instant,
    method: Method,
    path: String,
}

async fn handle(
    frontend: FrontendRequest,
    req: Request<Incoming>,
    wait: Arc<Wait>,
) -> Response<ProxyBody> {
    let conn = &frontend.0;
    let ctx = &conn.ctx;
    let settings = ctx.settings.load_full();
    // Only a wanted log line costs a clock read and a copy of the path.
    let log =
        (settings.log_requests || tracing::enabled!(tracing::Level::DEBUG)).then(|| LogLine {
            started: Instant::now(),
            method: req.method().clone(),
            path: req.uri().path().to_string(),
        });
    let (resp, backend) = match forward(conn, &settings, req, &wait).await {
        Ok((resp, backend)) => (resp, backend),
        Err((e, backend)) => {
            if let ForwardError::NoBackend = e {
                ctx.stats.no_backend.fetch_add(1, Ordering::Relaxed);
            } else {
                debug!(backend = %backend_name(&backend), error = %e, "forwarding failed");
            }
            (error_response(&e), backend)
        }
    };
    // The response body says what it waits on once it is polled.
    wait.idle();
    let status = resp.status().as_u16();
    ctx.stats.response(status);
    if let Some(LogLine {
        started,
        method,
        path,
    }) = log
    {
        let ms = started.elapsed().as_millis() as u64;
        let client = &conn.client.peer;
        let backend = backend_name(&backend);
        if settings.log_requests {
            info!(%client, %method, %path, status, %backend, ms, "request");
        } else {
            debug!(%client, %method, %path, status, %backend, ms, "request");
        }
    }
    let (parts, body) = resp.into_parts();
    Response::from_parts(parts, body.with_frontend(frontend))
}

fn backend_name(b: &Option<Arc<Backend>>) -> &str {
    b.as_ref().map_or("-", |b| b.name())
}

type ForwardResult =
    Result<(Response<ProxyBody>, Option<Arc<Backend>>), (ForwardError, Option<Arc<Backend>>)>;

/// Methods whose requests may be sent twice (RFC 9110 §9.2.2).
fn idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    )
}

/// What is needed to send a body-less request again: its head as it went on the wire.
struct Replay(Outgoing);

impl Replay {
    fn request(&self) -> Outgoing {
        Outgoing {
            head: self.0.head.clone(),
            method: self.0.method.clone(),
            framing: ReqFraming::Empty,
            body: ReqBody::Empty,
        }
    }
}

/// One attempt's outcome when it did not produce a response.
enum Failed {
    /// The request never left: it can go to another backend as is.
    NotSent(Box<Outgoing>, ForwardError),
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
    conn: &Arc<ConnState>,
    settings: &Settings,
    mut req: Request<Incoming>,
    wait: &Arc<Wait>,
) -> ForwardResult {
    let ctx = &conn.ctx;
    if forward::is_upgrade(req.headers()) {
        if let Some(ep) = &ctx.endpoint {
            if forward::upgrade_names(req.headers(), ep.protocol()) {
                return Ok((endpoint_upgrade(ep, conn, req), None));
            }
        }
    }
    // An upgrade only to protocols a gear may be offered (never h2c).
    let upgrade = forward::upgrade_offer(req.headers()).is_some();
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    if let Some((status, why)) = forward::request_problem(&parts) {
        return Err((ForwardError::Refused(status, why), None));
    }

    // Sticky cookie: taken out of the request whatever it says, from every `Cookie`
    // field (HTTP/2 clients split them).
    let sticky = settings.sticky.as_ref();
    let cookie = sticky.and_then(|s| s.take(&mut parts.headers));
    let client_version = parts.version;
    if client_version == http::Version::HTTP_2 {
        forward::join_cookies(&mut parts.headers);
    }
    let secure = conn.client.scheme == "https"
        || (settings.trust_forwarded
            && parts
                .headers
                .get("x-forwarded-proto")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https")));
    forward::prepare_request(
        &mut parts,
        &conn.client,
        settings.trust_forwarded,
        settings.forwarded_headers,
    );
    // What a `101` may switch to: the protocols the backend was asked for.
    let asked_upgrade = client_upgrade
        .as_ref()
        .and_then(|_| parts.headers.get(header::UPGRADE).cloned());

    // Wall-clock time only matters to sealed cookies.
    let sealed = sticky.is_some_and(Sticky::is_sealed);
    let now = if sealed { unix_now() } else { 0 };
    let pinned = match (sticky, cookie) {
        (Some(s), Some(raw)) => s
            .decode(&raw, now)
            .and_then(|v| ctx.router.load().sticky_target(&v).cloned()),
        _ => None,
    };

    // The head is the same whichever backend gets it: encoded once, replayed as is.
    let empty = body.is_end_stream();
    let framing = h1::request_framing(&mut parts.headers, empty, body.size_hint().exact());
    let mut head = bytes::BytesMut::new();
    h1::encode_request_head(&parts, framing, &mut head);
    let head = head.freeze();
    let replay = (idempotent(&parts.method) && empty).then(|| {
        Replay(Outgoing {
            head: head.clone(),
            method: parts.method.clone(),
            framing,
            body: ReqBody::Empty,
        })
    });
    // A request that cannot be replayed must not be written into a pooled connection
    // the backend has just closed: those are checked with the kernel, not only with
    // the readiness the runtime recorded.
    let check = if replay.is_some() {
        Check::Recorded
    } else {
        Check::Kernel
    };
    let mut req = Outgoing {
        head,
        method: parts.method,
        framing,
        body: ReqBody::Incoming(body),
    };
    // Interim responses (103 Early Hints, …) go on to HTTP/1.1 clients (RFC 9110
    // §15.2). Not to HTTP/1.0 ones, which must not get them, nor HTTP/2 ones: hyper's
    // HTTP/2 server has no way to send them.
    let push = |h: &h1::Head| conn.push_interim(h);
    let interim: upstream::Interim<'_> =
        (client_version == http::Version::HTTP_11).then_some(&push);
    let mut tried: Vec<Arc<Backend>> = Vec::new();
    let mut last_error = ForwardError::NoBackend;
    let mut last: Option<Arc<Backend>> = None;

    for attempt in 0..=settings.retries {
        let chosen = match (&pinned, attempt) {
            (Some(p), 0) => Some(p.clone()),
            (None, 0) => ctx
                .router
                .load()
                .select_for(&conn.affinity, settings.connection_affinity)
                .cloned(),
            _ => ctx.router.load().select_excluding(&tried).cloned(),
        };
        let Some(backend) = chosen else { break };
        last = Some(backend.clone());
        let flight = InFlight::start(backend.clone());
        let attempt_started = Instant::now();
        match send_once(
            settings,
            &backend,
            req,
            check,
            replay.as_ref(),
            wait,
            interim,
        )
        .await
        {
            Ok((Answer { head, upload }, up)) => {
                backend.stats.response_head(attempt_started.elapsed());
                ctx.passive_success(&backend);
                let codings = match usable(&head, asked_upgrade.as_ref(), client_version) {
                    Ok(c) => c,
                    Err(why) => {
                        drop(up);
                        backend
                            .stats
                            .response_errors
                            .fetch_add(1, Ordering::Relaxed);
                        return Err((ForwardError::BadResponse(why), last));
                    }
                };
                let insert_cookie =
                    sticky.filter(|_| pinned.as_ref().is_none_or(|p| !Arc::ptr_eq(p, &backend)));
                let resp = respond(
                    conn,
                    settings,
                    head,
                    Exchanged {
                        conn: up,
                        upload,
                        wait: wait.clone(),
                    },
                    flight,
                    insert_cookie,
                    secure,
                    now,
                    client_upgrade,
                    codings,
                );
                return Ok((resp, last));
            }
            Err(Failed::NotSent(back, e)) => {
                conn.affinity.forget();
                ctx.passive_failure(&backend, settings.eject_after);
                debug!(backend = %backend.name(), error = %e, "backend unreachable, trying another");
                backend.stats.redispatches.fetch_add(1, Ordering::Relaxed);
                req = *back;
                last_error = e;
            }
            Err(Failed::Sent(e)) => {
                conn.affinity.forget();
                if matches!(e, ForwardError::Upstream(_)) {
                    ctx.passive_failure(&backend, settings.eject_after);
                }
                match (&replay, &e) {
                    (Some(r), ForwardError::Upstream(_)) => {
                        debug!(backend = %backend.name(), error = %e, "backend failed, replaying elsewhere");
                        backend.stats.redispatches.fetch_add(1, Ordering::Relaxed);
                        req = r.request();
                        last_error = e;
                    }
                    _ => return Err((e, last)),
                }
            }
        }
        tried.push(backend);
    }
    Err((last_error, last))
}

/// One attempt on one backend: a pooled connection (one the backend closed meanwhile
/// hands the request back untouched, so try the next) or a new one, then the request.
///
/// A pooled connection can also be closed by the backend while the request goes out
/// (its keep-alive timeout, a restart): the request is written and nothing comes back.
/// A request that can be `replay`ed is then sent again, once, on a new connection to
/// the same backend, and the backend is not blamed (as nginx does for its cached
/// connections). Without this, with one gear or `proxy.retries = 0`, a GET would get a
/// 502 for a race of the connection's, not a fault of the gear's.
#[allow(clippy::too_many_arguments)]
async fn send_once(
    settings: &Settings,
    backend: &Arc<Backend>,
    mut req: Outgoing,
    check: Check,
    replay: Option<&Replay>,
    wait: &Wait,
    interim: upstream::Interim<'_>,
) -> Result<(Answer, Conn), Failed> {
    let t = &settings.timeouts;
    // Sent again already after a pooled connection closed under it: new connections only.
    let mut resent = false;
    loop {
        let pooled = if resent {
            None
        } else {
            backend.pool.checkout_idle(t.upstream_idle, check)
        };
        let (mut up, fresh) = match pooled {
            Some(c) => (c, false),
            None => match connect(backend, settings).await {
                Ok(c) => {
                    backend
                        .stats
                        .connections_opened
                        .fetch_add(1, Ordering::Relaxed);
                    (c, true)
                }
                Err(e) => {
                    backend.stats.connect_errors.fetch_add(1, Ordering::Relaxed);
                    return Err(Failed::NotSent(Box::new(req), ForwardError::Connect(e)));
                }
            },
        };
        let sent = {
            let exchange = upstream::send(&mut up, req, wait, interim);
            // Its timekeeper (the connection's watchdog for HTTP/1, the stream's timer
            // for HTTP/2) marks a wait that ran out and has it polled again at once.
            let mut exchange = std::pin::pin!(exchange);
            std::future::poll_fn(|cx| match exchange.as_mut().poll(cx) {
                Poll::Ready(r) => Poll::Ready(Ok(r)),
                Poll::Pending => match wait.expired() {
                    Some(p) => Poll::Ready(Err(p)),
                    None => Poll::Pending,
                },
            })
            .await
        };
        match sent {
            Err(phase) => {
                // Answered here: the mark is cleared.
                wait.reset();
                if phase == Phase::Client {
                    return Err(Failed::Sent(ForwardError::ClientTimeout(t.client)));
                }
                backend.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                return Err(Failed::Sent(ForwardError::Timeout(t.server)));
            }
            Ok(Ok(answer)) => {
                wait.idle();
                return Ok((answer, up));
            }
            // A pooled connection the backend had closed: the request never left.
            Ok(Err(SendFailure::NotSent(back, _))) if !fresh => req = *back,
            Ok(Err(SendFailure::NotSent(back, e))) => {
                backend
                    .stats
                    .response_errors
                    .fetch_add(1, Ordering::Relaxed);
                return Err(Failed::NotSent(back, ForwardError::Upstream(e)));
            }
            Ok(Err(SendFailure::Sent(e @ (SendError::ClientBody(_) | SendError::BodyLength)))) => {
                return Err(Failed::Sent(ForwardError::ClientBody(e)));
            }
            Ok(Err(SendFailure::Sent(e))) => {
                // A pooled connection the backend closed as the request went out: not
                // one byte came back.
                let closed_under = matches!(e, SendError::Closed | SendError::Io(_))
                    && !fresh
                    && !resent
                    && up.answered_nothing();
                if let Some(r) = replay.filter(|_| closed_under) {
                    debug!(backend = %backend.name(), error = %e, "pooled connection closed under the request, sending it again on a new one");
                    resent = true;
                    req = r.request();
                    continue;
                }
                backend
                    .stats
                    .response_errors
                    .fetch_add(1, Ordering::Relaxed);
                return Err(Failed::Sent(ForwardError::Upstream(e)));
            }
        }
    }
}

/// A new connection to `backend` (its name resolved through its pool's cache).
async fn connect(backend: &Backend, settings: &Settings) -> Result<Conn, upstream::ConnectError> {
    backend.pool.resolver().set_ttl(settings.dns_ttl);
    backend
        .pool
        .connect(&backend.spec.addr, settings.timeouts.connect)
        .await
}

/// Whether a backend's response head can go to the client as it is; `Ok` carries the
/// transfer codings other than `chunked` it applied to its body, which an HTTP/1.1
/// client gets as they are (hyper adds the chunked framing: RFC 9112 §6.1).
///
/// - A `101` must answer an upgrade request, switching to a protocol it listed (see
///   [`forward::switch_allowed`]).
/// - A body with other transfer codings cannot go to an HTTP/1.0 client (RFC 9112 §6.1:
///   no Transfer-Encoding to it) nor an HTTP/2 one (RFC 9113 §8.2.2: no
///   Transfer-Encoding at all) without being decoded, which the balancer does not do;
///   nor can one where `chunked` is not applied exactly once, last.
fn usable(
    head: &h1::Head,
    asked_upgrade: Option<&HeaderValue>,
    client: http::Version,
) -> Result<Option<HeaderValue>, &'static str> {
    if head.parts.status == StatusCode::SWITCHING_PROTOCOLS {
        forward::switch_allowed(asked_upgrade, &head.parts.headers)?;
        return Ok(None);
    }
    if head.body == h1::BodyLen::Empty {
        return Ok(None);
    }
    match forward::transfer_codings(&head.parts.headers)? {
        Some(_) if client != http::Version::HTTP_11 => {
            Err("transfer coding the client's protocol cannot carry")
        }
        codings => Ok(codings),
    }
}

/// What an exchange leaves for the response body: the backend connection, the rest of
/// an upload the backend answered early, and the exchange's wait.
struct Exchanged {
    conn: Conn,
    upload: Option<Box<upstream::Upload>>,
    wait: Arc<Wait>,
}

/// Turn a backend's response into the client's: headers cleaned, sticky cookie
/// inserted when the client had none for this backend, upgrades wired into a tunnel.
///
/// An upgraded connection stays one session on the backend from its request to the
/// tunnel's close, as HAProxy counts it: the request's in-flight count goes to the
/// tunnel (not to the `101`'s empty body), and the client connection's session with it.
#[allow(clippy::too_many_arguments)]
fn respond(
    conn: &Arc<ConnState>,
    settings: &Settings,
    head: h1::Head,
    up: Exchanged,
    flight: InFlight,
    insert_cookie: Option<&Sticky>,
    secure: bool,
    now: u64,
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    codings: Option<HeaderValue>,
) -> Response<ProxyBody> {
    let backend = flight.backend().clone();
    backend.stats.response(head.parts.status.as_u16());
    let switching = head.parts.status == StatusCode::SWITCHING_PROTOCOLS;
    let mut body = UpBody::new(up.conn, &head, up.upload, Some(up.wait));
    let mut flight = Some(flight);
    if switching {
        // The backend connection now belongs to the tunnel, not the pool.
        let up = body.take_conn().and_then(Conn::into_upgraded);
        if let (Some(client), Some(up), Some(flight)) = (client_upgrade, up, flight.take()) {
            tokio::spawn(tunnel::run(
                client,
                up,
                flight,
                conn.clone(),
                settings.timeouts.tunnel,
                conn.ctx.stopping.clone(),
                backend.pool.kill_token(),
            ));
        }
    }
    let mut parts = head.parts;
    forward::prepare_response(&mut parts, switching);
    if let Some(codings) = codings {
        parts.headers.insert(header::TRANSFER_ENCODING, codings);
    }
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
    let body = match flight {
        Some(flight) => ProxyBody::upstream(body, flight),
        None => ProxyBody::empty(),
    };
    Response::from_parts(parts, body)
}

/// Answer a request for the balancer's own upgrade protocol: `101` and hand the
/// connection to `ep` once hyper lets go of it, or `403` when its credentials are bad.
fn endpoint_upgrade(
    ep: &Arc<dyn UpgradeEndpoint>,
    conn: &Arc<ConnState>,
    mut req: Request<Incoming>,
) -> Response<ProxyBody> {
    let peer = conn.client.peer;
    if req.version() != http::Version::HTTP_11 || !ep.admit(req.headers()) {
        let mut resp = Response::new(ProxyBody::text("403 Forbidden\n"));
        *resp.status_mut() = StatusCode::FORBIDDEN;
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return resp;
    }
    let on = hyper::upgrade::on(&mut req);
    let protocol = ep.protocol();
    let ep = ep.clone();
    let conn = conn.clone();
    tokio::spawn(async move {
        match on.await {
            Ok(io) => {
                // No longer a client session: not in the connection count or limit, and
                // not waited for by the graceful stop.
                conn.end_session();
                drop(conn);
                ep.accept(io, peer)
            }
            Err(e) => debug!(error = %e, "upgrade to {} did not complete", ep.protocol()),
        }
    });
    let mut resp = Response::new(ProxyBody::text(""));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static(protocol));
    resp
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
    if matches!(
        e,
        ForwardError::Refused(..) | ForwardError::ClientBody(_) | ForwardError::ClientTimeout(_)
    ) {
        // What follows on this connection cannot be trusted to be framed as we think.
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}
