//! Unit tests of backend connections: the pool, reuse, resolving, the early-answer
//! classifier; the exchange on scripted I/O is in [`scripted`].

use std::future::poll_fn;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::body::UpBody;
use super::connection::{Conn, ConnIo, OpenGuard, READ_MAX, READ_MIN};
use super::error::ConnectError;
use super::error::SendError;
use super::exchange::{early, send, Early, MAX_INTERIM};
use super::pool::{Check, Pool};
use super::request::{outgoing, Outgoing, ReqBody};
use super::retry::SendFailure;
use super::upload::finish_upload;
use crate::h1::{self, Head, ReqFraming};
use crate::wait::{Phase, Wait};
use gearlb_core::gear::Addr;

mod frames;
mod scripted;

/// A wait with the default limits, for exchanges nobody keeps time for.
fn w() -> Wait {
    Wait::new(
        crate::io::Clock::new(),
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
                let mut r = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len())
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

    let short = scripted_backend(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", true).await;
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
    assert_eq!(head.status, 101);
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
