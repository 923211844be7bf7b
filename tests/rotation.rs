//! Rotate-out and rotate-in across three real balancer processes.

mod support;

use std::time::{Duration, Instant};

use support::*;

/// Run a ctl command off the async runtime.
async fn ctl_async(lb: &Gearlb, args: &[&str]) -> (i32, String, String) {
    let socket = lb.dir.join("control.sock");
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ctl(&socket, &args)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotate_out_waits_for_every_balancer_and_persists_until_rotate_in() {
    let g0 = TestBackend::start("g0").await;
    let g1 = TestBackend::start("g1").await;
    let (dirs, mut lbs) = cluster_of(3, &[&g0, &g1], "").await;

    // A slow request pinned to g0 through every balancer.
    let mut slow = Vec::new();
    for lb in &lbs {
        let proxy = lb.proxy;
        slow.push(tokio::spawn(async move {
            get(proxy, "/slow?ms=1500", &[("cookie", "GEAR=g0-ns")]).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let t = Instant::now();
    let (code, out, err) =
        ctl_async(&lbs[0], &["rotate-out", "g0-ns", "--as-json", "--persist"]).await;
    let took = t.elapsed();
    assert_eq!(code, 0, "{out}\n{err}");
    let result: serde_json::Value = serde_json::from_str(&out).expect("stdout is pure JSON");
    assert_eq!(result["status"], "success");
    assert_eq!(result["target_gear_uuid"], "g0-ns");
    let proxies = result["proxy_results"].as_object().unwrap();
    assert_eq!(proxies.len(), 3, "{result}");
    for (id, r) in proxies {
        assert_eq!(r["status"], "success", "{id}: {r}");
        assert_eq!(r["proxy_gear_uuid"], id.as_str());
    }
    assert!(err.contains("acks"), "progress goes to stderr: {err}");
    // It waited for the slow requests on every balancer, and they completed whole.
    assert!(
        took >= Duration::from_millis(900),
        "returned after {took:?}, before the slow requests finished"
    );
    for s in slow {
        let got = s.await.unwrap().unwrap();
        assert_eq!(got.status, 200);
        assert_eq!(got.text(), "slow done by g0");
    }

    // From now on nothing reaches g0, cookie or not, through any balancer.
    let before = g0.requests();
    for lb in &lbs {
        assert_eq!(backend_state(lb, "gear-g0-ns"), "drained");
        for cookie in ["", "GEAR=g0-ns"] {
            for _ in 0..10 {
                let got = get(lb.proxy, "/", &[("cookie", cookie)]).await.unwrap();
                assert_eq!(got.text(), "backend g1");
            }
        }
    }
    assert_eq!(
        g0.requests(),
        before,
        "a request reached the rotated-out gear"
    );

    // update-cluster does not bring it back.
    let entries = format!(
        "g0-ns.example.com|{} g1-ns.example.com|{}",
        g0.addr, g1.addr
    );
    assert_eq!(lbs[1].ctl(&["update-cluster", &entries]).0, 0);
    assert_eq!(backend_state(&lbs[1], "gear-g0-ns"), "drained");

    // A restarted balancer keeps it out (state file), before gossip says anything.
    lbs[1].signal("TERM");
    assert_eq!(lbs[1].wait(Duration::from_secs(10)), Some(0));
    lbs[1] = Gearlb::start_file(dirs[1].path(), &dirs[1].path().join("gearlb.toml"));
    assert_eq!(backend_state(&lbs[1], "gear-g0-ns"), "drained");
    for _ in 0..10 {
        assert_eq!(
            get(lbs[1].proxy, "/", &[]).await.unwrap().text(),
            "backend g1"
        );
    }
    // Its peers learn its new gossip address.
    let list = peer_list(&[("lb1", &lbs[0]), ("lb2", &lbs[1]), ("lb3", &lbs[2])]);
    for lb in &lbs {
        assert_eq!(lb.ctl(&["set-peers", &list]).0, 0);
    }
    let all = vec!["lb1".to_string(), "lb2".to_string(), "lb3".to_string()];
    assert!(
        eventually(Duration::from_secs(8), || lbs
            .iter()
            .all(|lb| lb.live() == all))
        .await
    );

    // rotate-in on another balancer brings it back everywhere, quickly.
    let t = Instant::now();
    let (code, out, err) = ctl_async(&lbs[2], &["rotate-in", "gear-g0-ns", "--as-json"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "rotate-in took {:?}",
        t.elapsed()
    );
    for lb in &lbs {
        assert_eq!(backend_state(lb, "gear-g0-ns"), "up");
    }
    let mut reached = false;
    for _ in 0..40 {
        reached |= get(lbs[0].proxy, "/", &[]).await.unwrap().text() == "backend g0";
    }
    assert!(reached, "g0 takes traffic again");

    // Metrics: the rotations taken here, gossip peers, rejected frames, the scaler.
    let m = get(lbs[0].status, "/metrics", &[]).await.unwrap().text();
    for want in [
        "gearlb_rotations_total{op=\"out\",result=\"success\"} 1",
        "gearlb_gossip_peers{state=\"live\"} 2",
        "gearlb_gossip_frames_rejected_total{reason=\"bad_tag\"} 0",
        "gearlb_scaler_acting 1",
    ] {
        assert!(m.contains(want), "{want} not in:\n{m}");
    }
    let m = get(lbs[2].status, "/metrics", &[]).await.unwrap().text();
    assert!(
        m.contains("gearlb_rotations_total{op=\"in\",result=\"success\"} 1"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_cuts_websockets_and_dead_peers_do_not_block() {
    use futures_util::{SinkExt, StreamExt};
    let g0 = TestBackend::start("g0").await;
    let g1 = TestBackend::start("g1").await;
    let (_dirs, mut lbs) = cluster_of(3, &[&g0, &g1], "").await;

    // A WebSocket to g0 through lb2 that nobody closes.
    let mut req = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
        format!("ws://{}/ws", lbs[1].proxy),
    )
    .unwrap();
    req.headers_mut()
        .insert("cookie", "GEAR=g0-ns".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    ws.send("ping".into()).await.unwrap();
    let reply = ws.next().await.unwrap().unwrap();
    assert_eq!(reply.into_text().unwrap(), "g0: ping");

    // lb3 dies: it is listed unreachable and does not hold the rotation up.
    let _ = lbs[2].child.kill();
    let _ = lbs[2].child.wait();

    let t = Instant::now();
    let (code, out, err) = ctl_async(
        &lbs[0],
        &["rotate-out", "g0", "--timeout", "2s", "--as-json"],
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        t.elapsed() >= Duration::from_secs(2),
        "the tunnel kept the drain open until the deadline"
    );
    assert!(
        t.elapsed() < Duration::from_secs(6),
        "took {:?}",
        t.elapsed()
    );
    let result: serde_json::Value = serde_json::from_str(&out).unwrap();
    let proxies = &result["proxy_results"];
    assert_eq!(proxies["lb3"]["status"], "unreachable", "{result}");
    assert_eq!(proxies["lb1"]["status"], "success");
    let lb2 = proxies["lb2"].to_string();
    assert!(
        lb2.contains("forced: 1"),
        "the cut tunnel is reported: {lb2}"
    );

    // The tunnel was closed.
    let end = tokio::time::timeout(Duration::from_secs(3), ws.next())
        .await
        .expect("tunnel closed");
    assert!(!matches!(&end, Some(Ok(m)) if m.is_text()), "{end:?}");
    drop(lbs.pop());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_gears_and_bad_arguments_change_nothing() {
    let g0 = TestBackend::start("g0").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("web1", g0.addr)], ""),
    );
    let (code, _, err) = lb.ctl(&["rotate-out", "no.such.gear"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown gear"), "{err}");
    let (code, _, err) = lb.ctl(&["rotate-out", "web1", "--timeout", "soon"]);
    assert_eq!(code, 64, "{err}");
    assert_eq!(backend_state(&lb, "web1"), "up");
    // A lone balancer rotates too (no peers to wait for).
    let (code, out, err) = lb.ctl(&["rotate-out", "web1", "--as-json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(backend_state(&lb, "web1"), "drained");
    let got = get(lb.proxy, "/", &[]).await.unwrap();
    assert_eq!(got.status, 503);
}

/// The node asks every balancer for the same rotation at once (`update_proxy_status`):
/// each command joins the one in force, or follows a concurrent one in the same
/// direction, and all succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_balancer_asked_at_once_agrees_and_succeeds() {
    let gears: Vec<TestBackend> = {
        let mut v = Vec::new();
        for i in 0..5 {
            v.push(TestBackend::start(&format!("g{i}")).await);
        }
        v
    };
    let refs: Vec<&TestBackend> = gears.iter().collect();
    let (_dirs, lbs) = cluster_of(3, &refs, "").await;
    for op in ["rotate-out", "rotate-in"] {
        for g in &gears {
            let label = format!("{}-ns", g.name);
            let args = [op, label.as_str(), "--as-json"];
            let calls: Vec<_> = lbs.iter().map(|lb| ctl_async(lb, &args)).collect();
            for (i, (code, out, err)) in futures_util::future::join_all(calls)
                .await
                .into_iter()
                .enumerate()
            {
                assert_eq!(code, 0, "{op} {label} on lb{}: {out}\n{err}", i + 1);
            }
        }
    }
    for lb in &lbs {
        for g in &gears {
            assert_eq!(backend_state(lb, &format!("gear-{}-ns", g.name)), "up");
        }
    }
}
