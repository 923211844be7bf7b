//! The keep-seen task with paused time and a recording [`Touch`]; [`FrontendTouch`]
//! against a socket on 127.0.0.1.

use super::*;
use std::sync::Mutex;

/// Records each request with when it was made; answers `status`, or never when
/// `hang`.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<(Duration, String, String, u16)>>,
    status: u16,
    hang: bool,
    start: Mutex<Option<Instant>>,
}

#[async_trait::async_trait]
impl Touch for Recorder {
    async fn touch(&self, t: &Target, port: u16) -> Result<u16, String> {
        let at = self.start.lock().unwrap().unwrap().elapsed();
        let call = (at, t.dns.clone(), t.host.clone(), port);
        self.calls.lock().unwrap().push(call);
        if self.hang {
            std::future::pending::<()>().await;
        }
        Ok(self.status)
    }
}

const REGISTRY: &str = r#"{"proxy":{"5a1e0000000000000000aaaa":{"namespace":"ns","dns":"myapp-ns.example.com","proxy_hostname":"node1.example.com","proxy_port":0},"5a1e0000000000000000bbbb":{"namespace":"ns","dns":"5a1e0000000000000000bbbb-ns.example.com","proxy_hostname":"node2.example.com","proxy_port":0}}}"#;

struct Rig {
    _dir: tempfile::TempDir,
    settings: Settings,
    served: Arc<AtomicU64>,
    touch: Arc<Recorder>,
    counters: Arc<Counters>,
    stop: CancellationToken,
}

fn rig(status: u16, hang: bool) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gear-registry.json");
    std::fs::write(&path, REGISTRY).unwrap();
    let touch = Arc::new(Recorder {
        status,
        hang,
        ..Recorder::default()
    });
    *touch.start.lock().unwrap() = Some(Instant::now());
    Rig {
        _dir: dir,
        settings: Settings {
            interval: Duration::from_secs(600),
            timeout: Duration::from_secs(5),
            port: 80,
            registry: path,
            own_uuid: Some("5a1e0000000000000000bbbb".into()),
            own_names: Vec::new(),
        },
        served: Arc::new(AtomicU64::new(0)),
        touch,
        counters: Arc::new(Counters::default()),
        stop: CancellationToken::new(),
    }
}

impl Rig {
    fn spawn(&self) -> tokio::task::JoinHandle<()> {
        let served = self.served.clone();
        tokio::spawn(run(
            self.settings.clone(),
            move || Sample {
                served: served.load(Ordering::Relaxed),
                ..Sample::default()
            },
            self.touch.clone(),
            self.counters.clone(),
            self.stop.clone(),
        ))
    }

    fn calls(&self) -> Vec<(Duration, String, String, u16)> {
        self.touch.calls.lock().unwrap().clone()
    }
}

#[tokio::test(start_paused = true)]
async fn the_head_gear_is_requested_once_an_interval_while_clients_are_served() {
    let r = rig(200, false);
    let task = r.spawn();
    // Quiet for two intervals: nothing sent.
    tokio::time::sleep(Duration::from_secs(1250)).await;
    assert!(r.calls().is_empty());
    assert_eq!(r.counters.read().rounds, 0);
    // Clients come: the next decision (at 1800 s) makes a round, to the head gear only
    // (the other balancer is this one).
    r.served.store(3, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(600)).await;
    let calls = r.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let (at, dns, host, port) = &calls[0];
    assert_eq!(*at, Duration::from_secs(1800));
    assert_eq!(
        (dns.as_str(), host.as_str(), *port),
        ("myapp-ns.example.com", "node1.example.com", 80)
    );
    // Serving goes on: one more each interval; then quiet again: none.
    for n in 4..7 {
        r.served.store(n, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(600)).await;
    }
    assert_eq!(r.calls().len(), 4);
    tokio::time::sleep(Duration::from_secs(3000)).await;
    assert_eq!(r.calls().len(), 4);
    assert_eq!(
        r.counters.read(),
        KeepSeenReport {
            enabled: true,
            interval_ms: 600_000,
            rounds: 4,
            sent: 4,
            failed: 0,
            peers: 1,
        }
    );
    r.stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_frontend_that_never_answers_costs_the_timeout_and_is_counted() {
    let r = rig(200, true);
    let task = r.spawn();
    r.served.store(1, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(601)).await;
    assert_eq!(r.calls().len(), 1);
    assert_eq!(r.counters.read().failed, 0, "still waiting");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let c = r.counters.read();
    assert_eq!((c.sent, c.failed), (1, 1));
    // The next round comes as usual; the stop is not held up by a request in flight.
    r.served.store(2, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(r.calls().len(), 2);
    r.stop.cancel();
    tokio::time::timeout(Duration::from_millis(10), task)
        .await
        .expect("stopped at once")
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn answers_other_than_2xx_or_3xx_and_a_missing_registry_are_failures_only() {
    let r = rig(404, false);
    let task = r.spawn();
    r.served.store(1, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(601)).await;
    let c = r.counters.read();
    assert_eq!((c.sent, c.failed), (1, 1));
    // The registry gone (a gear being moved): an empty registry, nothing to request.
    std::fs::remove_file(&r.settings.registry).unwrap();
    r.served.store(2, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(600)).await;
    let c = r.counters.read();
    assert_eq!((c.rounds, c.sent, c.peers), (2, 1, 0));
    r.stop.cancel();
    task.await.unwrap();
}

#[test]
fn settings_of_a_gear_and_of_a_balancer_alone() {
    let env = |pairs: &[(&str, &str)]| -> std::collections::HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let alone = crate::config::from_toml("", &env(&[])).unwrap();
    assert_eq!(Settings::of(&alone, None), None);
    let gear = env(&[
        ("OPENSHIFT_GEAR_UUID", "5a1e0000000000000000bbbb"),
        (
            "OPENSHIFT_HOMEDIR",
            "/var/lib/openshift/5a1e0000000000000000bbbb",
        ),
        ("OPENSHIFT_GEARLB_IDLER_INTERVAL", "5m"),
    ]);
    let cfg = crate::config::from_toml("", &gear).unwrap();
    let s = Settings::of(&cfg, Some("PUBLIC_HOSTNAME=node2.example.com\n")).unwrap();
    assert_eq!(s.interval, Duration::from_secs(300));
    assert_eq!(s.port, 80);
    assert_eq!(s.own_uuid.as_deref(), Some("5a1e0000000000000000bbbb"));
    assert_eq!(s.own_names, vec!["node2.example.com".to_string()]);
    assert!(s.registry.ends_with("gear-registry/gear-registry.json"));
    let mut off = gear.clone();
    off.insert("OPENSHIFT_GEARLB_IDLER_KEEP_SEEN".into(), "0".into());
    let cfg = crate::config::from_toml("", &off).unwrap();
    assert_eq!(Settings::of(&cfg, None), None);
    // On by the file outside a gear: no registry names the peers.
    let cfg = crate::config::from_toml("[idler]\nkeep_seen = true\n", &env(&[])).unwrap();
    assert_eq!(Settings::of(&cfg, None), None);
}

#[tokio::test]
async fn frontend_touch_sends_head_health_for_the_gears_name() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let mut got = Vec::new();
        for answer in [
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n",
            "nonsense\r\n",
        ] {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = vec![0u8; 2048];
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let n = s.read(&mut buf).await.unwrap();
                assert!(n > 0);
                head.extend_from_slice(&buf[..n]);
            }
            s.write_all(answer.as_bytes()).await.unwrap();
            got.push(String::from_utf8(head).unwrap());
        }
        got
    });
    let t = Target {
        uuid: "5a1e0000000000000000aaaa".into(),
        dns: "myapp-ns.example.com".into(),
        host: "127.0.0.1".into(),
    };
    assert_eq!(FrontendTouch.touch(&t, port).await, Ok(200));
    assert!(FrontendTouch.touch(&t, port).await.is_err());
    let got = server.await.unwrap();
    assert!(
        got[0].starts_with("HEAD /health HTTP/1.1\r\nHost: myapp-ns.example.com\r\n"),
        "{}",
        got[0]
    );
    // Nobody listening: an error, not a hang.
    drop(got);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    assert!(FrontendTouch.touch(&t, port).await.is_err());
}
