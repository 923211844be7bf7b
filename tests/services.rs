//! Many services behind one balancer, end to end through a real `gearlb run` process:
//! routes by host and path from a watched directory (edited under load, half-written,
//! bad, deleted), backups, per-backend connection limits with their queue, instances
//! that register themselves, and `/health/<service>`.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::*;

/// The body of a GET to `path` with this `Host`, or the status when it is not 200.
async fn via(lb: &Gearlb, host: &str, path: &str) -> String {
    match get(lb.proxy, path, &[("host", host)]).await {
        Ok(g) if g.status == 200 => g.text(),
        Ok(g) => format!("status {}", g.status),
        Err(e) => format!("error {e}"),
    }
}

fn services(lb: &Gearlb) -> serde_json::Value {
    let (code, out, err) = lb.ctl(&["services", "--json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

fn service<'a>(report: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    report["services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
}

/// Write a file the way consul-template does: a temporary file in the same directory,
/// then a rename over the target.
fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_file_name(format!(".{}.tmp", std::process::id()));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn yaml_service(
    name: &str,
    hosts: &[&str],
    paths: &[&str],
    backends: &[(&str, SocketAddr)],
) -> String {
    let mut s = format!("name: {name}\nhosts:\n");
    for h in hosts {
        s.push_str(&format!("  - \"{h}\"\n"));
    }
    s.push_str("paths:\n");
    for p in paths {
        s.push_str(&format!("  - {p}\n"));
    }
    s.push_str("backends:\n");
    for (n, a) in backends {
        s.push_str(&format!("  - name: {n}\n    addr: \"{a}\"\n"));
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_from_a_watched_directory_follow_its_files() {
    let shop = TestBackend::start("shop").await;
    let shop_api = TestBackend::start("shop-api").await;
    let blog = TestBackend::start("blog").await;
    let blog2 = TestBackend::start("blog2").await;
    let wd = workdir();
    let sd = wd.path().join("services.d");
    std::fs::create_dir(&sd).unwrap();
    write_atomic(
        &sd.join("shop.yaml"),
        &yaml_service("shop", &["shop.example.com"], &["/"], &[("s1", shop.addr)]),
    );
    write_atomic(
        &sd.join("shop-api.yml"),
        &yaml_service(
            "shop-api",
            &["shop.example.com"],
            &["/api"],
            &[("a1", shop_api.addr)],
        ),
    );
    std::fs::write(
        sd.join("blog.toml"),
        format!(
            "name = \"blog\"\nhosts = [\"*.blog.example.com\"]\n[[backends]]\nname = \"b1\"\naddr = \"{}\"\n",
            blog.addr
        ),
    )
    .unwrap();
    let extra = format!("[discovery]\ndir = \"{}\"\n", sd.display());
    let lb = Gearlb::start(wd.path(), &config_text(wd.path(), &[], &extra));

    // Three services by host and path; the host's case and port do not matter.
    assert!(
        eventually(Duration::from_secs(10), || services(&lb)["services"]
            .as_array()
            .unwrap()
            .len()
            == 3)
        .await
    );
    assert_eq!(via(&lb, "shop.example.com", "/").await, "backend shop");
    assert_eq!(
        via(&lb, "SHOP.example.com:80", "/cart").await,
        "backend shop"
    );
    assert_eq!(
        via(&lb, "shop.example.com", "/api/v1/items").await,
        "backend shop-api"
    );
    assert_eq!(
        via(&lb, "shop.example.com", "/apiary").await,
        "backend shop"
    );
    assert_eq!(
        via(&lb, "me.blog.example.com", "/post").await,
        "backend blog"
    );
    assert_eq!(via(&lb, "other.example.com", "/").await, "status 404");
    let report = services(&lb);
    let origin = &service(&report, "shop-api").unwrap()["origin"];
    assert_eq!(origin["kind"], "file");
    assert!(origin["path"].as_str().unwrap().ends_with("shop-api.yml"));

    // An edit under steady load: the backend changes, no request fails.
    let failures = Arc::new(AtomicU64::new(0));
    let served = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for _ in 0..4 {
        let (f, s, stop, addr) = (failures.clone(), served.clone(), stop.clone(), lb.proxy);
        load.push(tokio::spawn(async move {
            let c = client();
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            for _ in 0..20_000 {
                if stop.load(Ordering::Relaxed) || std::time::Instant::now() > deadline {
                    break;
                }
                let req = http::Request::get(format!("http://{addr}/p"))
                    .header("host", "x.blog.example.com")
                    .body(full(""))
                    .unwrap();
                match send(&c, req).await {
                    Ok(g) if g.status == 200 => s.fetch_add(1, Ordering::Relaxed),
                    _ => f.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    assert!(
        eventually(Duration::from_secs(5), || served.load(Ordering::Relaxed)
            > 50)
        .await
    );
    std::fs::write(
        sd.join("blog.toml"),
        format!(
            "name = \"blog\"\nhosts = [\"*.blog.example.com\"]\n[[backends]]\nname = \"b2\"\naddr = \"{}\"\n",
            blog2.addr
        ),
    )
    .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || blog2.requests() > 50).await,
        "the edit took effect"
    );
    let before = blog.requests();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        blog.requests(),
        before,
        "the removed backend takes no new requests"
    );
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "requests failed during the edit"
    );
    // The drained backend is gone from the service.
    assert!(
        eventually(Duration::from_secs(10), || {
            let r = services(&lb);
            let names: Vec<String> = service(&r, "blog").unwrap()["backends"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["name"].as_str().unwrap().to_string())
                .collect();
            names == ["b2"]
        })
        .await
    );

    // A half-written file, then a bad one: refused with their paths; the service keeps
    // its last good definition.
    let shop_file = sd.join("shop.yaml");
    std::fs::write(
        &shop_file,
        "name: shop\nhosts: [shop.example.com]\nbackends:\n  - name: s1\n    addr: \"127.0",
    )
    .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || {
            let r = services(&lb);
            r["files"].as_array().unwrap().iter().any(|f| {
                f["path"].as_str().unwrap().ends_with("shop.yaml") && f["problem"].is_string()
            })
        })
        .await
    );
    assert_eq!(via(&lb, "shop.example.com", "/").await, "backend shop");
    std::fs::write(&shop_file, "name: shop\nhosts: [shop.example.com]\ncolour: blue\nbackends:\n  - name: s1\n    addr: nowhere\n").unwrap();
    assert!(
        eventually(Duration::from_secs(10), || {
            let (_, out, _) = lb.ctl(&["services"]);
            out.contains("shop.yaml") && out.contains("colour") && out.contains("backends[0].addr")
        })
        .await,
        "every problem is listed with the file's path"
    );
    assert_eq!(via(&lb, "shop.example.com", "/").await, "backend shop");
    assert!(
        lb.log_text().contains("shop.yaml"),
        "the refusal is logged with its path"
    );

    // A file deleted: its service stops being routed, drains, and goes.
    std::fs::remove_file(sd.join("shop-api.yml")).unwrap();
    assert!(
        eventually(Duration::from_secs(10), || service(
            &services(&lb),
            "shop-api"
        )
        .is_none())
        .await
    );
    // The path falls back to the host's other route.
    assert_eq!(
        via(&lb, "shop.example.com", "/api/v1").await,
        "backend shop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backups_take_traffic_only_when_every_primary_is_down_and_health_says_so() {
    let p1 = TestBackend::start("p1").await;
    let p2 = TestBackend::start("p2").await;
    let backup = TestBackend::start("backup").await;
    let wd = workdir();
    let hport = free_addr();
    let extra = format!(
        "[health]\ninterval = \"100ms\"\nfall = 1\nrise = 1\n\
         [[services]]\nname = \"app\"\nhosts = [\"app.example.com\"]\nhealth = {{ listen = \"{hport}\" }}\n\
         [[services.backends]]\nname = \"p1\"\naddr = \"{}\"\n\
         [[services.backends]]\nname = \"p2\"\naddr = \"{}\"\n\
         [[services.backends]]\nname = \"b\"\naddr = \"{}\"\nbackup = true\n",
        p1.addr, p2.addr, backup.addr
    );
    let lb = Gearlb::start(wd.path(), &config_text(wd.path(), &[], &extra));
    let health = |lb: &Gearlb, name: &str| {
        let url = format!("/health/{name}");
        let addr = lb.status;
        async move { get(addr, &url, &[]).await.map(|g| g.status).unwrap_or(0) }
    };
    assert_eq!(health(&lb, "app").await, 200);
    assert_eq!(health(&lb, "nope").await, 404);
    assert_eq!(
        get(hport, "/anything", &[]).await.unwrap().status,
        200,
        "its health port"
    );
    for _ in 0..40 {
        assert!(via(&lb, "app.example.com", "/")
            .await
            .starts_with("backend p"));
    }
    assert_eq!(
        backup.requests(),
        0,
        "a backup takes nothing while a primary is up"
    );
    p1.kill();
    assert!(
        eventually(Duration::from_secs(10), || {
            let r = services(&lb);
            service(&r, "app").unwrap()["backends"][0]["state"] == "down"
        })
        .await
    );
    for _ in 0..20 {
        assert_eq!(via(&lb, "app.example.com", "/").await, "backend p2");
    }
    assert_eq!(backup.requests(), 0);
    p2.kill();
    assert!(
        eventually(Duration::from_secs(10), || {
            let r = services(&lb);
            service(&r, "app").unwrap()["backends"][1]["state"] == "down"
        })
        .await
    );
    for _ in 0..10 {
        assert_eq!(via(&lb, "app.example.com", "/").await, "backend backup");
    }
    assert_eq!(
        health(&lb, "app").await,
        200,
        "a backup up keeps the service up"
    );
    backup.kill();
    assert!(
        eventually(Duration::from_secs(10), || {
            let r = services(&lb);
            service(&r, "app").unwrap()["up"] == false
        })
        .await
    );
    assert_eq!(health(&lb, "app").await, 503);
    assert_eq!(get(hport, "/", &[]).await.unwrap().status, 503);
}

/// A backend that answers every request after `delay` and records the most
/// connections it ever had open at once.
async fn slow_backend(delay: Duration) -> (SocketAddr, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let open = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let m = most.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let now = open.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            let open = open.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |_req| async move {
                    tokio::time::sleep(delay).await;
                    Ok::<_, std::convert::Infallible>(http::Response::new(full("slow")))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (addr, most)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_limit_queues_requests_and_answers_503_at_the_queue_timeout() {
    let (addr, most) = slow_backend(Duration::from_millis(800)).await;
    let wd = workdir();
    let extra = format!(
        "[[services]]\nname = \"slow\"\nhosts = [\"slow.example.com\"]\nqueue_timeout = \"1s\"\n\
         [[services.backends]]\nname = \"s\"\naddr = \"{addr}\"\nmax_connections = 2\n"
    );
    let lb = Gearlb::start(wd.path(), &config_text(wd.path(), &[], &extra));
    let mut reqs = Vec::new();
    for _ in 0..10 {
        let proxy = lb.proxy;
        reqs.push(tokio::spawn(async move {
            get(proxy, "/", &[("host", "slow.example.com")])
                .await
                .map(|g| g.status)
        }));
    }
    let mut ok = 0;
    let mut unavailable = 0;
    for r in reqs {
        match r.await.unwrap() {
            Ok(200) => ok += 1,
            Ok(503) => unavailable += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert!(
        most.load(Ordering::SeqCst) <= 2,
        "the gear got {} connections at once",
        most.load(Ordering::SeqCst)
    );
    // Two at once, 800 ms each, 1 s of queue: the first two and the two queued behind
    // them are served; the others time out in the queue.
    assert!((2..=6).contains(&ok), "served {ok}");
    assert!(unavailable >= 4, "503 at the queue timeout: {unavailable}");
    assert_eq!(ok + unavailable, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_register_renew_deregister_and_lapse() {
    let a = TestBackend::start("a").await;
    let b = TestBackend::start("b").await;
    let wd = workdir();
    let extra = "[[services]]\nname = \"web\"\nhosts = [\"web.example.com\"]\n";
    let lb = Gearlb::start(wd.path(), &config_text(wd.path(), &[], extra));
    assert_eq!(via(&lb, "api.example.com", "/").await, "status 404");

    // The first instance of a new service names its routes.
    let (code, _, err) = lb.ctl(&["register", "api", "i1", &a.addr.to_string()]);
    assert_ne!(code, 0);
    assert!(err.contains("--host"), "{err}");
    let (code, out, err) = lb.ctl(&[
        "register",
        "api",
        "i1",
        &a.addr.to_string(),
        "--host",
        "api.example.com",
        "--ttl",
        "2s",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(via(&lb, "api.example.com", "/").await, "backend a");
    // A second one joins; an instance of a configured service joins it.
    let (code, _, err) = lb.ctl(&["register", "api", "i2", &b.addr.to_string(), "--ttl", "30s"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = lb.ctl(&["register", "web", "w1", &b.addr.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(via(&lb, "web.example.com", "/").await, "backend b");

    // A route another service has is refused, naming both.
    let (code, _, err) = lb.ctl(&[
        "register",
        "web2",
        "x",
        &a.addr.to_string(),
        "--host",
        "web.example.com",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("\"web\"") && err.contains("\"web2\""), "{err}");
    let (code, _, err) = lb.ctl(&["register", "bad", "x", "nowhere"]);
    assert_ne!(code, 0);
    assert!(err.contains("address"), "{err}");

    // Renewal keeps i1; without it, its lease lapses and it is removed.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(800)).await;
        let (code, _, err) = lb.ctl(&[
            "register",
            "api",
            "i1",
            &a.addr.to_string(),
            "--host",
            "api.example.com",
            "--ttl",
            "2s",
        ]);
        assert_eq!(code, 0, "{err}");
    }
    let names = |lb: &Gearlb| -> Vec<String> {
        service(&services(lb), "api").map_or(vec![], |s| {
            s["backends"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["name"].as_str().unwrap().to_string())
                .collect()
        })
    };
    assert_eq!(names(&lb), ["i1", "i2"]);
    assert!(
        eventually(Duration::from_secs(6), || names(&lb) == ["i2"]).await,
        "lapsed lease: {:?}",
        names(&lb)
    );
    assert!(lb.log_text().contains("lease lapsed"));
    for _ in 0..10 {
        assert_eq!(via(&lb, "api.example.com", "/").await, "backend b");
    }
    // Deregistration drains the last instance, then the service goes.
    let (code, _, err) = lb.ctl(&["deregister", "api", "i2"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        eventually(Duration::from_secs(6), || service(&services(&lb), "api")
            .is_none())
        .await
    );
    assert_eq!(via(&lb, "api.example.com", "/").await, "status 404");
    let (code, _, _) = lb.ctl(&["deregister", "api", "i2"]);
    assert_ne!(code, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_level_backends_stay_one_default_service_beside_named_ones() {
    let app = TestBackend::start("app").await;
    let own = TestBackend::start("own").await;
    let wd = workdir();
    let port = free_addr();
    let extra = format!(
        "[[services]]\nname = \"own\"\nlisten = \"{port}\"\nsticky_cookie = \"OWN\"\n\
         [[services.backends]]\nname = \"o\"\naddr = \"{}\"\n",
        own.addr
    );
    let lb = Gearlb::start(
        wd.path(),
        &config_text(wd.path(), &[("app", app.addr)], &extra),
    );
    // Every host goes to the top-level backends; the service has its own port.
    assert_eq!(via(&lb, "anything.example.com", "/").await, "backend app");
    let got = get(port, "/", &[]).await.unwrap();
    assert_eq!(got.text(), "backend own");
    let cookie = got.headers.get("set-cookie").unwrap().to_str().unwrap();
    assert!(cookie.starts_with("OWN=o"), "{cookie}");
    assert_eq!(
        get(lb.status, "/health/default", &[]).await.unwrap().status,
        200
    );
    assert_eq!(
        get(lb.status, "/health/own", &[]).await.unwrap().status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_balancers_of_a_cluster_route_a_registered_service_identically() {
    let app = TestBackend::start("app").await;
    let a = TestBackend::start("a").await;
    let b = TestBackend::start("b").await;
    let (_dirs, lbs) = cluster_of(2, &[&app], "").await;
    let routes = |lb: &Gearlb| -> Vec<(String, Vec<String>)> {
        services(lb)["services"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let backends = s["backends"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| format!("{} {}", b["name"], b["addr"]))
                    .collect();
                (
                    format!("{} {} {}", s["name"], s["hosts"], s["paths"]),
                    backends,
                )
            })
            .collect()
    };
    // Registered with the first balancer: both route it within a gossip round or two.
    let (code, _, err) = lbs[0].ctl(&[
        "register",
        "api",
        "i1",
        &a.addr.to_string(),
        "--host",
        "api.example.com",
        "--path",
        "/v1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        eventually(Duration::from_secs(3), || service(
            &services(&lbs[1]),
            "api"
        )
        .is_some())
        .await
    );
    assert_eq!(via(&lbs[1], "api.example.com", "/v1/x").await, "backend a");
    assert_eq!(
        via(&lbs[1], "api.example.com", "/other").await,
        "backend app"
    );
    // A second instance, registered with the other balancer, joins on both.
    let (code, _, err) = lbs[1].ctl(&["register", "api", "i2", &b.addr.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        eventually(Duration::from_secs(3), || routes(&lbs[0])
            == routes(&lbs[1])
            && routes(&lbs[0]).iter().any(|(_, b)| b.len() == 2))
        .await,
        "{:?} / {:?}",
        routes(&lbs[0]),
        routes(&lbs[1])
    );
    for lb in &lbs {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..20 {
            seen.insert(via(lb, "api.example.com", "/v1").await);
        }
        assert_eq!(
            seen.into_iter().collect::<Vec<_>>(),
            ["backend a", "backend b"]
        );
    }
    // A conflicting route is refused at either balancer.
    let (code, _, err) = lbs[1].ctl(&[
        "register",
        "api2",
        "x",
        &a.addr.to_string(),
        "--host",
        "api.example.com",
        "--path",
        "/v1",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("\"api\""), "{err}");
    // Deregistered where it registered: gone from both.
    let (code, _, err) = lbs[0].ctl(&["deregister", "api", "i1"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        eventually(Duration::from_secs(5), || {
            let r = routes(&lbs[0]);
            r == routes(&lbs[1]) && r.iter().any(|(s, b)| s.contains("api") && b.len() == 1)
        })
        .await
    );
    for lb in &lbs {
        assert_eq!(via(lb, "api.example.com", "/v1").await, "backend b");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_over_http_needs_the_token() {
    let a = TestBackend::start("a").await;
    let wd = workdir();
    let token = "registration-token-0123456789";
    let extra = format!(
        "[discovery]\ntoken = \"{token}\"\n[[services]]\nname = \"web\"\nhosts = [\"web.example.com\"]\n"
    );
    let lb = Gearlb::start(wd.path(), &config_text(wd.path(), &[], &extra));
    let post = |path: &str, auth: Option<&str>, body: String| {
        let mut req = http::Request::post(format!("http://{}{path}", lb.status));
        if let Some(t) = auth {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let req = req.body(full(body)).unwrap();
        async move { send(&client(), req).await.unwrap() }
    };
    let body = format!(
        r#"{{"service":"api","backend":"i1","addr":"{}","hosts":["api.example.com"],"ttl":"20s"}}"#,
        a.addr
    );
    for auth in [None, Some("wrong-token-0123456789"), Some("")] {
        let got = post("/services/register", auth, body.clone()).await;
        assert_eq!(got.status, 401, "{auth:?}");
        assert!(got.headers.get("www-authenticate").is_some());
    }
    assert!(
        service(&services(&lb), "api").is_none(),
        "nothing changed without the token"
    );
    assert_eq!(via(&lb, "api.example.com", "/").await, "status 404");

    let got = post("/services/register", Some(token), body.clone()).await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(via(&lb, "api.example.com", "/").await, "backend a");
    // Bad input: 400 with why, and nothing changes.
    let got = post(
        "/services/register",
        Some(token),
        r#"{"service":"api","backend":"i2","addr":"nowhere"}"#.into(),
    )
    .await;
    assert_eq!(got.status, 400);
    assert!(got.text().contains("address"), "{}", got.text());
    let got = post("/services/register", Some(token), "{not json".into()).await;
    assert_eq!(got.status, 400);
    // A conflict: 409 naming both services.
    let clash = format!(
        r#"{{"service":"web2","backend":"x","addr":"{}","hosts":["web.example.com"]}}"#,
        a.addr
    );
    let got = post("/services/register", Some(token), clash).await;
    assert_eq!(got.status, 409);
    assert!(got.text().contains("\"web\""), "{}", got.text());
    let got = post(
        "/services/deregister",
        None,
        r#"{"service":"api","backend":"i1"}"#.into(),
    )
    .await;
    assert_eq!(got.status, 401);
    let got = post(
        "/services/deregister",
        Some(token),
        r#"{"service":"api","backend":"i1"}"#.into(),
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert!(
        eventually(Duration::from_secs(5), || service(&services(&lb), "api")
            .is_none())
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_backend_rotates_out_and_in_by_name() {
    let b1 = TestBackend::start("b1").await;
    let b2 = TestBackend::start("b2").await;
    let app = TestBackend::start("app").await;
    let wd = workdir();
    let extra = format!(
        "[[services]]\nname = \"shop\"\nhosts = [\"shop.example.com\"]\n\
         [[services.backends]]\nname = \"b1\"\naddr = \"{}\"\n\
         [[services.backends]]\nname = \"b2\"\naddr = \"{}\"\n",
        b1.addr, b2.addr
    );
    let lb = Gearlb::start(
        wd.path(),
        &config_text(wd.path(), &[("app", app.addr)], &extra),
    );
    // A slow request in flight on b1 when it is rotated out: it finishes.
    let proxy = lb.proxy;
    let mut slow = None;
    for _ in 0..20 {
        let before = b1.requests();
        let t = tokio::spawn(async move {
            get(proxy, "/slow?ms=1500", &[("host", "shop.example.com")]).await
        });
        if eventually(Duration::from_millis(500), || b1.requests() > before).await {
            slow = Some(t);
            break;
        }
        t.await.unwrap().unwrap();
    }
    let slow = slow.expect("a slow request reached b1");
    let started = std::time::Instant::now();
    let (code, out, err) = lb.ctl(&["rotate-out", "--service", "shop", "b1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "waited for the drain"
    );
    let done = slow.await.unwrap().unwrap();
    assert_eq!(done.status, 200);
    assert_eq!(done.text(), "slow done by b1");
    let before = b1.requests();
    for _ in 0..20 {
        assert_eq!(via(&lb, "shop.example.com", "/").await, "backend b2");
    }
    assert_eq!(b1.requests(), before);
    // The default service's backends are untouched; unknown names are refused.
    assert_eq!(via(&lb, "other.example.com", "/").await, "backend app");
    let (code, _, err) = lb.ctl(&["rotate-out", "--service", "shop", "nope"]);
    assert_ne!(code, 0);
    assert!(err.contains("no backend"), "{err}");
    let (code, _, err) = lb.ctl(&["rotate-out", "--service", "ghost", "b1"]);
    assert_ne!(code, 0);
    assert!(err.contains("unknown service"), "{err}");
    // Back in rotation.
    let (code, _, err) = lb.ctl(&["rotate-in", "--service", "shop", "b1"]);
    assert_eq!(code, 0, "{err}");
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        seen.insert(via(&lb, "shop.example.com", "/").await);
    }
    assert!(seen.contains("backend b1"), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_service_is_seen_in_the_report_the_csv_show_stat_the_page_and_metrics() {
    let app = TestBackend::start("app").await;
    let s1 = TestBackend::start("s1").await;
    let wd = workdir();
    let port = free_addr();
    let extra = format!(
        "[[services]]\nname = \"shop\"\nhosts = [\"shop.example.com\"]\nlisten = \"{port}\"\n\
         [[services.backends]]\nname = \"s1\"\naddr = \"{}\"\nmax_connections = 5\n",
        s1.addr
    );
    let config = config_text(wd.path(), &[("app", app.addr)], &extra);
    let lb = Gearlb::start(wd.path(), &config);
    for _ in 0..3 {
        assert_eq!(via(&lb, "shop.example.com", "/").await, "backend s1");
    }
    assert_eq!(get(port, "/", &[]).await.unwrap().text(), "backend s1");

    let report = lb.status_json();
    let shop = &report["services"][0];
    assert_eq!(shop["name"], "shop");
    assert_eq!(shop["origin"], "the configuration file");
    assert_eq!(shop["hosts"][0], "shop.example.com");
    assert_eq!(shop["backends"][0]["name"], "s1");
    assert_eq!(shop["backends"][0]["requests_total"], 4);
    assert_eq!(
        shop["frontend"]["requests_total"], 1,
        "its own listener's traffic"
    );
    assert_eq!(
        report["backends"][0]["name"], "app",
        "the default service as before"
    );

    let csv = get(lb.status, "/haproxy-status;csv", &[])
        .await
        .unwrap()
        .text();
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    let names: Vec<(&str, &str)> = rows.iter().map(|r| (r[0], r[1])).collect();
    assert_eq!(
        names,
        [
            ("stats", "FRONTEND"),
            ("stats", "BACKEND"),
            ("express", "FRONTEND"),
            ("express", "app"),
            ("express", "BACKEND"),
            ("shop", "FRONTEND"),
            ("shop", "s1"),
            ("shop", "BACKEND"),
        ]
    );
    let mut sock = std::os::unix::net::UnixStream::connect(wd.path().join("stats")).unwrap();
    use std::io::{Read, Write};
    sock.write_all(b"show stat 3 -1 -1\n").unwrap();
    let mut shown = String::new();
    sock.read_to_string(&mut shown).unwrap();
    let px: Vec<&str> = shown
        .lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| l.split(',').next().unwrap())
        .collect();
    assert_eq!(px, ["shop", "shop", "shop"], "{shown}");

    let page = get(lb.status, "/haproxy-status", &[]).await.unwrap().text();
    assert!(page.contains("Service shop") && page.contains("shop.example.com"));
    let metrics = get(lb.status, "/metrics", &[]).await.unwrap().text();
    assert!(
        metrics.contains(r#"gearlb_backend_requests_total{service="shop",backend="s1"} 4"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"gearlb_backend_requests_total{backend="app"}"#));
}
