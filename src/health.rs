//! Backend health: active HTTP checks and passive ejection on real traffic.
//!
//! Owns the health state machine ([`Machine`]: `fall` consecutive failures → down,
//! `rise` consecutive successful checks → up), the HTTP check itself ([`HttpChecker`]:
//! `GET <uri>` with `Host` set to the gear's DNS name, on a connection kept between
//! checks, status matched against the
//! `expect` regular expression as HAProxy's `http-check expect rstatus`), and the
//! [`run`] supervisor that keeps one check loop per backend of this balancer's subset.
//!
//! Checks of different backends are spread over the interval (each loop starts at a
//! random phase), so a balancer never sends all its checks at once. The request path
//! reports failures by bumping an atomic counter on the backend; only the request that
//! reaches `fall` sends an ejection event here, over a channel. The supervisor is the
//! single owner of every machine and the only writer of health into the routing table.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use http::{header, HeaderValue, Request};
use http_body_util::BodyExt;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::HealthConfig;
use crate::proxy::upstream::ReqBody;
use crate::routing::{Backend, CheckReport, Router};

/// Health settings in force (swapped on reload).
#[derive(Clone, Debug)]
pub struct HealthSettings {
    pub enabled: bool,
    pub uri: String,
    pub expect: regex_lite::Regex,
    pub interval: Duration,
    pub timeout: Duration,
    pub fall: u32,
    pub rise: u32,
}

impl HealthSettings {
    /// From a validated configuration (`config` checked the expression compiles).
    pub fn from_config(c: &HealthConfig) -> Self {
        HealthSettings {
            enabled: c.enabled,
            uri: c.uri.clone(),
            expect: regex_lite::Regex::new(&c.expect)
                .unwrap_or_else(|_| regex_lite::Regex::new("^[23]..$|^401$").expect("static")),
            interval: c.interval,
            timeout: c.timeout,
            fall: c.fall,
            rise: c.rise,
        }
    }
}

/// A health state change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    Down,
    Up,
}

/// Health of one backend: pure state, fed with observations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    pub up: bool,
    ok_run: u32,
    fail_run: u32,
}

impl Machine {
    /// A backend starts up (as in HAProxy): traffic flows before the first check.
    pub fn new(up: bool) -> Self {
        Machine {
            up,
            ok_run: 0,
            fail_run: 0,
        }
    }

    /// An active check's result.
    pub fn check(&mut self, ok: bool, fall: u32, rise: u32) -> Option<Transition> {
        if ok {
            self.fail_run = 0;
            self.ok_run = self.ok_run.saturating_add(1);
            if !self.up && self.ok_run >= rise {
                self.up = true;
                return Some(Transition::Up);
            }
        } else {
            self.ok_run = 0;
            self.fail_run = self.fail_run.saturating_add(1);
            if self.up && self.fail_run >= fall {
                self.up = false;
                return Some(Transition::Down);
            }
        }
        None
    }

    /// `fall` consecutive failures on real traffic: down until checks succeed `rise`
    /// times in a row.
    pub fn eject(&mut self) -> Option<Transition> {
        self.ok_run = 0;
        if self.up {
            self.up = false;
            Some(Transition::Down)
        } else {
            None
        }
    }
}

/// Runs one check against a backend.
pub trait Checker: Send + Sync + 'static {
    /// What one backend's check loop keeps between two checks (a connection).
    type Conn: Default + Send + 'static;

    fn check(
        &self,
        conn: &mut Self::Conn,
        backend: &Backend,
        settings: &HealthSettings,
    ) -> impl Future<Output = CheckReport> + Send;
}

/// The real check: `GET <uri>`, status matched against `expect`, on a keep-alive
/// connection kept from one check to the next (as Envoy's HTTP checks do: no connection
/// set-up, no `TIME_WAIT` socket per check; with 1000 gears checked every 2 s that was
/// 500 connections a second). A kept connection that fails in any way, or that the gear
/// closed meanwhile, is replaced by a new one within the same check: only a failure on a
/// new connection counts. After a failed check the connection is dropped, so every
/// failure streak is confirmed on new connections. Refused or unreachable listeners are
/// also seen by the request path, which ejects a gear on connect errors.
pub struct HttpChecker;

/// The connection an [`HttpChecker`] keeps for one backend.
pub type CheckConn = Option<SendRequest<ReqBody>>;

/// The most of a check response's body that is read to keep its connection; a larger
/// body is not read, and its connection is closed.
const CHECK_BODY_KEEP: usize = 64 * 1024;

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Checker for HttpChecker {
    type Conn = CheckConn;

    async fn check(
        &self,
        conn: &mut CheckConn,
        backend: &Backend,
        s: &HealthSettings,
    ) -> CheckReport {
        let started = Instant::now();
        let result = tokio::time::timeout(s.timeout, http_check(conn, backend, &s.uri)).await;
        let (ok, result) = match result {
            Err(_) => (false, format!("timed out after {:?}", s.timeout)),
            Ok(Err(e)) => (false, e),
            Ok(Ok(status)) => {
                let code = status.to_string();
                (s.expect.is_match(&code), code)
            }
        };
        if !ok {
            *conn = None;
        }
        CheckReport {
            ok,
            result,
            ms: started.elapsed().as_millis() as u64,
            at: unix_now(),
        }
    }
}

fn check_request(backend: &Backend, uri: &str) -> Result<Request<ReqBody>, String> {
    let host = backend
        .spec
        .gear_dns
        .clone()
        .unwrap_or_else(|| backend.spec.addr.to_string());
    let mut req = Request::get(uri)
        .body(ReqBody::Empty)
        .map_err(|e| format!("request: {e}"))?;
    let h = req.headers_mut();
    h.insert(
        header::HOST,
        HeaderValue::from_str(&host).map_err(|_| format!("bad host {host:?}"))?,
    );
    h.insert(
        header::USER_AGENT,
        HeaderValue::from_static("gearlb-health-check"),
    );
    Ok(req)
}

async fn check_connect(backend: &Backend) -> Result<SendRequest<ReqBody>, String> {
    let stream = backend
        .pool
        .resolver()
        .dial(&backend.spec.addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake::<_, ReqBody>(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// One check: on the kept connection if there is a usable one, else (or if it fails)
/// on a new one. The connection is kept again when the response was read to the end.
async fn http_check(conn: &mut CheckConn, backend: &Backend, uri: &str) -> Result<u16, String> {
    if let Some(mut sender) = conn.take().filter(|s| !s.is_closed()) {
        if sender.ready().await.is_ok() {
            if let Ok(resp) = sender.send_request(check_request(backend, uri)?).await {
                return Ok(finish(conn, sender, resp).await);
            }
        }
        // Closed or broken while kept: that says nothing of the gear; ask anew.
    }
    let mut sender = check_connect(backend).await?;
    let resp = sender
        .send_request(check_request(backend, uri)?)
        .await
        .map_err(|e| format!("request failed: {e}"))?;
    Ok(finish(conn, sender, resp).await)
}

/// The response's status; its body is read (up to [`CHECK_BODY_KEEP`]) so that the
/// connection can be kept for the next check.
async fn finish(
    conn: &mut CheckConn,
    sender: SendRequest<ReqBody>,
    resp: hyper::Response<hyper::body::Incoming>,
) -> u16 {
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut read = 0usize;
    while read <= CHECK_BODY_KEEP {
        match body.frame().await {
            None => {
                *conn = Some(sender);
                break;
            }
            Some(Ok(f)) => read += f.data_ref().map_or(0, |d| d.len()),
            Some(Err(_)) => break,
        }
    }
    status
}

/// Where the request path reports a backend that reached `fall` failures.
pub type EjectSender = mpsc::UnboundedSender<Arc<Backend>>;

/// Keep checking the backends of `router` until `shutdown`, applying results and
/// ejections to the routing table.
pub async fn run<C: Checker>(
    router: Arc<Router>,
    checker: Arc<C>,
    settings: Arc<ArcSwap<HealthSettings>>,
    mut ejections: mpsc::UnboundedReceiver<Arc<Backend>>,
    shutdown: CancellationToken,
) {
    struct Watched {
        backend: Arc<Backend>,
        machine: Machine,
        stop: CancellationToken,
    }
    let mut watched: HashMap<usize, Watched> = HashMap::new();
    let (results_tx, mut results) = mpsc::unbounded_channel::<(Arc<Backend>, CheckReport)>();
    let mut changes = router.subscribe();
    let mut enabled = settings.load().enabled;
    let key = |b: &Arc<Backend>| Arc::as_ptr(b) as usize;
    let mut reconcile = true;
    loop {
        if reconcile {
            reconcile = false;
            let table = router.snapshot();
            let mut keep = std::collections::HashSet::new();
            for e in table.entries().iter().filter(|e| e.in_subset && enabled) {
                let k = key(&e.backend);
                keep.insert(k);
                watched.entry(k).or_insert_with(|| {
                    let stop = shutdown.child_token();
                    tokio::spawn(check_loop(
                        e.backend.clone(),
                        checker.clone(),
                        settings.clone(),
                        results_tx.clone(),
                        stop.clone(),
                    ));
                    Watched {
                        backend: e.backend.clone(),
                        machine: Machine::new(e.up),
                        stop,
                    }
                });
            }
            watched.retain(|k, w| {
                let stays = keep.contains(k);
                if !stays {
                    w.stop.cancel();
                }
                stays
            });
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            r = changes.changed() => {
                if r.is_err() { break; }
                reconcile = true;
            }
            Some((backend, report)) = results.recv() => {
                let s = settings.load();
                if s.enabled != enabled {
                    enabled = s.enabled;
                    reconcile = true;
                }
                let ok = report.ok;
                let result = report.result.clone();
                backend.last_check.store(Some(Arc::new(report)));
                backend.stats.check_result(ok);
                if let Some(w) = watched.get_mut(&key(&backend)) {
                    if ok {
                        backend.passive_failures.store(0, Ordering::Relaxed);
                    }
                    match w.machine.check(ok, s.fall, s.rise) {
                        Some(Transition::Down) => {
                            warn!(backend = %backend.name(), check = %result, "backend DOWN: {} failed checks", s.fall);
                            router.set_health(&w.backend, false);
                            backend.stats.health_changed(false);
                        }
                        Some(Transition::Up) => {
                            info!(backend = %backend.name(), "backend UP: {} successful checks", s.rise);
                            router.set_health(&w.backend, true);
                            backend.stats.health_changed(true);
                        }
                        None => debug!(backend = %backend.name(), check = %result, ok, "health check"),
                    }
                }
            }
            Some(backend) = ejections.recv() => {
                if !enabled { continue; }
                if let Some(w) = watched.get_mut(&key(&backend)) {
                    if w.machine.eject() == Some(Transition::Down) {
                        warn!(backend = %backend.name(), "backend DOWN: failures on live traffic; back when checks pass");
                        router.set_health(&w.backend, false);
                        backend.stats.health_changed(false);
                    }
                }
            }
        }
    }
    for w in watched.values() {
        w.stop.cancel();
    }
}

async fn check_loop<C: Checker>(
    backend: Arc<Backend>,
    checker: Arc<C>,
    settings: Arc<ArcSwap<HealthSettings>>,
    results: mpsc::UnboundedSender<(Arc<Backend>, CheckReport)>,
    stop: CancellationToken,
) {
    // A random phase spreads the checks of all backends over the interval.
    let interval = settings.load().interval;
    let phase = Duration::from_millis(fastrand::u64(..interval.as_millis().max(1) as u64));
    tokio::select! {
        _ = stop.cancelled() => return,
        _ = tokio::time::sleep(phase) => {}
    }
    let mut conn = C::Conn::default();
    loop {
        let s = settings.load_full();
        let next = Instant::now() + s.interval;
        let report = tokio::select! {
            _ = stop.cancelled() => return,
            r = checker.check(&mut conn, &backend, &s) => r,
        };
        if results.send((backend.clone(), report)).is_err() {
            return;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(next) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::{BackendSpec, BackendState};
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

        async fn check(&self, _: &mut (), _: &Backend, _: &HealthSettings) -> CheckReport {
            CheckReport {
                ok: self.0.load(Ordering::Relaxed),
                result: "fake".into(),
                ms: 0,
                at: 0,
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
    async fn check_target(status: u16, per_conn: usize) -> (Arc<Backend>, Arc<AtomicUsize>) {
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
                            let resp =
                                format!("HTTP/1.1 {status} X\r\nContent-Length: 2\r\n\r\nok");
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
        let backend = Backend::new(
            BackendSpec {
                name: "web1".into(),
                addr: addr.to_string().parse().unwrap(),
                gear_dns: None,
                cookie: None,
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
        let gone = Backend::new(
            BackendSpec {
                name: "web2".into(),
                addr: "127.0.0.1:1".parse().unwrap(),
                gear_dns: None,
                cookie: None,
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

        // The gear dies: down within fall × interval.
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

        // It comes back: up within rise × interval.
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
        }]);
        let backend = router.load().get("web1").unwrap().backend.clone();
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
}
