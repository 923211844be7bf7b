//! Peer balancers as real processes: gossip membership, failure detection, subsets,
//! authentication, and a network partition between namespaces.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

async fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return Some(t.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Which balancers have each gear in their subset.
fn coverage(lbs: &[&Gearlb]) -> BTreeMap<String, usize> {
    let mut cov = BTreeMap::new();
    for lb in lbs {
        for b in lb.status_json()["backends"].as_array().unwrap() {
            let n = cov
                .entry(b["name"].as_str().unwrap().to_string())
                .or_insert(0);
            if b["in_subset"].as_bool().unwrap() {
                *n += 1;
            }
        }
    }
    cov
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_balancers_gossip_fail_over_and_rejoin() {
    let mut gears = Vec::new();
    for i in 0..6 {
        gears.push(TestBackend::start(&format!("g{i}")).await);
    }
    let entries: Vec<String> = gears
        .iter()
        .map(|g| format!("{}-ns.example.com|{}", g.name, g.addr))
        .collect();
    let entries = entries.join(" ");
    let dirs: Vec<_> = (0..3).map(|_| workdir()).collect();
    let ids = ["lb1", "lb2", "lb3"];
    let mut lbs: Vec<Gearlb> = (0..3)
        .map(|i| {
            Gearlb::start(
                dirs[i].path(),
                &cluster_config(dirs[i].path(), ids[i], SECRET, "[subset]\ncoverage = 34"),
            )
        })
        .collect();
    let list = peer_list(&[("lb1", &lbs[0]), ("lb2", &lbs[1]), ("lb3", &lbs[2])]);
    for lb in &lbs {
        assert_eq!(lb.ctl(&["set-peers", &list]).0, 0);
        assert_eq!(lb.ctl(&["update-cluster", &entries]).0, 0);
    }

    // Everyone live within 3 s.
    let all = vec!["lb1".to_string(), "lb2".to_string(), "lb3".to_string()];
    let took = wait_for(Duration::from_secs(5), || {
        lbs.iter().all(|lb| lb.live() == all)
    })
    .await;
    let took = took.expect("balancers did not see each other");
    assert!(took < Duration::from_secs(3), "took {took:?}");

    // Subsets: 6 gears, 34% → 3 each; every gear covered, evenly (each by 1 or 2).
    let covered = wait_for(Duration::from_secs(3), || {
        let cov = coverage(&[&lbs[0], &lbs[1], &lbs[2]]);
        cov.len() == 6
            && cov.values().all(|&n| (1..=2).contains(&n))
            && cov.values().sum::<usize>() == 9
    })
    .await;
    assert!(
        covered.is_some(),
        "{:?}",
        coverage(&[&lbs[0], &lbs[1], &lbs[2]])
    );
    let peers = lbs[0].peers();
    let lb2 = peers["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "lb2")
        .unwrap()
        .clone();
    assert!(lb2["load"].is_object(), "load is gossiped: {lb2}");

    // Kill lb3: the others drop it within 5 s and cover every gear between them.
    let _ = lbs[2].child.kill();
    let _ = lbs[2].child.wait();
    let two = vec!["lb1".to_string(), "lb2".to_string()];
    let took = wait_for(Duration::from_secs(8), || {
        lbs[..2].iter().all(|lb| lb.live() == two)
    })
    .await;
    let took = took.expect("dead balancer not noticed");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let recovered = wait_for(Duration::from_secs(3), || {
        let cov = coverage(&[&lbs[0], &lbs[1]]);
        cov.len() == 6 && cov.values().all(|&n| n >= 1)
    })
    .await;
    assert!(recovered.is_some(), "{:?}", coverage(&[&lbs[0], &lbs[1]]));
    let view = lbs[0].peers();
    let lb3 = view["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "lb3")
        .unwrap()
        .clone();
    assert_eq!(lb3["live"], false);
    assert_eq!(lb3["known"], true);

    // Restart it from its own directory: peers and gears come back from its state
    // file; it listens on a new port, so the others learn it from its gossip.
    let restarted = Gearlb::start_file(dirs[2].path(), &dirs[2].path().join("gearlb.toml"));
    let list = peer_list(&[("lb1", &lbs[0]), ("lb2", &lbs[1]), ("lb3", &restarted)]);
    for lb in [&lbs[0], &lbs[1], &restarted] {
        assert_eq!(lb.ctl(&["set-peers", &list]).0, 0);
    }
    lbs[2] = restarted;
    let took = wait_for(Duration::from_secs(8), || {
        lbs.iter().all(|lb| lb.live() == all)
    })
    .await;
    assert!(took.is_some(), "restarted balancer did not rejoin");
    assert_eq!(
        lbs[2].backend_names().len(),
        6,
        "gears restored from the state file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_balancer_with_the_wrong_secret_is_never_a_peer() {
    let dirs: Vec<_> = (0..3).map(|_| workdir()).collect();
    let a = Gearlb::start(
        dirs[0].path(),
        &cluster_config(dirs[0].path(), "lb1", SECRET, ""),
    );
    let b = Gearlb::start(
        dirs[1].path(),
        &cluster_config(dirs[1].path(), "lb2", SECRET, ""),
    );
    let evil = Gearlb::start(
        dirs[2].path(),
        &cluster_config(dirs[2].path(), "lb3", "not-the-secret-at-all-000", ""),
    );
    let list = peer_list(&[("lb1", &a), ("lb2", &b), ("lb3", &evil)]);
    for lb in [&a, &b, &evil] {
        assert_eq!(lb.ctl(&["set-peers", &list]).0, 0);
    }
    let pair = vec!["lb1".to_string(), "lb2".to_string()];
    assert!(wait_for(Duration::from_secs(5), || a.live() == pair
        && b.live() == pair)
    .await
    .is_some());
    // Give the impostor time to try.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(a.live(), pair);
    assert_eq!(b.live(), pair);
    assert_eq!(
        evil.live(),
        vec!["lb3".to_string()],
        "it sees nobody either"
    );
    // Over the proxy port its handshake is refused before any frame is read.
    let rejected = |lb: &Gearlb| {
        let g = &lb.peers()["gossip"];
        g["rejected_bad_tag"].as_u64().unwrap() + g["rejected_handshake"].as_u64().unwrap()
    };
    assert!(
        rejected(&a) + rejected(&b) > 0,
        "its gossip was seen and refused"
    );
    assert!(rejected(&evil) > 0);
}

#[test]
fn set_peers_validates_and_changes_nothing_on_bad_input() {
    let dir = workdir();
    let lb = Gearlb::start(dir.path(), &cluster_config(dir.path(), "lb1", SECRET, ""));
    let (code, _, _) = lb.ctl(&["set-peers", "'lb2'='lb2|127.0.0.1:7002'"]);
    assert_eq!(code, 0);
    for bad in [
        "'lb3'='lb3|127.0.0.1:0'",
        "'x;reboot'='x;reboot|h:1'",
        "'a'='b|h:1'",
    ] {
        let (code, _, err) = lb.ctl(&["set-peers", &format!("'lb2'='lb2|127.0.0.1:7002' {bad}")]);
        assert_eq!(code, 22, "{bad}: {err}");
    }
    let peers = lb.peers();
    let ids: BTreeSet<&str> = peers["peers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        ["lb2"].into_iter().collect(),
        "bad lists changed nothing"
    );
    // Without gossip configured, set-peers says why it cannot work.
    let dir2 = workdir();
    let solo = Gearlb::start(dir2.path(), &config_text(dir2.path(), &[], ""));
    let (code, _, err) = solo.ctl(&["set-peers", "'lb2'='lb2|127.0.0.1:7002'"]);
    assert_eq!(code, 1);
    assert!(err.contains("gossip is off"), "{err}");
}

/// Two network namespaces joined by a veth pair; removed on drop.
struct Netns {
    a: String,
    b: String,
}

const ADDR_A: &str = "169.254.77.1";
const ADDR_B: &str = "169.254.77.2";

impl Netns {
    fn new() -> Netns {
        require_root();
        let tag = std::process::id() % 100_000;
        let (a, b) = (format!("glb-a{tag}"), format!("glb-b{tag}"));
        let n = Netns {
            a: a.clone(),
            b: b.clone(),
        };
        ip(&["netns", "add", &a]);
        ip(&["netns", "add", &b]);
        let (va, vb) = (format!("gla{tag}"), format!("glb{tag}"));
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        ip(&["link", "set", &va, "netns", &a]);
        ip(&["link", "set", &vb, "netns", &b]);
        ip(&["-n", &a, "addr", "add", &format!("{ADDR_A}/24"), "dev", &va]);
        ip(&["-n", &b, "addr", "add", &format!("{ADDR_B}/24"), "dev", &vb]);
        for (ns, dev) in [(&a, &va), (&b, &vb)] {
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        n
    }

    fn link(&self, up: bool) {
        let tag = std::process::id() % 100_000;
        ip(&[
            "-n",
            &self.a,
            "link",
            "set",
            &format!("gla{tag}"),
            if up { "up" } else { "down" },
        ]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.a]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.b]).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_balancers_see_each_other_dead_and_heal() {
    let net = Netns::new();
    let (da, db) = (workdir(), workdir());
    let conf = |dir: &Path, id: &str, me: &str, other: &str| {
        config_text(
            dir,
            &[],
            &format!(
                "[cluster]\nnode_id = \"{id}\"\nlisten = \"{me}:7946\"\nsecret = \"{SECRET}\"\npeers = [\"{other}:7946\"]\ngossip_interval = \"100ms\""
            ),
        )
    };
    std::fs::write(
        da.path().join("gearlb.toml"),
        conf(da.path(), "lbA", ADDR_A, ADDR_B),
    )
    .unwrap();
    std::fs::write(
        db.path().join("gearlb.toml"),
        conf(db.path(), "lbB", ADDR_B, ADDR_A),
    )
    .unwrap();
    let a = Gearlb::start_in(
        da.path(),
        &da.path().join("gearlb.toml"),
        &["ip", "netns", "exec", &net.a],
    );
    let b = Gearlb::start_in(
        db.path(),
        &db.path().join("gearlb.toml"),
        &["ip", "netns", "exec", &net.b],
    );
    let both = vec!["lbA".to_string(), "lbB".to_string()];
    let joined = wait_for(Duration::from_secs(5), || {
        a.live() == both && b.live() == both
    })
    .await;
    assert!(joined.is_some(), "a: {:?} b: {:?}", a.live(), b.live());

    net.link(false);
    let cut = wait_for(Duration::from_secs(8), || {
        a.live() == vec!["lbA".to_string()] && b.live() == vec!["lbB".to_string()]
    })
    .await;
    assert!(
        cut.is_some(),
        "partition not noticed: a {:?} b {:?}",
        a.live(),
        b.live()
    );

    net.link(true);
    let healed = wait_for(Duration::from_secs(10), || {
        a.live() == both && b.live() == both
    })
    .await;
    assert!(
        healed.is_some(),
        "did not heal: a {:?} b {:?}",
        a.live(),
        b.live()
    );
}

/// Whatever its `Upgrade` bytes, a request that names the gossip protocol or carries its
/// proof header is answered by the balancer (400 or 403) and never reaches a gear, over
/// HTTP/1.1 and h2c alike; an `Upgrade` with bytes outside the token grammar is a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_with_the_gossip_header_reaches_a_gear_whatever_its_upgrade_bytes() {
    let gear = TestBackend::start("g1").await;
    let (_dirs, lbs) = cluster_of(2, &[&gear], "").await;
    let proxy = lbs[0].proxy;
    let before = gear.requests();
    let proof = "gearlb-gossip-auth: v1 1 00\r\n";
    let cases: Vec<Vec<u8>> = vec![
        // A second protocol with a non-token byte after it.
        b"Upgrade: gearlb-gossip/1, x\xff\r\nConnection: upgrade\r\n".to_vec(),
        // A non-breaking space glued to the token.
        b"Upgrade: gearlb-gossip/1\xa0\r\nConnection: upgrade\r\n".to_vec(),
        // A space inside the token.
        b"Upgrade: gearlb-gossip /1\r\nConnection: upgrade\r\n".to_vec(),
        // Named, but not an upgrade (no Connection: upgrade).
        b"Upgrade: gearlb-gossip/1\r\n".to_vec(),
        // Another protocol, with the gossip proof attached.
        b"Upgrade: websocket\r\nConnection: upgrade\r\n".to_vec(),
        // No upgrade at all, the proof attached.
        b"".to_vec(),
    ];
    for head in cases {
        let mut req = b"GET /.gearlb/gossip HTTP/1.1\r\nHost: x\r\n".to_vec();
        req.extend_from_slice(&head);
        req.extend_from_slice(proof.as_bytes());
        req.extend_from_slice(b"\r\n");
        let answer = raw(proxy, &req, Duration::from_millis(500));
        assert!(
            answer.starts_with("HTTP/1.1 400") || answer.starts_with("HTTP/1.1 403"),
            "{:?}: {answer}",
            String::from_utf8_lossy(&head)
        );
    }
    // A malformed Upgrade without anything of gossip is refused too (no reader may see
    // other protocols in it than the balancer did).
    let answer = raw(
        proxy,
        b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\x01\r\nConnection: upgrade\r\n\r\n",
        Duration::from_millis(500),
    );
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // Over h2c (prior knowledge), the proof header is refused as well.
    let tcp = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let (mut h2, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let req = http::Request::get(format!("http://{proxy}/"))
        .header("gearlb-gossip-auth", "v1 1 00")
        .body(())
        .unwrap();
    let (resp, _) = h2.send_request(req, true).unwrap();
    let resp = resp.await.unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(gear.requests(), before, "nothing reached the gear");
    // The application's own upgrades and requests still pass.
    let got = get(proxy, "/", &[("host", "app-ns.example.com")])
        .await
        .unwrap();
    assert_eq!(got.status, 200);
}

/// Peers' gossip on the proxy port is not client traffic: the FRONTEND counts none of
/// its connections, upgrade requests, `101`s or frames; the cluster counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gossip_is_kept_out_of_the_client_counters() {
    let gear = TestBackend::start("g1").await;
    let (_dirs, lbs) = cluster_of(2, &[&gear], "").await;
    // Gossip flows (100 ms rounds) for a while on the upgraded connections.
    let upgraded = eventually(Duration::from_secs(10), || {
        lbs.iter().all(|lb| {
            lb.peers()["gossip"]["upgrades_accepted"]
                .as_u64()
                .unwrap_or(0)
                >= 1
                && lb.peers()["gossip"]["frames_received"]
                    .as_u64()
                    .unwrap_or(0)
                    >= 20
        })
    })
    .await;
    assert!(upgraded, "{}", lbs[0].peers()["gossip"]);
    let f = lbs[0].status_json()["frontend"].clone();
    assert_eq!(f["requests_total"], 0, "{f}");
    assert_eq!(f["connections_total"], 0, "{f}");
    assert_eq!(f["responses"]["1xx"], 0, "{f}");
    // Only the upgrade request's own head may have been counted, never the frames.
    let bytes = f["bytes_received"].as_u64().unwrap() + f["bytes_sent"].as_u64().unwrap();
    assert!(bytes < 2_000, "{f}");
    for _ in 0..3 {
        assert_eq!(get(lbs[0].proxy, "/", &[]).await.unwrap().status, 200);
    }
    let f = lbs[0].status_json()["frontend"].clone();
    assert_eq!(f["requests_total"], 3, "{f}");
    assert_eq!(f["responses"]["2xx"], 3, "{f}");
    assert_eq!(f["connections_total"], 3, "{f}");
    let (_, text, _) = lbs[0].ctl(&["peers"]);
    assert!(text.contains("connections upgraded "), "{text}");
}

/// With every client place taken (`limits.max_connections`), a peer's gossip upgrade
/// still gets in, in the room kept for it; a client request there gets a 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gossip_has_room_apart_from_max_connections() {
    let gear = TestBackend::start("g1").await;
    let (_dirs, lbs) = cluster_of(2, &[&gear], "[limits]\nmax_connections = 2\n").await;
    let proxy = lbs[0].proxy;
    // Two idle clients take both places.
    let held: Vec<std::net::TcpStream> = (0..2)
        .map(|_| std::net::TcpStream::connect(proxy).unwrap())
        .collect();
    let full = eventually(Duration::from_secs(5), || {
        lbs[0].status_json()["frontend"]["connections_current"] == 2
    })
    .await;
    assert!(full, "{}", lbs[0].status_json()["frontend"]);
    // A gossip upgrade is still answered by the balancer (403: no valid proof here)...
    let answer = raw(
        proxy,
        b"GET /.gearlb/gossip HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: gearlb-gossip/1\r\n\r\n",
        Duration::from_millis(500),
    );
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    // ...while a client's request in that room is refused, and reaches no gear.
    let before = gear.requests();
    let answer = raw(
        proxy,
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_millis(500),
    );
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert_eq!(gear.requests(), before);
    drop(held);
    // The balancers stayed live to each other.
    assert_eq!(lbs[0].live(), vec!["lb1".to_string(), "lb2".to_string()]);
}

/// Gossip connections proven and then silent cannot fill the slots: 1 000 of them (each
/// with its own valid v1 proof, as someone holding a stock of recorded proofs would
/// open them, and a recorded frame of lb2's) hold a handful of slots at most, and a
/// restarted peer still joins. A proof used a second time is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proven_then_silent_gossip_connections_cannot_keep_a_peer_out() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    raise_nofile_limit(4096);
    let gear = TestBackend::start("g1").await;
    let (dirs, mut lbs) = cluster_of(2, &[&gear], "").await;
    let auth = gearlb::cluster::transport::Auth::new("app1", SECRET.as_bytes());
    let now = gearlb::time::unix_secs();
    // A captured frame of lb2: chitchat's empty Ack (magic, version 0, type 2, end).
    let frame = auth.seal(lbs[1].gossip.unwrap(), &[0x53, 0xb0, 0, 2, 0]);
    let upgrade = |proof: &str| {
        format!(
            "GET /.gearlb/gossip HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: gearlb-gossip/1\r\ngearlb-gossip-auth: {proof}\r\n\r\n"
        )
    };
    async fn head(c: &mut tokio::net::TcpStream) -> String {
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && head.len() < 4096 {
            if c.read(&mut b).await.unwrap_or(0) == 0 {
                break;
            }
            head.push(b[0]);
        }
        String::from_utf8_lossy(&head).into_owned()
    }
    let mut open = Vec::new();
    for i in 0..1000u64 {
        let proof = auth.handshake(now + i - 500);
        let mut c = tokio::net::TcpStream::connect(lbs[0].proxy).await.unwrap();
        c.write_all(upgrade(&proof).as_bytes()).await.unwrap();
        let h = head(&mut c).await;
        assert!(h.starts_with("HTTP/1.1 101"), "{h}");
        c.write_all(&(frame.len() as u32).to_be_bytes())
            .await
            .unwrap();
        c.write_all(&frame).await.unwrap();
        open.push(c);
        if i == 0 {
            // The same proof again: refused.
            let mut again = tokio::net::TcpStream::connect(lbs[0].proxy).await.unwrap();
            again.write_all(upgrade(&proof).as_bytes()).await.unwrap();
            let h = head(&mut again).await;
            assert!(h.starts_with("HTTP/1.1 403"), "{h}");
        }
    }
    // All but a few are closed by the balancer.
    let mut closed = 0;
    for c in &mut open {
        let mut b = [0u8; 1];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(100), c.read(&mut b)).await
        {
            closed += 1;
        }
    }
    assert!(
        closed >= 1000 - 8,
        "only {closed} of 1000 proven connections closed"
    );
    // lb2 restarts (a new port) while the 1 000 are still open on our side, and joins.
    lbs.pop();
    let lb2 = Gearlb::start(
        dirs[1].path(),
        &cluster_config(dirs[1].path(), "lb2", SECRET, ""),
    );
    lbs.push(lb2);
    let list = peer_list(&[("lb1", &lbs[0]), ("lb2", &lbs[1])]);
    let entries = format!("g1-ns.example.com|{}", gear.addr);
    for lb in &lbs {
        assert_eq!(lb.ctl(&["set-peers", &list]).0, 0);
        assert_eq!(lb.ctl(&["update-cluster", &entries]).0, 0);
    }
    let ids = vec!["lb1".to_string(), "lb2".to_string()];
    let live = eventually(Duration::from_secs(15), || {
        lbs.iter().all(|lb| lb.live() == ids)
    })
    .await;
    assert!(live, "{:?} / {:?}", lbs[0].live(), lbs[1].live());
    drop(open);
}

fn raise_nofile_limit(want: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let want = limit.maximum.map_or(want, |max| max.min(want));
    if limit.current.is_some_and(|soft| soft < want) {
        let raised = Rlimit {
            current: Some(want),
            maximum: limit.maximum,
        };
        setrlimit(Resource::Nofile, raised).unwrap();
    }
}

/// Gossip rides the proxy port: a request for the gossip protocol is answered by the
/// balancer itself (403 without the handshake proof) and never reaches a web gear,
/// while the application's own upgrades still do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gossip_upgrades_on_the_proxy_port_never_reach_a_gear() {
    let gear = TestBackend::start("g1").await;
    let (_dirs, lbs) = cluster_of(2, &[&gear], "").await;
    let proxy = lbs[0].proxy;
    let before = gear.requests();
    for proof in ["", "gearlb-gossip-auth: v1 1 00\r\n"] {
        let answer = raw(
            proxy,
            format!(
                "GET /.gearlb/gossip HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: gearlb-gossip/1\r\n{proof}\r\n"
            )
            .as_bytes(),
            Duration::from_millis(500),
        );
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    }
    assert_eq!(
        gear.requests(),
        before,
        "no gossip request reached the gear"
    );
    assert!(
        lbs[0].peers()["gossip"]["rejected_handshake"]
            .as_u64()
            .unwrap()
            >= 2
    );
    // The text says so too, and names the scaler.
    let (code, text, err) = lbs[0].ctl(&["peers"]);
    assert_eq!(code, 0, "{err}");
    let refused: u64 = text
        .split("handshakes refused ")
        .nth(1)
        .and_then(|t| t.split(';').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(refused >= 2, "{text}");
    assert!(text.lines().any(|l| l.starts_with("scaler: lb")), "{text}");
    // The same path without the gossip protocol is the application's.
    let got = get(proxy, "/.gearlb/gossip", &[("host", "app-ns.example.com")])
        .await
        .unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(gear.requests(), before + 1);
    // Both balancers stay live to each other throughout.
    assert_eq!(lbs[0].live(), vec!["lb1".to_string(), "lb2".to_string()]);
    // A peer's gossip connection is not a client session: not counted, and a graceful
    // stop does not wait for it (shutdown_grace is 30 s here).
    let frontend = &lbs[0].status_json()["frontend"];
    assert_eq!(frontend["connections_current"], 0, "{frontend}");
    let mut lbs = lbs;
    lbs[0].signal("TERM");
    assert_eq!(
        lbs[0].wait(Duration::from_secs(10)),
        Some(0),
        "the stop waited for gossip connections"
    );
}

/// Three balancers that know each other by address only (`cluster.peers`, no ids).
fn address_only_config(dir: &Path, id: &str, me: u16, others: &[u16]) -> String {
    let peers: Vec<String> = others
        .iter()
        .map(|p| format!("\"127.0.0.1:{p}\""))
        .collect();
    config_text(
        dir,
        &[],
        &format!(
            "[cluster]\nnode_id = \"{id}\"\nid = \"app1\"\ntransport = \"tcp\"\nlisten = \"127.0.0.1:{me}\"\npeers = [{}]\nsecret = \"{SECRET}\"\ngossip_interval = \"100ms\"\n",
            peers.join(", ")
        ),
    )
}

/// Address-only peers keep the identity learnt from their address when they die: the
/// quorum base never shrinks, so a balancer left alone has no quorum (and says that it
/// reaches nobody); a restart with other ports in `cluster.peers` uses them, not the
/// saved list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn address_only_peers_keep_their_identity_and_configured_ports_win() {
    let dirs: Vec<_> = (0..3).map(|_| workdir()).collect();
    let ids = ["lb1", "lb2", "lb3"];
    let ports: Vec<u16> = (0..3).map(|_| free_port("127.0.0.1")).collect();
    let write = |ports: &[u16]| {
        for i in 0..3 {
            let others: Vec<u16> = (0..3).filter(|j| *j != i).map(|j| ports[j]).collect();
            let text = address_only_config(dirs[i].path(), ids[i], ports[i], &others);
            std::fs::write(dirs[i].path().join("gearlb.toml"), text).unwrap();
        }
    };
    write(&ports);
    let start = |i: usize| Gearlb::start_file(dirs[i].path(), &dirs[i].path().join("gearlb.toml"));
    let mut lbs: Vec<Gearlb> = (0..3).map(start).collect();
    let all: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    assert!(
        wait_for(Duration::from_secs(8), || lbs
            .iter()
            .all(|lb| lb.live() == all))
        .await
        .is_some(),
        "address-only peers did not form a cluster"
    );
    // The ids learnt from the addresses reach the state file.
    let saved = wait_for(Duration::from_secs(5), || {
        let st =
            std::fs::read_to_string(dirs[0].path().join("data/state.json")).unwrap_or_default();
        st.contains("\"lb2\"") && st.contains("\"lb3\"") && st.contains("\"learned\": true")
    })
    .await;
    assert!(saved.is_some(), "learnt ids not saved");

    // lb2 and lb3 die: lb1 still knows them by id, counts three, and has no quorum.
    for lb in &mut lbs[1..] {
        let _ = lb.child.kill();
        let _ = lb.child.wait();
    }
    let alone = wait_for(Duration::from_secs(5), || {
        lbs[0].live() == vec!["lb1".to_string()]
    })
    .await;
    assert!(alone.is_some());
    let peers = lbs[0].peers();
    let known: BTreeSet<&str> = peers["peers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["known"] == true)
        .filter_map(|p| p["id"].as_str())
        .collect();
    assert_eq!(known, ["lb2", "lb3"].into_iter().collect(), "{peers}");
    assert_eq!(peers["known_count"], 3);
    let scaler = &lbs[0].status_json()["scaler"];
    assert_eq!(scaler["quorum"], false, "{scaler}");
    assert_eq!(scaler["acting"], false);
    assert_eq!(scaler["known"], 3);
    let warned = wait_for(Duration::from_secs(15), || {
        lbs[0]
            .log_text()
            .contains("no known peer balancer reachable")
    })
    .await;
    assert!(warned.is_some(), "a balancer that reaches nobody says so");

    // Everyone restarts from its state directory with other ports in cluster.peers: the
    // configuration wins over the saved list, and they form a cluster again.
    let _ = lbs[0].child.kill();
    let _ = lbs[0].child.wait();
    let ports: Vec<u16> = (0..3).map(|_| free_port("127.0.0.1")).collect();
    write(&ports);
    let lbs: Vec<Gearlb> = (0..3).map(start).collect();
    assert!(
        wait_for(Duration::from_secs(8), || lbs
            .iter()
            .all(|lb| lb.live() == all))
        .await
        .is_some(),
        "balancers restarted with new ports did not join"
    );
    assert!(lbs[0]
        .log_text()
        .contains("cluster.peers changed since the state was saved"));
}
