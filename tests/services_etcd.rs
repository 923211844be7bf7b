//! Services from an etcd prefix, against Debian's `etcd-server` started here: an
//! instance written on a lease is served within a second, the lease's expiry drains
//! it, and an etcd that goes away leaves the last known services serving.

mod support;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use support::*;

/// An `etcd` process on free loopback ports, with its own data directory.
struct Etcd {
    child: Child,
    client: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Etcd {
    async fn start() -> Etcd {
        let dir = tempfile::tempdir().unwrap();
        let client = free_addr();
        let peer = free_addr();
        let child = Command::new("etcd")
            .args([
                "--name",
                "gearlb-test",
                "--data-dir",
                dir.path().join("data").to_str().unwrap(),
                "--listen-client-urls",
                &format!("http://{client}"),
                "--advertise-client-urls",
                &format!("http://{client}"),
                "--listen-peer-urls",
                &format!("http://{peer}"),
                "--initial-advertise-peer-urls",
                &format!("http://{peer}"),
                "--initial-cluster",
                &format!("gearlb-test=http://{peer}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd (Debian's etcd-server) must be installed: .ci/run installs it");
        let e = Etcd {
            child,
            client,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while e
            .call("/v3/kv/range", serde_json::json!({"key": B64.encode("x")}))
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "etcd did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        e
    }

    async fn call(&self, path: &str, body: serde_json::Value) -> Result<serde_json::Value, String> {
        let req = http::Request::post(format!("http://{}{path}", self.client))
            .body(full(body.to_string()))
            .unwrap();
        let got = send(&client(), req).await?;
        if got.status != 200 {
            return Err(format!("{} {}", got.status, got.text()));
        }
        Ok(got.json())
    }

    async fn put(&self, key: &str, value: &str, lease: Option<&str>) {
        let mut body = serde_json::json!({"key": B64.encode(key), "value": B64.encode(value)});
        if let Some(l) = lease {
            body["lease"] = l.into();
        }
        self.call("/v3/kv/put", body).await.unwrap();
    }

    async fn lease(&self, ttl: u64) -> String {
        let r = self
            .call("/v3/lease/grant", serde_json::json!({"TTL": ttl}))
            .await
            .unwrap();
        r["ID"].as_str().unwrap().to_string()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn via(lb: &Gearlb, host: &str) -> String {
    match get(lb.proxy, "/", &[("host", host)]).await {
        Ok(g) if g.status == 200 => g.text(),
        Ok(g) => format!("status {}", g.status),
        Err(e) => format!("error {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_in_etcd_are_served_drained_on_lease_expiry_and_kept_when_etcd_goes() {
    let a = TestBackend::start("a").await;
    let b = TestBackend::start("b").await;
    let mut etcd = Etcd::start().await;
    etcd.put(
        "/gearlb/services/api",
        r#"{"name":"api","hosts":["api.example.com"]}"#,
        None,
    )
    .await;
    let wd = workdir();
    let extra = format!("[discovery]\netcd = [\"http://{}\"]\n", etcd.client);
    let lb = Gearlb::start(wd.path(), &config_text(wd.path(), &[], &extra));
    assert!(
        eventually(Duration::from_secs(10), || {
            let (_, out, _) = lb.ctl(&["services"]);
            out.contains("api")
        })
        .await
    );

    // An instance on a lease: served within a second.
    let lease = etcd.lease(2).await;
    etcd.put(
        "/gearlb/instances/api/i1",
        &a.addr.to_string(),
        Some(&lease),
    )
    .await;
    let written = Instant::now();
    let mut served = false;
    while written.elapsed() < Duration::from_secs(1) {
        if via(&lb, "api.example.com").await == "backend a" {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served, "not served within a second of the write");
    // A second, permanent instance; then the lease expires: the first drains and goes.
    etcd.put(
        "/gearlb/instances/api/i2",
        &format!(r#"{{"addr":"{}"}}"#, b.addr),
        None,
    )
    .await;
    assert!(
        eventually(Duration::from_secs(10), || {
            let (_, out, _) = lb.ctl(&["services", "--json"]);
            out.contains("\"i2\"") && !out.contains("\"i1\"")
        })
        .await,
        "the lease's expiry removed the instance"
    );
    for _ in 0..10 {
        assert_eq!(via(&lb, "api.example.com").await, "backend b");
    }

    // etcd goes away: the services last read keep serving.
    let _ = etcd.child.kill();
    let _ = etcd.child.wait();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for _ in 0..10 {
        assert_eq!(via(&lb, "api.example.com").await, "backend b");
    }
    assert!(lb.log_text().contains("etcd not reachable"));
}
