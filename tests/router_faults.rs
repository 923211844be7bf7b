//! The router tier when things go wrong: the router killed while events are published,
//! the broker restarted, a new router with no table, events delivered in the wrong
//! order and repaired from the broker's REST API, a broker gone for longer than the
//! table may age, and the head gears kept seen by the node's idler. Debian's ActiveMQ
//! and origin-server's plugin as in `tests/router.rs`.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::router::*;
use support::*;

/// Wait until every host of `hosts` is routed (`within`).
fn all_routed(proxy: SocketAddr, hosts: &[String], within: Duration) -> bool {
    let end = Instant::now() + within;
    loop {
        let missing = hosts.iter().filter(|h| status_of(proxy, h) != 200).count();
        if missing == 0 {
            return true;
        }
        if Instant::now() > end {
            eprintln!("{missing} of {} hosts not routed", hosts.len());
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The message ids a router's log says it applied.
fn applied_ids(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("routing event applied"))
        .filter_map(|l| {
            let at = l.find("message_id=")? + "message_id=".len();
            Some(l[at..].split(' ').next()?.to_string())
        })
        .collect()
}

/// The `[cluster]` of router `id` (gossip over UDP on a port of its own), knowing
/// `peers` (quoted addresses, comma-separated).
/// A gear answering `body`, whose health check (`GET /`) fails while the flag is set.
async fn gear_checks_can_fail(body: &'static str) -> (Arc<AtomicBool>, Scripted) {
    let sick = Arc::new(AtomicBool::new(false));
    let s2 = sick.clone();
    let ok = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let gear = Scripted::start(move |seen| {
        if seen.head.starts_with("GET / ") && s2.load(Ordering::Relaxed) {
            Reply::after(&b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"[..])
        } else {
            Reply::after(ok.as_bytes())
        }
    })
    .await;
    (sick, gear)
}

/// Two routers of one cluster on `src`: r1 checks its gears every 200 ms and takes one
/// out at the first failure, r2 only after three failures a minute apart.
fn fast_and_slow_checkers(src: &Source, d1: &Path, d2: &Path) -> (Gearlb, Gearlb) {
    let fast = config(d1, src, "r1", false, &routers_cluster("r1", ""))
        .replace("interval = \"300ms\"\n", "interval = \"200ms\"\nfall = 1\n");
    let r1 = router(d1, &fast);
    let peers = format!("\"{}\"", r1.gossip.unwrap());
    let slow = config(d2, src, "r2", false, &routers_cluster("r2", &peers))
        .replace("interval = \"300ms\"\n", "interval = \"60s\"\nfall = 3\n");
    let r2 = router(d2, &slow);
    (r1, r2)
}

fn routers_cluster(id: &str, peers: &str) -> String {
    format!(
        "[cluster]\nnode_id = \"{id}\"\nid = \"routers\"\ntransport = \"udp\"\n\
         listen = \"127.0.0.1:{}\"\nsecret = \"routers-secret-0123456789abcdef\"\n\
         gossip_interval = \"100ms\"\npeers = [{peers}]\n",
        free_port("127.0.0.1")
    )
}

/// Twenty events published while the router is killed (`kill -9`) in their midst and
/// started again: all twenty are applied, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_killed_while_events_are_published_applies_each_once() {
    let g1 = TestBackend::start("g1").await;
    let mut src = Source::start(TOPIC);
    let dir = workdir();
    let cfg = config(dir.path(), &src, "r1", false, "");
    let mut r = router(dir.path(), &cfg);
    src.send(create("myapp"));
    src.send(endpoint("myapp", "g1", g1.addr));
    let hosts: Vec<String> = (0..20).map(|i| format!("a{i}.example.org")).collect();
    for h in &hosts[..6] {
        src.send(alias("myapp", h));
    }
    r.signal("KILL");
    r.wait(Duration::from_secs(10));
    // The log's reader thread takes what the pipe still held.
    let mut before = r.log_text();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(50));
        let now = r.log_text();
        if now.len() == before.len() {
            break;
        }
        before = now;
    }
    for h in &hosts[6..] {
        src.send(alias("myapp", h));
    }
    let r2 = router(dir.path(), &cfg);
    assert!(
        all_routed(r2.proxy, &hosts, Duration::from_secs(20)),
        "{}",
        r2.log_text()
    );
    let mut ids = applied_ids(&before);
    ids.extend(applied_ids(&r2.log_text()));
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(ids.len(), unique.len(), "an event applied twice: {ids:?}");
    // The killed router may have journaled an event and died before its log line: the
    // table's count (from its snapshot and journal) is the one that counts.
    assert!((21..=22).contains(&ids.len()), "every event once: {ids:?}");
    let report = spi(&r2);
    assert_eq!(report["table"]["events"], 22, "{report}");
    assert_eq!(report["table"]["source"], "state file", "{report}");
}

/// The broker restarted with its store (while the router is down, and while it is up):
/// nothing published is lost, and the router keeps serving its table meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restarted_with_its_store_loses_nothing() {
    let g1 = TestBackend::start("g1").await;
    let mut src = Source::start(TOPIC);
    let dir = workdir();
    let cfg = config(dir.path(), &src, "r1", false, "");
    let mut r = router(dir.path(), &cfg);
    src.send(create("myapp"));
    src.send(endpoint("myapp", "g1", g1.addr));
    assert!(until_status(r.proxy, &ha("myapp"), 200, Duration::from_secs(10)).is_some());
    r.signal("TERM");
    assert_eq!(r.wait(Duration::from_secs(30)), Some(0));
    let down: Vec<String> = (0..5).map(|i| format!("down{i}.example.org")).collect();
    // Published so that the broker has them before it stops (the plugin itself does not
    // wait for the broker: its last event could still be on the wire).
    for h in &down {
        src.send_ordered(alias("myapp", h));
    }
    src.broker.restart();
    let r = router(dir.path(), &cfg);
    assert!(
        all_routed(r.proxy, &down, Duration::from_secs(20)),
        "{}",
        r.log_text()
    );
    // Now the broker goes while the router runs: the table keeps serving, the router
    // comes back by itself.
    src.broker.stop();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(status_of(r.proxy, "down0.example.org"), 200);
    assert_eq!(get(r.status, "/health", &[]).await.unwrap().status, 200);
    src.broker.start_again();
    wait_subscribed(&r);
    let up: Vec<String> = (0..3).map(|i| format!("up{i}.example.org")).collect();
    for h in &up {
        src.send(alias("myapp", h));
    }
    assert!(
        all_routed(r.proxy, &up, Duration::from_secs(20)),
        "{}",
        r.log_text()
    );
    assert_eq!(spi(&r)["events"]["failed"], 0);
}

/// A new router with an empty state joins a running one: it takes its table (it says
/// so), serves the same, and follows the events from then on on its own subscription.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_router_takes_its_table_from_a_running_peer() {
    let g1 = TestBackend::start("g1").await;
    let mut src = Source::start(TOPIC);
    let d1 = workdir();
    let c1 = routers_cluster("r1", "");
    let r1 = router(d1.path(), &config(d1.path(), &src, "r1", true, &c1));
    src.send(create("myapp"));
    src.send(endpoint("myapp", "g1", g1.addr));
    src.send(alias("myapp", "www.example.org"));
    src.send(ssl(
        "myapp",
        "www.example.org",
        &fixture_text("rsa.crt"),
        &fixture_text("rsa.aes256.key"),
        Some("gearlb-test"),
    ));
    assert!(until_status(r1.proxy, "www.example.org", 200, Duration::from_secs(10)).is_some());
    let d2 = workdir();
    let c2 = routers_cluster("r2", &format!("\"{}\"", r1.gossip.unwrap()));
    let r2 = router(d2.path(), &config(d2.path(), &src, "r2", true, &c2));
    let end = Instant::now() + Duration::from_secs(20);
    while spi(&r2)["table"]["source"] != "peer r1" && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    let (s1, s2) = (spi(&r1), spi(&r2));
    assert_eq!(s2["table"]["source"], "peer r1", "{s2}");
    assert!(r2
        .log_text()
        .contains("routing table taken from a peer router"));
    assert_eq!(s1["table"]["digest"], s2["table"]["digest"]);
    assert_eq!(status_of(r2.proxy, "www.example.org"), 200);
    assert_eq!(status_of(r2.proxy, &ha("myapp")), 200);
    let (leaf, _) = sni(tls_addr(&r2), "www.example.org").await;
    assert!(
        leaf == der_of("rsa.crt"),
        "the alias's certificate came with the table"
    );
    // From now on each follows its own subscription.
    src.send(alias("myapp", "next.example.org"));
    for r in [&r1, &r2] {
        assert!(until_status(r.proxy, "next.example.org", 200, Duration::from_secs(10)).is_some());
    }
    // And each sees the other agrees.
    let end = Instant::now() + Duration::from_secs(20);
    let agrees = |r: &Gearlb| spi(r)["peers"][0]["agrees"] == true;
    while !(agrees(&r1) && agrees(&r2)) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(agrees(&r1) && agrees(&r2), "{} {}", spi(&r1), spi(&r2));
}

/// A fake of the broker's REST API in origin-server's response shape: applications (with
/// their aliases) and each one's gear groups with endpoints; what it was asked, with the
/// credentials.
struct Rest {
    addr: SocketAddr,
    apps: Arc<Mutex<serde_json::Value>>,
    groups: Arc<Mutex<serde_json::Value>>,
    auth: Arc<Mutex<Vec<String>>>,
}

impl Rest {
    async fn start() -> Rest {
        use http_body_util::Full;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let apps = Arc::new(Mutex::new(serde_json::json!([])));
        let groups = Arc::new(Mutex::new(serde_json::json!({})));
        let auth = Arc::new(Mutex::new(Vec::new()));
        let (a, g, au) = (apps.clone(), groups.clone(), auth.clone());
        tokio::spawn(async move {
            loop {
                let Ok((s, _)) = listener.accept().await else {
                    return;
                };
                let (a, g, au) = (a.clone(), g.clone(), au.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let path = req.uri().path().to_string();
                            if let Some(v) = req.headers().get("authorization") {
                                au.lock()
                                    .unwrap()
                                    .push(v.to_str().unwrap_or("").to_string());
                            }
                            let (kind, data) = if path == "/broker/rest/applications" {
                                ("applications", a.lock().unwrap().clone())
                            } else if let Some(id) = path
                                .strip_prefix("/broker/rest/application/")
                                .and_then(|p| p.strip_suffix("/gear_groups"))
                            {
                                ("gear_groups", g.lock().unwrap()[id].clone())
                            } else {
                                ("error", serde_json::Value::Null)
                            };
                            let body = serde_json::json!({
                                "api_version": 1.7, "type": kind, "status": "ok",
                                "messages": [], "data": data
                            });
                            let mut resp = hyper::Response::new(Full::new(bytes::Bytes::from(
                                body.to_string(),
                            )));
                            if data.is_null() {
                                *resp.status_mut() = hyper::StatusCode::NOT_FOUND;
                            }
                            async move { Ok::<_, std::convert::Infallible>(resp) }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                        .await;
                });
            }
        });
        Rest {
            addr,
            apps,
            groups,
            auth,
        }
    }
}

/// A certificate change is `remove_ssl` then `add_ssl`; delivered swapped, the alias
/// ends without its certificate. Reconciled with the broker's REST API (which says the
/// alias has one), the new certificate is served, and the repair is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swapped_certificate_change_is_repaired_from_the_brokers_rest_api() {
    let g1 = TestBackend::start("g1").await;
    let rest = Rest::start().await;
    let mut src = Source::start(TOPIC);
    let dir = workdir();
    let extra = format!(
        "rest_url = \"http://{}/broker/rest\"\nrest_user = \"router\"\nrest_password = \"rest-pass\"\n\
         reconcile_interval = \"1h\"\n",
        rest.addr
    );
    *rest.apps.lock().unwrap() = serde_json::json!([{
        "id": "5a1e0000000000000000aaaa", "name": "myapp", "domain_id": "ns1",
        "scalable": true, "ha": true,
        "aliases": [{"id": "www.example.org", "has_private_ssl_certificate": true,
                     "certificate_added_at": "2026-11-28"}]
    }]);
    rest.groups.lock().unwrap()["5a1e0000000000000000aaaa"] = serde_json::json!([{
        "id": "gg1", "name": "gg1", "gear_profile": "small", "cartridges": [],
        "gears": [{"id": "g1", "state": "started",
                   "ssh_url": format!("ssh://g1@myapp-ns1.{DOMAIN}"),
                   "endpoints": [{"cartridge_name": "gearlb-0.1",
                                  "external_address": g1.addr.ip().to_string(),
                                  "external_port": g1.addr.port().to_string(),
                                  "internal_address": "127.1.2.3", "internal_port": "8080",
                                  "protocols": ["http", "ws"], "types": ["load_balancer"],
                                  "mappings": []}]}]
    }]);
    let r = router(dir.path(), &config(dir.path(), &src, "r1", true, &extra));
    src.send(create("myapp"));
    src.send(endpoint("myapp", "g1", g1.addr));
    src.send(alias("myapp", "www.example.org"));
    src.send(ssl(
        "myapp",
        "www.example.org",
        &fixture_text("rsa.crt"),
        &fixture_text("rsa.key"),
        None,
    ));
    wait_taken(&r, 4);
    // The change, swapped: the new certificate, then the old one's removal (sent so
    // that they arrive in that order).
    src.send_ordered(ssl(
        "myapp",
        "www.example.org",
        &fixture_text("ec.crt"),
        &fixture_text("ec.aes128.key"),
        Some("gearlb-test"),
    ));
    src.send_ordered(unssl("myapp", "www.example.org"));
    let wildcard = der_of("wildcard.crt");
    wait_taken(&r, 6);
    let (leaf, _) = sni(tls_addr(&r), "www.example.org").await;
    assert!(
        leaf == wildcard,
        "swapped, the alias is left without its certificate: {} {}",
        spi(&r),
        r.log_text()
    );
    let (code, out, err) = r.ctl(&["spi", "reconcile"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("served again"), "{out}");
    let (leaf, status) = sni(tls_addr(&r), "www.example.org").await;
    assert!(
        leaf == der_of("ec.crt"),
        "the new certificate is served after reconciliation: rsa? {} wildcard? {} {} {}",
        leaf == der_of("rsa.crt"),
        leaf == wildcard,
        spi(&r),
        r.log_text()
    );
    assert_eq!(status, 200);
    let report = spi(&r);
    assert_eq!(
        report["reconcile"]["error"],
        serde_json::Value::Null,
        "{report}"
    );
    assert!(
        report["reconcile"]["repaired_total"].as_u64().unwrap() >= 1,
        "{report}"
    );
    let auth = rest.auth.lock().unwrap().clone();
    assert!(
        auth.iter().all(|a| a == "Basic cm91dGVyOnJlc3QtcGFzcw=="),
        "{auth:?}"
    );
    // The broker has an application the events never told: reconciliation adds it.
    rest.apps
        .lock()
        .unwrap()
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "id": "5a1e0000000000000000bbbb", "name": "quiet", "domain_id": "ns1",
            "scalable": true, "ha": true, "aliases": []
        }));
    let g = rest.groups.lock().unwrap()["5a1e0000000000000000aaaa"].clone();
    rest.groups.lock().unwrap()["5a1e0000000000000000bbbb"] = g;
    let (code, out, _) = r.ctl(&["spi", "reconcile"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("application quiet-ns1 missing: added"),
        "{out}"
    );
    assert_eq!(status_of(r.proxy, &ha("quiet")), 200);
}

/// `/health` (keepalived's check) answers 200 while a broker is connected, or while the
/// table is younger than `max_table_age`; 503 after; 200 again once the broker is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_without_its_broker_is_healthy_until_its_table_is_too_old() {
    let g1 = TestBackend::start("g1").await;
    let mut src = Source::start(TOPIC);
    let dir = workdir();
    let r = router(
        dir.path(),
        &config(dir.path(), &src, "r1", false, "max_table_age = \"3s\"\n"),
    );
    src.send(create("myapp"));
    src.send(endpoint("myapp", "g1", g1.addr));
    assert!(until_status(r.proxy, &ha("myapp"), 200, Duration::from_secs(10)).is_some());
    src.broker.stop();
    let stopped = Instant::now();
    assert_eq!(get(r.status, "/health", &[]).await.unwrap().status, 200);
    let mut unhealthy = None;
    while stopped.elapsed() < Duration::from_secs(15) {
        if get(r.status, "/health", &[]).await.unwrap().status == 503 {
            unhealthy = Some(stopped.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = unhealthy.expect("unhealthy once the table is older than 3 s");
    assert!(
        after >= Duration::from_secs(2),
        "not before the table is old: {after:?}"
    );
    // Still routing its last table meanwhile.
    assert_eq!(status_of(r.proxy, &ha("myapp")), 200);
    src.broker.start_again();
    wait_subscribed(&r);
    assert_eq!(get(r.status, "/health", &[]).await.unwrap().status, 200);
}

/// A new router (no table) connected to its broker but waiting for a peer's table
/// routes nothing yet: `/health` is 503 meanwhile (keepalived must not give it an
/// address), and 200 once it starts on its own (no live peer within
/// `peer_table_timeout`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_router_waiting_for_a_peers_table_is_not_healthy() {
    let src = Source::start(TOPIC);
    let dir = workdir();
    let nobody = format!("\"127.0.0.1:{}\"", free_port("127.0.0.1"));
    let extra = format!(
        "peer_table_timeout = \"6s\"\n{}",
        routers_cluster("r1", &nobody)
    );
    let r = router(dir.path(), &config(dir.path(), &src, "r1", false, &extra));
    let started = Instant::now();
    assert!(spi(&r)["broker"]["connected"].is_string());
    assert_eq!(
        get(r.status, "/health", &[]).await.unwrap().status,
        503,
        "subscribed, no table yet: {}",
        spi(&r)
    );
    let mut healthy = None;
    while started.elapsed() < Duration::from_secs(20) {
        if get(r.status, "/health", &[]).await.unwrap().status == 200 {
            healthy = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(healthy.is_some(), "never healthy: {}", r.log_text());
    assert!(
        r.log_text().contains("no peer router gave a routing table"),
        "{}",
        r.log_text()
    );
}

/// `/health` says whether the router follows its broker with a ready table, not whether
/// the gears answer: with its application's only gear down (or its gears' addresses
/// unreachable) the router stays healthy and answers the application with 503, as its
/// peer would; the gear back, it is served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_whose_gears_are_down_stays_healthy() {
    let g1 = TestBackend::start("g1").await;
    let mut src = Source::start(TOPIC);
    let dir = workdir();
    let r = router(dir.path(), &config(dir.path(), &src, "r1", false, ""));
    let health = || async { get(r.status, "/health", &[]).await.unwrap().status };
    assert_eq!(health().await, 200, "nothing routed yet");
    src.send(create("myapp"));
    src.send(endpoint("myapp", "g1", g1.addr));
    assert!(until_status(r.proxy, &ha("myapp"), 200, Duration::from_secs(10)).is_some());
    let addr = g1.addr;
    g1.kill();
    assert!(
        until_status(r.proxy, &ha("myapp"), 503, Duration::from_secs(10)).is_some(),
        "its only gear down, the application gets 503"
    );
    // Gears that were never reachable (an address nothing listens on) change nothing.
    src.send(endpoint("ghost", "g9", free_addr()));
    wait_taken(&r, 3);
    assert_eq!(health().await, 200);
    let _g1 = TestBackend::start_on("g1", addr).await;
    assert!(until_status(r.proxy, &ha("myapp"), 200, Duration::from_secs(10)).is_some());
    assert_eq!(health().await, 200);
}

/// While an application serves, the router requests its head gear through its node's
/// frontend (`HEAD /health`, `Host: <app>-<ns>.<domain>`), so that the node's idler
/// sees it; an application that does not serve is not requested.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_applications_head_gears_are_kept_seen() {
    let g1 = TestBackend::start("g1").await;
    let frontend =
        Scripted::start(|_| Reply::after(&b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"[..]))
            .await;
    let mut src = Source::start(TOPIC);
    let dir = workdir();
    let extra = format!(
        "[idler]\ninterval = \"300ms\"\nfrontend_port = {}\n",
        frontend.addr.port()
    );
    let r = router(dir.path(), &config(dir.path(), &src, "r1", false, &extra));
    src.send(create("busy"));
    src.send(endpoint("busy", "g1", g1.addr));
    src.send(create("idle"));
    src.send(endpoint("idle", "g1", g1.addr));
    assert!(until_status(r.proxy, &ha("busy"), 200, Duration::from_secs(10)).is_some());
    let end = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while Instant::now() < end {
        let _ = status_of(r.proxy, &ha("busy"));
        seen = frontend.seen();
        if !seen.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!seen.is_empty(), "no keep-seen request: {}", r.log_text());
    for s in &seen {
        assert!(
            s.head.starts_with("HEAD /health HTTP/1.1\r\n"),
            "{}",
            s.head
        );
        let host = s
            .head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("host:"))
            .unwrap();
        assert_eq!(
            host.split(':').nth(1).unwrap().trim(),
            format!("busy-ns1.{DOMAIN}"),
            "{}",
            s.head
        );
    }
    assert!(spi(&r)["keep_seen"]["sent"].as_u64().unwrap() >= 1);
}

/// Routers share health: a gear one router's checks find down is taken out at once by
/// its peer, whose own checks are far apart (three failures 60 s apart here: minutes);
/// traffic through the peer stops reaching it within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gear_a_peer_router_found_down_is_taken_out_here() {
    let good = TestBackend::start("good").await;
    let (sick, bad) = gear_checks_can_fail("bad").await;
    let mut src = Source::start(TOPIC);
    let (d1, d2) = (workdir(), workdir());
    let (r1, r2) = fast_and_slow_checkers(&src, d1.path(), d2.path());
    src.send(create("myapp"));
    src.send(endpoint("myapp", "good", good.addr));
    src.send(endpoint("myapp", "bad", bad.addr));
    for r in [&r1, &r2] {
        wait_taken(r, 3);
    }
    let traffic = |r: &Gearlb| {
        let before = bad
            .seen()
            .iter()
            .filter(|s| s.head.starts_with("GET /t "))
            .count();
        for _ in 0..20 {
            let got = raw(
                r.proxy,
                format!(
                    "GET /t HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                    ha("myapp")
                )
                .as_bytes(),
                Duration::from_secs(5),
            );
            assert!(got.starts_with("HTTP/1.1 200"), "{got}");
        }
        bad.seen()
            .iter()
            .filter(|s| s.head.starts_with("GET /t "))
            .count()
            - before
    };
    assert!(traffic(&r2) > 0, "both gears serve through r2 at first");
    sick.store(true, Ordering::Relaxed);
    let end = Instant::now() + Duration::from_secs(10);
    while traffic(&r2) > 0 {
        assert!(
            Instant::now() < end,
            "r2 still sends to the gear r1 found down: {}",
            r2.log_text()
        );
    }
    assert!(
        r2.log_text()
            .contains("a peer router found this backend down"),
        "{}",
        r2.log_text()
    );
    // Well again: r1 says so, and r2's own checks (60 s apart) would be too slow to
    // bring it back; it stays out of r2 until they pass, as a passive ejection does.
    sick.store(false, Ordering::Relaxed);
}

/// A peer's word never takes out an application's last gear up here: a router cut off
/// from the gears (its own link lost) finds and reports them all down, and its peer,
/// which reaches them, keeps serving. Here r1's checks (fast) find the only gear down,
/// r2's (a minute apart) have not looked again: r2 keeps it, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_routers_word_never_takes_an_applications_last_gear_out() {
    let (sick, only) = gear_checks_can_fail("only").await;
    let mut src = Source::start(TOPIC);
    let (d1, d2) = (workdir(), workdir());
    let (r1, r2) = fast_and_slow_checkers(&src, d1.path(), d2.path());
    src.send(create("solo"));
    src.send(endpoint("solo", "only", only.addr));
    for r in [&r1, &r2] {
        wait_taken(r, 2);
    }
    for r in [&r1, &r2] {
        assert!(until_status(r.proxy, &ha("solo"), 200, Duration::from_secs(10)).is_some());
    }
    sick.store(true, Ordering::Relaxed);
    // Heard (whatever r2 made of it).
    let end = Instant::now() + Duration::from_secs(15);
    while !r2
        .log_text()
        .contains("a peer router found this backend down")
    {
        assert!(
            Instant::now() < end,
            "r2 never heard r1's report: {}",
            r2.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Traffic asks for /t (only the checks' `GET /` is answered 503).
    let traffic = |r: &Gearlb| {
        let req = format!(
            "GET /t HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            ha("solo")
        );
        raw(r.proxy, req.as_bytes(), Duration::from_secs(5))
    };
    assert!(traffic(&r1).starts_with("HTTP/1.1 503"), "r1 found it down");
    for _ in 0..20 {
        let got = traffic(&r2);
        assert!(got.starts_with("HTTP/1.1 200"), "r2 keeps serving: {got}");
    }
    assert!(!r2
        .log_text()
        .contains("taken out until its checks pass here"));
    assert!(r2
        .log_text()
        .contains("a peer router found this backend down, but it is the last one up here"));
}
