//! The downstream connection's task for a TLS connection: the handshake (bounded by
//! `request_header`), then HTTP/1.1 or HTTP/2 by ALPN under the connection's watchdog,
//! and the graceful stop. HTTP/1.1 starts on the byte path ([`super::lane`]), as a
//! plain connection does, and goes to hyper's server from the first request the byte
//! path does not take. Never parked; the lingering close only after a request the byte
//! path refused (see `LIFECYCLE.md`).

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::Request;
use hyper_util::rt::TokioIo;
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::conn::serve_request;
use super::lane::{self, LaneEnd};
use super::protocol::h2_settings;
use super::socket::ClientIo;
use super::watchdog::{check_deadlines, StreamExec, GOAWAY_GRACE_MS};
use crate::forward::ClientInfo;
use crate::session::ConnState;
use crate::session::Session;
use crate::shared::{ProxyCtx, Settings};

/// Serve one HTTPS client connection: TLS handshake (bounded by `request_header`), then
/// HTTP/2 (by ALPN) through hyper-util's auto builder, or HTTP/1.1 on the byte path and
/// then hyper's server, with the client inactivity timeout kept here. TLS connections
/// are not parked. The `session` counts from before the handshake.
pub(crate) async fn serve_tls_connection(
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
        ClientInfo::new(peer, local_port, "https")
            .trusted(settings.trust_forwarded.trusts(peer.ip())),
        &settings.timeouts,
    ));
    let svc_state = state.clone();
    let service = move |req: Request<Incoming>| serve_request(&svc_state, req);
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let watchdog = tokio::time::sleep(head.min(settings.timeouts.client));
    let watched = Watched {
        ctx,
        state: &state,
        peer,
        shutdown: &shutdown,
        client_ms: settings.timeouts.client.as_millis() as u64,
        head_ms: head.as_millis() as u64,
        h2,
    };
    if h2 {
        let io = TokioIo::new(ClientIo::new(stream, state.clone(), None));
        let mut b = auto::Builder::new(StreamExec(state.clone()));
        h2_settings(b.http2(), &settings);
        let conn = b.serve_connection_with_upgrades(io, service_fn(service));
        drive(conn, |c| c.graceful_shutdown(), watched, watchdog).await
    } else {
        // HTTP/1.1: the byte path until a request it does not take, then hyper's server
        // with the bytes read so far, as for plain connections; the request head
        // timeout kept by the watchdog.
        let served = lane::serve(state.clone(), stream, shutdown.clone(), false);
        let (stream, read) = match lane_first(served, watched, watchdog).await {
            Some(LaneEnd::Hyper(stream, read)) => (stream, read),
            // A request refused before its upload was read: the 400 and close_notify
            // went out; the rest of the upload is read and dropped, so that closing
            // does not reset the connection before the client reads the answer.
            Some(LaneEnd::Linger(stream)) => {
                return super::linger::close(stream, &state, &shutdown).await;
            }
            // Parking is for plain connections.
            Some(LaneEnd::Closed | LaneEnd::Parked(_)) | None => return,
        };
        let io = TokioIo::new(ClientIo::with_read(stream, state.clone(), None, read));
        let conn = settings
            .h1
            .serve_connection(io, service_fn(service))
            .with_upgrades();
        let watchdog = tokio::time::sleep(Duration::from_millis(state.tick_ms));
        drive(conn, |c| c.graceful_shutdown(), watched, watchdog).await
    }
}

/// Run the byte path of a TLS connection under the watchdog until it lets go (how, with
/// the stream if it has one), or `None` when the watchdog closes it (a timeout).
///
/// An idle connection, and only an idle one, waits on the stop itself (a cancellation
/// future takes a lock when polled: not on every wake-up of a busy connection, which
/// sees the stop when its answer is written). At the stop the byte path is polled at
/// once: between requests it closes, a request in flight is answered with
/// `connection: close`.
async fn lane_first<S, F>(served: F, w: Watched<'_>, watchdog: Sleep) -> Option<LaneEnd<S>>
where
    F: Future<Output = LaneEnd<S>>,
{
    let stop = w.shutdown.cancelled();
    tokio::pin!(served, watchdog, stop);
    let mut stopping = false;
    poll_fn(|cx| loop {
        if let Poll::Ready(end) = served.as_mut().poll(cx) {
            return Poll::Ready(Some(end));
        }
        let idle = w.state.in_flight.load(Ordering::Relaxed) == 0;
        if idle && !stopping && stop.as_mut().poll(cx).is_ready() {
            // The byte path looks at the stop itself: poll it again.
            stopping = true;
            continue;
        }
        if let Err(inactive) = ready!(w.poll_watchdog(watchdog.as_mut(), cx)) {
            w.closing(inactive);
            return Poll::Ready(None);
        }
    })
    .await
}

/// What the loop of a TLS connection looks at besides its connection object.
#[derive(Clone, Copy)]
struct Watched<'a> {
    ctx: &'a ProxyCtx,
    state: &'a ConnState,
    peer: SocketAddr,
    shutdown: &'a CancellationToken,
    client_ms: u64,
    head_ms: u64,
    /// HTTP/2 by ALPN: an idle connection is sent GOAWAY before it closes.
    h2: bool,
}

impl Watched<'_> {
    /// The connection's watchdog, for both loops: an HTTP/1.1 request in flight is
    /// looked at within a tick (its wait on the gear, also when it began while the
    /// watchdog slept to the idle deadline; HTTP/2 streams keep their own timers); when
    /// it fires, the deadlines are looked at and it is set for the next. `Pending` until
    /// it fires, then `Ok`, or `Err(inactive)` when a deadline passed (`inactive`: the
    /// client's, `timeouts.client`; else `request_header`).
    fn poll_watchdog(
        &self,
        mut watchdog: Pin<&mut Sleep>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), bool>> {
        if !self.h2 && self.state.in_flight.load(Ordering::Relaxed) > 0 {
            let soon = Instant::now() + Duration::from_millis(self.state.tick_ms);
            if watchdog.deadline() > soon {
                watchdog.as_mut().reset(soon);
            }
        }
        ready!(watchdog.as_mut().poll(cx));
        let now = self.ctx.clock.now_ms();
        let next = check_deadlines(
            self.state,
            now,
            self.client_ms,
            self.head_ms,
            self.state.is_h2(),
        )?;
        let wait = Duration::from_millis(next.saturating_sub(now).max(1));
        watchdog.reset(Instant::now() + wait);
        Poll::Ready(Ok(()))
    }

    /// A deadline passed: the connection closes (counted if it was the client's
    /// inactivity, or a request that stopped coming: [`ConnState::cut`]).
    fn closing(&self, inactive: bool) {
        let cut = self.state.cut(inactive);
        debug!(client = %self.peer, ?cut, "idle or slow client connection closed");
    }
}

/// The loop of a TLS connection, the same for both of hyper's connection objects
/// (HTTP/1.1's and the auto builder's): they share no trait for the graceful stop, so
/// `graceful` is it. Generic, so built once per connection type: no dynamic dispatch.
async fn drive<C, E>(conn: C, graceful: impl Fn(Pin<&mut C>), w: Watched<'_>, watchdog: Sleep)
where
    C: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let stop = w.shutdown.cancelled();
    tokio::pin!(conn, watchdog, stop);
    let mut stopping = false;
    let mut going_away = false;
    poll_fn(|cx| loop {
        if let Poll::Ready(res) = conn.as_mut().poll(cx) {
            if let Err(e) = res {
                debug!(client = %w.peer, error = %e, "client connection ended with an error");
            }
            return Poll::Ready(());
        }
        if !stopping && stop.as_mut().poll(cx).is_ready() {
            stopping = true;
            graceful(conn.as_mut());
            continue;
        }
        if going_away {
            // The GOAWAY had its moment to go out.
            ready!(watchdog.as_mut().poll(cx));
            return Poll::Ready(());
        }
        match ready!(w.poll_watchdog(watchdog.as_mut(), cx)) {
            Ok(()) => {}
            Err(false) if w.h2 => {
                // Idle: GOAWAY, and a moment for it to go out.
                graceful(conn.as_mut());
                going_away = true;
                watchdog
                    .as_mut()
                    .reset(Instant::now() + Duration::from_millis(GOAWAY_GRACE_MS));
            }
            Err(inactive) => {
                w.closing(inactive);
                return Poll::Ready(());
            }
        }
    })
    .await
}
