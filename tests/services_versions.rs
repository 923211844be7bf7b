//! Versions that roll (seed 002), through real `gearlb run` processes: instances
//! register with their versions; a newer incompatible group gets nothing while an
//! older one lives, then takes everything without a failed request; the canary's
//! share, prefer newer and older, a cut-over, and two balancers deciding the same.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::*;

/// Which backend answered `n` requests to `host`, each on a new connection (a new
/// session): counts by body.
async fn spread(lb: &Gearlb, host: &str, n: usize) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let body = match get(lb.proxy, "/", &[("host", host)]).await {
            Ok(g) if g.status == 200 => g.text(),
            Ok(g) => format!("status {}", g.status),
            Err(e) => format!("error {e}"),
        };
        *out.entry(body).or_default() += 1;
    }
    out
}

fn register(lb: &Gearlb, name: &str, b: &TestBackend, version: &str, host: Option<&str>) {
    let addr = b.addr.to_string();
    let mut args = vec![
        "register",
        "catalog",
        name,
        &addr,
        "--version",
        version,
        "--ttl",
        "1h",
    ];
    if let Some(h) = host {
        args.extend(["--host", h]);
    }
    let (code, out, err) = lb.ctl(&args);
    assert_eq!(code, 0, "{out}{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_incompatible_version_waits_for_the_older_one_through_two_balancers() {
    let app = TestBackend::start("app").await;
    let v101 = TestBackend::start("v101").await;
    let v102 = TestBackend::start("v102").await;
    let v110 = TestBackend::start("v110").await;
    let (_dirs, lbs) = cluster_of(2, &[&app], "").await;
    register(
        &lbs[0],
        "i101",
        &v101,
        "catalog-1.0.1",
        Some("catalog.example.com"),
    );
    // The other balancer knows the service within a gossip round or two; an instance
    // registering there joins it.
    let known = |lb: &Gearlb| lb.ctl(&["services", "--json"]).1.contains("\"i101\"");
    assert!(eventually(Duration::from_secs(5), || known(&lbs[1])).await);
    register(&lbs[1], "i102", &v102, "catalog-1.0.2", None);
    let both = |lb: &Gearlb| {
        let (_, out, _) = lb.ctl(&["services", "--json"]);
        out.contains("\"i101\"") && out.contains("\"i102\"")
    };
    assert!(eventually(Duration::from_secs(5), || lbs.iter().all(both)).await);
    for lb in &lbs {
        let seen = spread(lb, "catalog.example.com", 200).await;
        assert_eq!(
            seen.keys().collect::<Vec<_>>(),
            ["backend v101", "backend v102"],
            "{seen:?}"
        );
    }
    // 1.1.0 registers: it receives nothing while a 1.0.x lives, through either balancer.
    register(&lbs[0], "i110", &v110, "catalog-1.1.0", None);
    let all3 = |lb: &Gearlb| {
        let (_, out, _) = lb.ctl(&["services", "--json"]);
        out.contains("\"i110\"") && out.contains("\"i101\"")
    };
    assert!(eventually(Duration::from_secs(5), || lbs.iter().all(all3)).await);
    for _ in 0..3 {
        for lb in &lbs {
            let seen = spread(lb, "catalog.example.com", 400).await;
            assert!(!seen.contains_key("backend v110"), "{seen:?}");
            assert_eq!(
                seen.values().sum::<usize>(),
                seen.get("backend v101").unwrap_or(&0) + seen.get("backend v102").unwrap_or(&0)
            );
        }
    }
    assert_eq!(v110.requests(), 0, "1.1.0 got no request while 1.0.x lived");
    let (_, text, _) = lbs[1].ctl(&["services"]);
    assert!(text.contains("(active)"), "{text}");

    // A cut-over on one balancer: it returns once both run by it and have drained.
    let (code, out, err) = lbs[0].ctl(&["cutover", "catalog", "catalog-1.1.0", "--timeout", "20s"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("every balancer acknowledged"), "{out}");
    for lb in &lbs {
        let seen = spread(lb, "catalog.example.com", 100).await;
        assert_eq!(
            seen.keys().collect::<Vec<_>>(),
            ["backend v110"],
            "{seen:?}"
        );
    }

    // The 1.0.x deregister under load: 1.1.0 takes every new request, none fails.
    let failures = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for lb in &lbs {
        let (f, stop, addr) = (failures.clone(), stop.clone(), lb.proxy);
        load.push(tokio::spawn(async move {
            let c = client();
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            for _ in 0..20_000 {
                if stop.load(Ordering::Relaxed) || std::time::Instant::now() > deadline {
                    break;
                }
                let req = http::Request::get(format!("http://{addr}/"))
                    .header("host", "catalog.example.com")
                    .body(full(""))
                    .unwrap();
                if !matches!(send(&c, req).await, Ok(g) if g.status == 200) {
                    f.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(lbs[0].ctl(&["deregister", "catalog", "i101"]).0, 0);
    assert_eq!(lbs[1].ctl(&["deregister", "catalog", "i102"]).0, 0);
    assert!(eventually(Duration::from_secs(10), || v110.requests() > 200).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "requests failed during the roll-out"
    );
    for lb in &lbs {
        let seen = spread(lb, "catalog.example.com", 50).await;
        assert_eq!(
            seen.keys().collect::<Vec<_>>(),
            ["backend v110"],
            "{seen:?}"
        );
    }
}

async fn one_balancer(
    versions: &str,
    backends: &[(&str, &TestBackend, &str)],
) -> (tempfile::TempDir, Gearlb) {
    let wd = workdir();
    let mut extra = format!(
        "[[services]]\nname = \"catalog\"\nhosts = [\"catalog.example.com\"]\nversions = {{ {versions} }}\n"
    );
    for (name, b, v) in backends {
        extra.push_str(&format!(
            "[[services.backends]]\nname = \"{name}\"\naddr = \"{}\"\nversion = \"{v}\"\n",
            b.addr
        ));
    }
    let lb = Gearlb::start(wd.path(), &config_text(wd.path(), &[], &extra));
    (wd, lb)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_prefer_and_cutover() {
    let a = TestBackend::start("a").await;
    let b = TestBackend::start("b").await;
    let c = TestBackend::start("c").await;
    let set = [
        ("a", &a, "catalog-1.0.1"),
        ("b", &b, "catalog-1.0.2"),
        ("c", &c, "catalog-1.1.0"),
    ];

    // A canary of 10% of new sessions to the next group, over 5 000 sessions.
    let (_wd, lb) = one_balancer("canary = \"10%\"", &set).await;
    let seen = spread(&lb, "catalog.example.com", 5000).await;
    let canary = *seen.get("backend c").unwrap_or(&0) as f64 / 5000.0;
    assert!(
        (0.07..=0.13).contains(&canary),
        "canary share {canary}: {seen:?}"
    );
    assert_eq!(seen.values().sum::<usize>(), 5000, "{seen:?}");
    // Seen: the JSON report, the page and the metrics name the groups.
    let report = lb.status_json();
    let v = &report["services"][0]["versions"];
    assert_eq!(v["active"], 0);
    assert_eq!(v["canary"], 1);
    assert_eq!(v["canary_per_mille"], 100);
    assert_eq!(v["groups"][0][1], "catalog-1.0.2");
    let metrics = get(lb.status, "/metrics", &[]).await.unwrap().text();
    assert!(
        metrics.contains(r#"gearlb_service_version_group{service="catalog",versions="catalog-1.1.0",state="canary"} 1"#),
        "{metrics}"
    );
    let page = get(lb.status, "/haproxy-status", &[]).await.unwrap().text();
    assert!(
        page.contains("versions: catalog-1.0.1, catalog-1.0.2 <b>active</b>"),
        "{page}"
    );
    // A sticky session on a 1.0.x instance keeps it through the roll-out.
    // (A new session may be the canary's: the first one on 1.0.x.)
    let mut first = get(lb.proxy, "/", &[("host", "catalog.example.com")])
        .await
        .unwrap();
    for _ in 0..100 {
        if first.text() != "backend c" {
            break;
        }
        first = get(lb.proxy, "/", &[("host", "catalog.example.com")])
            .await
            .unwrap();
    }
    let cookie = first
        .headers
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .unwrap()
        .to_string();
    let sticky_body = first.text();
    assert!(
        sticky_body == "backend a" || sticky_body == "backend b",
        "{sticky_body}"
    );
    // A cut-over: 1.1.0's group is active at once, the older group drains.
    let (code, out, err) = lb.ctl(&["cutover", "catalog", "catalog-1.1.0"]);
    assert_eq!(code, 0, "{out}{err}");
    let seen = spread(&lb, "catalog.example.com", 100).await;
    assert_eq!(seen.keys().collect::<Vec<_>>(), ["backend c"], "{seen:?}");
    for _ in 0..10 {
        let got = get(
            lb.proxy,
            "/",
            &[("host", "catalog.example.com"), ("cookie", &cookie)],
        )
        .await
        .unwrap();
        assert_eq!(got.text(), sticky_body, "the session stays on its instance");
    }
    let (code, _, err) = lb.ctl(&["cutover", "catalog", "catalog-9.9.9"]);
    assert_ne!(code, 0);
    assert!(err.contains("no backend"), "{err}");
    drop(lb);

    // Prefer newer, then older, within the active group.
    let (_wd, lb) = one_balancer("prefer = \"newer\"", &set).await;
    let seen = spread(&lb, "catalog.example.com", 200).await;
    assert_eq!(seen.keys().collect::<Vec<_>>(), ["backend b"], "{seen:?}");
    drop(lb);
    let (_wd, lb) = one_balancer("prefer = \"older\"", &set).await;
    let seen = spread(&lb, "catalog.example.com", 200).await;
    assert_eq!(seen.keys().collect::<Vec<_>>(), ["backend a"], "{seen:?}");
    // Holding the active group back makes the next one active.
    let (code, _, err) = lb.ctl(&["hold", "catalog", "catalog-1.0.1"]);
    assert_eq!(code, 0, "{err}");
    let seen = spread(&lb, "catalog.example.com", 100).await;
    assert_eq!(seen.keys().collect::<Vec<_>>(), ["backend c"], "{seen:?}");
}

/// A web gear that says its version on every answer (its health checks' too).
async fn announcing(
    name: &'static str,
    version: &'static str,
) -> (std::net::SocketAddr, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(AtomicU64::new(0));
    let count = served.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let count = count.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let check = req
                            .headers()
                            .get("user-agent")
                            .is_some_and(|v| v == "gearlb-health-check");
                        if !check {
                            count.fetch_add(1, Ordering::Relaxed);
                        }
                        async move {
                            let mut resp = http::Response::new(full(format!("backend {name}")));
                            resp.headers_mut().insert(
                                "x-gearlb-version",
                                http::HeaderValue::from_static(version),
                            );
                            Ok::<_, std::convert::Infallible>(resp)
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, served)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_gears_that_cannot_register_announce_their_version_on_the_health_check() {
    let (old, old_served) = announcing("old", "app-1.0.0").await;
    let (new, new_served) = announcing("new", "app-1.1.0").await;
    let wd = workdir();
    let lb = Gearlb::start(
        wd.path(),
        &config_text(
            wd.path(),
            &[("old", old), ("new", new)],
            "[health]\ninterval = \"100ms\"\n",
        ),
    );
    let announced = |lb: &Gearlb| {
        let r = lb.status_json();
        r["backends"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["version"].is_string())
    };
    assert!(eventually(Duration::from_secs(10), || announced(&lb)).await);
    let before = new_served.load(Ordering::Relaxed);
    for _ in 0..200 {
        let got = get(lb.proxy, "/", &[]).await.unwrap();
        assert_eq!(got.text(), "backend old");
    }
    assert_eq!(
        new_served.load(Ordering::Relaxed),
        before,
        "1.1.0 waits for 1.0.x"
    );
    assert!(old_served.load(Ordering::Relaxed) >= 200);
}
