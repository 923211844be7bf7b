//! A node-platform harness: the cartridge driven exactly as OpenShift's node drove the
//! HAProxy one. Gear home directories with `.env/` variable files, `bin/setup`,
//! `bin/control` with arguments in one shell word, publisher and subscriber hooks, and a
//! real HTTPS broker. Gears are processes and servers on distinct 127.0.0.x addresses.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::*;

const APP_SECRET: &str = "app-secret-token-0123456789abcdef";

/// One balancer gear: a home directory, its environment, the installed cartridge.
struct Gear {
    home: tempfile::TempDir,
    name: String,
    uuid: String,
    proxy: SocketAddr,
    /// Its own web server (the primary cartridge).
    web: TestBackend,
}

impl Gear {
    async fn new(ip: &str, name: &str, uuid: &str, broker: &TestBroker, preferred: &str) -> Gear {
        let home = tempfile::Builder::new().prefix("gear").tempdir().unwrap();
        let h = home.path();
        let web =
            TestBackend::start_on(&format!("web-{name}"), format!("{ip}:0").parse().unwrap()).await;
        // The installed cartridge, as the packaging step assembles it.
        let out = Command::new("bash")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("cartridge/package.sh"))
            .arg(h.join("gearlb"))
            .env("GEARLB_BIN", bin())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The primary web cartridge of the gear.
        std::fs::create_dir_all(h.join("php/metadata")).unwrap();
        std::fs::write(
            h.join("php/metadata/manifest.yml"),
            "Name: php\nCartridge-Short-Name: PHP\n",
        )
        .unwrap();
        let proxy: SocketAddr = format!("{ip}:{}", free_port(ip)).parse().unwrap();
        let mut env: BTreeMap<String, String> = broker.gear_env(h).into_iter().collect();
        let d = |p: &str| format!("{}/{p}", h.display());
        for (k, v) in [
            ("OPENSHIFT_GEAR_UUID", uuid.to_string()),
            ("OPENSHIFT_GEAR_NAME", name.to_string()),
            ("OPENSHIFT_GEAR_DNS", format!("{name}-ns.example.com")),
            ("OPENSHIFT_APP_DNS", "app-ns.example.com".to_string()),
            ("OPENSHIFT_APP_UUID", "appuuid0001".to_string()),
            ("OPENSHIFT_SECRET_TOKEN", APP_SECRET.to_string()),
            ("OPENSHIFT_DATA_DIR", d("app-root/data/")),
            ("OPENSHIFT_LOG_DIR", d("app-root/logs/")),
            ("OPENSHIFT_REPO_DIR", d("app-root/runtime/repo/")),
            ("OPENSHIFT_GEARLB_DIR", d("gearlb/")),
            ("OPENSHIFT_GEARLB_IP", ip.to_string()),
            ("OPENSHIFT_GEARLB_PORT", proxy.port().to_string()),
            ("OPENSHIFT_GEARLB_STATUS_IP", ip.to_string()),
            ("OPENSHIFT_GEARLB_STATUS_PORT", free_port(ip).to_string()),
            // No port proxy here: the public port is the private one.
            ("OPENSHIFT_GEARLB_PROXY_PORT", proxy.port().to_string()),
            ("OPENSHIFT_PRIMARY_CARTRIDGE_DIR", d("php/")),
            ("OPENSHIFT_PHP_IP", ip.to_string()),
            ("OPENSHIFT_PHP_PORT", web.addr.port().to_string()),
            // A user environment variable: the preferred scaler.
            ("OPENSHIFT_GEARLB_SCALER_GEAR", preferred.to_string()),
        ] {
            env.insert(k.to_string(), v);
        }
        // The node keeps the environment as one file per variable in ~/.env.
        std::fs::create_dir_all(h.join(".env")).unwrap();
        for (k, v) in &env {
            std::fs::write(h.join(".env").join(k), v).unwrap();
        }
        Gear {
            home,
            name: name.to_string(),
            uuid: uuid.to_string(),
            proxy,
            web,
        }
    }

    fn cart(&self) -> PathBuf {
        self.home.path().join("gearlb")
    }

    /// Run a cartridge script as the node does: the gear's `.env` as environment,
    /// working directory the cartridge.
    fn run(&self, script: &str, args: &[&str]) -> (i32, String, String) {
        let mut env = BTreeMap::new();
        for e in std::fs::read_dir(self.home.path().join(".env")).unwrap() {
            let e = e.unwrap();
            env.insert(
                e.file_name().into_string().unwrap(),
                std::fs::read_to_string(e.path()).unwrap(),
            );
        }
        let out = Command::new(self.cart().join(script))
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .envs(&env)
            .current_dir(self.cart())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Run any executable with the gear's environment.
    fn run_path(&self, path: &Path, args: &[&str]) -> (i32, String, String) {
        let rel = path
            .strip_prefix(self.cart())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        self.run(&rel, args)
    }

    fn control(&self, args: &[&str]) -> (i32, String, String) {
        self.run("bin/control", args)
    }

    fn ctl(&self, args: &[&str]) -> (i32, String, String) {
        ctl(&self.cart().join("run/control.sock"), args)
    }

    fn status(&self) -> serde_json::Value {
        let (code, out, err) = self.ctl(&["status", "--json"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap()
    }

    fn pid(&self) -> i32 {
        std::fs::read_to_string(self.cart().join("run/gearlb.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for Gear {
    /// bin/control starts gearlb detached; a test that fails half-way must not leave it
    /// running.
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.cart().join("run/gearlb.pid")) {
            let _ = Command::new("kill").args(["-9", pid.trim()]).output();
        }
    }
}

/// Keep GETs flowing through `proxies` until `stop`; counts outcomes.
fn traffic(
    proxies: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let c = client();
        let end = Instant::now() + Duration::from_secs(60);
        let mut i = 0usize;
        while !stop.load(Ordering::Relaxed) && Instant::now() < end {
            let p = proxies[i % proxies.len()];
            i += 1;
            let req = http::Request::get(format!("http://{p}/"))
                .header("host", "app-ns.example.com")
                .body(gen_body(0))
                .unwrap();
            match send(&c, req).await {
                Ok(g) if g.status == 200 => ok.fetch_add(1, Ordering::Relaxed),
                other => {
                    eprintln!("request through {p} failed: {other:?}");
                    failed.fetch_add(1, Ordering::Relaxed)
                }
            };
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_life_as_the_node_platform_drives_it() {
    let broker = TestBroker::start(5, 10).await;
    // Two balancer gears (the head gear "app" and a second one), preferring the second
    // as scaler; three web gears.
    let a = Gear::new("127.0.0.11", "app", "aaaa1111", &broker, "bbbb2222").await;
    let b = Gear::new("127.0.0.12", "bbbb2222", "bbbb2222", &broker, "bbbb2222").await;
    let mut web = Vec::new();
    for (i, ip) in ["127.0.0.21", "127.0.0.22", "127.0.0.23"]
        .iter()
        .enumerate()
    {
        web.push(
            TestBackend::start_on(&format!("w{}", i + 1), format!("{ip}:0").parse().unwrap()).await,
        );
    }

    for g in [&a, &b] {
        let (code, _, err) = g.run("bin/setup", &["--version", "1"]);
        assert_eq!(code, 0, "{err}");
        // The user edits the configuration (faster checks for this test)…
        let conf = g.cart().join("conf/gearlb.toml");
        let mut text = std::fs::read_to_string(&conf).unwrap();
        text.push_str(&format!(
            "\n[cluster]\ngossip_interval = \"100ms\"\n[health]\ninterval = \"500ms\"\n[scaler]\nbroker_ca = \"{}\"\ncheck_interval = \"200ms\"\naverage_window = \"1s\"\nmax_sessions_per_gear = 1\nup_cooldown = \"60s\"\n",
            broker.ca_file.display()
        ));
        std::fs::write(&conf, &text).unwrap();
        // …and a second setup keeps the edits.
        assert_eq!(g.run("bin/setup", &["--version", "1"]).0, 0);
        assert_eq!(std::fs::read_to_string(&conf).unwrap(), text);
        let (code, out, err) = g.control(&["start"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(
            out.contains("CLIENT_RESULT: gearlb instance is started"),
            "{out}"
        );
        let (code, out, _) = g.control(&["status"]);
        assert_eq!(code, 0);
        assert!(
            out.contains("CLIENT_RESULT: gearlb instance is running"),
            "{out}"
        );
    }
    assert_eq!(a.control(&["threaddump"]).0, 0, "unknown actions exit 0");

    // Publisher hook on every balancer gear; its output to every subscriber hook, as
    // one shell-escaped word.
    let mut published = Vec::new();
    for g in [&a, &b] {
        let (code, out, err) = g.run("hooks/publish-gearlb-peer", &[&g.name, "ns", &g.uuid]);
        assert_eq!(code, 0, "{err}");
        published.push(format!("'{}'='{}'", g.uuid, out.trim()));
    }
    let peers_word = published.join(" ");
    for g in [&a, &b] {
        let (code, out, err) = g.run(
            "hooks/set-gearlb-peers",
            &[&g.name, "ns", &g.uuid, &peers_word],
        );
        assert_eq!(code, 0, "{out}{err}");
    }

    // update-cluster: every web gear, the balancer gears' own included, in one word.
    let mut entries = vec![
        format!("app-ns.example.com|{}", a.web.addr),
        format!("bbbb2222-ns.example.com|{}", b.web.addr),
    ];
    for w in &web {
        entries.push(format!("{}-ns.example.com|{}", w.name, w.addr));
    }
    for g in [&a, &b] {
        let (code, out, err) = g.control(&["update-cluster", &entries.join(" ")]);
        assert_eq!(code, 0, "{out}{err}");
        let names: Vec<String> = g.status()["backends"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["name"].as_str().unwrap().to_string())
            .collect();
        assert!(names.contains(&"local-gear".to_string()), "{names:?}");
        assert_eq!(names.len(), 5, "{names:?}");
    }
    let both_live = eventually(Duration::from_secs(8), || {
        [&a, &b].iter().all(|g| {
            g.status()["peers"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p["state"] == "alive"))
        })
    })
    .await;
    assert!(both_live, "balancer gears did not find each other");

    // Five web gears for two balancers: the gear ratio takes the web servers colocated
    // with balancers out of selection, on both balancers alike.
    let parked = eventually(Duration::from_secs(5), || {
        [&a, &b].iter().all(|g| {
            g.status()["backends"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|x| {
                    x["name"] == "local-gear"
                        || x["name"] == "gear-app-ns"
                        || x["name"] == "gear-bbbb2222-ns"
                })
                .all(|x| x["state"] == "drained")
        })
    })
    .await;
    assert!(parked, "{}", a.status()["backends"]);

    // Traffic flows with stickiness, across both balancers.
    let first = get(a.proxy, "/headers", &[("host", "app-ns.example.com")])
        .await
        .unwrap();
    let set = first.headers["set-cookie"].to_str().unwrap().to_string();
    let value = set.split(';').next().unwrap().to_string();
    let pinned = first.json()["backend"].as_str().unwrap().to_string();
    for g in [&a, &b] {
        for _ in 0..10 {
            let got = get(
                g.proxy,
                "/headers",
                &[("host", "app-ns.example.com"), ("cookie", &value)],
            )
            .await
            .unwrap();
            assert_eq!(
                got.json()["backend"],
                pinned.as_str(),
                "sticky across balancers"
            );
        }
    }

    // Load: the preferred scaler (the second gear) asks the broker for a gear.
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for p in [
        a.proxy, b.proxy, a.proxy, b.proxy, a.proxy, b.proxy, a.proxy, b.proxy,
    ] {
        let stop = stop.clone();
        load.push(tokio::spawn(async move {
            let end = Instant::now() + Duration::from_secs(20);
            while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                let _ = get(p, "/slow?ms=400", &[("host", "app-ns.example.com")]).await;
            }
        }));
    }
    let scaled = eventually(Duration::from_secs(10), || !broker.events().is_empty()).await;
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.unwrap();
    }
    assert!(scaled, "no scale-up");
    assert_eq!(
        broker.events()[0],
        ("scale-up".to_string(), "bbbb2222".to_string())
    );

    // A copy of the old autoscaler (haproxy_ctld.rb) scales through the old
    // cartridge's command: `$OPENSHIFT_HAPROXY_DIR/usr/bin/add-gear -n NS -a APP -u UUID`.
    let haproxy_dir = std::fs::read_to_string(a.cart().join("env/OPENSHIFT_HAPROXY_DIR.erb"))
        .unwrap()
        .replace(
            "<%= ENV['OPENSHIFT_GEARLB_DIR'] %>",
            &a.cart().display().to_string(),
        );
    let before = broker.events().len();
    let (code, out, err) = a.run_path(
        &Path::new(haproxy_dir.trim()).join("usr/bin/add-gear"),
        &["-n", "ns", "-a", "app", "-u", &a.uuid],
    );
    assert_eq!(code, 0, "{out}{err}");
    let events = broker.events();
    assert_eq!(events.len(), before + 1, "{events:?}");
    assert_eq!(events[before].0, "scale-up");

    // The broker's new gear arrives by update-cluster.
    let w4 = TestBackend::start_on("w4", "127.0.0.24:0".parse().unwrap()).await;
    entries.push(format!("w4-ns.example.com|{}", w4.addr));
    for g in [&a, &b] {
        assert_eq!(g.control(&["update-cluster", &entries.join(" ")]).0, 0);
    }

    // Rotate-out and rotate-in as the broker does, under load: no request fails.
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let t = traffic(
        vec![a.proxy, b.proxy],
        stop.clone(),
        ok.clone(),
        failed.clone(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (code, out, err) = a.control(&["disable-server", "persist w1"]);
    assert_eq!(code, 0, "{out}{err}");
    let json = out
        .lines()
        .find(|l| l.starts_with('{'))
        .expect("result JSON");
    let result: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(result["status"], "success", "{result}");
    assert_eq!(result["proxy_results"].as_object().unwrap().len(), 2);
    let before = web[0].requests();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(web[0].requests(), before, "w1 is out everywhere");
    let (code, out, err) = b.control(&["enable-server", "w1"]);
    assert_eq!(code, 0, "{out}{err}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    t.await.unwrap();
    assert_eq!(failed.load(Ordering::Relaxed), 0);
    assert!(ok.load(Ordering::Relaxed) > 50);

    // A balancer gear dies: traffic continues through the other.
    let b_pid = b.pid();
    Command::new("kill")
        .args(["-9", &b_pid.to_string()])
        .status()
        .unwrap();
    for _ in 0..20 {
        let got = get(a.proxy, "/", &[("host", "app-ns.example.com")])
            .await
            .unwrap();
        assert_eq!(got.status, 200);
    }
    // With two balancers, the survivor sees exactly half of the known ones and ranks
    // below the dead one: it cannot tell death from a partition, so it does not act…
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        a.status()["scaler"]["acting"],
        false,
        "no split brain with two balancers"
    );
    // …until the platform's peer list drops the dead gear; then it is the scaler.
    let only_a = published[0].clone();
    assert_eq!(
        a.run("hooks/set-gearlb-peers", &[&a.name, "ns", &a.uuid, &only_a])
            .0,
        0
    );
    let over = eventually(Duration::from_secs(6), || {
        let s = a.status();
        s["scaler"]["scaler"] == "aaaa1111" && s["scaler"]["acting"] == true
    })
    .await;
    assert!(over, "{}", a.status()["scaler"]);
    for _ in 0..20 {
        let got = get(a.proxy, "/", &[("host", "app-ns.example.com")])
            .await
            .unwrap();
        assert_eq!(got.status, 200);
    }

    // reload re-reads the environment; stop stops.
    let (code, out, err) = a.control(&["reload"]);
    assert_eq!(code, 0, "{out}{err}");
    let a_pid = a.pid();
    let (code, out, _) = a.control(&["stop"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("CLIENT_RESULT: gearlb instance is stopped"),
        "{out}"
    );
    assert!(
        !Path::new(&format!("/proc/{a_pid}")).exists(),
        "process gone"
    );
    let (_, out, _) = a.control(&["status"]);
    assert!(out.contains("is stopped"), "{out}");
    let _ = b.control(&["stop"]);
}
