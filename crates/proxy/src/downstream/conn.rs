//! The downstream connection's task for a plain TCP connection: protocol detection,
//! hyper's connection object run under the connection's watchdog, parking between
//! requests, the graceful stop, and the lingering close. The states and their
//! transitions are drawn in `LIFECYCLE.md` (see [`super`]).
//!
//! HTTP/1 connections start on the byte path ([`super::lane`]), which serves plain
//! HTTP/1.1 requests itself and hands the connection, with the bytes it read, to
//! hyper's HTTP/1 server (built once per settings, not per connection) at the first
//! request it does not take; a connection hyper parked comes back to the byte path. A
//! connection whose first bytes are, or may be, the HTTP/2 preface (h2c prior
//! knowledge) goes to hyper-util's protocol-detecting builder instead. Detection peeks
//! at the socket, so the HTTP/1 parser later reads the request in one piece.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http_body::Body as _;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::lane::{self, LaneEnd};
use super::linger;
use super::parking::{Handback, ParkedGauge, PARK_AFTER_MS};
use super::protocol::{detect, h2_settings, Detected};
use super::socket::ClientIo;
use super::watchdog::{check_deadlines, StreamExec, GOAWAY_GRACE_MS};
use crate::body::ProxyBody;
use crate::forward::ClientInfo;
use crate::request::handle;
use crate::session::Session;
use crate::session::{ConnState, Cut, FrontendRequest};
use crate::shared::{ProxyCtx, Settings};
use crate::wait::Phase;

/// One request of a client connection, as hyper hands it over: counted at once (so the
/// connection never looks idle before its handler runs), with its
/// [`Wait`](crate::wait::Wait). An HTTP/2 stream's response then waits on the
/// client to take it.
pub(super) fn serve_request(
    state: &Arc<ConnState>,
    req: Request<Incoming>,
) -> impl std::future::Future<Output = Result<hyper::Response<ProxyBody>, Infallible>> {
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

/// Serve one accepted client connection until it closes, times out or the balancer
/// stops (`shutdown`: requests in flight finish, idle connections close at once). An
/// upgraded connection's `session` outlives this, in its tunnel.
pub(crate) fn serve_connection(
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
        ClientInfo::new(peer, local_port, "http")
            .trusted(settings.trust_forwarded.trusts(peer.ip())),
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
    // Empty, of the type `new_h1` makes (which has no name to write).
    let mut h1_conn = None::<ClientIo<TcpStream>>.map(&new_h1);
    let mut h1_slot: Option<Arc<OnceLock<(TcpStream, Handback)>>> = None;
    // The byte path (`lane`), serving plain HTTP/1.1 requests until one is hyper's.
    let mut lane_conn: Option<Pin<Box<dyn Future<Output = LaneEnd<TcpStream>> + Send>>> = None;
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
                        Err(inactive) => {
                            state.cut(inactive);
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
                    lane_conn = Some(Box::pin(lane::serve(
                        state.clone(),
                        stream,
                        shutdown.clone(),
                        true,
                    )));
                    // Look again soon: to park once the request is answered.
                    let soon = at(clock.now_ms() + state.tick_ms).min(watchdog.deadline());
                    watchdog.as_mut().reset(soon);
                    continue;
                }
            }
        }

        // An HTTP connection object is running.
        let is_h1 = h1_conn.is_some() || lane_conn.is_some();
        let done = tokio::select! {
            biased;
            res = async {
                match (lane_conn.as_mut(), h1_conn.as_mut(), other_conn.as_mut()) {
                    (Some(l), _, _) => Err(l.as_mut().await),
                    (None, Some(c), _) => Ok(c.as_mut().await.map_err(|e| e.to_string())),
                    (None, None, Some(c)) => Ok(c.as_mut().await.map_err(|e| e.to_string())),
                    (None, None, None) => Ok(Ok(())),
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
                    Err(inactive) => {
                        match state.cut(inactive) {
                            Cut::Inactive => debug!(client = %state.client.peer, "client inactive for {:?}, closing", settings.timeouts.client),
                            Cut::Incomplete => debug!(client = %state.client.peer, "request not whole within {:?}, closing", settings.timeouts.request_header),
                            Cut::Idle => debug!(client = %state.client.peer, "no request head within {:?}, closing", settings.timeouts.request_header),
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
        // What is left once the HTTP object ended: a socket to park, or to close after a
        // lingering read of the rest of an upload, or nothing.
        let left = match res {
            Err(LaneEnd::Hyper(stream, read)) => {
                lane_conn = None;
                let slot = Arc::new(OnceLock::new());
                h1_conn = Some(new_h1(ClientIo::with_read(
                    stream,
                    state.clone(),
                    Some(slot.clone()),
                    read,
                )));
                h1_slot = Some(slot);
                if stopping {
                    if let Some(c) = h1_conn.as_mut() {
                        c.as_mut().graceful_shutdown();
                    }
                }
                continue;
            }
            Err(end) => {
                lane_conn = None;
                match end {
                    LaneEnd::Parked(stream) => Some((stream, Handback::Parked)),
                    // Refused before its upload was read: always a lingering close.
                    LaneEnd::Linger(stream) => Some((stream, Handback::Closed)),
                    LaneEnd::Closed | LaneEnd::Hyper(..) => None,
                }
            }
            Ok(res) => {
                if let Err(e) = res {
                    debug!(client = %state.client.peer, error = %e, "client connection ended with an error");
                }
                // Dropping the connection object drops the socket wrapper, which hands a
                // parked or closed socket back through the slot; a closed one lingers
                // only if its last request had a body.
                h1_conn = None;
                other_conn = None;
                h1_slot
                    .take()
                    .as_mut()
                    .and_then(Arc::get_mut)
                    .and_then(OnceLock::take)
                    .filter(|(_, h)| {
                        matches!(h, Handback::Parked) || state.last_had_body.load(Ordering::Relaxed)
                    })
            }
        };
        match left {
            Some((stream, Handback::Closed)) => {
                // Boxed: the connection's own future stays small.
                return Box::pin(linger::close(stream, &state, &shutdown)).await;
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

#[cfg(test)]
mod tests {
    use super::super::test_support::{test_ctx, test_session};
    use super::*;

    /// What every open connection costs while idle (parked) is mostly this future:
    /// keep it small (see the `downstream` module docs; hyper's state is boxed and dropped).
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
}
