//! openloop's tests (a module of main.rs).

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;

/// A gear answering every request with `answer`; the `slow`-th request (counted from
/// 1 over all connections) waits `delay` first.
async fn gear(answer: &'static [u8], slow: usize, delay: Duration) -> SocketAddr {
    gear_counting(answer, slow, delay).await.0
}

/// `gear`, also counting the connections it accepted. An answer with `Connection:
/// close` closes the connection after it; an answer with `|` in it is written in
/// pieces 20 ms apart, without the `|`.
async fn gear_counting(
    answer: &'static [u8],
    slow: usize,
    delay: Duration,
) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicUsize::new(0));
    let close = answer.windows(17).any(|w| w == b"Connection: close");
    let pieces: Vec<&'static [u8]> = answer.split(|&b| b == b'|').collect();
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let count = count.clone();
            let pieces = pieces.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        if s.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                            return;
                        }
                    }
                    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    buf.drain(..end);
                    if count.fetch_add(1, Ordering::SeqCst) + 1 == slow {
                        tokio::time::sleep(delay).await;
                    }
                    for (i, piece) in pieces.iter().enumerate() {
                        if i > 0 {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        if s.write_all(piece).await.is_err() {
                            return;
                        }
                    }
                    if close {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

fn args(addr: SocketAddr, connections: usize, rate: f64, secs: f64) -> Args {
    Args {
        connections,
        rate,
        duration: Duration::from_secs_f64(secs),
        grace: Duration::from_secs(5),
        url: format!("http://{addr}/x?y=1"),
    }
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

/// Every request answered 200, `n` of them, and no error.
fn all_answered(report: &serde_json::Value, n: u64) {
    let want = serde_json::json!({"200": n});
    assert_eq!(report["statusCodeDistribution"], want, "{report:#}");
    assert_eq!(
        report["errorDistribution"],
        serde_json::json!({}),
        "{report:#}"
    );
}

#[test]
fn durations_are_positive_seconds() {
    assert_eq!(parse_secs("20s"), Ok(Duration::from_secs(20)));
    assert_eq!(parse_secs("0.5"), Ok(Duration::from_millis(500)));
    for bad in ["0", "-1s", "x", "", "inf"] {
        assert!(parse_secs(bad).is_err(), "{bad}");
    }
}

#[test]
fn the_request_names_the_path_and_the_host() {
    let t = target("http://127.0.0.1:8080/a/b?c=d").unwrap();
    assert_eq!(t.addr, "127.0.0.1:8080".parse().unwrap());
    let req = String::from_utf8(t.request).unwrap();
    assert!(
        req.starts_with("GET /a/b?c=d HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"),
        "{req}"
    );
    assert!(req.ends_with("\r\n\r\n"));
    assert!(target("127.0.0.1:8080/").is_err());
    assert!(target("https://127.0.0.1/").is_err());
    assert!(target("http:///x").is_err());
}

#[test]
fn a_head_gives_its_status_length_and_whether_the_connection_stays() {
    let head = |b: &[u8]| parse_head(b).unwrap();
    assert_eq!(head(b"HTTP/1.1 200 OK\r\nContent-Len"), None);
    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 16\r\nConnection: keep-alive\r\n\r\n";
    let want = |status, keep, body_len| Head {
        status,
        keep,
        head_len: ok.len(),
        body_len,
    };
    assert_eq!(head(ok), Some(want(200, true, 16)));
    let close = b"HTTP/1.1 503 Busy\r\nContent-Length: 16\r\nConnection: x, Close\r\n\r\n";
    assert_eq!(head(close).map(|h| (h.status, h.keep)), Some((503, false)));
    let old = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(head(old).map(|h| h.keep), Some(false));
    let not_modified = b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n";
    assert_eq!(head(not_modified).map(|h| h.body_len), Some(0));
    for bad in [
        &b"HTTP/1.1 101 Switching Protocols\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
    ] {
        assert!(parse_head(bad).is_err(), "{}", String::from_utf8_lossy(bad));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_released_is_answered_and_counted_once() {
    let addr = gear(OK, 0, Duration::ZERO).await;
    let report = run(args(addr, 4, 2000.0, 0.5)).await.unwrap();
    // Requests 0..1000 are due before the end (i / 2000 s < 0.5 s).
    all_answered(&report, 1000);
    assert_eq!(report["summary"]["requestsPerSec"], 2000.0);
    let p = &report["latencyPercentiles"];
    let (p50, p99) = (p["p50"].as_f64().unwrap(), p["p99"].as_f64().unwrap());
    assert!(p50 > 0.0 && p50 <= p99, "{report:#}");
    // The end wakes the idle connections: the run does not wait out the grace (5 s).
    let elapsed = report["openloop"]["elapsed"].as_f64().unwrap();
    assert!(elapsed < 2.0, "{report:#}");
    assert_eq!(report["openloop"]["released"], 1000, "{report:#}");
    let late = &report["openloop"]["releaseLate"];
    assert!(
        late["p50"].as_f64().unwrap() <= late["max"].as_f64().unwrap(),
        "{report:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_unanswered_within_the_grace_are_errors() {
    // The first answer takes 10 s; the nine requests behind it on the one connection
    // are never sent.
    let addr = gear(OK, 1, Duration::from_secs(10)).await;
    let mut a = args(addr, 1, 100.0, 0.1);
    a.grace = Duration::from_millis(300);
    let report = run(a).await.unwrap();
    assert_eq!(
        report["statusCodeDistribution"],
        serde_json::json!({}),
        "{report:#}"
    );
    let errors = report["errorDistribution"].as_object().unwrap();
    assert_eq!(errors.len(), 1, "{report:#}");
    let (what, n) = errors.iter().next().unwrap();
    assert!(what.contains("grace") && n == 10, "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_split_over_reads_is_read_whole() {
    let answer = b"HTTP/1.1 200 OK\r\nContent-|Length: 10\r\n\r\nhello|world";
    let addr = gear(answer, 0, Duration::ZERO).await;
    let report = run(args(addr, 2, 100.0, 0.2)).await.unwrap();
    all_answered(&report, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_counts_against_every_request_due_during_it() {
    // One connection, 200 requests a second; the gear holds the 20th answer 300 ms.
    // The ~60 requests due meanwhile wait for the connection, and their latency
    // counts from when they were due: a closed-loop count would show one slow request.
    let addr = gear(OK, 20, Duration::from_millis(300)).await;
    let report = run(args(addr, 1, 200.0, 1.0)).await.unwrap();
    assert_eq!(report["statusCodeDistribution"]["200"], 200, "{report:#}");
    let p = &report["latencyPercentiles"];
    assert!(p["p90"].as_f64().unwrap() >= 0.1, "{report:#}");
    assert!(
        report["summary"]["slowest"].as_f64().unwrap() >= 0.3,
        "{report:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_it_cannot_read_are_errors_not_latencies() {
    for (answer, error) in [
        (
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"[..],
            "Transfer-Encoding",
        ),
        (b"HTTP/1.1 200 OK\r\n\r\nok", "without Content-Length"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA",
            "bytes after the response",
        ),
    ] {
        let addr = gear(answer, 0, Duration::ZERO).await;
        let report = run(args(addr, 1, 100.0, 0.1)).await.unwrap();
        assert_eq!(
            report["statusCodeDistribution"],
            serde_json::json!({}),
            "{report:#}"
        );
        let errors = report["errorDistribution"].as_object().unwrap();
        assert_eq!(
            errors.values().map(|v| v.as_u64().unwrap()).sum::<u64>(),
            10,
            "{report:#}"
        );
        assert!(errors.keys().all(|k| k.contains(error)), "{report:#}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interim_answer_is_passed_over() {
    let answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let addr = gear(answer, 0, Duration::ZERO).await;
    let report = run(args(addr, 1, 100.0, 0.1)).await.unwrap();
    all_answered(&report, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_gear_is_reconnected_to() {
    let (addr, accepted) = gear_counting(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
        0,
        Duration::ZERO,
    )
    .await;
    let report = run(args(addr, 2, 200.0, 0.2)).await.unwrap();
    all_answered(&report, 40);
    // Two opened before the start, then one for every answer but the last of each.
    assert_eq!(accepted.load(Ordering::SeqCst), 40, "{report:#}");
}
