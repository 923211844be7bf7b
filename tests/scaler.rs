//! The scaler with real processes and a real HTTPS broker on 127.0.0.1.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::*;

fn scaler_extra(broker: &TestBroker) -> String {
    format!(
        "[scaler]\nbroker_ca = \"{}\"\ncheck_interval = \"200ms\"\naverage_window = \"1s\"\nmax_sessions_per_gear = 1\nup_cooldown = \"4s\"\n",
        broker.ca_file.display()
    )
}

fn start(dir: &std::path::Path, config: &str, broker: &TestBroker) -> Gearlb {
    let env = broker.gear_env(&dir.join("home"));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Gearlb::start_with(dir, config, &[], &env)
}

/// Keep `n` slow requests in flight through `proxy` until `stop` (bounded to 30 s).
fn load(
    proxy: std::net::SocketAddr,
    n: usize,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let end = Instant::now() + Duration::from_secs(30);
                while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                    let _ = get(proxy, "/slow?ms=400", &[]).await;
                }
            })
        })
        .collect()
}

fn scaler_of(lb: &Gearlb) -> (String, bool) {
    let s = lb.status_json();
    (
        s["scaler"]["scaler"].as_str().unwrap_or("").to_string(),
        s["scaler"]["acting"].as_bool().unwrap_or(false),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_scaler_scales_up_once_and_another_takes_over() {
    let broker = TestBroker::start(1, 10).await;
    let g0 = TestBackend::start("g0").await;
    let dirs: Vec<_> = (0..3).map(|_| workdir()).collect();
    let mut lbs: Vec<Gearlb> = (0..3)
        .map(|i| {
            let id = format!("lb{}", i + 1);
            let cfg = cluster_config(dirs[i].path(), &id, SECRET, &scaler_extra(&broker));
            start(dirs[i].path(), &cfg, &broker)
        })
        .collect();
    let list = peer_list(&[("lb1", &lbs[0]), ("lb2", &lbs[1]), ("lb3", &lbs[2])]);
    let entry = format!("g0-ns.example.com|{}", g0.addr);
    for lb in &lbs {
        assert_eq!(lb.ctl(&["set-peers", &list]).0, 0);
        assert_eq!(lb.ctl(&["update-cluster", &entry]).0, 0);
    }
    // Every balancer agrees: lb1 (lowest id, no preference, no head gear) is the scaler.
    let agreed = eventually(Duration::from_secs(8), || {
        lbs.iter().all(|lb| scaler_of(lb).0 == "lb1") && scaler_of(&lbs[0]).1
    })
    .await;
    assert!(
        agreed,
        "{:?}",
        lbs.iter().map(scaler_of).collect::<Vec<_>>()
    );
    assert!(
        !scaler_of(&lbs[1]).1 && !scaler_of(&lbs[2]).1,
        "only one acts"
    );

    // Load through the other two balancers: the scaler adds it up and asks once.
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = load(lbs[1].proxy, 2, stop.clone());
    tasks.extend(load(lbs[2].proxy, 2, stop.clone()));
    let up = eventually(Duration::from_secs(8), || !broker.events().is_empty()).await;
    assert!(up, "no scale-up under load");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let events = broker.events();
    assert_eq!(
        events,
        vec![("scale-up".to_string(), "lb1".to_string())],
        "exactly one scale-up, from lb1"
    );

    // Kill the scaler: another takes over within 3 s (the failure timeout is 1 s at this
    // gossip interval, and the election follows the view at once), and the next
    // decision is its own.
    let _ = lbs[0].child.kill();
    let _ = lbs[0].child.wait();
    let t = Instant::now();
    let took_over = eventually(Duration::from_secs(8), || {
        scaler_of(&lbs[1]) == ("lb2".to_string(), true)
    })
    .await;
    assert!(took_over, "{:?}", scaler_of(&lbs[1]));
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
    let agreed = eventually(Duration::from_secs(5), || scaler_of(&lbs[2]).0 == "lb2").await;
    assert!(agreed, "lb3 believes {:?}", scaler_of(&lbs[2]));
    let second = eventually(Duration::from_secs(10), || broker.events().len() >= 2).await;
    assert!(second, "no decision from the new scaler");
    assert_eq!(
        broker.events()[1],
        ("scale-up".to_string(), "lb2".to_string())
    );
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    drop(lbs.remove(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disable_marker_stops_decisions_without_a_restart() {
    let broker = TestBroker::start(1, 10).await;
    let g0 = TestBackend::start("g0").await;
    let dir = workdir();
    let cfg = config_text(
        dir.path(),
        &[("gear-g0-ns", g0.addr)],
        &scaler_extra(&broker),
    );
    let marker = dir
        .path()
        .join("home/repo/.openshift/markers/disable_auto_scaling");
    std::fs::create_dir_all(marker.parent().unwrap()).unwrap();
    std::fs::write(&marker, "").unwrap();
    let lb = start(dir.path(), &cfg, &broker);
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = load(lb.proxy, 3, stop.clone());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        broker.events().is_empty(),
        "decisions while the marker is there"
    );
    assert_eq!(lb.status_json()["scaler"]["enabled"], false);
    std::fs::remove_file(&marker).unwrap();
    let up = eventually(Duration::from_secs(5), || !broker.events().is_empty()).await;
    assert!(up, "no decision after the marker went away");
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_scaling_from_any_balancer_and_the_limit() {
    let broker = TestBroker::start(1, 2).await;
    let dir = workdir();
    let cfg = config_text(
        dir.path(),
        &[],
        &format!("{}enabled = false\n", scaler_extra(&broker)),
    );
    let lb = start(dir.path(), &cfg, &broker);
    let (code, out, err) = lb.ctl(&["scale", "up"]);
    assert_eq!(code, 0, "{out}{err}");
    // The application is at scale_max now: 422 is reported, not an error.
    let (code, out, _) = lb.ctl(&["scale", "up"]);
    assert_eq!(code, 0);
    assert!(out.contains("limit"), "{out}");
    let (code, _, _) = lb.ctl(&["scale", "sideways"]);
    assert_eq!(code, 64);
    assert_eq!(broker.events().len(), 2);
}

/// lb1 in its own network namespace with two links to the root namespace: one carries
/// gossip (cut to partition), the other traffic and the broker (kept up). Each run uses
/// its own link-local subnets, so a run never meets another run's addresses.
struct SplitNet {
    ns: String,
    gossip_if: String,
    root_ifs: [String; 2],
    a_gossip: String,
    root_gossip: String,
    a_traffic: String,
    root_traffic: String,
}

impl SplitNet {
    fn new() -> SplitNet {
        require_root();
        let tag = std::process::id() % 100_000;
        let ns = format!("gls-{tag}");
        let (g, t) = (20 + tag % 100, 120 + tag % 100);
        let net = SplitNet {
            ns: ns.clone(),
            gossip_if: format!("glsg{tag}"),
            root_ifs: [format!("glrg{tag}"), format!("glrt{tag}")],
            a_gossip: format!("169.254.{g}.1"),
            root_gossip: format!("169.254.{g}.2"),
            a_traffic: format!("169.254.{t}.1"),
            root_traffic: format!("169.254.{t}.2"),
        };
        // A previous run killed before its clean-up may have left our names behind.
        for stale in &net.root_ifs {
            let _ = std::process::Command::new("ip")
                .args(["link", "del", stale])
                .output();
        }
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &ns])
            .output();
        ip(&["netns", "add", &ns]);
        let links = [
            (
                format!("glsg{tag}"),
                &net.root_ifs[0],
                &net.a_gossip,
                &net.root_gossip,
            ),
            (
                format!("glst{tag}"),
                &net.root_ifs[1],
                &net.a_traffic,
                &net.root_traffic,
            ),
        ];
        for (inner, outer, a, root) in links {
            ip(&["link", "add", &inner, "type", "veth", "peer", "name", outer]);
            ip(&["link", "set", &inner, "netns", &ns]);
            ip(&["-n", &ns, "addr", "add", &format!("{a}/24"), "dev", &inner]);
            ip(&["addr", "add", &format!("{root}/24"), "dev", outer]);
            ip(&["-n", &ns, "link", "set", &inner, "up"]);
            ip(&["link", "set", outer, "up"]);
        }
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        net
    }

    fn cut_gossip(&self) {
        ip(&["-n", &self.ns, "link", "set", &self.gossip_if, "down"]);
    }
}

impl Drop for SplitNet {
    fn drop(&mut self) {
        // Delete the pairs from the root side: a namespace still referenced somewhere
        // would otherwise keep them, with their addresses and routes.
        for outer in &self.root_ifs {
            let _ = std::process::Command::new("ip")
                .args(["link", "del", outer])
                .output();
        }
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.ns])
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_two_one_partition_only_the_majority_side_scales() {
    let net = SplitNet::new();
    let broker =
        TestBroker::start_on(format!("{}:0", net.root_traffic).parse().unwrap(), 1, 10).await;
    let g0 = TestBackend::start_on("g0", format!("{}:0", net.root_traffic).parse().unwrap()).await;
    let dirs: Vec<_> = (0..3).map(|_| workdir()).collect();
    // lb1 is preferred: the scaler while the cluster is whole.
    let config = |i: usize, gossip: &str, proxy: &str| {
        let dir = dirs[i].path();
        format!(
            "[listen]\nproxy = \"{proxy}:0\"\nstatus = \"127.0.0.1:0\"\n[control]\nsocket = \"{}\"\n[state]\ndir = \"{}\"\n\
             [cluster]\nnode_id = \"lb{}\"\nid = \"app1\"\nlisten = \"{gossip}:0\"\nsecret = \"{SECRET}\"\ngossip_interval = \"100ms\"\n\
             {}preferred = \"lb1\"\n",
            dir.join("control.sock").display(),
            dir.join("data").display(),
            i + 1,
            scaler_extra(&broker)
        )
    };
    let env_for = |i: usize| broker.gear_env(&dirs[i].path().join("home"));
    let start_at = |i: usize, prefix: &[&str], cfg: String| {
        let path = dirs[i].path().join("gearlb.toml");
        std::fs::write(&path, cfg).unwrap();
        let env = env_for(i);
        let mut cmd: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
        cmd.push("env".into());
        for (k, v) in &env {
            cmd.push(format!("{k}={v}"));
        }
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        Gearlb::start_in(dirs[i].path(), &path, &cmd)
    };
    let lb1 = start_at(
        0,
        &["ip", "netns", "exec", &net.ns],
        config(0, &net.a_gossip, &net.a_traffic),
    );
    let lb2 = start_at(1, &[], config(1, &net.root_gossip, "127.0.0.1"));
    let lb3 = start_at(2, &[], config(2, &net.root_gossip, "127.0.0.1"));
    let lbs = [&lb1, &lb2, &lb3];
    let list = peer_list(&[("lb1", &lb1), ("lb2", &lb2), ("lb3", &lb3)]);
    let entry = format!("g0-ns.example.com|{}", g0.addr);
    for lb in lbs {
        assert_eq!(lb.ctl(&["set-peers", &list]).0, 0);
        assert_eq!(lb.ctl(&["update-cluster", &entry]).0, 0);
    }
    let whole = eventually(Duration::from_secs(10), || {
        lbs.iter().all(|lb| scaler_of(lb).0 == "lb1") && scaler_of(&lb1).1
    })
    .await;
    assert!(
        whole,
        "{:?}\nlb1 peers: {}\nlb2 peers: {}\nlb1 log:\n{}",
        lbs.iter().map(|lb| scaler_of(lb)).collect::<Vec<_>>(),
        lb1.peers(),
        lb2.peers(),
        lb1.log_text()
    );

    net.cut_gossip();
    let split = eventually(Duration::from_secs(8), || {
        scaler_of(&lb2) == ("lb2".to_string(), true) && !scaler_of(&lb1).1
    })
    .await;
    assert!(split, "lb1 {:?} lb2 {:?}", scaler_of(&lb1), scaler_of(&lb2));
    // lb1 stopped acting once it lacked a majority heard from recently (half the failure
    // timeout); it reports no quorum once the others are dead to it (the whole timeout).
    let no_quorum = eventually(Duration::from_secs(3), || {
        lb1.status_json()["scaler"]["quorum"] == false
    })
    .await;
    assert!(no_quorum, "{}", lb1.status_json()["scaler"]);

    // Load on both sides of the partition; only the majority side may ask the broker.
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = load(lb1.proxy, 3, stop.clone());
    tasks.extend(load(lb2.proxy, 3, stop.clone()));
    let asked = eventually(Duration::from_secs(8), || !broker.events().is_empty()).await;
    assert!(asked, "the majority side did not scale");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let events = broker.events();
    assert!(events.iter().all(|(_, node)| node == "lb2"), "{events:?}");
    assert!(!scaler_of(&lb1).1, "the minority balancer never acts");
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gear_ratio_takes_the_local_gear_out_and_back() {
    let local = TestBackend::start("local").await;
    let r1 = TestBackend::start("r1").await;
    let r2 = TestBackend::start("r2").await;
    let dir = workdir();
    let cfg = config_text(dir.path(), &[], "[scaler]\ncheck_interval = \"100ms\"\n");
    let lb = Gearlb::start_with(
        dir.path(),
        &cfg,
        &[],
        &[
            ("GEARLB_LOCAL_GEAR", &local.addr.to_string()),
            ("OPENSHIFT_GEAR_DNS", "myapp-ns.example.com"),
            ("OPENSHIFT_GEARLB_GEAR_RATIO", "3"),
        ],
    );
    // Our own entry becomes local-gear (reached directly), with the shared sticky value.
    let entries = format!(
        "myapp-ns.example.com|127.0.0.1:9 r1-ns.example.com|{} r2-ns.example.com|{}",
        r1.addr, r2.addr
    );
    assert_eq!(lb.ctl(&["update-cluster", &entries]).0, 0);
    let mut names = lb.backend_names();
    names.sort();
    assert_eq!(names, vec!["gear-r1-ns", "gear-r2-ns", "local-gear"]);
    // Three web gears for one balancer: local-gear takes no traffic.
    assert!(
        eventually(Duration::from_secs(3), || backend_state(&lb, "local-gear")
            == "drained")
        .await
    );
    let before = local.requests();
    for _ in 0..20 {
        let got = get(lb.proxy, "/", &[("cookie", "GEAR=myapp-ns")])
            .await
            .unwrap();
        assert_ne!(got.text(), "backend local");
    }
    assert_eq!(local.requests(), before);
    // Two gears: it serves again.
    let entries = format!(
        "myapp-ns.example.com|127.0.0.1:9 r1-ns.example.com|{}",
        r1.addr
    );
    assert_eq!(lb.ctl(&["update-cluster", &entries]).0, 0);
    assert!(
        eventually(Duration::from_secs(3), || backend_state(&lb, "local-gear")
            == "up")
        .await
    );
    let got = get(lb.proxy, "/", &[("cookie", "GEAR=myapp-ns")])
        .await
        .unwrap();
    assert_eq!(
        got.text(),
        "backend local",
        "the sticky value of the own gear is <gearname>-<ns>"
    );
}

fn scaler_num(lb: &Gearlb, key: &str) -> f64 {
    lb.status_json()["scaler"][key].as_f64().unwrap_or(0.0)
}

/// The GET of the scale limits carries the broker key in its body, where the broker
/// reads it (never in the URL), so the limits are read, and a balancer already at
/// `scale_max` asks for no gear however loaded it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scale_limits_are_read_with_the_key_in_the_body() {
    // One gear, at most one.
    let broker = TestBroker::start(1, 1).await;
    let g0 = TestBackend::start("g0").await;
    let dir = workdir();
    let cfg = config_text(
        dir.path(),
        &[("gear-g0-ns", g0.addr)],
        &scaler_extra(&broker),
    );
    let lb = start(dir.path(), &cfg, &broker);
    let read = eventually(Duration::from_secs(8), || {
        lb.status_json()["scaler"]["scale_limits"] == serde_json::json!({"min": 1, "max": 1})
    })
    .await;
    assert!(read, "{}\n{}", lb.status_json()["scaler"], lb.log_text());
    assert!(broker.limit_reads.load(Ordering::Relaxed) >= 1);
    assert_eq!(broker.keys_in_url.load(Ordering::Relaxed), 0);
    assert!(!lb.log_text().contains("scale limits"), "{}", lb.log_text());

    // Full, but at its maximum: no scale-up is asked for.
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = load(lb.proxy, 3, stop.clone());
    let mut full_at = 0.0;
    let full = eventually(Duration::from_secs(8), || {
        full_at = scaler_num(&lb, "checks");
        scaler_num(&lb, "capacity") >= 90.0
    })
    .await;
    assert!(full, "{}", lb.status_json()["scaler"]);
    // That check's decision is made once the next check has begun.
    let decided = eventually(Duration::from_secs(5), || {
        scaler_num(&lb, "checks") >= full_at + 2.0
    })
    .await;
    assert!(decided);
    assert!(broker.events().is_empty(), "{:?}", broker.events());
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
}

/// A broker failure is logged with what failed (method, URL, status and what the
/// broker said), once and not at every check; its end is logged too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_failures_are_logged_once_then_backed_off_and_the_recovery_too() {
    let broker = TestBroker::start(1, 10).await;
    broker.fail_limits.store(true, Ordering::Relaxed);
    let g0 = TestBackend::start("g0").await;
    let dir = workdir();
    let cfg = config_text(
        dir.path(),
        &[("gear-g0-ns", g0.addr)],
        &scaler_extra(&broker),
    );
    let lb = start(dir.path(), &cfg, &broker);
    // Ten checks (200 ms apart), every one failing.
    let failing = eventually(Duration::from_secs(10), || {
        scaler_num(&lb, "broker_failures") >= 10.0
    })
    .await;
    assert!(failing, "{}", lb.status_json()["scaler"]);
    let log = lb.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("scale limits")).collect();
    assert_eq!(lines.len(), 1, "logged once:\n{log}");
    let url = format!(
        "GET https://{}/broker/rest/domains/ns/applications/app",
        broker.addr
    );
    for part in [url.as_str(), "503", "The broker is down for maintenance"] {
        assert!(lines[0].contains(part), "{part:?} not in {}", lines[0]);
    }
    assert!(!log.contains(BROKER_TOKEN) && !log.contains(BROKER_IV));
    let error = lb.status_json()["scaler"]["broker_error"].to_string();
    assert!(error.contains(&url) && error.contains("503"), "{error}");

    broker.fail_limits.store(false, Ordering::Relaxed);
    let back = eventually(Duration::from_secs(5), || {
        let s = lb.status_json();
        s["scaler"]["scale_limits"] == serde_json::json!({"min": 1, "max": 10})
            && s["scaler"]["broker_error"].is_null()
            && s["scaler"]["broker_failures"] == 0
    })
    .await;
    assert!(back, "{}", lb.status_json()["scaler"]);
    let said = eventually(Duration::from_secs(2), || {
        lb.log_text().contains("the broker answers again")
    })
    .await;
    assert!(said, "{}", lb.log_text());
}

/// A broker nobody listens for: the scaler's log and `ctl scale` say which request
/// failed and why, not only "error sending request".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_broker_connection_is_named_with_its_cause() {
    let broker = TestBroker::start(1, 10).await;
    let closed = free_addr();
    let g0 = TestBackend::start("g0").await;
    let dir = workdir();
    let cfg = config_text(
        dir.path(),
        &[("gear-g0-ns", g0.addr)],
        &scaler_extra(&broker),
    );
    let mut env = broker.gear_env(&dir.path().join("home"));
    for (k, v) in &mut env {
        if k == "OPENSHIFT_BROKER_HOST" {
            *v = closed.to_string();
        }
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let lb = Gearlb::start_with(dir.path(), &cfg, &[], &env);
    let app = format!("https://{closed}/broker/rest/domains/ns/applications/app");
    let logged = eventually(Duration::from_secs(8), || {
        lb.log_text()
            .lines()
            .any(|l| l.contains(&format!("GET {app}: ")) && l.contains("Connection refused"))
    })
    .await;
    assert!(logged, "{}", lb.log_text());
    let (code, out, err) = lb.ctl(&["scale", "up"]);
    assert_eq!(code, 1, "{out}{err}");
    let said = format!("{out}{err}");
    assert!(
        said.contains(&format!("POST {app}/events: ")) && said.contains("Connection refused"),
        "{said}"
    );
}

/// Open WebSockets are load even with no request in flight, as they were in the old
/// autoscaler's `scur`: enough of them ask for a gear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_websockets_alone_are_load_for_the_scaler() {
    use futures_util::{SinkExt, StreamExt};
    let broker = TestBroker::start(1, 10).await;
    let g0 = TestBackend::start("g0").await;
    let dir = workdir();
    let cfg = config_text(
        dir.path(),
        &[("gear-g0-ns", g0.addr)],
        &scaler_extra(&broker),
    );
    let lb = start(dir.path(), &cfg, &broker);
    // One gear of at most one session each: two open tunnels are 200%.
    let mut sockets = Vec::new();
    for _ in 0..2 {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", lb.proxy))
            .await
            .unwrap();
        ws.send("ping".into()).await.unwrap();
        let reply = ws.next().await.unwrap().unwrap();
        assert_eq!(reply.into_text().unwrap(), "g0: ping");
        sockets.push(ws);
    }
    let up = eventually(Duration::from_secs(8), || !broker.events().is_empty()).await;
    assert!(
        up,
        "no scale-up for open WebSockets: {}",
        lb.status_json()["scaler"]
    );
    assert_eq!(broker.events()[0].0, "scale-up");
    assert_eq!(lb.status_json()["frontend"]["requests_current"], 0);
}

/// A balancer started alone acts as the scaler of the cluster it knows: itself. The
/// moment `set-peers` tells it of two others it has not heard from, it no longer has a
/// majority: it stands down before the call returns (the platform sends set-peers to
/// every balancer of a new cluster at once, and another may already count it), says so,
/// and stays down until a majority of the new membership is heard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_peers_that_take_away_the_majority_stand_the_scaler_down_before_returning() {
    let dir = workdir();
    let cfg = cluster_config(dir.path(), "lb1", SECRET, "");
    let lb = Gearlb::start(dir.path(), &cfg);
    let alone = eventually(Duration::from_secs(10), || scaler_of(&lb).1).await;
    assert!(alone, "alone, it acts: {:?}", scaler_of(&lb));
    // Two peers nobody answers for (closed ports on loopback).
    let silent: Vec<std::net::TcpListener> = (0..2)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs: Vec<_> = silent.iter().map(|l| l.local_addr().unwrap()).collect();
    drop(silent);
    let me = lb.gossip.unwrap();
    let list = format!(
        "'lb1'='lb1|{me}' 'lb2'='lb2|{}' 'lb3'='lb3|{}'",
        addrs[0], addrs[1]
    );
    let (code, _, err) = lb.ctl(&["set-peers", &list]);
    assert_eq!(code, 0, "{err}");
    assert!(
        !scaler_of(&lb).1,
        "still acting right after set-peers returned"
    );
    assert!(
        lb.log_text()
            .contains("the known balancers were replaced (set-peers)"),
        "the stand-down is logged with its reason"
    );
    // It stays down: 1 of 3 is no majority (sampled over two of its fence turns' worth
    // of seconds; any sample acting fails).
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end {
        assert!(!scaler_of(&lb).1, "acted again with 1 of 3 heard");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Alone again, it takes the role back.
    let (code, _, err) = lb.ctl(&["set-peers", &format!("'lb1'='lb1|{me}'")]);
    assert_eq!(code, 0, "{err}");
    let back = eventually(Duration::from_secs(10), || scaler_of(&lb).1).await;
    assert!(back, "alone again, it acts again");
}
