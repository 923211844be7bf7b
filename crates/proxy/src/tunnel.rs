//! Upgraded connections (WebSocket and other `Connection: Upgrade` protocols).
//!
//! Owns the byte tunnel between a client and a backend once both sides switched
//! protocols: copied both ways, closed after `timeouts.tunnel` without traffic, when the
//! balancer stops, or when the backend's tunnels are closed (drain deadline).
//!
//! A tunnel is the rest of one session, as HAProxy counts it: it holds its client
//! connection's session (in `connections_current`, the FRONTEND `scur`, one of the
//! `limits.max_connections` permits, tracked by the graceful stop) and its request's
//! in-flight count on the backend (the server's `scur`, what selection and drain see)
//! until it closes. Open tunnels are also counted on their backend (`tunnels`) and on
//! the frontend (`tunnels_current`, part of the load the scaler averages), once the
//! client's side switched.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::io::{ActivityIo, Clock, Counted};
use super::shared::InFlight;
use crate::session::ConnState;
use crate::stats::FrontendStats;

/// Counts a tunnel (an upgraded connection, or a TCP mode connection) as open on its
/// backend and the frontend until dropped; the request's in-flight count, dropped after
/// it, ends the session on the backend.
pub(crate) struct Open<'a> {
    flight: &'a InFlight,
    stats: &'a FrontendStats,
}

impl<'a> Open<'a> {
    pub(crate) fn new(flight: &'a InFlight, stats: &'a FrontendStats) -> Self {
        flight.backend().tunnels.fetch_add(1, Ordering::Relaxed);
        stats.tunnels_current.fetch_add(1, Ordering::Relaxed);
        Open { flight, stats }
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.flight
            .backend()
            .tunnels
            .fetch_sub(1, Ordering::Relaxed);
        self.stats.tunnels_current.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Wait for the client's upgrade, pass on what the backend sent after its `101`
/// (`server.1`), then copy bytes until either side closes, `idle` passes without
/// traffic, or `stop` is cancelled. `flight` (the upgrade request on its backend) and
/// `conn` (the client connection, with its session) are held until then.
pub(super) async fn run(
    client: OnUpgrade,
    server: (Counted<TcpStream>, Bytes),
    flight: InFlight,
    conn: Arc<ConnState>,
    idle: Duration,
    stop: CancellationToken,
    kill: CancellationToken,
) {
    relay(client, server, &flight, &conn, idle, stop, kill).await;
    // The sockets are closed. The session ends on the backend, then on the frontend:
    // when the graceful stop sees the connection gone, its gear does too.
    drop(flight);
    drop(conn);
}

async fn relay(
    client: OnUpgrade,
    server: (Counted<TcpStream>, Bytes),
    flight: &InFlight,
    conn: &ConnState,
    idle: Duration,
    stop: CancellationToken,
    kill: CancellationToken,
) {
    let backend = flight.backend();
    let (mut server, early) = server;
    let client = match client.await {
        Ok(c) => c,
        Err(e) => {
            debug!(error = %e, "client upgrade did not complete");
            return;
        }
    };
    // The `101` went out and the client's request is over: from here on the session is
    // a tunnel.
    let _open = Open::new(flight, &conn.ctx.stats);
    let clock = Clock::new();
    let last = Arc::new(AtomicU64::new(0));
    // Both directions pass through the client side: watching it sees all traffic.
    let mut client = ActivityIo::new(TokioIo::new(client), clock, last.clone());
    if !early.is_empty() {
        if let Err(e) = client.write_all(&early).await {
            debug!(error = %e, "tunnel closed before it started");
            return;
        }
    }
    let copy = tokio::io::copy_bidirectional(&mut client, &mut server);
    let end = watch(copy, clock, &last, idle, &stop, &kill).await;
    debug!(backend = %backend.name(), ended = ?end, "tunnel closed");
}

/// Why a byte relay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// A side closed (or failed); the relay's result.
    Closed,
    /// The balancer stops.
    Stopped,
    /// The backend's connections were cut (drain deadline).
    Cut,
    /// No byte moved for the idle limit.
    Idle,
}

/// Run `copy` (bytes both ways) until it ends, the balancer stops (`stop`), the
/// backend's connections are cut (`kill`), or no byte moved for `idle` (as `last`,
/// kept on `clock` by an [`ActivityIo`], says). One timer, re-armed only when it fires.
pub(crate) async fn watch<F: std::future::Future>(
    copy: F,
    clock: Clock,
    last: &AtomicU64,
    idle: Duration,
    stop: &CancellationToken,
    kill: &CancellationToken,
) -> Ended {
    tokio::pin!(copy);
    let watchdog = tokio::time::sleep(idle);
    tokio::pin!(watchdog);
    loop {
        tokio::select! {
            _ = &mut copy => return Ended::Closed,
            _ = stop.cancelled() => return Ended::Stopped,
            _ = kill.cancelled() => return Ended::Cut,
            _ = &mut watchdog => {
                let quiet = clock.now_ms().saturating_sub(last.load(Ordering::Relaxed));
                let limit = idle.as_millis() as u64;
                if quiet >= limit {
                    return Ended::Idle;
                }
                watchdog.as_mut().reset(tokio::time::Instant::now() + Duration::from_millis(limit - quiet));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::time::Instant;
    use tokio_util::sync::CancellationToken;
    use tokio_util::task::TaskTracker;

    use crate::router::Router;
    use crate::stats::FrontendStats;
    use crate::{serve, ProxyCtx, Settings};
    use gearlb_core::routing::BackendSpec;

    /// Read until the end of a message head (bounded); what was read.
    async fn read_head(s: &mut TcpStream) -> String {
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while got.len() < 64 * 1024 && !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf).await {
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    }

    /// A backend that answers every request with a `101`, then echoes.
    async fn echo_backend() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    read_head(&mut s).await;
                    let head = "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n";
                    if s.write_all(head.as_bytes()).await.is_ok() {
                        let (mut r, mut w) = s.split();
                        let _ = tokio::io::copy(&mut r, &mut w).await;
                    }
                });
            }
        });
        addr
    }

    /// Some bytes there and back through an open tunnel.
    async fn echoes(c: &mut TcpStream, msg: &[u8]) -> bool {
        let mut back = vec![0u8; msg.len()];
        c.write_all(msg).await.is_ok()
            && tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut back))
                .await
                .is_ok_and(|r| r.is_ok())
            && back == msg
    }

    async fn eventually(mut f: impl FnMut() -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if f() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        f()
    }

    /// Once hyper hands an upgraded socket over, the client connection's task returns;
    /// the tunnel carries on with the connection's session: counted once in
    /// `connections_current`, on its backend and as load, holding its connection
    /// permit, and keeping the graceful stop waiting until the stop closes it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tunnel_keeps_its_connections_session_until_it_closes() {
        let router = Arc::new(Router::new(4));
        router.replace_backends(vec![BackendSpec {
            name: "web1".into(),
            addr: echo_backend().await.into(),
            gear_dns: None,
            cookie: None,
            backup: false,
            max_connections: None,
            version: None,
            compatible: Vec::new(),
            send_proxy: None,
        }]);
        let stats = Arc::new(FrontendStats::default());
        let stopping = CancellationToken::new();
        let ctx = Arc::new(ProxyCtx::new(
            router.clone(),
            stats.clone(),
            Settings::from_config(&gearlb_core::config::Config::default()),
            tokio::sync::mpsc::unbounded_channel().0,
            stopping.clone(),
        ));
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = l.local_addr().unwrap();
        let (shutdown, tracker) = (CancellationToken::new(), TaskTracker::new());
        // One connection at most.
        let accepting = tokio::spawn(serve(l, ctx, 1, shutdown.clone(), tracker.clone()));

        let mut c = TcpStream::connect(proxy).await.unwrap();
        c.write_all(b"GET /ws HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n")
            .await
            .unwrap();
        let head = read_head(&mut c).await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head:?}");
        assert!(echoes(&mut c, b"ping").await, "tunnel does not echo");

        let backend = router.load().targets()[0].clone();
        let r = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        assert_eq!(r(&stats.connections_current), 1);
        assert_eq!(r(&stats.tunnels_current), 1);
        assert!(
            eventually(|| r(&stats.requests_current) == 0).await,
            "the upgrade request ended with its 101"
        );
        assert_eq!(
            stats.sessions_now(),
            1,
            "one session, not a request and a tunnel"
        );
        assert_eq!(
            (backend.outstanding(), r(&backend.tunnels)),
            (1, 1),
            "one session on the backend"
        );

        // The tunnel holds the only permit: another connection is closed at once.
        let mut other = TcpStream::connect(proxy).await.unwrap();
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(5), other.read(&mut buf))
            .await
            .expect("over the limit: closed at once");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        assert_eq!(r(&stats.connections_refused), 1);

        // The listener stops: the tunnel's session still holds the stop back, and works.
        shutdown.cancel();
        accepting.await.unwrap();
        tracker.close();
        assert_eq!(tracker.len(), 1, "the tunnel is tracked");
        assert!(echoes(&mut c, b"pong").await);

        // The balancer's stop closes the tunnel, and its end is what the stop waits for.
        stopping.cancel();
        tokio::time::timeout(Duration::from_secs(5), tracker.wait())
            .await
            .expect("the stop waited for a tunnel that was closed");
        let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
            .await
            .expect("the client sees the tunnel close");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        assert_eq!(r(&stats.connections_current), 0);
        assert_eq!(r(&stats.tunnels_current), 0);
        assert_eq!((backend.outstanding(), r(&backend.tunnels)), (0, 0));
    }
}
