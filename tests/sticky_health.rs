//! Sticky sessions, health checks, retries and WebSockets, end to end through a real
//! `gearlb run` process.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::*;

/// The `GEAR=…` value of a response's Set-Cookie, if any.
fn gear_cookie(got: &Got) -> Option<String> {
    got.headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("GEAR="))
        .map(|v| v.split(';').next().unwrap().to_string())
}

async fn gears(n: usize) -> Vec<TestBackend> {
    let mut v = Vec::new();
    for i in 0..n {
        v.push(TestBackend::start(&format!("g{i}")).await);
    }
    v
}

/// A balancer whose backends were announced by `update-cluster` as gears `g<i>-ns`.
fn balancer(dir: &std::path::Path, gears: &[TestBackend], extra: &str) -> Gearlb {
    let lb = Gearlb::start(dir, &config_text(dir, &[], extra));
    let entries: Vec<String> = gears
        .iter()
        .map(|g| format!("{}-ns.example.com|{}", g.name, g.addr))
        .collect();
    let (code, _, err) = lb.ctl(&["update-cluster", &entries.join(" ")]);
    assert_eq!(code, 0, "{err}");
    lb
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_cookie_pins_and_is_stripped() {
    let g = gears(3).await;
    let dir = workdir();
    // The client is a trusted front (the router) saying its client came over HTTPS.
    let lb = balancer(
        dir.path(),
        &g,
        "[proxy]\ntrust_forwarded = [\"127.0.0.1\"]\n",
    );

    let first = get(lb.proxy, "/headers", &[("x-forwarded-proto", "https")])
        .await
        .unwrap();
    let value = gear_cookie(&first).expect("a sticky cookie is inserted");
    let set = first.headers["set-cookie"].to_str().unwrap();
    assert!(
        set.contains("path=/") && set.contains("HttpOnly") && set.contains("Secure"),
        "{set}"
    );
    assert_eq!(first.headers["cache-control"], "private");
    let pinned = first.json()["backend"].as_str().unwrap().to_string();
    assert_eq!(
        value,
        format!("{pinned}-ns"),
        "cookie value is <gearname>-<ns>"
    );

    let cookie = format!("a=1; GEAR={value}; b=\"x y\"");
    for _ in 0..100 {
        let got = get(lb.proxy, "/headers", &[("cookie", &cookie)])
            .await
            .unwrap();
        assert_eq!(got.status, 200);
        let seen = got.json();
        assert_eq!(seen["backend"], pinned.as_str(), "stickiness broke");
        assert_eq!(
            seen["headers"]["cookie"][0], "a=1; b=\"x y\"",
            "only GEAR is stripped"
        );
        assert_eq!(gear_cookie(&got), None, "a valid cookie is not re-sent");
    }
    // Other balancers use the same value: a second balancer honours the first's cookie.
    let dir2 = workdir();
    let lb2 = balancer(dir2.path(), &g, "");
    let got = get(
        lb2.proxy,
        "/headers",
        &[("cookie", &format!("GEAR={value}"))],
    )
    .await
    .unwrap();
    assert_eq!(got.json()["backend"], pinned.as_str());
    assert!(got.json()["headers"].get("cookie").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_cookies_are_ignored_and_replaced() {
    let g = gears(2).await;
    let dir = workdir();
    let lb = balancer(dir.path(), &g, "");
    let long = "x".repeat(10 * 1024);
    for forged in [
        "unknown-ns",
        "../../etc/passwd",
        "127.0.0.1:22",
        "g0",
        long.as_str(),
        "",
    ] {
        let got = get(
            lb.proxy,
            "/headers",
            &[("cookie", &format!("GEAR={forged}; keep=1"))],
        )
        .await
        .unwrap();
        assert_eq!(
            got.status,
            200,
            "forged {:?}",
            &forged[..forged.len().min(20)]
        );
        let seen = got.json();
        assert_eq!(seen["headers"]["cookie"][0], "keep=1");
        let new = gear_cookie(&got).expect("re-pinned with a valid value");
        assert_eq!(new, format!("{}-ns", seen["backend"].as_str().unwrap()));
    }
    // Not even text.
    let out = raw(
        lb.proxy,
        b"GET /headers HTTP/1.1\r\nHost: x\r\nCookie: GEAR=\xff\xfe\x00z\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(
        out.starts_with("HTTP/1.1 200") || out.starts_with("HTTP/1.1 400"),
        "{out}"
    );
    if out.starts_with("HTTP/1.1 200") {
        assert!(out.contains("set-cookie: GEAR=g"), "{out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_sticky_gear_is_replaced_at_once() {
    let g = gears(3).await;
    let dir = workdir();
    let lb = balancer(dir.path(), &g, "");
    let first = get(lb.proxy, "/headers", &[]).await.unwrap();
    let value = gear_cookie(&first).unwrap();
    let pinned = first.json()["backend"].as_str().unwrap().to_string();
    g.iter().find(|b| b.name == pinned).unwrap().kill();

    let got = get(
        lb.proxy,
        "/headers",
        &[("cookie", &format!("GEAR={value}"))],
    )
    .await
    .unwrap();
    assert_eq!(got.status, 200);
    let now = got.json()["backend"].as_str().unwrap().to_string();
    assert_ne!(now, pinned);
    assert_eq!(gear_cookie(&got), Some(format!("{now}-ns")), "re-pinned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_gear_under_get_load_fails_no_request() {
    let g = gears(3).await;
    let dir = workdir();
    let lb = balancer(dir.path(), &g, "[health]\ninterval = \"200ms\"");
    let proxy = lb.proxy;
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (ok, failed) = (ok.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            let c = client();
            let end = Instant::now() + Duration::from_secs(3);
            for i in 0..2000 {
                if Instant::now() > end {
                    break;
                }
                // Some requests are in flight on the gear when it dies.
                let path = if i % 5 == 0 { "/slow?ms=30" } else { "/" };
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
    tokio::time::sleep(Duration::from_millis(700)).await;
    g[0].kill();
    let killed_at = g[0].requests();
    for t in tasks {
        t.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(killed_at > 0, "the killed gear had taken traffic");
    assert!(ok > 300, "only {ok} requests");
    assert_eq!(failed, 0, "{failed} GETs failed");
    // The dead gear is reported down.
    let (_, out, _) = lb.ctl(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let dead = v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "gear-g0-ns")
        .unwrap();
    assert_eq!(dead["state"], "down", "{dead}");
}

/// A gear that reads a request and its body, then dies without answering.
async fn dying_gear() -> (std::net::SocketAddr, Arc<AtomicU64>) {
    use tokio::io::AsyncReadExt;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let accepted = Arc::new(AtomicU64::new(0));
    let a = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            a.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut seen = Vec::new();
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    let head_done = seen.windows(4).any(|w| w == b"\r\n\r\n");
                    if seen.ends_with(b"the body") || (seen.starts_with(b"GET") && head_done) {
                        break; // got the whole request: die without a word
                    }
                }
            });
        }
    });
    (addr, accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_to_a_dying_gear_is_502_not_retried() {
    let healthy = TestBackend::start("healthy").await;
    let (dying, accepted) = dying_gear().await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[], "[health]\nenabled = false"),
    );
    let entries = format!(
        "dying-ns.example.com|{dying} healthy-ns.example.com|{}",
        healthy.addr
    );
    assert_eq!(lb.ctl(&["update-cluster", &entries]).0, 0);

    let c = client();
    let req = http::Request::post(format!("http://{}/upload", lb.proxy))
        .header("cookie", "GEAR=dying-ns")
        .body(full("the body"))
        .unwrap();
    let got = send(&c, req).await.unwrap();
    assert_eq!(got.status, 502, "{}", got.text());
    assert_eq!(accepted.load(Ordering::Relaxed), 1);
    assert_eq!(
        healthy.requests(),
        0,
        "a POST whose body was sent is never replayed"
    );

    // The same GET is replayed on the healthy gear.
    let got = get(lb.proxy, "/", &[("cookie", "GEAR=dying-ns")])
        .await
        .unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(got.text(), "backend healthy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_gear_is_skipped_even_for_posts() {
    let healthy = TestBackend::start("healthy").await;
    let dead = free_addr();
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("dead", dead), ("healthy", healthy.addr)],
            "[health]\nenabled = false",
        ),
    );
    let c = client();
    for _ in 0..10 {
        let req = http::Request::post(format!("http://{}/upload", lb.proxy))
            .body(gen_body(1000))
            .unwrap();
        let got = send(&c, req).await.unwrap();
        assert_eq!(got.status, 200);
        assert_eq!(
            got.text(),
            "1000",
            "the body arrives whole at the healthy gear"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_mark_down_and_up() {
    // g0 comes back on its port after it dies: a port outside the ephemeral range, which
    // no other test's `bind(0)` can take while it is down.
    let g = vec![
        TestBackend::start_on("g0", free_addr()).await,
        TestBackend::start("g1").await,
    ];
    let dir = workdir();
    let lb = balancer(
        dir.path(),
        &g,
        "[health]\ninterval = \"200ms\"\nfall = 2\nrise = 2\nuri = \"/healthz\"",
    );
    let state = |name: &str| -> String {
        let (_, out, _) = lb.ctl(&["status", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["backends"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == name)
            .unwrap()["state"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // Checks use the gear's DNS name as Host.
    let checked = eventually(Duration::from_secs(3), || {
        !g[0].checks.lock().unwrap().is_empty()
    })
    .await;
    assert!(checked);
    assert_eq!(g[0].checks.lock().unwrap()[0], "g0-ns.example.com");
    assert_eq!(state("gear-g0-ns"), "up");

    let addr = g[0].addr;
    g[0].kill();
    let t = Instant::now();
    assert!(eventually(Duration::from_secs(3), || state("gear-g0-ns") == "down").await);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "down after {:?}",
        t.elapsed()
    );
    assert_eq!(state("gear-g1-ns"), "up");

    let back = TestBackend::start_on("g0", addr).await;
    let t = Instant::now();
    assert!(eventually(Duration::from_secs(3), || state("gear-g0-ns") == "up").await);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "up after {:?}",
        t.elapsed()
    );
    drop(back);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balancer_health_follows_its_backends() {
    let g = gears(1).await;
    let dir = workdir();
    let lb = balancer(
        dir.path(),
        &g,
        "[health]\ninterval = \"100ms\"\nfall = 1\nrise = 1",
    );
    assert_eq!(get(lb.status, "/health", &[]).await.unwrap().status, 200);
    g[0].kill();
    let mut down = false;
    for _ in 0..100 {
        if get(lb.status, "/health", &[]).await.unwrap().status == 503 {
            down = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert!(down, "/health still 200 with every backend dead");
    // The proxy answers 503 with a plain page, never the status page.
    let got = get(lb.proxy, "/", &[]).await.unwrap();
    assert_eq!(got.status, 503);
    assert!(got.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    assert!(!got.text().contains("gearlb-status"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_outlives_the_client_timeout() {
    use futures_util::{SinkExt, StreamExt};
    let g = gears(1).await;
    let dir = workdir();
    let lb = balancer(
        dir.path(),
        &g,
        "[timeouts]\nclient = \"300ms\"\ntunnel = \"1h\"",
    );
    let (mut ws, resp) = tokio_tungstenite::connect_async(format!("ws://{}/ws", lb.proxy))
        .await
        .unwrap();
    assert_eq!(resp.status(), 101);
    let started = Instant::now();
    for i in 0..4 {
        ws.send(format!("hello {i}").into()).await.unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(reply.into_text().unwrap(), format!("g0: hello {i}"));
        // Quiet for longer than timeouts.client between messages.
        tokio::time::sleep(Duration::from_millis(450)).await;
    }
    assert!(started.elapsed() > Duration::from_millis(1500));
    let (_, out, _) = lb.ctl(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["backends"][0]["tunnels"], 1,
        "the tunnel is tracked on its backend"
    );
    ws.close(None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_tunnels_close_at_the_tunnel_timeout() {
    use futures_util::StreamExt;
    let g = gears(1).await;
    let dir = workdir();
    let lb = balancer(dir.path(), &g, "[timeouts]\ntunnel = \"400ms\"");
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", lb.proxy))
        .await
        .unwrap();
    let t = Instant::now();
    let end = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("closed by the balancer");
    assert!(end.is_none() || end.unwrap().is_err() || t.elapsed() >= Duration::from_millis(350));
    assert!(
        t.elapsed() >= Duration::from_millis(350),
        "closed too early: {:?}",
        t.elapsed()
    );
}
