//! The data plane end to end: a real `gearlb run` process between a client and test
//! backends on 127.0.0.1.

mod support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_host_and_path_exact() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    // The client is a trusted front here (a router): its list is appended to.
    let every = "[proxy]\nforwarded_headers = [\"x-forwarded-for\", \"x-forwarded-proto\", \
                 \"x-forwarded-host\", \"X-Forwarded-Port\", \"forwarded\"]\n\
                 trust_forwarded = [\"127.0.0.1\"]\n";
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("web1", b.addr)], every),
    );

    let got = get(
        lb.proxy,
        "/headers/a%2Fb/../c?x=1&y=%20",
        &[
            ("host", "App-NS.Example.com:8000"),
            ("x-forwarded-for", "203.0.113.9"),
            ("connection", "x-hop"),
            ("x-hop", "must-not-pass"),
            ("proxy-connection", "keep-alive"),
            ("te", "gzip, trailers"),
            ("x-custom", "Kept As Is"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(got.status, 200);
    // Hop-by-hop headers of the response are removed too.
    assert!(!got.headers.contains_key("x-resp-hop"));
    assert!(!got.headers.contains_key("keep-alive"));
    let seen = got.json();
    // The backend's router sees only the path, so ask for the whole URI via /headers.
    assert_eq!(seen["uri"], "/headers/a%2Fb/../c?x=1&y=%20");
    let h = &seen["headers"];
    assert_eq!(h["host"][0], "App-NS.Example.com:8000");
    assert_eq!(h["x-forwarded-for"][0], "203.0.113.9, 127.0.0.1");
    assert_eq!(h["x-forwarded-proto"][0], "http");
    assert_eq!(h["x-forwarded-host"][0], "App-NS.Example.com:8000");
    assert_eq!(h["x-forwarded-port"][0], lb.proxy.port().to_string());
    assert_eq!(
        h["forwarded"][0],
        "for=127.0.0.1;host=\"App-NS.Example.com:8000\";proto=http"
    );
    assert_eq!(h["x-custom"][0], "Kept As Is");
    for gone in ["x-hop", "proxy-connection"] {
        assert!(h.get(gone).is_none(), "{gone} was forwarded: {h}");
    }
    // TE is hop-by-hop: the balancer says what it takes itself, trailers (it relays
    // them), never the client's codings.
    assert_eq!(h["te"], serde_json::json!(["trailers"]), "{h}");
}

/// By default only `X-Forwarded-For` and `-Proto` are set: the gear's listener port is
/// not the public one, and `Host` goes through unchanged. What the router in front (a
/// trusted front) set reaches the web gear as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_forwarding_headers_are_for_and_proto() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("web1", b.addr)],
            "[proxy]\ntrust_forwarded = [\"127.0.0.0/8\"]\n",
        ),
    );
    let got = get(
        lb.proxy,
        "/headers",
        &[("host", "app.example.com"), ("x-forwarded-port", "443")],
    )
    .await
    .unwrap();
    assert_eq!(got.status, 200);
    let seen = got.json();
    let h = &seen["headers"];
    assert_eq!(h["host"][0], "app.example.com");
    assert_eq!(h["x-forwarded-for"][0], "127.0.0.1");
    assert_eq!(h["x-forwarded-proto"][0], "http");
    assert_eq!(h["x-forwarded-port"][0], "443");
    for absent in ["x-forwarded-host", "forwarded"] {
        assert!(h.get(absent).is_none(), "{absent} was set: {h}");
    }
}

/// A client that is not a listed front (outside a gear, by default nobody is) claims
/// nothing: its address list is replaced by its address, its scheme by the one it
/// used, and the forwarding headers gearlb does not set are removed; a sticky cookie
/// is not `Secure` for its word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_client_cannot_claim_another_address_or_https() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("web1", b.addr)], ""),
    );
    let got = get(
        lb.proxy,
        "/headers",
        &[
            ("host", "app.example.com"),
            ("x-forwarded-for", "10.9.9.9"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-port", "443"),
            ("forwarded", "for=10.9.9.9;proto=https"),
        ],
    )
    .await
    .unwrap();
    assert_eq!(got.status, 200);
    let set = got
        .headers
        .get("set-cookie")
        .map(|v| v.to_str().unwrap().to_string());
    assert!(
        set.is_some_and(|c| !c.contains("Secure")),
        "{:?}",
        got.headers
    );
    let seen = got.json();
    let h = &seen["headers"];
    assert_eq!(
        h["x-forwarded-for"],
        serde_json::json!(["127.0.0.1"]),
        "{h}"
    );
    assert_eq!(h["x-forwarded-proto"], serde_json::json!(["http"]), "{h}");
    for absent in ["x-forwarded-port", "forwarded"] {
        assert!(h.get(absent).is_none(), "{absent} was passed: {h}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_backend_is_a_quick_503() {
    let dir = workdir();
    let lb = Gearlb::start(dir.path(), &config_text(dir.path(), &[], ""));
    let t = Instant::now();
    let got = get(lb.proxy, "/", &[]).await.unwrap();
    assert_eq!(got.status, 503);
    assert!(got.text().contains("no web gear"), "{}", got.text());
    assert!(t.elapsed() < Duration::from_secs(2));
    let health = get(lb.status, "/health", &[]).await.unwrap();
    assert_eq!(health.status, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_backend_gives_502_not_a_hang() {
    let dead = free_addr();
    let dir = workdir();
    let lb = Gearlb::start(dir.path(), &config_text(dir.path(), &[("gone", dead)], ""));
    let got = get(lb.proxy, "/", &[]).await.unwrap();
    assert_eq!(got.status, 502);
}

/// Read from `s` into `buf` until it holds a whole request head: the offset of the
/// blank line that ends it, or `None` when the peer closed first.
async fn read_head(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    use tokio::io::AsyncReadExt;
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(end);
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A gear that answers the first request of each connection, and closes the connection
/// without an answer when a later request on it asks for `/vanish`: a keep-alive
/// connection the gear closes just as the balancer reuses it. Counts those closes, and
/// every request it read by method.
async fn vanishing_backend(
    vanished: Arc<AtomicU64>,
    posts: Arc<AtomicU64>,
) -> std::net::SocketAddr {
    use tokio::io::AsyncWriteExt;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let (vanished, posts) = (vanished.clone(), posts.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut served = 0;
                loop {
                    let Some(end) = read_head(&mut s, &mut buf).await else {
                        return;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    buf.drain(..end + 4);
                    if head.starts_with("POST ") {
                        posts.fetch_add(1, Ordering::SeqCst);
                        // The test's POSTs carry no body.
                    }
                    if served > 0 && head.contains(" /vanish ") {
                        vanished.fetch_add(1, Ordering::SeqCst);
                        return; // closed, nothing answered
                    }
                    served += 1;
                    let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                    if s.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_on_a_pooled_connection_the_gear_closes_is_sent_again_a_post_is_not() {
    let (vanished, posts) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let gear = vanishing_backend(vanished.clone(), posts.clone()).await;
    let dir = workdir();
    // One gear: there is nowhere else to replay the GET.
    let lb = Gearlb::start(dir.path(), &config_text(dir.path(), &[("web1", gear)], ""));
    let c = client();
    let req = |m: http::Method, path: &str| {
        http::Request::builder()
            .method(m)
            .uri(format!("http://{}{path}", lb.proxy))
            .body(full(""))
            .unwrap()
    };
    // Each time, a first request leaves a pooled connection and the next meets it
    // closing: a GET, then a POST.
    let mut answers = Vec::new();
    for (n, m) in [http::Method::GET, http::Method::POST]
        .into_iter()
        .enumerate()
    {
        let first = send(&c, req(http::Method::GET, "/first")).await.unwrap();
        assert_eq!(first.status, 200);
        answers.push(send(&c, req(m, "/vanish")).await.unwrap());
        assert_eq!(
            vanished.load(Ordering::SeqCst),
            n as u64 + 1,
            "the race did not happen"
        );
    }
    // The GET was sent again on a new connection.
    assert_eq!(answers[0].status, 200, "{}", answers[0].text());
    assert_eq!(answers[0].text(), "ok");
    // A POST is never sent twice: 502, and the gear read it once.
    assert_eq!(answers[1].status, 502);
    assert_eq!(posts.load(Ordering::SeqCst), 1);

    // The gear was not blamed for the GET's race: it is up and counted one error only
    // (the POST's).
    assert_eq!(backend_state(&lb, "web1"), "up");
    let metrics = get(lb.status, "/metrics", &[]).await.unwrap().text();
    assert!(
        metrics.contains(r#"gearlb_backend_errors_total{backend="web1",kind="response"} 1"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_backend_times_out_with_504() {
    let b = TestBackend::start("slow").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("slow", b.addr)],
            "[timeouts]\nserver = \"300ms\"",
        ),
    );
    let got = get(lb.proxy, "/slow?ms=3000", &[]).await.unwrap();
    assert_eq!(got.status, 504);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_stream_with_flat_memory() {
    const SIZE: u64 = 160 << 20; // 160 MiB each way
    let b = TestBackend::start("big").await;
    let dir = workdir();
    let lb = Gearlb::start(dir.path(), &config_text(dir.path(), &[("big", b.addr)], ""));
    let (rss_before, _) = lb.rss_kib();

    // Download: count bytes as they arrive.
    let c = client();
    let req = http::Request::get(format!("http://{}/download?bytes={SIZE}", lb.proxy))
        .body(gen_body(0))
        .unwrap();
    let resp = c.request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut n = 0u64;
    use http_body_util::BodyExt;
    while let Some(f) = body.frame().await {
        n += f.unwrap().data_ref().map_or(0, |d| d.len() as u64);
    }
    assert_eq!(n, SIZE);

    // Upload: the backend answers with the byte count it received.
    let req = http::Request::post(format!("http://{}/upload", lb.proxy))
        .body(gen_body(SIZE))
        .unwrap();
    let got = send(&c, req).await.unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(got.text(), SIZE.to_string());

    let (rss_after, peak) = lb.rss_kib();
    // Buffering either body would need 160 MiB; streaming stays at a few MiB.
    assert!(
        peak < rss_before + 48 * 1024,
        "peak RSS {peak} KiB (start {rss_before} KiB, end {rss_after} KiB)"
    );
}

/// A backend that refuses uploads before reading them: it answers a POST at once with
/// `413`, leaving the body unread, and closes (as an app server rejecting an upload
/// does), or for `/upload-hold` keeps the connection open for 15 s without reading.
/// `/duplex` is answered `200` at once, with a [`DUPLEX_ANSWER`]-byte body sent while
/// the request body is read to the end (counted in `duplex`), as a full-duplex backend
/// does. GETs (health checks) get `200`.
const DUPLEX_ANSWER: usize = 32 << 20;

async fn refusing_backend(duplex: Arc<AtomicU64>) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let duplex = duplex.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Some(end) = read_head(&mut s, &mut buf).await else {
                        return;
                    };
                    if buf.starts_with(b"POST /duplex ") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                        let len: u64 = head
                            .split("content-length:")
                            .nth(1)
                            .and_then(|v| v.lines().next()?.trim().parse().ok())
                            .unwrap_or(0);
                        // The answer, a large one, goes out while the body comes in.
                        let (mut rd, mut wr) = s.split();
                        let answer = async {
                            let head = format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {DUPLEX_ANSWER}\r\n\r\n"
                            );
                            wr.write_all(head.as_bytes()).await?;
                            let block = vec![b'a'; 64 * 1024];
                            for _ in 0..DUPLEX_ANSWER / block.len() {
                                wr.write_all(&block).await?;
                            }
                            Ok::<_, std::io::Error>(())
                        };
                        let body = async {
                            let mut got = (buf.len() - end - 4) as u64;
                            while got < len {
                                tokio::time::sleep(Duration::from_millis(1)).await;
                                match rd.read(&mut chunk).await {
                                    Ok(0) | Err(_) => break,
                                    Ok(n) => got += n as u64,
                                }
                            }
                            got
                        };
                        let (_, got) = tokio::join!(answer, body);
                        duplex.store(got, Ordering::SeqCst);
                        return;
                    }
                    if buf.starts_with(b"POST") {
                        let _ = s
                            .write_all(
                                b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\n\
                                  Connection: close\r\n\r\ntoo big\n",
                            )
                            .await;
                        if buf.starts_with(b"POST /upload-hold ") {
                            tokio::time::sleep(Duration::from_secs(15)).await;
                        }
                        return; // closed with the body unread
                    }
                    buf.drain(..end + 4);
                    if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// Write a POST of `len` body bytes to `path`: how many body bytes went out, and the
/// error that stopped the writes, if one did.
fn write_upload(
    w: &mut impl std::io::Write,
    path: &str,
    len: usize,
) -> (usize, std::io::Result<()>) {
    let head = format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\n\r\n");
    if let Err(e) = w.write_all(head.as_bytes()) {
        return (0, Err(e));
    }
    let chunk = vec![b'x'; 64 * 1024];
    let mut wrote = 0;
    while wrote < len {
        let n = (len - wrote).min(chunk.len());
        if let Err(e) = w.write_all(&chunk[..n]) {
            return (wrote, Err(e));
        }
        wrote += n;
    }
    (wrote, Ok(()))
}

/// POST `len` bytes to `path` on a raw connection, writing from one thread while the
/// response is read on another: the response, and how many body bytes were written
/// before the connection would take no more.
fn raw_upload(addr: std::net::SocketAddr, path: &str, len: usize) -> (String, usize) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let path = path.to_string();
    let writer = std::thread::spawn(move || write_upload(&mut w, &path, len).0);
    let got = read_response(&mut s, &mut Vec::new());
    let wrote = writer.join().unwrap();
    (got, wrote)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_answering_before_the_upload_ends_is_heard() {
    let duplex = Arc::new(AtomicU64::new(0));
    let addr = refusing_backend(duplex.clone()).await;
    let dir = workdir();
    let lb = Gearlb::start(dir.path(), &config_text(dir.path(), &[("app", addr)], ""));
    // Far more than the socket buffers hold: writing the rest fails once the backend
    // has closed, or blocks while it holds the connection without reading, and its
    // answer is what the client gets, at once (not a 502, nor a 504 after
    // `timeouts.server`).
    for (path, len) in [
        ("/upload", 64usize << 20),
        ("/upload-hold", 64 << 20),
        ("/upload", 100),
    ] {
        let (got, _) = raw_upload(lb.proxy, path, len);
        assert!(
            got.starts_with("HTTP/1.1 413"),
            "{path}, {len} bytes: {got}"
        );
        assert!(got.ends_with("too big\n"), "{got}");
    }
    // The backend was not marked down for it, and still serves.
    assert_eq!(get(lb.proxy, "/", &[]).await.unwrap().status, 200);

    // A success answered early is no refusal: a full-duplex backend, reading slowly,
    // gets the whole body, and the client the answer.
    let len = 8usize << 20;
    let (rss_before, _) = lb.rss_kib();
    let (got, wrote) = raw_upload(lb.proxy, "/duplex", len);
    assert!(
        got.starts_with("HTTP/1.1 200"),
        "{}",
        &got[..got.len().min(200)]
    );
    assert_eq!(got.len() - got.find("\r\n\r\n").unwrap() - 4, DUPLEX_ANSWER);
    // Meanwhile its answer waited in the backend's socket, not in gearlb's memory.
    let (_, peak) = lb.rss_kib();
    assert!(
        peak < rss_before + 16 * 1024,
        "peak RSS {peak} KiB (before {rss_before} KiB)"
    );
    assert_eq!(wrote, len, "the client could send it all");
    assert!(
        eventually(Duration::from_secs(10), || duplex.load(Ordering::SeqCst)
            == len as u64)
        .await,
        "the backend got {} of {len} bytes",
        duplex.load(Ordering::SeqCst)
    );
}

/// Most HTTP/1 clients, and the proxies in front of a gear, send a whole upload before
/// they read the answer. When a gear refuses the upload early, gearlb answers and closes;
/// it must read and drop the rest of the upload first (a lingering close): a socket
/// closed with unread bytes sends a reset, which cuts the client's writes and loses the
/// answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sends_its_whole_upload_first_still_gets_the_refusal() {
    let addr = refusing_backend(Arc::new(AtomicU64::new(0))).await;
    let dir = workdir();
    let lb = Gearlb::start(dir.path(), &config_text(dir.path(), &[("app", addr)], ""));
    let proxy = lb.proxy;
    // Far more than the socket buffers on both sides hold.
    let len = 32usize << 20;
    for path in ["/upload", "/upload-hold"] {
        let (wrote, got) = tokio::task::spawn_blocking(move || {
            use std::io::Read;
            let mut s = std::net::TcpStream::connect(proxy).unwrap();
            s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let (wrote, sent) = write_upload(&mut s, path, len);
            if let Err(e) = sent {
                return (wrote, format!("write failed: {e}"));
            }
            // The answer, then the end of the connection.
            let mut got = Vec::new();
            match s.read_to_end(&mut got) {
                Ok(_) => (wrote, String::from_utf8_lossy(&got).into_owned()),
                Err(e) => (wrote, format!("read failed after {got:?}: {e}")),
            }
        })
        .await
        .unwrap();
        assert!(got.starts_with("HTTP/1.1 413"), "{path}: {got}");
        assert!(got.ends_with("too big\n"), "{path}: {got}");
        assert_eq!(wrote, len, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_changes_under_load_fail_no_request() {
    let backends: Vec<TestBackend> = futures_join(4).await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("b0", backends[0].addr), ("b1", backends[1].addr)],
            "",
        ),
    );
    let proxy = lb.proxy;
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (ok, failed, stop) = (ok.clone(), failed.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let c = client();
            let end = Instant::now() + Duration::from_secs(20);
            // Bounded in count and time.
            for i in 0..3000 {
                if stop.load(Ordering::Relaxed) || Instant::now() > end {
                    break;
                }
                let path = if i % 10 == 0 { "/slow?ms=20" } else { "/" };
                let req = http::Request::get(format!("http://{proxy}{path}"))
                    .body(gen_body(0))
                    .unwrap();
                match send(&c, req).await {
                    Ok(g) if g.status == 200 => ok.fetch_add(1, Ordering::Relaxed),
                    other => {
                        eprintln!("failed: {other:?}");
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }));
    }
    // Twenty changes of the backend set while the load runs: add, remove, re-address.
    let sets: Vec<Vec<usize>> = vec![
        vec![0, 1, 2],
        vec![2, 3],
        vec![1],
        vec![0, 3],
        vec![0, 1, 2, 3],
    ];
    let socket = dir.path().join("control.sock");
    for round in 0..20 {
        tokio::time::sleep(Duration::from_millis(60)).await;
        let set = &sets[round % sets.len()];
        let entries: Vec<String> = set
            .iter()
            .map(|&i| format!("g{i}-ns.example.com|{}", backends[i].addr))
            .collect();
        let socket = socket.clone();
        let (code, _, err) = tokio::task::spawn_blocking(move || {
            let joined = entries.join(" ");
            ctl(&socket, &["update-cluster", &joined])
        })
        .await
        .unwrap();
        assert_eq!(code, 0, "{err}");
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(ok > 200, "only {ok} requests ran");
    assert_eq!(failed, 0, "{failed} of {} requests failed", ok + failed);
    // Every backend that was in some set took traffic.
    for b in &backends {
        assert!(b.requests() > 0, "{} got nothing", b.name);
    }
}

async fn futures_join(n: usize) -> Vec<TestBackend> {
    let mut v = Vec::new();
    for i in 0..n {
        v.push(TestBackend::start(&format!("b{i}")).await);
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_connections_to_backends_are_reused() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("web1", b.addr)], ""),
    );
    let c = client();
    for _ in 0..50 {
        let req = http::Request::get(format!("http://{}/", lb.proxy))
            .body(gen_body(0))
            .unwrap();
        assert_eq!(send(&c, req).await.unwrap().status, 200);
    }
    assert_eq!(b.requests(), 50);
    assert!(
        b.connections.load(Ordering::Relaxed) <= 2,
        "{} backend connections for 50 sequential requests",
        b.connections.load(Ordering::Relaxed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_spreads_over_backends() {
    let (a, b) = (TestBackend::start("a").await, TestBackend::start("b").await);
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("a", a.addr), ("b", b.addr)], ""),
    );
    let mut seen = BTreeSet::new();
    for _ in 0..40 {
        seen.insert(get(lb.proxy, "/", &[]).await.unwrap().text());
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
}

/// Exactly one keep-alive client connection. (A pooled client may open a second one
/// when the first is not back in its pool yet, and affinity is per connection.)
struct OneConn(hyper::client::conn::http1::SendRequest<BoxBody>);

impl OneConn {
    async fn open(addr: std::net::SocketAddr) -> Self {
        let s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s))
            .await
            .unwrap();
        tokio::spawn(conn);
        OneConn(sender)
    }

    /// Which backend took each of this connection's next `n` requests, in order.
    async fn backends(&mut self, n: usize) -> Vec<String> {
        use http_body_util::BodyExt;
        let mut got = Vec::new();
        for _ in 0..n {
            self.0.ready().await.expect("the connection stays open");
            let req = http::Request::get("/")
                .header("host", "app.example")
                .body(gen_body(0))
                .unwrap();
            let resp = self.0.send_request(req).await.unwrap();
            assert_eq!(resp.status(), 200);
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            let text = String::from_utf8_lossy(&body).into_owned();
            got.push(text.trim_start_matches("backend ").to_string());
        }
        got
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_clients_stay_on_a_gear_for_a_bounded_run() {
    let b = futures_join(3).await;
    let list: Vec<_> = b.iter().map(|b| (b.name.as_str(), b.addr)).collect();
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &list, "[proxy]\nconnection_affinity = 4\n"),
    );
    let mut c = OneConn::open(lb.proxy).await;
    let got = c.backends(40).await;
    for run in got.chunks(4) {
        assert!(run.iter().all(|n| *n == run[0]), "runs of 4: {got:?}");
    }
    let seen: BTreeSet<_> = got.iter().collect();
    assert!(seen.len() >= 2, "every run is placed afresh: {got:?}");

    // The gear of the current run taken out of rotation: left at once.
    let current = c.backends(1).await.remove(0);
    let (code, _, err) = lb.ctl(&["rotate-out", &current]);
    assert_eq!(code, 0, "{err}");
    for other in c.backends(8).await {
        assert_ne!(other, current, "a rotated-out gear gets no new request");
    }

    // connection_affinity = 0: each request of one connection is placed afresh.
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &list, "[proxy]\nconnection_affinity = 0\n"),
    );
    let got = OneConn::open(lb.proxy).await.backends(30).await;
    let switches = got.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        switches >= 10,
        "{switches} switches in 30 requests: {got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_headers_get_431() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("web1", b.addr)], ""),
    );
    let big = "a".repeat(40 * 1024);
    let req = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n");
    let out = raw(lb.proxy, req.as_bytes(), Duration::from_secs(5));
    assert!(
        out.starts_with("HTTP/1.1 431"),
        "{}",
        &out[..out.len().min(200)]
    );
    assert_eq!(b.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_400() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("web1", b.addr)], ""),
    );
    for bad in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",
    ] {
        let out = raw(lb.proxy, bad, Duration::from_secs(5));
        assert!(
            out.starts_with("HTTP/1.1 400"),
            "{:?} -> {out:?}",
            String::from_utf8_lossy(bad)
        );
    }
    assert_eq!(b.requests(), 0, "nothing malformed reached the backend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("web1", b.addr)], ""),
    );
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(lb.proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(
        b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    )
    .unwrap();
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).unwrap();
    let interim = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(interim.starts_with("HTTP/1.1 100 Continue"), "{interim:?}");
    s.write_all(b"hello").unwrap();
    let mut rest = Vec::new();
    let mut chunk = [0u8; 1024];
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                rest.extend_from_slice(&chunk[..n]);
                if rest.ends_with(b"\r\n\r\n5") {
                    break;
                }
            }
        }
    }
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("200 OK") && rest.ends_with('5'), "{rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_clients_are_served() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("web1", b.addr)], ""),
    );
    let c = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<BoxBody>();
    let req = http::Request::get(format!("http://{}/headers", lb.proxy))
        .body(gen_body(0))
        .unwrap();
    let got = send(&c, req).await.unwrap();
    assert_eq!(got.status, 200);
    let seen = got.json();
    assert_eq!(seen["version"], "HTTP/1.1");
    assert_eq!(seen["headers"]["host"][0], lb.proxy.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_are_refused_quickly() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("web1", b.addr)],
            "[limits]\nmax_connections = 5",
        ),
    );
    let held: Vec<_> = (0..5)
        .map(|_| std::net::TcpStream::connect(lb.proxy).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    let out = raw(
        lb.proxy,
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(out.is_empty(), "over-limit connection was served: {out:?}");
    assert!(t.elapsed() < Duration::from_secs(2));
    drop(held);
    let ok = eventually(Duration::from_secs(5), || {
        raw(
            lb.proxy,
            b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            Duration::from_secs(2),
        )
        .starts_with("HTTP/1.1 200")
    })
    .await;
    assert!(ok, "served again once connections were released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_clients_are_cut_at_the_client_timeout() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("web1", b.addr)],
            "[timeouts]\nclient = \"300ms\"\nrequest_header = \"5s\"",
        ),
    );
    use std::io::{Read, Write};
    // A client that sends half a body and stalls is cut after ~client timeout.
    let mut s = std::net::TcpStream::connect(lb.proxy).unwrap();
    s.write_all(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t = Instant::now();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "not cut: {:?}",
        t.elapsed()
    );
    assert!(t.elapsed() >= Duration::from_millis(250));
    // A slow backend is the server timeout's business, not the client's.
    let got = get(lb.proxy, "/slow?ms=800", &[]).await.unwrap();
    assert_eq!(got.status, 200);
}

/// Read one response with a Content-Length body from a raw keep-alive connection.
/// Bytes past its end (the start of the next pipelined response) stay in `rest` for
/// the next call.
fn read_response(s: &mut std::net::TcpStream, rest: &mut Vec<u8>) -> String {
    let (head, body) = read_head_and_body(s, rest);
    format!("{head}\r\n\r\n{body}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_park_and_serve_again() {
    use std::io::Write;
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("web1", b.addr)], ""),
    );
    let parked = |lb: &Gearlb| {
        let metrics = raw(
            lb.status,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            Duration::from_secs(5),
        );
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("gearlb_frontend_connections_parked "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .expect("parked gauge in /metrics")
    };
    let mut s = std::net::TcpStream::connect(lb.proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut rest = Vec::new();
    assert!(read_response(&mut s, &mut rest).starts_with("HTTP/1.1 200"));
    // Idle past the parking delay: the connection holds no HTTP state...
    assert!(eventually(Duration::from_secs(5), || parked(&lb) == 1).await);
    // ...and serves the next request, a head split over two writes, all the same.
    s.write_all(b"GET /b HTTP/1.1\r\nHo").unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    s.write_all(b"st: x\r\n\r\n").unwrap();
    assert!(read_response(&mut s, &mut rest).starts_with("HTTP/1.1 200"));
    // A pipelined pair, then parked again, then a third request.
    s.write_all(b"GET /c HTTP/1.1\r\nHost: x\r\n\r\nGET /d HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert!(read_response(&mut s, &mut rest).starts_with("HTTP/1.1 200"));
    assert!(read_response(&mut s, &mut rest).starts_with("HTTP/1.1 200"));
    assert!(eventually(Duration::from_secs(5), || parked(&lb) == 1).await);
    s.write_all(b"GET /e HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert!(read_response(&mut s, &mut rest).starts_with("HTTP/1.1 200"));
    assert_eq!(b.requests(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_head_timeout_closes_idle_and_slow_connections() {
    use std::io::{Read, Write};
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("web1", b.addr)],
            "[timeouts]\nrequest_header = \"1s\"",
        ),
    );
    // A head trickling in byte by byte is cut at the head timeout, not kept alive by
    // its activity.
    let mut s = std::net::TcpStream::connect(lb.proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t = Instant::now();
    for b in b"GET / HTTP/1.1\r\nX-Slow: "
        .iter()
        .chain(b"aaaaaaaaaaaaaaaaaaaa")
    {
        if s.write_all(&[*b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let cut = t.elapsed();
    assert!(
        cut >= Duration::from_millis(900) && cut < Duration::from_secs(4),
        "cut after {cut:?}"
    );
    // An idle keep-alive connection is closed after the same time.
    let mut s = std::net::TcpStream::connect(lb.proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert!(read_response(&mut s, &mut Vec::new()).starts_with("HTTP/1.1 200"));
    let t = Instant::now();
    let n = s.read(&mut [0u8; 16]).unwrap_or(0);
    assert_eq!(n, 0, "closed, not answered");
    assert!(t.elapsed() >= Duration::from_millis(800) && t.elapsed() < Duration::from_secs(3));
}

/// A backend that answers one request per connection with a keep-alive response (no
/// `Connection: close`) and then closes it, as a backend whose keep-alive timeout ran out
/// does; `style` picks the response framing. Counts the requests it read in full.
async fn one_shot_backend(style: &'static str) -> (std::net::SocketAddr, Arc<AtomicU64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let served = Arc::new(AtomicU64::new(0));
    let n = served.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let n = n.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                // Read the head, then the body its Content-Length announces.
                loop {
                    let Ok(k) = s.read(&mut buf).await else {
                        return;
                    };
                    if k == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..k]);
                    let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    if got.len() >= end + 4 + len {
                        break;
                    }
                }
                n.fetch_add(1, Ordering::Relaxed);
                let resp: &[u8] = match style {
                    "chunked" => b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nsome\r\n5\r\nthing\r\n0\r\nx-trailer: t\r\n\r\n",
                    _ => b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nsomething",
                };
                let _ = s.write_all(resp).await;
                // Closed here, without having said so.
            });
        }
    });
    (addr, served)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backends_closing_idle_keep_alive_connections_fail_no_request() {
    for style in ["length", "chunked"] {
        let (addr, served) = one_shot_backend(style).await;
        let dir = workdir();
        let lb = Gearlb::start(
            dir.path(),
            &config_text(dir.path(), &[("web1", addr)], "[health]\nenabled = false\n"),
        );
        let c = client();
        for i in 0..10 {
            // A POST is never replayed: it must not be sent on a connection the backend
            // already closed.
            let req = if i % 2 == 0 {
                http::Request::get(format!("http://{}/", lb.proxy)).body(full(""))
            } else {
                http::Request::post(format!("http://{}/form", lb.proxy)).body(full("a=1&b=2"))
            };
            let got = send(&c, req.unwrap()).await.unwrap();
            assert_eq!(
                (got.status, got.text().as_str()),
                (200, "something"),
                "{style} {i}"
            );
            // Let the close reach the balancer before the next request.
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        assert_eq!(served.load(Ordering::Relaxed), 10, "{style}");
    }
}

/// `scur` of every row of the HAProxy CSV, by `svname`.
async fn csv_scur(status: std::net::SocketAddr) -> std::collections::HashMap<String, String> {
    let csv = get(status, "/haproxy-status/;csv", &[])
        .await
        .unwrap()
        .text();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines
        .next()
        .and_then(|h| h.strip_prefix("# "))
        .unwrap()
        .split(',')
        .collect();
    let col = |name: &str| header.iter().position(|c| *c == name).unwrap();
    let (sv, scur) = (col("svname"), col("scur"));
    lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .map(|f| (f[sv].to_string(), f[scur].to_string()))
        .collect()
}

/// A metric's value in the Prometheus text, by its name and labels as written.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// An open WebSocket is a session as HAProxy counts one: in FRONTEND, server and
/// BACKEND `scur` (and their JSON and Prometheus forms), within
/// `limits.max_connections`, and in the load the scaler averages, until it closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_websockets_are_sessions_until_they_close() {
    use futures_util::{SinkExt, StreamExt};
    const K: u64 = 3;
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("web1", b.addr)],
            &format!(
                "[limits]\nmax_connections = {K}\n\
                 [scaler]\ncheck_interval = \"200ms\"\naverage_window = \"1s\"\n"
            ),
        ),
    );
    let mut sockets = Vec::new();
    for i in 0..K {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", lb.proxy))
            .await
            .unwrap();
        ws.send(format!("hello {i}").into()).await.unwrap();
        let reply = ws.next().await.unwrap().unwrap();
        assert_eq!(reply.into_text().unwrap(), format!("web1: hello {i}"));
        sockets.push(ws);
    }

    // Counted once each: a connection on the frontend, a session on the server.
    let s = lb.status_json();
    assert_eq!(s["frontend"]["connections_current"], K, "{s}");
    assert_eq!(s["frontend"]["requests_current"], 0, "{s}");
    assert_eq!(s["backends"][0]["sessions"], K, "{s}");
    assert_eq!(s["backends"][0]["tunnels"], K, "{s}");
    let scur = csv_scur(lb.status).await;
    for row in ["FRONTEND", "web1", "BACKEND"] {
        assert_eq!(scur[row], K.to_string(), "{row} scur: {scur:?}");
    }
    let m = get(lb.status, "/metrics", &[]).await.unwrap().text();
    assert_eq!(metric(&m, "gearlb_frontend_connections"), Some(K as f64));
    assert_eq!(metric(&m, "gearlb_frontend_tunnels"), Some(K as f64));
    assert_eq!(
        metric(&m, "gearlb_backend_sessions{backend=\"web1\"}"),
        Some(K as f64),
        "{m}"
    );
    assert_eq!(
        metric(&m, "gearlb_backend_requests_in_flight{backend=\"web1\"}"),
        Some(0.0)
    );

    // They hold their connections' places: one more is refused, and they still work.
    let out = raw(
        lb.proxy,
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(out.is_empty(), "served over the limit: {out:?}");
    assert_eq!(lb.status_json()["frontend"]["connections_refused"], 1);
    for ws in &mut sockets {
        ws.send("still".into()).await.unwrap();
        let reply = ws.next().await.unwrap().unwrap();
        assert_eq!(reply.into_text().unwrap(), "web1: still");
    }

    // The scaler's load sees them, with no request in flight.
    let seen = eventually(Duration::from_secs(10), || {
        lb.status_json()["scaler"]["sessions"]
            .as_f64()
            .is_some_and(|v| v >= K as f64 * 0.9)
    })
    .await;
    assert!(seen, "scaler load: {}", lb.status_json()["scaler"]);

    for mut ws in sockets {
        ws.close(None).await.unwrap();
        // Bounded: the close handshake, then the end.
        for _ in 0..10 {
            if ws.next().await.is_none_or(|m| m.is_err()) {
                break;
            }
        }
    }
    let released = eventually(Duration::from_secs(5), || {
        let s = lb.status_json();
        s["frontend"]["connections_current"] == 0
            && s["backends"][0]["sessions"] == 0
            && s["backends"][0]["tunnels"] == 0
    })
    .await;
    assert!(released, "{}", lb.status_json());
    let scur = csv_scur(lb.status).await;
    for row in ["FRONTEND", "web1", "BACKEND"] {
        assert_eq!(scur[row], "0", "{row} scur: {scur:?}");
    }
    let got = get(lb.proxy, "/", &[]).await.unwrap();
    assert_eq!(got.status, 200, "places are given back");
}

// ---------------------------------------------------------------------------------------
// The backend exchange's edges (see the decision table in `crates/proxy/src/upstream/mod.rs`).

/// A balancer in front of `gear` alone, health checks off (scripted gears answer only
/// what their script says).
fn lb_for(dir: &std::path::Path, gear: std::net::SocketAddr, extra: &str) -> Gearlb {
    Gearlb::start(
        dir,
        &config_text(
            dir,
            &[("web1", gear)],
            &format!("[health]\nenabled = false\n{extra}"),
        ),
    )
}

/// One response from a raw connection: its head, and its body as far as the head's
/// Content-Length says (none without one). Bytes after it stay in `buf`.
async fn read_reply(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Option<(String, Vec<u8>)> {
    use tokio::io::AsyncReadExt;
    let end = read_head(s, buf).await?;
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    buf.drain(..end + 4);
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut chunk = [0u8; 4096];
    while buf.len() < len {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = buf.drain(..len).collect();
    Some((head, body))
}

/// RFC 9110 §7.8: a server switches only to a protocol the client listed in `Upgrade`.
/// A `101` to a request that asked for no upgrade, or to another protocol than the one
/// asked for, is a 502: no tunnel opens, so nothing the client sends next can reach the
/// gear without the balancer reading it as a request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_to_a_protocol_nobody_asked_for_is_a_502_and_opens_no_tunnel() {
    use tokio::io::AsyncWriteExt;
    let gear = Scripted::start(|_| {
        Reply::after(
            &b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n"[..],
        )
        .then(Then::Tunnel)
    })
    .await;
    let dir = workdir();
    let lb = lb_for(dir.path(), gear.addr, "");
    for (name, request) in [
        ("no upgrade asked", &b"GET /plain HTTP/1.1\r\nHost: x\r\n\r\n"[..]),
        (
            "websocket asked",
            b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        ),
    ] {
        let mut s = tokio::net::TcpStream::connect(lb.proxy).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut buf = Vec::new();
        let (head, _) = read_reply(&mut s, &mut buf).await.expect("an answer");
        assert!(head.starts_with("HTTP/1.1 502"), "{name}: {head}");
        // What a tunnel would have carried.
        let _ = s
            .write_all(b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        let _ = tokio::time::timeout(Duration::from_secs(2), read_reply(&mut s, &mut buf)).await;
    }
    assert!(
        gear.tunnel_bytes().is_empty(),
        "bytes reached the gear through a tunnel: {:?}",
        String::from_utf8_lossy(&gear.tunnel_bytes())
    );
    // Every request the gear got came through the balancer's parser.
    let seen = gear.seen();
    assert!(
        seen.iter().all(|r| r.header("x-forwarded-for").is_some()),
        "{seen:?}"
    );
    // The gear is not ejected for it: a client could provoke it.
    assert_eq!(backend_state(&lb, "web1"), "up");
}

/// RFC 9112 §6.1: transfer codings other than chunked are refused on requests (501: the
/// balancer would take the chunked framing off a body still coded otherwise) and passed
/// on faithfully in responses to HTTP/1.1 clients; a client that cannot receive them
/// (HTTP/1.0, HTTP/2: no Transfer-Encoding) gets a 502, never the coded bytes as if
/// they were the content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_codings_other_than_chunked_are_refused_or_passed_faithfully() {
    const GZ: &[u8] = b"\x1f\x8b\x08\x00coded";
    let gear = Scripted::start(|req| {
        if req.head.starts_with("GET /close ") {
            let mut r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n".to_vec();
            r.extend_from_slice(GZ);
            Reply::after(r).then(Then::Close)
        } else {
            let mut r =
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n9\r\n".to_vec();
            r.extend_from_slice(GZ);
            r.extend_from_slice(b"\r\n0\r\n\r\n");
            Reply::after(r)
        }
    })
    .await;
    let dir = workdir();
    let lb = lb_for(dir.path(), gear.addr, "");

    let out = raw(
        lb.proxy,
        b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(out.starts_with("HTTP/1.1 501"), "{out:?}");
    assert!(gear.seen().is_empty(), "forwarded: {:?}", gear.seen());

    for path in ["/close", "/chunked"] {
        let got = get(lb.proxy, path, &[]).await.unwrap();
        assert_eq!(got.status, 200, "{path}");
        assert_eq!(got.headers["transfer-encoding"], "gzip, chunked", "{path}");
        assert_eq!(&got.body[..], GZ, "{path}");

        let out = raw(
            lb.proxy,
            format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes(),
            Duration::from_secs(5),
        );
        assert!(out.starts_with("HTTP/1.0 502"), "HTTP/1.0 {path}: {out:?}");

        let h2 = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http2_only(true)
            .build_http::<BoxBody>();
        let req = http::Request::get(format!("http://{}{path}", lb.proxy))
            .body(full(""))
            .unwrap();
        assert_eq!(send(&h2, req).await.unwrap().status, 502, "HTTP/2 {path}");
    }
}

/// RFC 9112 §6.1: an HTTP/1.0 response with Transfer-Encoding has faulty framing and its
/// connection closes after it, whatever `Connection: keep-alive` says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_1_0_response_with_transfer_encoding_closes_its_connection() {
    let gear = Scripted::start(|_| {
        Reply::after(
            &b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n2\r\nok\r\n0\r\n\r\n"[..],
        )
    })
    .await;
    let dir = workdir();
    let lb = lb_for(dir.path(), gear.addr, "");
    for _ in 0..3 {
        let got = get(lb.proxy, "/", &[]).await.unwrap();
        assert_eq!((got.status, got.text().as_str()), (200, "ok"));
    }
    assert_eq!(
        gear.connections.load(Ordering::SeqCst),
        3,
        "a connection was used again after an HTTP/1.0 response with Transfer-Encoding"
    );
}

/// An HTTP/1.0 client has no chunked coding: a body of unknown length reaches it ended
/// by the close, and its head says so (`Connection: close`), even to a client that asked
/// to keep the connection alive. A body with a length, or none, keeps the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_1_0_client_is_told_the_close_ends_its_body() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gear = Scripted::start(|seen| {
        if seen.head.starts_with("GET /chunked ") {
            Reply::after(
                &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"[..],
            )
        } else if seen.head.starts_with("HEAD ") {
            Reply::after(&b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"[..])
        } else {
            Reply::after(&b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"[..])
        }
    })
    .await;
    let dir = workdir();
    let lb = lb_for(dir.path(), gear.addr, "");
    let ka = "Host: x\r\nConnection: keep-alive\r\n\r\n";
    // Each answered, then one more request on the same connection where it stays open.
    for (first, body, stays) in [
        ("GET /chunked", "ok", false),
        ("GET /length", "ok", true),
        ("HEAD /chunked", "", true),
    ] {
        let request = format!("{first} HTTP/1.0\r\n{ka}");
        let mut s = tokio::net::TcpStream::connect(lb.proxy).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let end = read_head(&mut s, &mut buf).await.unwrap();
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        assert!(head.starts_with("http/1.0 200"), "{first}: {head}");
        assert_eq!(
            head.contains("connection: close"),
            !stays,
            "{first}: {head}"
        );
        assert_eq!(
            head.contains("connection: keep-alive"),
            stays,
            "{first}: {head}"
        );
        if stays {
            s.write_all(b"GET /length HTTP/1.0\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
        }
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest))
            .await
            .expect("the connection was left open")
            .unwrap();
        let mut after = buf.split_off(end + 4);
        after.extend_from_slice(&rest);
        let rest = String::from_utf8_lossy(&after);
        assert!(rest.starts_with(body), "{first}: {rest:?}");
        assert_eq!(rest.contains("HTTP/1.0 200"), stays, "{first}: {rest:?}");
    }
}

/// An HTTP/1.0 request without Host goes on as HTTP/1.1, which needs one: empty, as RFC
/// 9112 §3.2 says for a target without authority. `Content-Length: 3, 3` is one length
/// written twice: each side gets it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_and_length_are_made_valid_http_1_1() {
    let gear = Scripted::start(|_| {
        Reply::after(&b"HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\nabc"[..])
    })
    .await;
    let dir = workdir();
    let lb = lb_for(dir.path(), gear.addr, "");
    let out = raw(
        lb.proxy,
        b"GET /old HTTP/1.0\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(out.starts_with("HTTP/1.0 200"), "{out:?}");
    let seen = gear.seen();
    assert!(
        seen[0].head.starts_with("GET /old HTTP/1.1\r\n"),
        "{seen:?}"
    );
    assert_eq!(seen[0].headers("host"), [""], "{seen:?}");

    let out = raw(
        lb.proxy,
        b"POST /len HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
        Duration::from_secs(5),
    );
    let lengths: Vec<&str> = out
        .lines()
        .take_while(|l| !l.is_empty())
        .filter(|l| l.to_ascii_lowercase().starts_with("content-length:"))
        .collect();
    assert_eq!(lengths, ["content-length: 3"], "{out:?}");
    assert!(out.ends_with("\r\n\r\nabc"), "{out:?}");
    let seen = gear.seen();
    assert_eq!(seen[1].headers("content-length"), ["3"], "{seen:?}");
    assert_eq!(seen[1].body, b"abc");
}

/// RFC 9113 §8.2.3: an HTTP/2 client may split `cookie` into several fields; they are
/// joined with "; " before the request goes on as HTTP/1.1 (one `Cookie` header, which
/// is what PHP and Apache read), and the sticky cookie is found in whichever piece.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_http2_cookies_reach_the_gear_joined() {
    let (a, b) = (
        TestBackend::start("web1").await,
        TestBackend::start("web2").await,
    );
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("web1", a.addr), ("web2", b.addr)], ""),
    );
    let h2 = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<BoxBody>();
    for _ in 0..4 {
        let req = http::Request::get(format!("http://{}/headers", lb.proxy))
            .header("cookie", "PHPSESSID=abc")
            .header("cookie", "GEAR=web2")
            .header("cookie", "lang=en; theme=dark")
            .body(full(""))
            .unwrap();
        let got = send(&h2, req).await.unwrap();
        assert_eq!(got.status, 200);
        let seen = got.json();
        assert_eq!(seen["backend"], "web2", "the sticky piece was read: {seen}");
        assert_eq!(
            seen["headers"]["cookie"],
            serde_json::json!(["PHPSESSID=abc; lang=en; theme=dark"]),
            "{seen}"
        );
        assert!(got.headers.get("set-cookie").is_none());
    }
}

/// Write a POST of `total` body bytes in pieces of `piece`, one every `every`, on a
/// raw connection, reading the response on another thread: the response, and when it
/// arrived (from the first byte sent) and when the last body byte went.
fn paced_upload(
    addr: std::net::SocketAddr,
    path: &str,
    total: usize,
    piece: usize,
    every: Duration,
) -> (String, Duration, Duration) {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut w = s.try_clone().unwrap();
    let head = format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {total}\r\n\r\n");
    let start = Instant::now();
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(head.as_bytes());
        let mut sent = 0;
        while sent < total {
            let n = piece.min(total - sent);
            if w.write_all(&vec![b'p'; n]).is_err() {
                break;
            }
            sent += n;
            if sent < total {
                std::thread::sleep(every);
            }
        }
        start.elapsed()
    });
    let got = read_response(&mut s, &mut Vec::new());
    let answered = start.elapsed();
    let sent = writer.join().unwrap();
    (got, answered, sent)
}

/// Issue 25, point 1: `timeouts.server` is backend inactivity, as HAProxy's `timeout
/// server`. A steady upload longer than it is no timeout (the gear keeps taking
/// bytes); the wait for the response head starts when the request has been sent; a
/// gear that stops taking the body times out after `server` of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_timeout_is_backend_inactivity_not_the_length_of_the_upload() {
    let b = TestBackend::start("web1").await;
    let silent = Scripted::start(|req| {
        if req.head.starts_with("POST /stall ") {
            // Takes nothing of the body, answers nothing.
            Reply::after(Vec::new())
                .before_body()
                .then(Then::Hold(Duration::from_secs(20)))
        } else {
            // Takes the whole body, answers nothing.
            Reply::after(Vec::new()).then(Then::Hold(Duration::from_secs(20)))
        }
    })
    .await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("web1", b.addr), ("silent", silent.addr)],
            "[timeouts]\nserver = \"2s\"\n[health]\nenabled = false\n[sticky]\nenabled = false\n[proxy]\nretries = 0\nconnection_affinity = 0",
        ),
    );
    let backends = |lb: &Gearlb| lb.status_json()["backends"].clone();
    // Routed by hand: the silent gear is drained, the working one takes the uploads.
    let (code, out, err) = lb.ctl(&["rotate-out", "silent", "--timeout", "5s"]);
    assert_eq!(code, 0, "{out}{err}");
    let proxy = lb.proxy;
    let (got, answered, sent) = tokio::task::spawn_blocking(move || {
        paced_upload(proxy, "/upload", 25_000, 1_000, Duration::from_millis(200))
    })
    .await
    .unwrap();
    assert!(
        got.starts_with("HTTP/1.1 200") && got.ends_with("\r\n\r\n25000"),
        "a 4.8 s upload with server = 2s: {got}"
    );
    assert!(sent >= Duration::from_millis(4_500), "{sent:?}");
    assert!(answered >= sent, "{answered:?} {sent:?}");

    // The silent gear now: the working one drained, the silent one in.
    let (code, out, err) = lb.ctl(&["rotate-in", "silent"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = lb.ctl(&["rotate-out", "web1", "--timeout", "5s"]);
    assert_eq!(code, 0, "{out}{err}");
    // A 3 s upload the gear takes, then silence: 504 two seconds after the last byte,
    // not two seconds after the first.
    let (got, answered, sent) = tokio::task::spawn_blocking(move || {
        paced_upload(proxy, "/quiet", 15_000, 1_000, Duration::from_millis(200))
    })
    .await
    .unwrap();
    assert!(got.starts_with("HTTP/1.1 504"), "{got}");
    assert!(sent >= Duration::from_millis(2_700), "{sent:?}");
    let after = answered.saturating_sub(sent);
    assert!(
        after >= Duration::from_millis(1_500) && after < Duration::from_millis(3_500),
        "504 {after:?} after the request was sent"
    );
    // A gear that takes none of a large body: 504 about `server` after it stopped.
    let t = Instant::now();
    let (got, _) = tokio::task::spawn_blocking(move || raw_upload(proxy, "/stall", 64 << 20))
        .await
        .unwrap();
    assert!(got.starts_with("HTTP/1.1 504"), "{got}");
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    let silent_row = backends(&lb)
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "silent")
        .cloned()
        .unwrap();
    assert_eq!(silent_row["timeouts"], 2, "{silent_row}");
}

/// Issue 25, point 2: a gear that answers an upload early with a success that does not
/// close (a redirect, say) and then stops reading: its answer goes to the client at
/// once, as it would directly; the rest of the upload goes on under `timeouts.server`,
/// and when the gear takes no more, its connection is closed (and the client's, whose
/// upload is then read and dropped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_redirect_from_a_gear_that_stops_reading_reaches_the_client_at_once() {
    let gear = Scripted::start(|_| {
        Reply::after(&b"HTTP/1.1 302 Found\r\nLocation: /done\r\nContent-Length: 0\r\n\r\n"[..])
            .before_body()
            .then(Then::Hold(Duration::from_secs(30)))
    })
    .await;
    let dir = workdir();
    let lb = lb_for(dir.path(), gear.addr, "[timeouts]\nserver = \"3s\"");
    let proxy = lb.proxy;
    let (got, answered) = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(proxy).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut w = s.try_clone().unwrap();
        let t = Instant::now();
        std::thread::spawn(move || write_upload(&mut w, "/form", 32 << 20));
        let got = read_response(&mut s, &mut Vec::new());
        (got, t.elapsed())
    })
    .await
    .unwrap();
    assert!(got.starts_with("HTTP/1.1 302"), "{got}");
    assert!(
        answered < Duration::from_secs(1),
        "the redirect took {answered:?} (server = 3s)"
    );
    // The gear's connection and the request's count are let go of once the gear has
    // taken nothing for `server`.
    assert!(
        eventually(Duration::from_secs(8), || {
            let b = &lb.status_json()["backends"][0];
            b["sessions"] == 0 && b["connections_open"] == 0
        })
        .await,
        "{}",
        lb.status_json()["backends"][0]
    );
}

/// A gear that answers an upload at once and reads the body afterwards (full duplex):
/// the answer reaches the client before the body is sent, the body follows to the gear
/// whole, and both connections carry the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_answer_from_a_gear_that_reads_on_leaves_both_connections_usable() {
    use tokio::io::AsyncWriteExt;
    let gear = Scripted::start(|req| {
        if req.head.starts_with("POST ") {
            Reply::after(&b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly"[..]).before_body()
        } else {
            Reply::after(&b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext"[..])
        }
    })
    .await;
    let dir = workdir();
    let lb = lb_for(dir.path(), gear.addr, "");
    let mut s = tokio::net::TcpStream::connect(lb.proxy).await.unwrap();
    const LEN: usize = 300_000;
    s.write_all(
        format!("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: {LEN}\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    let (head, body) = tokio::time::timeout(Duration::from_secs(5), read_reply(&mut s, &mut buf))
        .await
        .expect("the answer before the body")
        .unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, b"early");
    for _ in 0..10 {
        s.write_all(&[b'b'; LEN / 10]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        eventually(Duration::from_secs(5), || {
            lb.status_json()["backends"][0]["connections_idle"] == 1
        })
        .await,
        "the gear's connection went back to the pool: {}",
        lb.status_json()["backends"][0]
    );
    let seen = gear.seen();
    assert!(
        seen[0].complete && seen[0].body.len() == LEN,
        "{:?}",
        seen[0].head
    );
    s.write_all(b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (head, body) = read_reply(&mut s, &mut buf).await.unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, b"next");
    assert_eq!(gear.connections.load(Ordering::SeqCst), 1);
}

/// RFC 9110 §15.2: a proxy forwards interim responses. A `103 Early Hints` reaches an
/// HTTP/1.1 client as soon as the gear sends it, before the final response; an
/// HTTP/1.0 client must not get one (and does not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interim_responses_reach_http_1_1_clients_ahead_of_the_final_one() {
    use tokio::io::AsyncWriteExt;
    let gear = Scripted::start(|_| {
        Reply::after(
            &b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\nConnection: x-hop\r\nX-Hop: 1\r\n\r\n"[..],
        )
        .and_later(
            Duration::from_millis(500),
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfinal"[..],
        )
    })
    .await;
    let dir = workdir();
    let lb = lb_for(dir.path(), gear.addr, "");
    let mut s = tokio::net::TcpStream::connect(lb.proxy).await.unwrap();
    let t = Instant::now();
    s.write_all(b"GET /page HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let (hint, _) = read_reply(&mut s, &mut buf).await.unwrap();
    let hinted = t.elapsed();
    assert!(hint.starts_with("HTTP/1.1 103"), "{hint}");
    assert!(hint.contains("link: </style.css>; rel=preload"), "{hint}");
    assert!(!hint.contains("x-hop"), "hop-by-hop fields stay: {hint}");
    assert!(
        hinted < Duration::from_millis(400),
        "the hint came after {hinted:?}"
    );
    let (fin, body) = read_reply(&mut s, &mut buf).await.unwrap();
    assert!(fin.starts_with("HTTP/1.1 200"), "{fin}");
    assert_eq!(body, b"final");
    // Keep-alive goes on, hint and all.
    s.write_all(b"GET /again HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (hint, _) = read_reply(&mut s, &mut buf).await.unwrap();
    assert!(hint.starts_with("HTTP/1.1 103"), "{hint}");
    let (fin, _) = read_reply(&mut s, &mut buf).await.unwrap();
    assert!(fin.starts_with("HTTP/1.1 200"), "{fin}");

    let out = raw(
        lb.proxy,
        b"GET /old HTTP/1.0\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(
        out.starts_with("HTTP/1.0 200"),
        "an HTTP/1.0 client got {out:?}"
    );
}

/// Trailer fields travel both ways (RFC 9110 §6.5): a request's into the chunked body
/// sent to the gear, a response's to HTTP/2 clients and to HTTP/1.1 clients that
/// accept them (`TE: trailers`, with the `Trailer` field naming them). Fields that
/// must not be trailers (framing, routing, cookies) are dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailer_fields_are_forwarded_both_ways() {
    let gear = Scripted::start(|_| {
        Reply::after(
            &b"HTTP/1.1 200 OK\r\nTrailer: x-checksum\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nx-checksum: abc\r\nset-cookie: GEAR=evil\r\ncontent-length: 9\r\n\r\n"[..],
        )
    })
    .await;
    let dir = workdir();
    let lb = lb_for(dir.path(), gear.addr, "");
    // A request's trailers reach the gear, and its TE: trailers says it may send its own.
    let out = raw(
        lb.proxy,
        b"POST /up HTTP/1.1\r\nHost: x\r\nTE: trailers\r\nConnection: TE, close\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nx-sum: 1\r\nhost: evil\r\n\r\n",
        Duration::from_secs(5),
    );
    let seen = gear.seen();
    assert_eq!(seen[0].body, b"abc");
    assert_eq!(seen[0].trailers, "x-sum: 1\r\n", "{seen:?}");
    assert_eq!(seen[0].headers("te"), ["trailers"]);
    // ... and the response's reach the HTTP/1.1 client that asked for them.
    assert!(out.contains("\r\n0\r\nx-checksum: abc\r\n\r\n"), "{out:?}");
    assert!(!out.contains("evil"), "{out:?}");

    let h2 = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<BoxBody>();
    let req = http::Request::get(format!("http://{}/h2", lb.proxy))
        .header("te", "trailers")
        .body(full(""))
        .unwrap();
    let resp = h2.request(req).await.unwrap();
    use http_body_util::BodyExt;
    let collected = resp.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().expect("trailers over HTTP/2");
    assert_eq!(trailers["x-checksum"], "abc");
    assert!(!trailers.contains_key("set-cookie"));
    assert_eq!(&collected.to_bytes()[..], b"hello");
}

/// A response body the gear cuts short or frames badly reaches the client as far as it
/// went, then cut (no last chunk, the connection closed): the client can tell a
/// truncated answer, where an empty reply says nothing of what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_or_malformed_response_body_reaches_the_client_as_far_as_it_went() {
    let gear = Scripted::start(|req| {
        let cut = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n";
        if req.head.starts_with("GET /bad ") {
            Reply::after([&cut[..], b"zz\r\nworld\r\n"].concat())
        } else if req.head.starts_with("GET /short ") {
            Reply::after(&b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello"[..])
                .then(Then::Close)
        } else {
            Reply::after(&cut[..]).then(Then::Close)
        }
    })
    .await;
    let dir = workdir();
    let lb = lb_for(dir.path(), gear.addr, "");
    for path in ["/bad", "/cut"] {
        let out = raw(
            lb.proxy,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
            Duration::from_secs(5),
        );
        assert!(out.starts_with("HTTP/1.1 200"), "{path}: {out:?}");
        assert!(out.ends_with("\r\n\r\n5\r\nhello\r\n"), "{path}: {out:?}");
    }
    let out = raw(
        lb.proxy,
        b"GET /short HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(out.starts_with("HTTP/1.1 200"), "{out:?}");
    assert!(out.contains("content-length: 10"), "{out:?}");
    assert!(out.ends_with("\r\n\r\nhello"), "{out:?}");
}

/// h2c smuggling: an `Upgrade: h2c` (deprecated, RFC 9113 §3.1) honoured by a gear would
/// open a tunnel through which the client speaks HTTP/2 to the gear directly, every
/// request of it unseen by the balancer. The token is not forwarded: the request goes
/// on as plain HTTP/1.1, and a `101` to it is a 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2c_upgrade_is_not_forwarded() {
    let gear = Scripted::start(|req| {
        if req.header("upgrade").is_some() {
            Reply::after(
                &b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"
                    [..],
            )
            .then(Then::Tunnel)
        } else {
            Reply::after(&b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"[..])
        }
    })
    .await;
    let dir = workdir();
    let lb = lb_for(dir.path(), gear.addr, "");
    let out = raw(
        lb.proxy,
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n",
        Duration::from_secs(3),
    );
    assert!(out.starts_with("HTTP/1.1 200"), "{out:?}");
    let seen = gear.seen();
    assert_eq!(seen.len(), 1);
    for gone in ["upgrade", "http2-settings", "connection"] {
        assert!(seen[0].header(gone).is_none(), "{gone}: {:?}", seen[0].head);
    }
    // Listed with another protocol, only that one is asked for.
    let out = raw(
        lb.proxy,
        b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c, websocket\r\n\r\n",
        Duration::from_secs(3),
    );
    assert!(out.starts_with("HTTP/1.1 502"), "{out:?}");
    assert_eq!(gear.seen()[1].headers("upgrade"), ["websocket"]);
    assert!(gear.tunnel_bytes().is_empty());
}
