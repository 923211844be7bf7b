//! Connections to backends: one pool per backend.
//!
//! Owns connecting (with `timeouts.connect`), the HTTP/1.1 handshake, and a lock-free
//! queue of idle keep-alive connections per backend. Why not hyper-util's pooled client:
//! it keys one shared pool by host with no way to close one backend's idle connections
//! (drain needs that), and it merges "could not connect" with "sent and failed", while a
//! balancer must know whether a request left the building before it retries it
//! elsewhere. Here, [`Pool::checkout_idle`] and [`Pool::connect`] are separate steps and
//! hyper's `try_send_request` hands back a request that was never written.
//!
//! A connection returns to the pool only when its response body was read to the end
//! (see `UpstreamBody` in the proxy): a half-read response leaves the connection unusable,
//! so it is dropped and closed instead.

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use crossbeam_queue::ArrayQueue;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::debug;

use super::io::Counted;
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

/// A connection to a backend, ready to carry one request.
pub type Sender = SendRequest<ReqBody>;

/// Why a new connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connect timed out after {0:?}")]
    Timeout(Duration),
    #[error("connect failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("HTTP handshake failed: {0}")]
    Handshake(#[from] hyper::Error),
}

struct Idle {
    sender: Sender,
    since: Instant,
}

/// A TCP connection to a backend address (an IP address, or a name resolved now).
pub async fn dial(addr: &Addr) -> std::io::Result<TcpStream> {
    match addr.socket_addr() {
        Some(sa) => TcpStream::connect(sa).await,
        None => TcpStream::connect((addr.host(), addr.port())).await,
    }
}

impl Idle {
    /// Closed by the backend, or pooled longer than `max_age`: to be dropped.
    fn is_stale(&self, max_age: Duration) -> bool {
        self.sender.is_closed() || self.since.elapsed() > max_age
    }
}

/// The connection pool of one backend.
pub struct Pool {
    /// `None` when pooling is off (`limits.max_idle_per_backend = 0`).
    idle: Option<ArrayQueue<Idle>>,
    closed: AtomicBool,
    /// Cancelled to cut every connection of this pool, busy ones included (drain
    /// deadline); replaced by a fresh token when the pool is reopened.
    kill: arc_swap::ArcSwap<tokio_util::sync::CancellationToken>,
    /// Connections currently open (idle or busy), shared with their driver tasks.
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
    /// and stop pooling. Returns the token tunnels of this backend watch too.
    pub fn force_close(&self) {
        self.close();
        self.kill.load().cancel();
    }

    /// Pool again after a close (rotate-in).
    pub fn reopen(&self) {
        if self.kill.load().is_cancelled() {
            self.kill
                .store(Arc::new(tokio_util::sync::CancellationToken::new()));
        }
        self.closed.store(false, Ordering::Release);
    }

    /// Cancelled when the pool's connections are cut (tunnels stop on it too).
    pub fn kill_token(&self) -> tokio_util::sync::CancellationToken {
        (**self.kill.load()).clone()
    }

    /// An idle connection ready for a request, if one is pooled and fresher than
    /// `max_age`. Stale and closed connections met on the way are dropped.
    pub fn checkout_idle(&self, max_age: Duration) -> Option<Sender> {
        let q = self.idle.as_ref()?;
        let mut busy = Vec::new();
        let mut found = None;
        // Bounded: at most what the queue held when we started.
        for _ in 0..q.len() {
            let Some(idle) = q.pop() else { break };
            if idle.is_stale(max_age) {
                continue; // dropped: closes the connection
            }
            if idle.sender.is_ready() {
                found = Some(idle.sender);
                break;
            }
            // Returned a moment ago and its driver has not caught up yet: keep it.
            busy.push(idle);
        }
        for idle in busy {
            let _ = q.push(idle);
        }
        found
    }

    /// Close idle connections older than `max_age` (and closed ones): the background
    /// sweep, so that a quiet balancer keeps no stale sockets and buffers (checkouts skip
    /// stale connections too, but only when there is traffic). Each idle connection is
    /// looked at once; fresh ones go back in the queue.
    pub fn sweep(&self, max_age: Duration) {
        let Some(q) = &self.idle else { return };
        for _ in 0..q.len() {
            let Some(idle) = q.pop() else { break };
            if idle.is_stale(max_age) {
                continue; // dropped: closes the connection
            }
            let _ = q.push(idle);
        }
    }

    /// Return a connection whose response was read in full.
    pub fn checkin(&self, sender: Sender) {
        if self.is_closed() || sender.is_closed() {
            return;
        }
        if let Some(q) = &self.idle {
            // Full queue: the connection is dropped and closed.
            let _ = q.push(Idle {
                sender,
                since: Instant::now(),
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
    pub async fn connect(&self, addr: &Addr, timeout: Duration) -> Result<Sender, ConnectError> {
        let stream = tokio::time::timeout(timeout, dial(addr))
            .await
            .map_err(|_| ConnectError::Timeout(timeout))??;
        stream.set_nodelay(true)?;
        let (sender, conn) = http1::Builder::new()
            .writev(false)
            .handshake::<_, ReqBody>(TokioIo::new(Counted::new(stream, self.traffic.clone())))
            .await?;
        let open = self.open.clone();
        open.fetch_add(1, Ordering::Relaxed);
        let kill = self.kill_token();
        // The connection's task is polled on every request; a cancellation future polled
        // with it would take the token's lock each time. A second task, woken only when
        // the connection ends or the pool is cut, watches the token and aborts it.
        let driver = tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                debug!(error = %e, "backend connection ended with an error");
            }
        });
        let abort = driver.abort_handle();
        tokio::spawn(async move {
            tokio::select! {
                _ = driver => {}
                _ = kill.cancelled() => {
                    abort.abort();
                    debug!("backend connection cut (drain deadline)");
                }
            }
            open.fetch_sub(1, Ordering::Relaxed);
        });
        Ok(sender)
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

    async fn get(sender: &mut Sender) -> hyper::Response<Incoming> {
        let req = hyper::Request::get("/")
            .header("host", "x")
            .body(ReqBody::Empty)
            .unwrap();
        sender
            .try_send_request(req)
            .await
            .map_err(|e| e.into_error())
            .unwrap()
    }

    #[tokio::test]
    async fn connections_are_reused_after_a_full_response() {
        let (addr, accepted) = backend().await;
        let pool = Pool::new(4);
        let mut s = pool
            .connect(&addr.into(), Duration::from_secs(1))
            .await
            .unwrap();
        let resp = get(&mut s).await;
        http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap();
        pool.checkin(s);
        // Give the connection driver a moment to mark the connection ready.
        let mut again = None;
        for _ in 0..100 {
            again = pool.checkout_idle(Duration::from_secs(10));
            if again.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut s = again.expect("pooled connection");
        get(&mut s).await;
        assert_eq!(accepted.load(Ordering::Relaxed), 1);
        assert_eq!(pool.open_connections(), 1);
    }

    #[tokio::test]
    async fn close_drops_idle_connections_and_refuses_checkins() {
        let (addr, _) = backend().await;
        let pool = Pool::new(4);
        let mut s = pool
            .connect(&addr.into(), Duration::from_secs(1))
            .await
            .unwrap();
        let resp = get(&mut s).await;
        http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap();
        pool.checkin(s);
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

    #[tokio::test]
    async fn force_close_cuts_busy_connections_and_reopen_pools_again() {
        let (addr, _) = backend().await;
        let pool = Pool::new(4);
        let _busy = pool
            .connect(&addr.into(), Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(pool.open_connections(), 1);
        pool.force_close();
        for _ in 0..100 {
            if pool.open_connections() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(pool.open_connections(), 0, "a busy connection is cut too");
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
        assert!(pool.checkout_idle(Duration::from_millis(10)).is_none());
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
