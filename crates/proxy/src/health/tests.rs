//! Unit tests of health: the state machine, the supervisor with a fake checker, and the
//! HTTP check against real listeners.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::router::{Router, Target};
use gearlb_core::routing::CheckReport;
use gearlb_core::routing::{BackendSpec, BackendState};
use std::sync::atomic::{AtomicBool, AtomicUsize};

#[test]
fn machine_fall_and_rise() {
    let mut m = Machine::new(true);
    assert_eq!(m.check(false, 2, 3), None);
    assert_eq!(
        m.check(true, 2, 3),
        None,
        "a success resets the failure run"
    );
    assert_eq!(m.check(false, 2, 3), None);
    assert_eq!(m.check(false, 2, 3), Some(Transition::Down));
    assert_eq!(m.check(false, 2, 3), None);
    assert_eq!(m.check(true, 2, 3), None);
    assert_eq!(m.check(true, 2, 3), None);
    assert_eq!(
        m.check(false, 2, 3),
        None,
        "a failure resets the success run"
    );
    assert_eq!(m.check(true, 2, 3), None);
    assert_eq!(m.check(true, 2, 3), None);
    assert_eq!(m.check(true, 2, 3), Some(Transition::Up));
}

#[test]
fn ejection_needs_checks_to_come_back() {
    let mut m = Machine::new(true);
    m.check(true, 2, 3);
    assert_eq!(m.eject(), Some(Transition::Down));
    assert_eq!(m.eject(), None);
    assert_eq!(m.check(true, 2, 2), None);
    assert_eq!(m.check(true, 2, 2), Some(Transition::Up));
}

#[test]
fn expect_matches_like_haproxy_rstatus() {
    let re = regex_lite::Regex::new("2..|3..|401").unwrap();
    for ok in ["200", "204", "302", "401"] {
        assert!(re.is_match(ok), "{ok}");
    }
    for bad in ["404", "500", "403"] {
        assert!(!re.is_match(bad), "{bad}");
    }
}

struct Fake(Arc<AtomicBool>);

impl Checker for Fake {
    type Conn = ();

    async fn check(&self, _: &mut (), _: &Target, _: &HealthSettings) -> CheckReport {
        CheckReport {
            ok: self.0.load(Ordering::Relaxed),
            result: "fake".into(),
            ms: 0,
            at: 0,
            version: None,
        }
    }
}

fn settings(interval: Duration, fall: u32, rise: u32) -> Arc<ArcSwap<HealthSettings>> {
    Arc::new(ArcSwap::from_pointee(HealthSettings {
        enabled: true,
        uri: "/".into(),
        expect: regex_lite::Regex::new("2..").unwrap(),
        interval,
        timeout: Duration::from_secs(1),
        fall,
        rise,
        port: None,
        tcp: None,
    }))
}

fn state(router: &Router) -> BackendState {
    router.load().get("web1").unwrap().state()
}

/// Let spawned tasks run to a quiet point without moving paused time much.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// A gear on 127.0.0.1:0 answering `GET` with `status`, counting the connections it
/// accepted; it answers at most `per_conn` requests on a connection, then closes it
/// when the next request arrives, unanswered (as a keep-alive timeout racing a request).
async fn check_target(status: u16, per_conn: usize) -> (Arc<Target>, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut answered = 0;
                let mut chunk = [0u8; 1024];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        if answered == per_conn {
                            return;
                        }
                        answered += 1;
                        let resp = format!("HTTP/1.1 {status} X\r\nContent-Length: 2\r\n\r\nok");
                        if s.write_all(resp.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    let backend = Target::of_spec(
        BackendSpec {
            name: "web1".into(),
            addr: addr.to_string().parse().unwrap(),
            gear_dns: None,
            cookie: None,
            backup: false,
            max_connections: None,
            version: None,
            compatible: Vec::new(),
            send_proxy: None,
        },
        1,
    );
    (backend, accepted)
}

#[tokio::test]
async fn checks_keep_their_connection() {
    let (backend, accepted) = check_target(200, usize::MAX).await;
    let s = settings(Duration::from_secs(1), 2, 2).load_full();
    let mut conn = CheckConn::default();
    for i in 0..5 {
        let r = HttpChecker.check(&mut conn, &backend, &s).await;
        assert!(r.ok, "check {i}: {}", r.result);
        assert_eq!(r.result, "200");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one connection for five checks"
    );
}

#[tokio::test]
async fn a_kept_connection_closed_by_the_gear_is_not_a_failed_check() {
    // Each connection answers one check and drops the next one unanswered.
    let (backend, accepted) = check_target(200, 1).await;
    let s = settings(Duration::from_secs(1), 2, 2).load_full();
    let mut conn = CheckConn::default();
    for i in 0..4 {
        let r = HttpChecker.check(&mut conn, &backend, &s).await;
        assert!(r.ok, "check {i}: {}", r.result);
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        4,
        "a new connection each time"
    );
}

#[tokio::test]
async fn failed_checks_drop_the_connection() {
    let (backend, accepted) = check_target(503, usize::MAX).await;
    let s = settings(Duration::from_secs(1), 2, 2).load_full();
    let mut conn = CheckConn::default();
    for _ in 0..3 {
        let r = HttpChecker.check(&mut conn, &backend, &s).await;
        assert!(!r.ok);
        assert_eq!(r.result, "503");
        assert!(conn.is_none());
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        3,
        "each failure confirmed anew"
    );

    // Nothing listening: a clear failure, no connection kept.
    let gone = Target::of_spec(
        BackendSpec {
            name: "web2".into(),
            addr: "127.0.0.1:1".parse().unwrap(),
            gear_dns: None,
            cookie: None,
            backup: false,
            max_connections: None,
            version: None,
            compatible: Vec::new(),
            send_proxy: None,
        },
        1,
    );
    let r = HttpChecker.check(&mut conn, &gone, &s).await;
    assert!(!r.ok);
    assert!(r.result.starts_with("connect:"), "{}", r.result);
    assert!(conn.is_none());
}

#[tokio::test(start_paused = true)]
async fn down_within_fall_intervals_up_within_rise_intervals() {
    let router = Arc::new(Router::new(1));
    router.replace_backends(vec![BackendSpec {
        name: "web1".into(),
        addr: "127.0.0.1:1".parse().unwrap(),
        gear_dns: None,
        cookie: None,
        backup: false,
        max_connections: None,
        version: None,
        compatible: Vec::new(),
        send_proxy: None,
    }]);
    let healthy = Arc::new(AtomicBool::new(true));
    let interval = Duration::from_secs(2);
    let (_tx, rx) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    tokio::spawn(run(
        router.clone(),
        Arc::new(Fake(healthy.clone())),
        settings(interval, 2, 3),
        rx,
        stop.clone(),
    ));
    tokio::time::sleep(interval * 3).await;
    assert_eq!(state(&router), BackendState::Up);

    // The gear dies, half an interval after a check (a check at the very instant of
    // the change could run before or after it): down within fall × interval.
    tokio::time::sleep(interval / 2).await;
    healthy.store(false, Ordering::Relaxed);
    let died = Instant::now();
    while state(&router) == BackendState::Up {
        tokio::time::sleep(Duration::from_millis(100)).await;
        settle().await;
    }
    let took = died.elapsed();
    assert!(took <= interval * 2, "down after {took:?}");
    assert!(
        took > interval,
        "one failed check must not be enough ({took:?})"
    );

    // It comes back (again between two checks): up within rise × interval.
    tokio::time::sleep(interval / 2).await;
    healthy.store(true, Ordering::Relaxed);
    let back = Instant::now();
    while state(&router) == BackendState::Down {
        tokio::time::sleep(Duration::from_millis(100)).await;
        settle().await;
    }
    let took = back.elapsed();
    assert!(took <= interval * 3, "up after {took:?}");
    assert!(
        took > interval * 2,
        "two good checks must not be enough ({took:?})"
    );
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn passive_ejection_and_recovery_by_checks() {
    let router = Arc::new(Router::new(1));
    router.replace_backends(vec![BackendSpec {
        name: "web1".into(),
        addr: "127.0.0.1:1".parse().unwrap(),
        gear_dns: None,
        cookie: None,
        backup: false,
        max_connections: None,
        version: None,
        compatible: Vec::new(),
        send_proxy: None,
    }]);
    let backend = router.load().target("web1").unwrap().clone();
    let (tx, rx) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    tokio::spawn(run(
        router.clone(),
        Arc::new(Fake(Arc::new(AtomicBool::new(true)))),
        settings(Duration::from_secs(2), 2, 2),
        rx,
        stop.clone(),
    ));
    settle().await;
    tx.send(backend.clone()).unwrap();
    settle().await;
    assert_eq!(state(&router), BackendState::Down, "ejected at once");
    tokio::time::sleep(Duration::from_secs(6)).await;
    settle().await;
    assert_eq!(
        state(&router),
        BackendState::Up,
        "back after passing checks"
    );
    stop.cancel();
}
