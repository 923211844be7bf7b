//! Slow readers against a real `gearlb run` process (issue 34): clients that advertise a
//! tiny TCP window, ask for large files and stop reading must cost the other clients
//! nothing they can notice, and the balancer only what a bounded buffer holds for each;
//! a burst of new connections while the balancer cannot accept waits in the listener's
//! queue. Bounded in time and count; 127.0.0.1 only. Timing is asserted loosely (the
//! machine may be loaded): how fast is measured by `bench/slow_read.sh`.

mod support;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::*;

/// Slow clients, and what each asks for (twice, pipelined).
const SLOW: usize = 40;
const SLOW_BYTES: u64 = 8 << 20;

/// A client with a 1 KiB receive buffer that asks for `SLOW_BYTES` twice, reads the
/// first 4 KiB and then nothing more. The socket is returned to keep the connection open.
async fn slow_reader(proxy: SocketAddr) -> tokio::net::TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    // Before connecting: the window the client advertises from its first segment.
    sock.set_recv_buffer_size(1024).unwrap();
    let mut s = sock.connect(proxy).await.unwrap();
    let one = format!("GET /download?bytes={SLOW_BYTES} HTTP/1.1\r\nHost: x\r\n\r\n");
    s.write_all(format!("{one}{one}").as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let mut got = 0;
    while got < buf.len() {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf[got..]))
            .await
            .expect("the slow client's first bytes")
            .unwrap();
        assert!(n > 0, "closed before the first 4 KiB");
        got += n;
    }
    assert!(buf.starts_with(b"HTTP/1.1 200"));
    s
}

/// Bytes read from the gear, and written to clients, so far.
fn traffic(lb: &Gearlb) -> (u64, u64) {
    let j = lb.status_json();
    (
        j["backends"][0]["bytes_received"].as_u64().unwrap(),
        j["frontend"]["bytes_sent"].as_u64().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_readers_cost_a_normal_client_nothing_and_the_balancer_a_bounded_buffer() {
    let b = TestBackend::start("big").await;
    let dir = workdir();
    // One worker thread: the balancer's loop is what slow clients must not hold.
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("big", b.addr)],
            "[runtime]\nthreads = 1\n[health]\nenabled = false",
        ),
    );
    assert_eq!(get(lb.proxy, "/", &[]).await.unwrap().status, 200);
    let (rss_before, _) = lb.rss_kib();
    let (from_gear_before, sent_before) = traffic(&lb);

    let mut slow = Vec::new();
    for _ in 0..SLOW {
        slow.push(slow_reader(lb.proxy).await);
    }
    // Until what the balancer reads from the gear settles (the clients' sockets full).
    let mut last = traffic(&lb);
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = traffic(&lb);
        if now == last {
            break;
        }
        last = now;
    }
    let (from_gear, sent) = (last.0 - from_gear_before, last.1 - sent_before);
    // What the balancer holds for them: read from the gear and not written to a client.
    // One read and one frame each at most (with their response heads), not the 2 x 8 MiB
    // they asked for.
    let held = from_gear.saturating_sub(sent);
    let (rss, _) = lb.rss_kib();
    assert!(
        held < SLOW as u64 * (384 << 10),
        "{held} bytes held for {SLOW} slow clients ({from_gear} read from the gear, {sent} sent)"
    );
    // And what it sent them waits in the kernel, at most TCP_NOTSENT_LOWAT unsent each
    // (plus the tiny window): the gear is not drained into the clients' sockets either.
    assert!(
        sent < SLOW as u64 * (512 << 10),
        "{sent} bytes sent to {SLOW} clients that took 4 KiB each"
    );
    assert!(
        rss < rss_before + SLOW as u64 * 512,
        "RSS grew from {rss_before} KiB to {rss} KiB for {SLOW} slow clients"
    );

    // A normal client meanwhile: small and 1 MiB answers, on new connections, each well
    // within a generous deadline.
    for i in 0..10 {
        for (path, len) in [("/", None), ("/download?bytes=1048576", Some(1 << 20))] {
            let t = Instant::now();
            let got = tokio::time::timeout(Duration::from_secs(10), get(lb.proxy, path, &[]))
                .await
                .unwrap_or_else(|_| panic!("request {i} for {path} took over 10 s"))
                .unwrap();
            assert_eq!(got.status, 200, "{path}");
            if let Some(len) = len {
                assert_eq!(got.body.len(), len, "{path}");
            }
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "request {i} for {path} took {:?} beside {SLOW} slow readers",
                t.elapsed()
            );
        }
    }
    // The slow clients are still there, and still held back.
    let (from_gear_after, sent_after) = traffic(&lb);
    let normal = 10 * ((1 << 20) + 200);
    let slack = SLOW as u64 * (256 << 10);
    assert!(
        from_gear_after - from_gear_before < from_gear + normal + slack,
        "the gear was drained for the slow clients meanwhile"
    );
    assert!(
        sent_after - sent_before < sent + normal + slack,
        "the slow clients' sockets were filled meanwhile"
    );
    drop(slow);
}

/// Sends SIGCONT to the balancer when dropped, so that a failed assertion never leaves
/// it stopped.
struct Resume<'a>(&'a Gearlb);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        self.0.signal("CONT");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_connections_while_the_balancer_is_busy_waits_in_its_queue() {
    // The kernel caps the queue at net.core.somaxconn (4096 on current kernels, 128 on
    // old ones): the burst fits in what it allows.
    let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(128);
    let burst = 300.min(somaxconn.saturating_sub(8)).max(1);
    let b = TestBackend::start("web").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("web", b.addr)],
            "[runtime]\nthreads = 1\n[health]\nenabled = false\n[limits]\nmax_connections = 1000",
        ),
    );
    assert_eq!(get(lb.proxy, "/", &[]).await.unwrap().status, 200);
    let proxy = lb.proxy;
    // The balancer cannot accept: every handshake must still complete, in the kernel,
    // at once (a dropped one would be tried again a second later).
    lb.signal("STOP");
    let resume = Resume(&lb);
    let streams = tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        let mut streams = Vec::new();
        for i in 0..burst {
            let s = std::net::TcpStream::connect_timeout(&proxy, Duration::from_millis(900))
                .unwrap_or_else(|e| panic!("connection {i} of {burst} not taken at once: {e}"));
            streams.push(s);
        }
        (streams, t.elapsed())
    })
    .await
    .unwrap();
    let (streams, took) = streams;
    drop(resume);
    assert!(
        took < Duration::from_secs(5),
        "{burst} connections took {took:?}"
    );
    // Once it runs again, every one of them is served.
    let served = tokio::task::spawn_blocking(move || {
        let mut ok = 0;
        for mut s in streams {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            if out.starts_with(b"HTTP/1.1 200") {
                ok += 1;
            }
        }
        ok
    })
    .await
    .unwrap();
    assert_eq!(served, burst, "every queued connection is served");
}
