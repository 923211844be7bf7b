//! HTTP/2 cleartext clients that hold things (issue 25, point 3): streams a connection may
//! open, streams whose response cannot be sent (a zero window) or whose request body
//! never comes, idle connections kept busy with PINGs, and a HEADERS never completed.
//! Each is bounded by the same `timeouts` as HTTP/1, as HAProxy bounds them. Clients are
//! the `h2` crate (which sends what hyper's client never does) or raw frames.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use support::*;

/// An HTTP/2 client connection from the `h2` crate with the given stream window; its
/// connection task runs (and answers PINGs) in the background until dropped.
async fn h2_client(
    addr: SocketAddr,
    window: u32,
) -> (
    h2::client::SendRequest<Bytes>,
    Option<h2::PingPong>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
    usize,
) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (client, mut conn) = h2::client::Builder::new()
        .initial_window_size(window)
        .handshake::<_, Bytes>(tcp)
        .await
        .unwrap();
    let pings = conn.ping_pong();
    // The server's SETTINGS come with its first frames: let them arrive.
    let mut conn = Box::pin(conn);
    let _ = tokio::time::timeout(Duration::from_millis(300), &mut conn).await;
    let streams = conn.max_concurrent_send_streams();
    let task = tokio::spawn(conn);
    (client, pings, task, streams)
}

fn get(addr: SocketAddr, path: &str) -> http::Request<()> {
    http::Request::get(format!("http://{addr}{path}"))
        .body(())
        .unwrap()
}

fn backend_row(lb: &Gearlb) -> serde_json::Value {
    lb.status_json()["backends"][0].clone()
}

/// Streams per connection are limited (HAProxy: `tune.h2.max-concurrent-streams`, 100);
/// streams whose response the client gives no window for are reset after
/// `timeouts.client`, with their backend connections, however many PINGs keep the
/// connection busy; a client cannot hold a gear's connections for as long as it likes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_stalled_by_a_zero_window_are_reset_with_their_gear_connections() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("web1", b.addr)],
            "[timeouts]\nclient = \"2s\"\nserver = \"30s\"\n[proxy]\nh2_max_concurrent_streams = 10\n[health]\nenabled = false",
        ),
    );
    let mut conns = Vec::new();
    let mut responses = Vec::new();
    for _ in 0..3 {
        let (mut client, pings, task, streams) = h2_client(lb.proxy, 0).await;
        assert_eq!(streams, 10, "SETTINGS_MAX_CONCURRENT_STREAMS");
        // More streams than allowed: the client keeps the rest waiting.
        for _ in 0..10 {
            client = client.ready().await.unwrap();
            let (resp, _) = client
                .send_request(get(lb.proxy, "/download?bytes=1000000"), true)
                .unwrap();
            responses.push(tokio::spawn(async move {
                // The head arrives (HEADERS are not flow-controlled); the body cannot.
                let resp = resp.await.map_err(|e| e.to_string())?;
                let mut body = resp.into_body();
                match tokio::time::timeout(Duration::from_secs(20), body.data()).await {
                    Ok(Some(Ok(d))) => Err(format!("{} bytes through a zero window", d.len())),
                    Ok(Some(Err(e))) => Ok(e.to_string()),
                    Ok(None) => Err("ended".to_string()),
                    Err(_) => Err("not reset within 20 s".to_string()),
                }
            }));
        }
        // PINGs all along.
        let pinger = pings.map(|mut p| {
            tokio::spawn(async move {
                for _ in 0..100 {
                    if p.ping(h2::Ping::opaque()).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
        });
        conns.push((client, task, pinger));
    }
    assert!(
        eventually(Duration::from_secs(5), || backend_row(&lb)["sessions"]
            == 30)
        .await,
        "{}",
        backend_row(&lb)
    );
    let t = Instant::now();
    for r in responses {
        let reset = r.await.unwrap();
        assert!(reset.is_ok(), "{reset:?}");
    }
    assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());
    assert!(
        eventually(Duration::from_secs(5), || {
            let row = backend_row(&lb);
            row["sessions"] == 0 && row["connections_open"] == 0
        })
        .await,
        "{}",
        backend_row(&lb)
    );
    assert!(backend_row(&lb)["sessions_max"].as_u64().unwrap() <= 30);
    drop(conns);
}

/// A stream whose request body never comes gets 408 after `timeouts.client` (not a 504
/// after `timeouts.server`), and its gear connection is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_request_body_stalls_gets_408_after_the_client_timeout() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("web1", b.addr)],
            "[timeouts]\nclient = \"1s\"\nserver = \"30s\"\n[health]\nenabled = false",
        ),
    );
    let (client, _pings, _task, _) = h2_client(lb.proxy, 65_535).await;
    let mut client = client.ready().await.unwrap();
    let req = http::Request::post(format!("http://{}/upload", lb.proxy))
        .body(())
        .unwrap();
    let (resp, mut body) = client.send_request(req, false).unwrap();
    body.send_data(Bytes::from_static(b"the start"), false)
        .unwrap();
    let t = Instant::now();
    let resp = tokio::time::timeout(Duration::from_secs(10), resp)
        .await
        .expect("an answer")
        .unwrap();
    assert_eq!(resp.status(), 408);
    assert!(
        t.elapsed() >= Duration::from_millis(800) && t.elapsed() < Duration::from_secs(4),
        "{:?}",
        t.elapsed()
    );
    assert!(
        eventually(Duration::from_secs(5), || {
            let row = backend_row(&lb);
            row["sessions"] == 0 && row["connections_open"] == 0
        })
        .await,
        "{}",
        backend_row(&lb)
    );
    // Not the gear's fault.
    assert_eq!(backend_row(&lb)["timeouts"], 0);
}

/// An idle HTTP/2 connection is closed (GOAWAY) after `timeouts.request_header`, as an
/// idle HTTP/1 keep-alive connection is, however many PINGs the client sends; a HEADERS
/// frame never completed by its CONTINUATION is an incomplete head, and is cut after
/// the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_headed_http2_connections_are_closed_at_the_head_timeout() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("web1", b.addr)],
            "[timeouts]\nrequest_header = \"1s\"\nclient = \"30s\"\n[health]\nenabled = false",
        ),
    );
    // One request served, then idle but for PINGs.
    let (client, pings, task, _) = h2_client(lb.proxy, 65_535).await;
    let mut client = client.ready().await.unwrap();
    let (resp, _) = client.send_request(get(lb.proxy, "/"), true).unwrap();
    let resp = resp.await.unwrap();
    assert_eq!(resp.status(), 200);
    let t = Instant::now();
    let mut pings = pings.unwrap();
    let pinging = tokio::spawn(async move {
        for _ in 0..200 {
            if pings.ping(h2::Ping::opaque()).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let ended = tokio::time::timeout(Duration::from_secs(10), task).await;
    assert!(ended.is_ok(), "an idle connection kept open by PINGs");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(4),
        "{took:?}"
    );
    pinging.abort();

    // Preface, SETTINGS, then a HEADERS (GET /, END_STREAM) without END_HEADERS, and
    // nothing more: the CONTINUATION it announces never comes.
    let mut s = TcpStream::connect(lb.proxy).await.unwrap();
    let mut raw = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    raw.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
    raw.extend_from_slice(&[0, 0, 3, 0x1, 0x1, 0, 0, 0, 1, 0x82, 0x86, 0x84]);
    s.write_all(&raw).await.unwrap();
    let t = Instant::now();
    let mut buf = [0u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "a half-sent head held the connection");
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    assert_eq!(b.requests(), 1, "the half head reached the gear");
}
