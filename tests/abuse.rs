//! Abusive clients against a real `gearlb run` process: slowloris heads, clients that
//! never read, connection floods, request smuggling and malformed requests, forged
//! cookies, garbage on the gossip port, other users on the control socket, and hostile
//! control arguments. Every test is bounded in time and count and talks to 127.0.0.1 only.

mod support;

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::pin::Pin;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use support::*;

/// The status code of a raw HTTP/1 response (0 when there is none).
fn status_of(out: &str) -> u16 {
    out.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .filter(|_| out.starts_with("HTTP/1."))
        .unwrap_or(0)
}

/// [`raw`] off the async runtime.
async fn raw_async(addr: SocketAddr, request: Vec<u8>, wait: Duration) -> (String, Duration) {
    tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        let out = raw(addr, &request, wait);
        (out, t.elapsed())
    })
    .await
    .unwrap()
}

// ---------------------------------------------------------------------------------------
// A web gear that records every byte it receives.

/// A socket that appends every byte read from it to a shared log.
struct Tap<T> {
    inner: T,
    log: Arc<Mutex<Vec<u8>>>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Tap<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        this.log
            .lock()
            .unwrap()
            .extend_from_slice(&buf.filled()[before..]);
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tap<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// What the recording gear's own HTTP parser made of one request.
#[derive(Clone, Debug)]
struct Seen {
    target: String,
    content_length: Option<String>,
    transfer_encoding: Option<String>,
    /// The body arrived whole.
    complete: bool,
}

/// A web gear (hyper HTTP/1.1 server) that keeps the raw bytes it received and what its
/// parser saw; it reads every body to its end before answering `200 ok`.
struct Recorder {
    addr: SocketAddr,
    bytes: Arc<Mutex<Vec<u8>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Recorder {
    async fn start() -> Recorder {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let bytes: Arc<Mutex<Vec<u8>>> = Arc::default();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let (b, s) = (bytes.clone(), seen.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let io = Tap {
                    inner: stream,
                    log: b.clone(),
                };
                let s = s.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: http::Request<Incoming>| {
                        let s = s.clone();
                        async move {
                            let h = |n: &str| {
                                req.headers()
                                    .get(n)
                                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                            };
                            let mut seen = Seen {
                                target: req.uri().to_string(),
                                content_length: h("content-length"),
                                transfer_encoding: h("transfer-encoding"),
                                complete: false,
                            };
                            seen.complete = req.into_body().collect().await.is_ok();
                            s.lock().unwrap().push(seen);
                            Ok::<_, Infallible>(http::Response::new(full("ok")))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(io), svc)
                        .await;
                });
            }
        });
        Recorder { addr, bytes, seen }
    }

    fn take(&self) -> (Vec<u8>, Vec<Seen>) {
        (
            std::mem::take(&mut *self.bytes.lock().unwrap()),
            std::mem::take(&mut *self.seen.lock().unwrap()),
        )
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

// ---------------------------------------------------------------------------------------
// Slow and greedy clients.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_heads_are_cut_at_the_request_header_timeout() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("web1", b.addr)],
            "[timeouts]\nrequest_header = \"1s\"\n[health]\nenabled = false",
        ),
    );
    let proxy = lb.proxy;
    // 20 clients trickle a head that never ends, one byte every 200 ms; one sends nothing.
    let mut clients = Vec::new();
    for i in 0..21 {
        clients.push(tokio::task::spawn_blocking(move || {
            let mut s = TcpStream::connect(proxy).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ";
            let t = Instant::now();
            let mut buf = [0u8; 512];
            let mut answer = Vec::new();
            for n in 0..40 {
                if i < 20 {
                    let byte = head.get(n).copied().unwrap_or(b'a');
                    if s.write_all(&[byte]).is_err() {
                        break;
                    }
                }
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(k) => answer.extend_from_slice(&buf[..k]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                    Err(_) => break,
                }
            }
            (t.elapsed(), String::from_utf8_lossy(&answer).into_owned())
        }));
    }
    // Meanwhile a normal client is served at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    let got = get(proxy, "/", &[]).await.unwrap();
    assert_eq!(got.status, 200);
    assert!(
        t.elapsed() < Duration::from_millis(650),
        "{:?}",
        t.elapsed()
    );
    for (i, c) in clients.into_iter().enumerate() {
        let (took, answer) = c.await.unwrap();
        assert!(
            took >= Duration::from_millis(800) && took < Duration::from_secs(3),
            "client {i}: connection lasted {took:?} (request_header is 1s)"
        );
        assert!(
            answer.is_empty() || status_of(&answer) == 408,
            "client {i}: {answer:?}"
        );
    }
    assert_eq!(b.requests(), 1, "only the normal request reached the gear");
}

/// A gear that answers `ok` to every request, behind a balancer with `request_header`
/// set to `request_header` and no health checks.
async fn ok_gear_behind(dir: &Path, request_header: &str) -> (Scripted, Gearlb) {
    let gear =
        Scripted::start(|_| Reply::after(&b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"[..]))
            .await;
    let lb = Gearlb::start(
        dir,
        &config_text(
            dir,
            &[("web1", gear.addr)],
            &format!(
                "[timeouts]\nrequest_header = \"{request_header}\"\n[health]\nenabled = false"
            ),
        ),
    );
    (gear, lb)
}

/// Connections cut at `request_header` are counted as client timeouts (`client_timeouts`,
/// HAProxy's `ereq`) when a request had begun and stopped coming, on the byte path and on
/// hyper's: an operator sees slow heads and bodies. A keep-alive connection that sent
/// nothing after its response, closed at the same timeout, is not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_stop_coming_are_counted_idle_connections_are_not() {
    let dir = workdir();
    let (_gear, lb) = ok_gear_behind(dir.path(), "1s").await;
    let proxy = lb.proxy;
    // Sends each part in turn (reading the answer to each whole request), then waits
    // for the balancer to close: how long that took, and everything read.
    let cut = |parts: &'static [&'static [u8]]| {
        tokio::task::spawn_blocking(move || {
            let mut s = TcpStream::connect(proxy).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut answer = Vec::new();
            let mut buf = [0u8; 4096];
            for part in parts {
                s.write_all(part).unwrap();
                if part.ends_with(b"\r\n\r\n") {
                    while !String::from_utf8_lossy(&answer).ends_with("ok") {
                        let n = s.read(&mut buf).unwrap();
                        assert!(n > 0, "closed before the answer");
                        answer.extend_from_slice(&buf[..n]);
                    }
                }
            }
            let t = Instant::now();
            let _ = s.read_to_end(&mut answer);
            (t.elapsed(), String::from_utf8_lossy(&answer).into_owned())
        })
    };
    let timeouts = || lb.status_json()["frontend"]["client_timeouts"].clone();
    const HYPER_FIRST: &[u8] = b"GET /h HTTP/1.1\r\nHost: x\r\nConnection: x-drop\r\n\r\n";
    let cases: [(&str, &'static [&'static [u8]], u64); 5] = [
        (
            "idle after a response (byte path)",
            &[b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"],
            0,
        ),
        ("idle after a response (hyper)", &[HYPER_FIRST], 0),
        ("a head that stops", &[b"GET / HTTP/1.1\r\nHost: x\r\n"], 1),
        (
            "a body that stops",
            &[b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"],
            1,
        ),
        (
            "a head that stops after hyper's answer",
            &[HYPER_FIRST, b"GET /next HTTP/1.1\r\n"],
            1,
        ),
    ];
    let mut expected = 0;
    for (name, parts, counted) in cases {
        let (took, answer) = cut(parts).await.unwrap();
        assert!(
            took >= Duration::from_millis(500) && took < Duration::from_secs(5),
            "{name}: closed after {took:?} (request_header is 1s): {answer:?}"
        );
        expected += counted;
        assert_eq!(timeouts(), expected, "{name}");
    }
}

/// A body with a length that stops coming (a slow POST) is held at the balancer, not
/// passed on: the connection is cut at `timeouts.request_header`, as a head that stops
/// coming is, and the gear never sees the request, nor a part of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stops_coming_is_cut_at_the_request_header_timeout() {
    let dir = workdir();
    let (gear, lb) = ok_gear_behind(dir.path(), "1s").await;
    let proxy = lb.proxy;
    let took = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(proxy).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let t = Instant::now();
        s.write_all(b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
            .unwrap();
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        (t.elapsed(), String::from_utf8_lossy(&answer).into_owned())
    })
    .await
    .unwrap();
    let (took, answer) = took;
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(5),
        "the connection lasted {took:?} (request_header is 1s)"
    );
    assert!(answer.is_empty() || status_of(&answer) == 408, "{answer:?}");
    // The same request with its whole body goes through at once.
    let out = raw(
        proxy,
        b"POST /whole HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
        Duration::from_secs(5),
    );
    assert_eq!(status_of(&out), 200, "{out:?}");
    let seen = gear.seen();
    assert_eq!(seen.len(), 1, "only the whole request reached the gear");
    assert!(seen[0].head.starts_with("POST /whole "));
    assert_eq!(seen[0].body, b"abc");
}

/// The body's time counts from its head's end: on a keep-alive connection that waited
/// most of `request_header` for its next head, a small body that takes less than
/// `request_header` after its head still goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_gets_the_request_header_time_from_its_heads_end() {
    let dir = workdir();
    let (gear, lb) = ok_gear_behind(dir.path(), "2s").await;
    let proxy = lb.proxy;
    let answers = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(proxy).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).unwrap();
        let first = String::from_utf8_lossy(&buf[..n]).into_owned();
        // 1.5 s of the 2 s for the next head, then the head and part of its body; the
        // rest 1 s later (2.5 s after the last response, 1 s after the head).
        std::thread::sleep(Duration::from_millis(1500));
        s.write_all(
            b"POST /late HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\nConnection: close\r\n\r\nabc",
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(1000));
        let _ = s.write_all(b"def");
        let mut second = Vec::new();
        let _ = s.read_to_end(&mut second);
        (first, String::from_utf8_lossy(&second).into_owned())
    })
    .await
    .unwrap();
    assert_eq!(status_of(&answers.0), 200, "{:?}", answers.0);
    assert_eq!(status_of(&answers.1), 200, "{:?}", answers.1);
    let seen = gear.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen[1].head.starts_with("POST /late "));
    assert_eq!(seen[1].body, b"abcdef");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_do_not_read_do_not_pin_memory() {
    const SIZE: u64 = 256 << 20;
    let b = TestBackend::start("big").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("big", b.addr)], "[health]\nenabled = false"),
    );
    assert_eq!(get(lb.proxy, "/", &[]).await.unwrap().status, 200);
    let (rss_before, _) = lb.rss_kib();
    let proxy = lb.proxy;
    let request = format!("GET /download?bytes={SIZE} HTTP/1.1\r\nHost: x\r\n\r\n");
    // Three clients read the head and stop; one reads 4 KiB every 100 ms.
    let mut held = Vec::new();
    for i in 0..4 {
        let request = request.clone();
        held.push(tokio::task::spawn_blocking(move || {
            let mut s = TcpStream::connect(proxy).unwrap();
            s.write_all(request.as_bytes()).unwrap();
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).unwrap();
            assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
            let mut read = n as u64;
            if i == 3 {
                for _ in 0..25 {
                    std::thread::sleep(Duration::from_millis(100));
                    read += s.read(&mut buf).unwrap() as u64;
                }
            } else {
                std::thread::sleep(Duration::from_millis(2500));
            }
            (s, read)
        }));
    }
    let mut streams = Vec::new();
    for h in held {
        let (s, read) = h.await.unwrap();
        assert!(read < SIZE);
        streams.push(s);
    }
    // All four are "in flight" now: 1 GiB the gear would send if nothing pushed back.
    let (rss_now, peak) = lb.rss_kib();
    let from_gear = lb.status_json()["backends"][0]["bytes_received"]
        .as_u64()
        .unwrap();
    assert!(
        peak < rss_before + 32 * 1024,
        "RSS grew from {rss_before} KiB to {rss_now} KiB (peak {peak} KiB)"
    );
    assert!(
        from_gear < 64 << 20,
        "{from_gear} bytes read from the gear: no back-pressure"
    );
    // Others are served meanwhile.
    let got = get(lb.proxy, "/", &[]).await.unwrap();
    assert_eq!(got.status, 200);
    drop(streams);
}

/// Raise this process's soft limit on open files to `want` (at most the hard limit).
fn raise_nofile_limit(want: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let want = limit.maximum.map_or(want, |max| max.min(want));
    if limit.current.is_some_and(|soft| soft < want) {
        let raised = Rlimit {
            current: Some(want),
            maximum: limit.maximum,
        };
        setrlimit(Resource::Nofile, raised).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_max_connections_are_refused_and_served_ones_unaffected() {
    const LIMIT: usize = 1000;
    raise_nofile_limit(16_384);
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("web1", b.addr)],
            &format!(
                "[limits]\nmax_connections = {LIMIT}\n[timeouts]\nrequest_header = \"30s\"\n[health]\nenabled = false"
            ),
        ),
    );
    let proxy = lb.proxy;
    let request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    let expected = b"backend web1";
    // Read one whole response (its body is `backend web1`).
    fn answer(s: &mut TcpStream, expected: &[u8]) -> Result<(), String> {
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.ends_with(expected) {
            match s.read(&mut buf) {
                Ok(0) => return Err(format!("closed after {:?}", String::from_utf8_lossy(&got))),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => return Err(e.to_string()),
            }
        }
        if got.starts_with(b"HTTP/1.1 200") {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&got).into_owned())
        }
    }
    let t = Instant::now();
    let served = tokio::task::spawn_blocking(move || {
        let mut conns: Vec<TcpStream> = (0..LIMIT)
            .map(|_| {
                let s = TcpStream::connect(proxy).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                s
            })
            .collect();
        for s in &mut conns {
            s.write_all(request).unwrap();
        }
        for (i, s) in conns.iter_mut().enumerate() {
            answer(s, expected).unwrap_or_else(|e| panic!("connection {i}: {e}"));
        }
        conns
    })
    .await
    .unwrap();
    let opened = t.elapsed();

    // 1000 more: each is closed at once, without an answer.
    let t = Instant::now();
    let refused = tokio::task::spawn_blocking(move || {
        let mut answered = 0;
        for _ in 0..LIMIT {
            let mut s = TcpStream::connect(proxy).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let _ = s.write_all(request);
            let mut buf = [0u8; 64];
            if matches!(s.read(&mut buf), Ok(n) if n > 0) {
                answered += 1;
            }
        }
        answered
    })
    .await
    .unwrap();
    let flood = t.elapsed();
    assert_eq!(refused, 0, "connections over the limit were served");
    assert!(
        flood < Duration::from_secs(10),
        "refusing {LIMIT} connections took {flood:?}"
    );

    // Every connection that was in is still served.
    let t = Instant::now();
    tokio::task::spawn_blocking(move || {
        let mut conns = served;
        for (i, s) in conns.iter_mut().enumerate() {
            s.write_all(request).unwrap();
            answer(s, expected).unwrap_or_else(|e| panic!("connection {i} after the flood: {e}"));
        }
    })
    .await
    .unwrap();
    let again = t.elapsed();
    let front = &lb.status_json()["frontend"];
    assert_eq!(front["connections_refused"], LIMIT as u64, "{front}");
    assert_eq!(front["connections_max"], LIMIT as u64, "{front}");
    eprintln!(
        "{LIMIT} served in {opened:?}, {LIMIT} refused in {flood:?}, served again in {again:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Request smuggling and malformed requests.

/// How a request must be handled.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// Answered with this status by the balancer; not one byte reaches a gear.
    Refused(u16),
    /// Answered 400 when the body turns out malformed; the gear saw at most the head,
    /// never a whole request, and its connection was closed.
    BadBody,
    /// `Content-Length` and `Transfer-Encoding`: forwarded once by `Transfer-Encoding`
    /// alone (the length dropped), and the client connection closed after the answer.
    TeWins,
}

const SMUGGLED: &[u8] = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggling_attempts_are_refused_and_never_forwarded_ambiguously() {
    use Expect::*;
    let gear = Recorder::start().await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("rec", gear.addr)],
            "[health]\nenabled = false",
        ),
    );
    let cases: Vec<(&str, Vec<u8>, Expect)> = vec![
        ("CL then TE", [&b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"[..], SMUGGLED].concat(), TeWins),
        ("TE then CL", [&b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n"[..], SMUGGLED].concat(), TeWins),
        ("two lengths in one header", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nhello!".to_vec(), Refused(400)),
        ("signed length", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello".to_vec(), Refused(400)),
        ("obs-fold", b"GET / HTTP/1.1\r\nHost: x\r\nX-Foo: a\r\n b\r\n\r\n".to_vec(), Refused(400)),
        ("obs-fold Transfer-Encoding", [&b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\nContent-Length: 3\r\n\r\nabc"[..], SMUGGLED].concat(), Refused(400)),
        ("chunked, identity", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n5\r\nhello\r\n0\r\n\r\n".to_vec(), Refused(400)),
        ("identity", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\nhello".to_vec(), Refused(400)),
        ("xchunked", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".to_vec(), Refused(400)),
        ("chunked twice", [&b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"[..], SMUGGLED].concat(), Refused(400)),
        ("chunked, chunked", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n".to_vec(), Refused(400)),
        ("space before colon", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n".to_vec(), Refused(400)),
        ("HTTP/1.0 chunked", b"POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(), Refused(400)),
        ("two Host headers", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".to_vec(), Refused(400)),
        ("Host differs from the target", b"GET http://evil.example/ HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), Refused(400)),
        ("no Host", b"GET / HTTP/1.1\r\n\r\n".to_vec(), Refused(400)),
        ("chunk size 0x5", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n".to_vec(), BadBody),
        ("negative chunk size", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\nhello\r\n0\r\n\r\n".to_vec(), BadBody),
        ("chunk size overflow", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\nhello\r\n0\r\n\r\n".to_vec(), BadBody),
        ("chunk longer than its size", [&b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n"[..], SMUGGLED].concat(), BadBody),
        ("chunk size with junk", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5 x\r\nhello\r\n0\r\n\r\n".to_vec(), BadBody),
    ];
    for (name, request, expect) in cases {
        let _ = gear.take();
        let (out, took) = raw_async(lb.proxy, request, Duration::from_secs(5)).await;
        // Whatever reached the gear has arrived by now.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (bytes, seen) = gear.take();
        assert!(
            !contains(&bytes, b"/smuggled"),
            "{name}: the smuggled request reached the gear: {:?}",
            String::from_utf8_lossy(&bytes)
        );
        assert!(
            took < Duration::from_secs(4),
            "{name}: the connection stayed open after the answer"
        );
        let status = status_of(&out);
        match expect {
            Refused(code) => {
                assert_eq!(status, code, "{name}: {out:?}");
                assert!(
                    bytes.is_empty(),
                    "{name}: forwarded {:?}",
                    String::from_utf8_lossy(&bytes)
                );
            }
            BadBody => {
                assert_eq!(status, 400, "{name}: {out:?}");
                assert!(seen.len() <= 1, "{name}: {seen:?}");
                assert!(
                    seen.iter().all(|s| !s.complete),
                    "{name}: the gear got a whole request: {seen:?}"
                );
            }
            TeWins => {
                assert_eq!(status, 200, "{name}: {out:?}");
                assert!(
                    out.to_ascii_lowercase().contains("connection: close"),
                    "{name}: {out:?}"
                );
                assert_eq!(seen.len(), 1, "{name}: {seen:?}");
                let s = &seen[0];
                assert!(s.complete && s.target == "/", "{name}: {s:?}");
                assert_eq!(s.content_length, None, "{name}: both framings forwarded");
                assert_eq!(s.transfer_encoding.as_deref(), Some("chunked"), "{name}");
            }
        }
    }
    // The gear was never blamed for what clients sent: still up, no error counted.
    let b = &lb.status_json()["backends"][0];
    assert_eq!(b["state"], "up", "{b}");
    assert_eq!(b["errors"], 0, "{b}");
    let got = get(lb.proxy, "/", &[]).await.unwrap();
    assert_eq!((got.status, got.text().as_str()), (200, "ok"));
}

/// `POST /front` whose body is `GET /smuggled`: what a front end that ends lines at LF
/// sends behind a trailer section it saw end at `\n\r\n`.
fn front_hiding_a_request() -> Vec<u8> {
    let head = format!(
        "POST /front HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        SMUGGLED.len()
    );
    [head.as_bytes(), SMUGGLED].concat()
}

/// The gear saw the first request only, and never the hidden one.
fn assert_only_first_seen(gear: &Scripted) {
    let seen = gear.seen();
    assert!(
        seen.iter().all(|r| !r.head.contains("/smuggled")),
        "{seen:?}"
    );
    assert_eq!(seen.len(), 1, "{seen:?}");
}

/// hyper's decoder reads a chunked body's trailer section up to the first empty CRLF
/// line, bare LFs included. A front end that ends lines at LF sees the trailer section
/// end at `\n\r\n` and sends the next request; the balancer would take that request's
/// head in as trailer lines and read its body as a request nobody sent ("TERM.TRAIL").
/// A request whose body had a trailer section is answered with `Connection: close`, and
/// nothing after it on the connection reaches a gear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_hidden_behind_a_trailer_section_never_reaches_a_gear() {
    let gear = Recorder::start().await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("rec", gear.addr)],
            "[health]\nenabled = false",
        ),
    );
    let front = front_hiding_a_request();
    for trailer in [&b"X-T: y\n\r\n"[..], b"\n", b"X-T: y\r\n\r\n"] {
        let request = [
            &b"POST /first HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n"[..],
            trailer,
            &front,
        ]
        .concat();
        let _ = gear.take();
        let (out, took) = raw_async(lb.proxy, request, Duration::from_secs(5)).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (bytes, seen) = gear.take();
        let name = String::from_utf8_lossy(trailer);
        assert!(
            !contains(&bytes, b"/smuggled"),
            "{name:?}: the hidden request reached the gear: {:?}",
            String::from_utf8_lossy(&bytes)
        );
        assert_eq!(status_of(&out), 200, "{name:?}: {out:?}");
        assert!(
            out.to_ascii_lowercase().contains("connection: close"),
            "{name:?}: {out:?}"
        );
        assert!(took < Duration::from_secs(4), "{name:?}: left open");
        let targets: Vec<&str> = seen.iter().map(|s| s.target.as_str()).collect();
        // A trailer section that ended where it should leaves `/front` a request of its
        // own: it is not served on this connection either (the client sends it again).
        assert_eq!(targets, ["/first"], "{name:?}");
    }
}

/// As above, where the gear answered before the body (full duplex): the answer went
/// out on a connection kept alive, and the trailer section comes after it. The request
/// hyper then reads behind it is refused, and reaches no gear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_behind_a_trailer_section_after_an_early_answer_is_refused() {
    let gear = Scripted::start(|_| {
        Reply::after(&b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"[..]).before_body()
    })
    .await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("web1", gear.addr)],
            "[health]\nenabled = false",
        ),
    );
    let mut s = TcpStream::connect(lb.proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(
        b"POST /first HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
    )
    .unwrap();
    let mut rest = Vec::new();
    let (head, body) = read_head_and_body(&mut s, &mut rest);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, "ok");
    let front = front_hiding_a_request();
    s.write_all(&[&b"0\r\nX-T: y\n\r\n"[..], &front].concat())
        .unwrap();
    let mut out = rest;
    let _ = s.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("HTTP/1.1 400"), "{out:?}");
    assert!(
        out.to_ascii_lowercase().contains("connection: close"),
        "{out:?}"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_only_first_seen(&gear);
}

/// As above, where the balancer answers without reading the body to its end (no gear
/// to take it, or a gear that refused it before reading it): hyper then reads the rest
/// itself, trailer section included. The answer closes the connection, and the request
/// hidden behind reaches no gear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_hidden_behind_an_unread_chunked_body_never_reaches_a_gear() {
    let front = front_hiding_a_request();
    let request = [
        &b"POST /first HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: y\n\r\n"[..],
        &front,
    ]
    .concat();
    // A gear that refuses before reading the body, then reads on.
    let gear = Scripted::start(|_| {
        Reply::after(&b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\n\r\nno"[..]).before_body()
    })
    .await;
    // No gear at all: a port nothing listens on.
    let dead = free_addr();
    for (name, addr, status) in [("refused early", gear.addr, 401), ("no gear", dead, 503)] {
        let dir = workdir();
        let lb = Gearlb::start(
            dir.path(),
            &config_text(dir.path(), &[("web1", addr)], "[health]\nenabled = false"),
        );
        let (out, took) = raw_async(lb.proxy, request.clone(), Duration::from_secs(5)).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let got = status_of(&out);
        assert!(
            got == status || (status == 503 && got == 502),
            "{name}: {out:?}"
        );
        assert!(
            out.to_ascii_lowercase().contains("connection: close"),
            "{name}: {out:?}"
        );
        assert_eq!(out.matches("HTTP/1.1 ").count(), 1, "{name}: {out:?}");
        assert!(took < Duration::from_secs(4), "{name}: left open");
    }
    assert_only_first_seen(&gear);
}

/// A chunk size of 2^52 or more (HAProxy's bound) that comes with its head: a 400 at
/// once, and nothing reaches a gear. hyper's server would take sizes up to 2^64 - 1
/// and wait for that many bytes, the timeout timing scanners report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_chunk_size_is_refused_at_once() {
    let gear = Recorder::start().await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("rec", gear.addr)],
            "[health]\nenabled = false",
        ),
    );
    let head = "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    for body in [
        "10000000000000\r\nhello\r\n0\r\n\r\n",
        "8000000000000000\r\nhello\r\n0\r\n\r\n",
        "ffffffffffffffff;a=b\r\nhello\r\n0\r\n\r\n",
        // Behind a first chunk read with it.
        "5\r\nhello\r\n0ffffffffffffffff\r\nhello\r\n0\r\n\r\n",
    ] {
        let _ = gear.take();
        let request = format!("{head}{body}").into_bytes();
        let (out, took) = raw_async(lb.proxy, request, Duration::from_secs(5)).await;
        assert_eq!(status_of(&out), 400, "{body:?}: {out:?}");
        assert!(took < Duration::from_secs(4), "{body:?}: left open");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (bytes, _) = gear.take();
        assert!(bytes.is_empty(), "{body:?}: forwarded {bytes:?}");
    }
    // Leading zeros are no size: such a request goes through whole.
    let _ = gear.take();
    let request = b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n00000000000000000005\r\nhello\r\n0\r\n\r\n".to_vec();
    let (out, _) = raw_async(lb.proxy, request, Duration::from_secs(2)).await;
    assert_eq!(status_of(&out), 200, "{out:?}");
    let (_, seen) = gear.take();
    assert!(seen.len() == 1 && seen[0].complete, "{seen:?}");

    // A client that sends its whole upload before it reads (as most do) can send it
    // all and then reads the answer: the rest is read and dropped (the lingering
    // close), not met with a reset that cuts its writes.
    let addr = lb.proxy;
    let (sent, out) = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        // Far more than the socket buffers on both sides hold.
        let mut upload = format!("{head}8000000000000000\r\n").into_bytes();
        upload.resize(upload.len() + (32 << 20), b'a');
        let sent = s.write_all(&upload).map_err(|e| e.to_string());
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        (sent, String::from_utf8_lossy(&out).into_owned())
    })
    .await
    .unwrap();
    assert_eq!(sent, Ok(()), "the upload was cut");
    assert_eq!(status_of(&out), 400, "{out:?}");
}

/// A target with a fragment (`#`), which no request target may carry: a 400, as from
/// HAProxy, and nothing reaches a gear. hyper's parser would cut the fragment off and
/// forward the rest: `/c#/../admin` would reach the gear as `/c`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_with_a_fragment_is_refused() {
    let gear = Recorder::start().await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("rec", gear.addr)],
            "[health]\nenabled = false",
        ),
    );
    for request in [
        "GET /c#frag HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /c#/../admin HTTP/1.1\r\nHost: x\r\n\r\n",
        "POST /up?a=1#b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
    ] {
        let _ = gear.take();
        let (out, took) = raw_async(lb.proxy, request.into(), Duration::from_secs(5)).await;
        assert_eq!(status_of(&out), 400, "{request:?}: {out:?}");
        assert!(
            out.to_ascii_lowercase().contains("connection: close"),
            "{request:?}: {out:?}"
        );
        assert!(took < Duration::from_secs(4), "{request:?}: left open");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (bytes, _) = gear.take();
        assert!(bytes.is_empty(), "{request:?}: forwarded {bytes:?}");
    }
    // Encoded, `#` is a path byte like any other, and goes through.
    let request = "GET /c%23frag HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let (out, _) = raw_async(lb.proxy, request.into(), Duration::from_secs(2)).await;
    assert_eq!(status_of(&out), 200, "{out:?}");
    let (bytes, _) = gear.take();
    let seen = String::from_utf8_lossy(&bytes).into_owned();
    assert!(seen.starts_with("GET /c%23frag HTTP/1.1\r\n"), "{seen:?}");
}

/// The lingering close after such a refusal lasts as long as the client keeps sending
/// (up to its own limits), not only until the connection's head timeout: a slow upload
/// still gets through whole, then the answer is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_upload_behind_a_refusal_lingers_past_the_head_timeout() {
    let gear = Recorder::start().await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("rec", gear.addr)],
            "[timeouts]\nrequest_header = \"1s\"\n[health]\nenabled = false",
        ),
    );
    let addr = lb.proxy;
    let (sent, out) = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let head = "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
        s.write_all(format!("{head}8000000000000000\r\n").as_bytes())
            .unwrap();
        // 3 s of upload, a piece every 100 ms: three times the head timeout.
        let piece = vec![b'a'; 256 * 1024];
        let end = Instant::now() + Duration::from_secs(3);
        let mut sent = Ok(());
        while Instant::now() < end && sent.is_ok() {
            sent = s.write_all(&piece).map_err(|e| e.to_string());
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        (sent, String::from_utf8_lossy(&out).into_owned())
    })
    .await
    .unwrap();
    assert_eq!(sent, Ok(()), "the upload was cut");
    assert_eq!(status_of(&out), 400, "{out:?}");
    let (bytes, _) = gear.take();
    assert!(bytes.is_empty(), "forwarded {} bytes", bytes.len());
    let (bytes, _) = gear.take();
    assert!(bytes.is_empty(), "forwarded {} bytes", bytes.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_methods_targets_and_heads_get_4xx_and_reach_no_gear() {
    let gear = Recorder::start().await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("rec", gear.addr)],
            "[health]\nenabled = false",
        ),
    );
    let many_headers: Vec<u8> = (0..200)
        .flat_map(|i| format!("X-H{i}: v\r\n").into_bytes())
        .collect();
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(40 * 1024));
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        (
            "method with a delimiter",
            b"G(T / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            400,
        ),
        (
            "method with a NUL",
            b"GE\0T / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            400,
        ),
        (
            "space in the target",
            b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            400,
        ),
        (
            "DEL in the target",
            b"GET /a\x7fb HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            400,
        ),
        (
            "unclosed IPv6 authority",
            b"GET http://[::1/ HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            400,
        ),
        (
            "asterisk for GET",
            b"GET * HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            400,
        ),
        (
            "CONNECT",
            b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n".to_vec(),
            405,
        ),
        (
            "HTTP/2.0 in an HTTP/1 line",
            b"GET / HTTP/2.0\r\nHost: x\r\n\r\n".to_vec(),
            400,
        ),
        ("HTTP/0.9", b"GET /\r\n\r\n".to_vec(), 400),
        (
            "NUL in a header value",
            b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n".to_vec(),
            400,
        ),
        ("bare CR", b"GET / HTTP/1.1\rHost: x\r\n\r\n".to_vec(), 400),
        (
            "200 headers",
            [
                &b"GET / HTTP/1.1\r\nHost: x\r\n"[..],
                &many_headers,
                b"\r\n",
            ]
            .concat(),
            431,
        ),
        ("40 KiB target", long_target.into_bytes(), 431),
    ];
    for (name, request, code) in cases {
        let (out, _) = raw_async(lb.proxy, request, Duration::from_secs(5)).await;
        assert_eq!(status_of(&out), code, "{name}: {out:?}");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (bytes, seen) = gear.take();
    assert!(
        bytes.is_empty() && seen.is_empty(),
        "forwarded: {:?}",
        String::from_utf8_lossy(&bytes)
    );
    let got = get(lb.proxy, "/", &[]).await.unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(gear.take().1.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_or_abandoned_uploads_never_eject_a_healthy_gear() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    // Ejection after 2 failures in a row on live traffic (the default).
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("web1", b.addr)],
            "[health]\ninterval = \"30s\"",
        ),
    );
    for i in 0..4 {
        let bad = b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n";
        let (out, _) = raw_async(lb.proxy, bad.to_vec(), Duration::from_secs(5)).await;
        assert_eq!(status_of(&out), 400, "malformed body {i}: {out:?}");
    }
    // Clients that leave halfway through their upload.
    for _ in 0..4 {
        let proxy = lb.proxy;
        tokio::task::spawn_blocking(move || {
            let mut s = TcpStream::connect(proxy).unwrap();
            s.write_all(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
                .unwrap();
            s.write_all(&[b'u'; 1000]).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            drop(s);
        })
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = lb.status_json();
    let web1 = &status["backends"][0];
    assert_eq!(web1["state"], "up", "{web1}");
    assert_eq!(web1["errors"], 0, "{web1}");
    let got = get(lb.proxy, "/", &[]).await.unwrap();
    assert_eq!((got.status, got.text().as_str()), (200, "backend web1"));
}

// ---------------------------------------------------------------------------------------
// Forged input never routes.

/// The `GEAR=…` value of a response's Set-Cookie, if any.
fn gear_cookie(got: &Got) -> Option<String> {
    got.headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("GEAR="))
        .map(|v| v.split(';').next().unwrap_or("").to_string())
}

fn entries_of(gears: &[&TestBackend]) -> String {
    gears
        .iter()
        .map(|g| format!("{}-ns.example.com|{}", g.name, g.addr))
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_forged_and_tampered_cookies_only_ever_name_current_gears() {
    let (g0, g1, g2) = (
        TestBackend::start("g0").await,
        TestBackend::start("g1").await,
        TestBackend::start("g2").await,
    );
    // Plain cookies: a gear removed by update-cluster (still alive and listening) is
    // never reached again through its old cookie. (Unknown, path-like and address-like
    // values are in tests/sticky_health.rs.)
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[], "[health]\nenabled = false"),
    );
    assert_eq!(
        lb.ctl(&["update-cluster", &entries_of(&[&g0, &g1, &g2])]).0,
        0
    );
    assert_eq!(
        get(lb.proxy, "/", &[("cookie", "GEAR=g0-ns")])
            .await
            .unwrap()
            .text(),
        "backend g0"
    );
    assert_eq!(lb.ctl(&["update-cluster", &entries_of(&[&g1, &g2])]).0, 0);
    let before = g0.requests();
    for forged in [
        "g0-ns",
        "G1-NS",
        "gear-g1-ns",
        "g1-ns.",
        "g1-ns.example.com",
        "g1",
        " g1-ns",
        "g1-ns\"",
    ] {
        let got = get(
            lb.proxy,
            "/headers",
            &[("cookie", &format!("GEAR={forged}"))],
        )
        .await
        .unwrap();
        assert_eq!(got.status, 200);
        let now = got.json()["backend"].as_str().unwrap().to_string();
        if forged.trim_matches(|c| c == ' ' || c == '"') != "g1-ns" {
            assert_eq!(
                gear_cookie(&got),
                Some(format!("{now}-ns")),
                "{forged:?} was honoured"
            );
        }
    }
    assert_eq!(
        g0.requests(),
        before,
        "a removed gear was reached through its cookie"
    );

    // Sealed cookies: only values sealed with this application's secret, for a current
    // gear, pin a client.
    let sealed = |dir: &Path, secret: &str| {
        config_text(
            dir,
            &[],
            &format!("[sticky]\nseal = true\n[cluster]\nsecret = \"{secret}\"\n[health]\nenabled = false"),
        )
    };
    let (d1, d2, d3) = (workdir(), workdir(), workdir());
    let a = Gearlb::start(d1.path(), &sealed(d1.path(), SECRET));
    let same = Gearlb::start(d2.path(), &sealed(d2.path(), SECRET));
    let other = Gearlb::start(
        d3.path(),
        &sealed(d3.path(), "another-application-secret-0"),
    );
    for lb in [&a, &same, &other] {
        assert_eq!(lb.ctl(&["update-cluster", &entries_of(&[&g1, &g2])]).0, 0);
    }
    let first = get(a.proxy, "/headers", &[]).await.unwrap();
    let value = gear_cookie(&first).unwrap();
    let pinned = first.json()["backend"].as_str().unwrap().to_string();
    // The plain value would be `<gear>-ns`; a random sealed value may contain a short
    // gear name such as `g2` by chance, but not the whole plain value.
    assert!(
        !value.contains(&format!("{pinned}-ns")),
        "the sealed value shows the gear: {value}"
    );
    for lb in [&a, &same] {
        for _ in 0..5 {
            let got = get(
                lb.proxy,
                "/headers",
                &[("cookie", &format!("GEAR={value}"))],
            )
            .await
            .unwrap();
            assert_eq!(got.json()["backend"], pinned.as_str());
            assert_eq!(gear_cookie(&got), None, "a genuine cookie is not replaced");
        }
    }
    let mut tampered = value.clone().into_bytes();
    let mid = tampered.len() / 2;
    tampered[mid] = if tampered[mid] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    for (lb, forged) in [
        (&a, format!("{pinned}-ns")),
        (&a, tampered),
        (&other, value.clone()),
    ] {
        let got = get(
            lb.proxy,
            "/headers",
            &[("cookie", &format!("GEAR={forged}"))],
        )
        .await
        .unwrap();
        let now = gear_cookie(&got).expect("a forged sealed cookie is replaced");
        assert_ne!(now, forged);
    }
    // A genuine cookie for a gear that has left is not honoured either.
    let gone = if pinned == "g1" { &g2 } else { &g1 };
    assert_eq!(a.ctl(&["update-cluster", &entries_of(&[gone])]).0, 0);
    let got = get(a.proxy, "/headers", &[("cookie", &format!("GEAR={value}"))])
        .await
        .unwrap();
    assert_eq!(got.json()["backend"], gone.name.as_str());
    assert!(gear_cookie(&got).is_some());
}

/// One gossip frame on the wire: length prefix and body.
fn framed(body: &[u8]) -> Vec<u8> {
    let mut v = (body.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_gossip_port_is_dropped_and_gossip_goes_on() {
    use sha2::Digest;
    // Gossip on a TCP port of its own: raw frames reach the frame reader. (On the proxy
    // port nothing reaches it without the upgrade's proof: see tests/cluster.rs.)
    let dirs: Vec<_> = (0..2).map(|_| workdir()).collect();
    let lbs: Vec<Gearlb> = ["lb1", "lb2"]
        .iter()
        .zip(&dirs)
        .map(|(id, d)| Gearlb::start(d.path(), &cluster_config_tcp(d.path(), id, SECRET, "")))
        .collect();
    let list = peer_list(&[("lb1", &lbs[0]), ("lb2", &lbs[1])]);
    for lb in &lbs {
        assert_eq!(lb.ctl(&["set-peers", &list]).0, 0);
    }
    let both = vec!["lb1".to_string(), "lb2".to_string()];
    assert!(
        eventually(Duration::from_secs(10), || lbs
            .iter()
            .all(|lb| lb.live() == both))
        .await,
        "balancers did not form a cluster"
    );
    let gossip = lbs[0].gossip.unwrap();
    // Frames that must be dropped: noise, an oversized length, another application's
    // frame, this application's tag with a forged HMAC.
    let tag = &sha2::Sha256::digest(b"app1")[..8];
    let body = |cluster: &[u8]| {
        let mut b = b"GLB1".to_vec();
        b.extend_from_slice(cluster);
        b.push(14);
        b.extend_from_slice(b"127.0.0.1:7001");
        b.extend_from_slice(b"chitchat message");
        b.extend_from_slice(&[0u8; 32]);
        b
    };
    let noise: Vec<u8> = (0..1000u32).map(|i| (i * 7919 % 251) as u8).collect();
    let attempts: Vec<Vec<u8>> = vec![
        framed(&noise[..200]),
        noise,
        u32::MAX.to_be_bytes().to_vec(),
        framed(&body(&[0u8; 8])),
        framed(&body(tag)),
    ];
    for bytes in attempts {
        tokio::task::spawn_blocking(move || {
            let mut s = TcpStream::connect(gossip).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let _ = s.write_all(&bytes);
            let mut buf = [0u8; 16];
            // The balancer closes the connection (nothing is ever answered).
            assert!(matches!(s.read(&mut buf), Ok(0) | Err(_)));
        })
        .await
        .unwrap();
    }
    // (The counters in the cluster view are refreshed about once a second.)
    let keys = [
        "rejected_malformed",
        "rejected_oversized",
        "rejected_other_cluster",
        "rejected_bad_tag",
    ];
    let counted = eventually(Duration::from_secs(5), || {
        let c = lbs[0].peers()["gossip"].clone();
        keys.iter().all(|k| c[*k].as_u64().unwrap() >= 1)
    })
    .await;
    assert!(counted, "{}", lbs[0].peers()["gossip"]);
    assert_eq!(lbs[0].live(), vec!["lb1".to_string(), "lb2".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_on_the_gossip_port_never_lock_a_peer_out() {
    for over_proxy in [false, true] {
        idle_flood_then_a_peer_joins(over_proxy).await;
    }
}

/// 300 idle connections on lb1's gossip address (its own TCP port, or the proxy port
/// gossip rides), then lb2 joins.
async fn idle_flood_then_a_peer_joins(over_proxy: bool) {
    let config = |d: &Path, id: &str| {
        if over_proxy {
            cluster_config(d, id, SECRET, "[timeouts]\nrequest_header = \"2s\"")
        } else {
            cluster_config_tcp(d, id, SECRET, "")
        }
    };
    let d1 = workdir();
    let lb1 = Gearlb::start(d1.path(), &config(d1.path(), "lb1"));
    let gossip = lb1.gossip.unwrap();
    // Anyone who can reach the port keeps 300 connections open that never send a
    // frame (re-opening those that get closed). A peer still joins: its connection
    // must be accepted and heard (gossip replies travel on new connections).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut conns: Vec<Option<TcpStream>> = (0..300).map(|_| None).collect();
            let (mut opened, mut closed_by_lb) = (0u32, 0u32);
            let end = Instant::now() + Duration::from_secs(20);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < end {
                for c in conns.iter_mut() {
                    if let Some(s) = c {
                        let mut buf = [0u8; 1];
                        if matches!(s.read(&mut buf), Ok(0)) {
                            closed_by_lb += 1;
                            *c = None;
                        }
                    }
                    if c.is_none() {
                        if let Ok(s) = TcpStream::connect(gossip) {
                            s.set_nonblocking(true).unwrap();
                            opened += 1;
                            *c = Some(s);
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (opened, closed_by_lb)
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let d2 = workdir();
    let lb2 = Gearlb::start(d2.path(), &config(d2.path(), "lb2"));
    let list = peer_list(&[("lb1", &lb1), ("lb2", &lb2)]);
    for lb in [&lb1, &lb2] {
        assert_eq!(lb.ctl(&["set-peers", &list]).0, 0);
    }
    let all = vec!["lb1".to_string(), "lb2".to_string()];
    let joined = eventually(Duration::from_secs(8), || {
        lb1.live() == all && lb2.live() == all
    })
    .await;
    // Keep it up past the 3 s an unauthenticated connection may wait for its first frame.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (opened, closed) = tokio::task::spawn_blocking(move || flood.join().unwrap())
        .await
        .unwrap();
    eprintln!("idle flood (over the proxy port: {over_proxy}): {opened} connections opened, {closed} closed by the balancer");
    assert!(
        joined,
        "over the proxy port: {over_proxy}: lb1 sees {:?}, lb2 sees {:?}",
        lb1.live(),
        lb2.live()
    );
    assert!(
        closed > 0,
        "idle unauthenticated connections were never closed (opened {opened})"
    );
}

/// `gearlb ctl` as the unprivileged user `nobody` (util-linux `setpriv`).
fn ctl_as_nobody(bin: &Path, socket: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin)
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .expect("setpriv (util-linux)");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_socket_refuses_other_users() {
    use std::os::unix::fs::PermissionsExt;
    assert!(
        rustix::process::geteuid().is_root(),
        "this test runs ctl as another user and needs root; CI runs as root"
    );
    let a = TestBackend::start("a").await;
    let dir = workdir();
    let lb = Gearlb::start(dir.path(), &config_text(dir.path(), &[("a", a.addr)], ""));
    let socket = dir.path().join("control.sock");
    // The other user can reach the directory and run a copy of the binary.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = bin_dir.path().join("gearlb");
    std::fs::copy(bin(), &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let b = TestBackend::start("b").await;
    let entry = format!("b-ns.example.com|{}", b.addr);

    // The socket's mode (0600) stops it at connect.
    let (code, err) = ctl_as_nobody(&copy, &socket, &["status"]);
    assert_eq!(code, 77, "{err}");
    assert!(err.contains("permission denied"), "{err}");
    // Even with the mode opened up by mistake, the peer's uid is checked.
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    for args in [
        vec!["status"],
        vec!["update-cluster", entry.as_str()],
        vec!["rotate-out", "a"],
        vec!["reload"],
    ] {
        let (code, err) = ctl_as_nobody(&copy, &socket, &args);
        assert_eq!(code, 77, "{args:?}: {err}");
        assert!(
            err.contains("permission denied: uid 65534"),
            "{args:?}: {err}"
        );
    }
    assert!(lb
        .log_text()
        .contains("control connection from another user refused"));
    assert_eq!(lb.backend_names(), vec!["a"]);
    assert_eq!(backend_state(&lb, "a"), "up");
    // Its own user (root here) is served as before.
    let (code, _, err) = lb.ctl(&["update-cluster", &entry]);
    assert_eq!(code, 0, "{err}");
}

/// Send raw bytes to the control socket; the exit code and message of the reply.
fn control_raw(socket: &Path, bytes: &[u8]) -> (i32, String) {
    use std::os::unix::net::UnixStream;
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let _ = s.write_all(bytes);
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let last = out.lines().last().unwrap_or("");
    let v: serde_json::Value =
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    (
        v["exit_code"].as_i64().unwrap() as i32,
        v["message"].as_str().unwrap_or("").to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_hook_and_ctl_arguments_are_refused_and_change_nothing() {
    let (g0, g1) = (
        TestBackend::start("g0").await,
        TestBackend::start("g1").await,
    );
    let dir = workdir();
    let lb = Gearlb::start(dir.path(), &cluster_config(dir.path(), "lb1", SECRET, ""));
    assert_eq!(lb.ctl(&["update-cluster", &entries_of(&[&g0, &g1])]).0, 0);
    assert_eq!(lb.ctl(&["set-peers", "'lb2'='lb2|127.0.0.1:7002'"]).0, 0);
    let state_file = dir.path().join("data/state.json");
    let snapshot = |lb: &Gearlb| {
        let status = lb.status_json();
        let backends = status["backends"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b["name"].to_string(),
                    b["addr"].to_string(),
                    b["state"].to_string(),
                )
            })
            .collect::<std::collections::BTreeSet<_>>();
        let peers = lb.peers()["peers"].to_string();
        // The saved state, backends in name order (a refused entry for a known gear
        // keeps it, possibly in another position).
        let mut saved: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&state_file).unwrap()).unwrap();
        saved["backends"]
            .as_array_mut()
            .unwrap()
            .sort_by_key(|b| b["name"].to_string());
        (backends, peers, status["rotations"].to_string(), saved)
    };
    let before = snapshot(&lb);

    let huge = format!("{}|127.0.0.1:80", "a".repeat(100_000));
    let many: String = (0..5000)
        .map(|i| format!("bad{i}$|127.0.0.1:{i} "))
        .collect();
    let long_id = format!("'{0}'='{0}|127.0.0.1:7003'", "x".repeat(65));
    let long_gear = "g".repeat(100_000);
    let conflict = format!(
        "g0-ns.example.com|{} g0-ns.example.com|127.0.0.1:1 g1-ns.example.com|{}",
        g0.addr, g1.addr
    );
    let table: Vec<(Vec<&str>, i32, &str)> = vec![
        // update-cluster: every entry invalid, so nothing changes (exit 22).
        (
            vec!["update-cluster", "g0"],
            22,
            "expected <gear-dns>|<host>:<port>",
        ),
        (
            vec!["update-cluster", "g0-ns.example.com|127.0.0.1"],
            22,
            "invalid entry",
        ),
        (
            vec!["update-cluster", "g0-ns.example.com|127.0.0.1:65536"],
            22,
            "port",
        ),
        (
            vec!["update-cluster", "$(reboot)-ns.example.com|127.0.0.1:9"],
            22,
            "not a valid gear DNS name",
        ),
        (
            vec!["update-cluster", "x-ns.example.com|127.0.0.1:9;rm -rf /"],
            22,
            "invalid entry",
        ),
        (
            vec!["update-cluster", "x-ns.example.com|`id`:80"],
            22,
            "invalid entry",
        ),
        (
            vec!["update-cluster", "x-ns.example.com|[::1]:80|x"],
            22,
            "invalid entry",
        ),
        (
            vec!["update-cluster", "../../etc/passwd|127.0.0.1:80"],
            22,
            "invalid entry",
        ),
        (
            vec!["update-cluster", "x-ns.example.com|http://127.0.0.1:80"],
            22,
            "invalid entry",
        ),
        (
            vec!["update-cluster", "x-ns.example.com|fe80::1%eth0:80"],
            22,
            "invalid entry",
        ),
        (
            vec!["update-cluster", "\u{ff41}-ns.example.com|127.0.0.1:80"],
            22,
            "invalid entry",
        ),
        (
            vec!["update-cluster", "x-ns.example.com|127.0.0.1:80\u{1b}[2J"],
            22,
            "invalid entry",
        ),
        (vec!["update-cluster", "-rf"], 22, "invalid entry"),
        (vec!["update-cluster", huge.as_str()], 22, "longer than"),
        (vec!["update-cluster", many.as_str()], 22, "invalid entry"),
        // A gear named twice with different addresses is ambiguous: both refused, and
        // the gear keeps its current address.
        (vec!["update-cluster", &conflict], 22, "more than once"),
        // set-peers: all or nothing (exit 22).
        (vec!["set-peers", "'lb3'='lb3|127.0.0.1:0'"], 22, "port"),
        (
            vec!["set-peers", "'lb3'='lb3|$(id):7003'"],
            22,
            "peer list refused",
        ),
        (
            vec!["set-peers", "lb3|127.0.0.1:7003 lb3|127.0.0.1:7004"],
            22,
            "listed twice",
        ),
        (
            vec![
                "set-peers",
                "'lb2'='lb2|127.0.0.1:7002' 'lb3'='lb4|127.0.0.1:7004'",
            ],
            22,
            "differ",
        ),
        (
            vec!["set-peers", long_id.as_str()],
            22,
            "not a valid gear id",
        ),
        (vec!["set-peers", "lb3|[::1]"], 22, "peer list refused"),
        (vec!["set-peers", huge.as_str()], 22, "longer than"),
        // rotate-out: unknown gears (exit 1), bad timeouts (exit 64).
        (vec!["rotate-out", "$(reboot)"], 1, "unknown gear"),
        (vec!["rotate-out", "../../etc/passwd"], 1, "unknown gear"),
        (vec!["rotate-out", ""], 1, "unknown gear"),
        (vec!["rotate-out", "g0-ns;reboot"], 1, "unknown gear"),
        (vec!["rotate-out", "*"], 1, "unknown gear"),
        (vec!["rotate-out", &long_gear], 1, "unknown gear"),
        (vec!["rotate-out", "g0-ns", "--timeout", "-1s"], 64, "error"),
        (
            vec!["rotate-out", "g0-ns", "--timeout", "99999999999999999999s"],
            64,
            "--timeout",
        ),
        (vec!["rotate-in", "$(reboot)"], 1, "unknown gear"),
    ];
    for (args, code, says) in &table {
        let (got, out, err) = lb.ctl(args);
        let shown: Vec<String> = args.iter().map(|a| a.chars().take(60).collect()).collect();
        assert_eq!(got, *code, "{shown:?}: {out}{err}");
        assert!(err.contains(says), "{shown:?}: {says:?} not in {err:?}");
        assert!(
            !err.contains('\u{1b}'),
            "{shown:?}: control characters echoed: {err:?}"
        );
        assert!(
            err.len() < 2_000_000,
            "{shown:?}: {} bytes of error",
            err.len()
        );
    }

    // What argv cannot carry, straight to the socket: NUL bytes, bad JSON, non-UTF-8,
    // more than 1 MiB.
    let socket = dir.path().join("control.sock");
    let raw_table: Vec<(Vec<u8>, i32, &str)> = vec![
        (
            br#"{"cmd":"update-cluster","args":["x-ns.example.com|127.0.0.1:80\u0000"]}"#.to_vec(),
            22,
            "invalid entry",
        ),
        (
            br#"{"cmd":"update-cluster","args":["x-ns.example.com\u0000|127.0.0.1:80"]}"#.to_vec(),
            22,
            "invalid entry",
        ),
        (
            br#"{"cmd":"set-peers","args":["lb3\u0000|127.0.0.1:7003"]}"#.to_vec(),
            22,
            "not a valid gear id",
        ),
        (
            br#"{"cmd":"rotate","gear":"g0-ns\u0000","op":"out"}"#.to_vec(),
            1,
            "unknown gear",
        ),
        (
            br#"{"cmd":"rotate","gear":"g0-ns","op":"sideways"}"#.to_vec(),
            1,
            "invalid request",
        ),
        (
            br#"{"cmd":"update-cluster","args":"not a list"}"#.to_vec(),
            1,
            "invalid request",
        ),
        (br#"{"cmd":"format-disk"}"#.to_vec(), 1, "invalid request"),
        (b"\xff\xfe\xfd".to_vec(), 1, "could not read request"),
        (vec![b'x'; (1 << 20) + 10], 1, "larger than"),
    ];
    for (bytes, code, says) in raw_table {
        let mut line = bytes.clone();
        line.push(b'\n');
        let (got, message) = control_raw(&socket, &line);
        let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(60)]).into_owned();
        assert_eq!(got, code, "{shown:?}: {message}");
        assert!(
            message.contains(says),
            "{shown:?}: {says:?} not in {message:?}"
        );
    }
    assert_eq!(
        snapshot(&lb),
        before,
        "hostile input changed the balancer's state"
    );

    // A rotation with an absurd deadline (not reachable through ctl) neither panics nor
    // wraps around into an immediate cut: g0 drains normally, then comes back.
    let (code, message) = control_raw(
        &socket,
        b"{\"cmd\":\"rotate\",\"gear\":\"g0-ns\",\"op\":\"out\",\"timeout_ms\":18446744073709551615}\n",
    );
    assert_eq!(code, 0, "{message}");
    assert_eq!(backend_state(&lb, "gear-g0-ns"), "drained");
    assert_eq!(lb.ctl(&["rotate-in", "g0-ns"]).0, 0);
    assert_eq!(backend_state(&lb, "gear-g0-ns"), "up");
    assert_eq!(get(lb.proxy, "/", &[]).await.unwrap().status, 200);
}
