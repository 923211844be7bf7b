//! A tree of balancers with real processes: service instances → a balancer per host →
//! a front balancer. A service that registers on a host becomes reachable through the
//! front; the version rule holds across the two hosts; a host that loses its last
//! instance stops receiving traffic from the front.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::*;

const TOKEN: &str = "tree-registration-token-0123";

async fn via_front(front: &Gearlb, n: usize) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let body = match get(front.proxy, "/", &[("host", "catalog.example.com")]).await {
            Ok(g) if g.status == 200 => g.text(),
            Ok(g) => format!("status {}", g.status),
            Err(e) => format!("error {e}"),
        };
        *out.entry(body).or_default() += 1;
    }
    out
}

fn upstream_backends(front: &Gearlb) -> Vec<String> {
    let (_, out, _) = front.ctl(&["services", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["services"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == "catalog")
        .flat_map(|s| s["backends"].as_array().unwrap().clone())
        .map(|b| {
            format!(
                "{} {}",
                b["addr"].as_str().unwrap(),
                b["version"].as_str().unwrap_or("-")
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_level_tree_routes_down_and_keeps_the_version_rule_across_hosts() {
    let a = TestBackend::start("a").await;
    let b = TestBackend::start("b").await;
    let (fd, hd1, hd2) = (workdir(), workdir(), workdir());
    let front = Gearlb::start(
        fd.path(),
        &config_text(
            fd.path(),
            &[],
            &format!("[discovery]\ntoken = \"{TOKEN}\"\n"),
        ),
    );
    let up = format!(
        "[upstream]\nbalancers = [\"http://{}\"]\ntoken = \"{TOKEN}\"\nttl = \"3s\"\n",
        front.status
    );
    let host1 = Gearlb::start(hd1.path(), &config_text(hd1.path(), &[], &up));
    let host2 = Gearlb::start(hd2.path(), &config_text(hd2.path(), &[], &up));
    assert_eq!(
        via_front(&front, 1).await.keys().next().unwrap(),
        "status 503"
    );

    // An instance registers on host 1: reachable through the front.
    let (code, _, err) = host1.ctl(&[
        "register",
        "catalog",
        "a1",
        &a.addr.to_string(),
        "--host",
        "catalog.example.com",
        "--version",
        "catalog-1.0.1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        eventually(Duration::from_secs(10), || upstream_backends(&front).len()
            == 1)
        .await
    );
    assert_eq!(
        upstream_backends(&front),
        [format!("{} catalog-1.0.1", host1.proxy)]
    );
    let seen = via_front(&front, 20).await;
    assert_eq!(seen.keys().collect::<Vec<_>>(), ["backend a"], "{seen:?}");

    // A newer incompatible version on host 2: the front sends it nothing while host 1
    // serves 1.0.x.
    let (code, _, err) = host2.ctl(&[
        "register",
        "catalog",
        "b1",
        &b.addr.to_string(),
        "--host",
        "catalog.example.com",
        "--version",
        "catalog-1.1.0",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        eventually(Duration::from_secs(10), || upstream_backends(&front).len()
            == 2)
        .await
    );
    let seen = via_front(&front, 300).await;
    assert_eq!(seen.keys().collect::<Vec<_>>(), ["backend a"], "{seen:?}");
    assert_eq!(b.requests(), 0);

    // Host 1 loses its last instance: it withdraws, and the front sends to host 2.
    assert_eq!(host1.ctl(&["deregister", "catalog", "a1"]).0, 0);
    assert!(
        eventually(Duration::from_secs(10), || upstream_backends(&front)
            == [format!("{} catalog-1.1.0", host2.proxy)])
        .await,
        "{:?}",
        upstream_backends(&front)
    );
    assert!(
        eventually(Duration::from_secs(10), || {
            let (_, out, _) = front.ctl(&["services", "--json"]);
            !out.contains("draining")
        })
        .await
    );
    let seen = via_front(&front, 50).await;
    assert_eq!(seen.keys().collect::<Vec<_>>(), ["backend b"], "{seen:?}");
}
