//! Abusive clients against a real `gearlb run` process: slowloris heads, clients that
//! never read, connection floods, request smuggling and malformed requests, forged
//! cookies, garbage on the gossip port, other users on the control socket, and hostile
//! control arguments. Every test is bounded in time and count and talks to 127.0.0.1 only.

mod support;

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::pin::Pin;
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
        t.elapsed() < Duration::from_millis(500),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_max_connections_are_refused_and_served_ones_unaffected() {
    const LIMIT: usize = 1000;
    rlimit::increase_nofile_limit(16_384).unwrap();
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
