//! Gossip on the wire (wire v2): what someone on the path between two balancers sees
//! and can do. Two real balancers gossip through recording relays (each advertises its
//! relay, so every byte between them passes one); the capture carries no secret, gear
//! name or balancer id in clear, and replaying it to a balancer is refused and changes
//! nothing. A balancer speaking only the release before's format (v1) still joins a
//! balancer of this release.

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use support::*;

/// One relayed connection: what the connecting side sent, and what it got back.
type Session = Arc<Mutex<(Vec<u8>, Vec<u8>)>>;

/// A TCP relay to `target` (set once known) recording, per connection, the bytes the
/// connecting side sent and those it got back.
struct Relay {
    addr: SocketAddr,
    target: Arc<Mutex<Option<SocketAddr>>>,
    sessions: Arc<Mutex<Vec<Session>>>,
}

impl Relay {
    async fn start() -> Relay {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay = Relay {
            addr: l.local_addr().unwrap(),
            target: Arc::default(),
            sessions: Arc::default(),
        };
        let (target, sessions) = (relay.target.clone(), relay.sessions.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = l.accept().await {
                let Some(to) = *target.lock().unwrap() else {
                    continue;
                };
                let Ok(server) = TcpStream::connect(to).await else {
                    continue;
                };
                let record = Arc::new(Mutex::new((Vec::new(), Vec::new())));
                sessions.lock().unwrap().push(record.clone());
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                let r1 = record.clone();
                tokio::spawn(pump(cr, sw, move |b| {
                    r1.lock().unwrap().0.extend_from_slice(b)
                }));
                tokio::spawn(pump(sr, cw, move |b| {
                    record.lock().unwrap().1.extend_from_slice(b)
                }));
            }
        });
        relay
    }

    fn to(&self, target: SocketAddr) {
        *self.target.lock().unwrap() = Some(target);
    }

    /// Every byte recorded, both ways, and the sessions' client-side bytes.
    fn capture(&self) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut all = Vec::new();
        let mut sent = Vec::new();
        for s in self.sessions.lock().unwrap().iter() {
            let s = s.lock().unwrap();
            all.extend_from_slice(&s.0);
            all.extend_from_slice(&s.1);
            sent.push(s.0.clone());
        }
        (all, sent)
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    record: impl Fn(&[u8]),
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                record(&buf[..n]);
                if to.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown().await;
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn counter(lb: &Gearlb, name: &str) -> u64 {
    lb.peers()["gossip"][name].as_u64().unwrap_or(0)
}

/// Config of balancer `id` advertising its gossip at `advertise`, with `wire`.
fn config(dir: &std::path::Path, id: &str, advertise: SocketAddr, wire: &str) -> String {
    cluster_config(dir, id, SECRET, "").replace(
        "transport = \"http\"\n",
        &format!("transport = \"http\"\nadvertise = \"{advertise}\"\ngossip_wire = \"{wire}\"\n"),
    )
}

/// A gear name and balancer ids the capture must not show (long enough that random
/// bytes never spell them).
const GEAR: &str = "gsecretname";
const ID: [&str; 2] = ["lbnode-alpha", "lbnode-bravo"];

/// `wires[i]` is balancer i's `gossip_wire`; `"old"` runs the release before's binary
/// (`$GEARLB_OLD_BIN`), which has no such key and speaks v1 only.
async fn pair_through_relays(
    wires: [&str; 2],
    gear: &TestBackend,
) -> (Vec<tempfile::TempDir>, Vec<Gearlb>, Vec<Relay>) {
    let relays = vec![Relay::start().await, Relay::start().await];
    let dirs: Vec<_> = (0..2).map(|_| workdir()).collect();
    let lbs: Vec<Gearlb> = (0..2)
        .map(|i| {
            let dir = dirs[i].path();
            if wires[i] != "old" {
                return Gearlb::start(dir, &config(dir, ID[i], relays[i].addr, wires[i]));
            }
            let text =
                config(dir, ID[i], relays[i].addr, "v1").replace("gossip_wire = \"v1\"\n", "");
            let path = dir.join("gearlb.toml");
            std::fs::write(&path, text).unwrap();
            // `sh -c '…' sh <this release's binary> run --config …`: the old one instead.
            let exec_old = "shift; exec \"$GEARLB_OLD_BIN\" \"$@\"";
            Gearlb::start_in(dir, &path, &["sh", "-c", exec_old, "sh"])
        })
        .collect();
    for (r, lb) in relays.iter().zip(&lbs) {
        r.to(lb.proxy);
    }
    let peers = format!(
        "'{a}'='{a}|{}' '{b}'='{b}|{}'",
        relays[0].addr,
        relays[1].addr,
        a = ID[0],
        b = ID[1]
    );
    let entries = format!("{}-ns.example.com|{}", gear.name, gear.addr);
    for lb in &lbs {
        assert_eq!(lb.ctl(&["set-peers", &peers]).0, 0);
        assert_eq!(lb.ctl(&["update-cluster", &entries]).0, 0);
    }
    let ids: Vec<String> = ID.iter().map(|s| s.to_string()).collect();
    let live = eventually(Duration::from_secs(15), || {
        lbs.iter().all(|lb| lb.live() == ids)
    })
    .await;
    assert!(
        live,
        "the balancers did not find each other through the relays"
    );
    (dirs, lbs, relays)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capture_of_gossip_shows_nothing_and_replays_of_it_are_refused() {
    let gear = TestBackend::start(GEAR).await;
    let (_dirs, mut lbs, relays) = pair_through_relays(["both", "both"], &gear).await;
    // Rotation state and its acknowledgments travel in gossip and notes.
    let gear_id = format!("{GEAR}-ns");
    let lb1 = &lbs[0];
    let (code, out, err) = tokio::task::spawn_blocking({
        let socket = lb1.dir.join("control.sock");
        let gear_id = gear_id.clone();
        move || ctl(&socket, &["rotate-out", &gear_id, "--as-json"])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("\"success\""), "{out}");
    // Both balancers know it (gossip went through the relays).
    let state = |lb: &Gearlb| backend_state(lb, &format!("gear-{gear_id}"));
    assert!(
        eventually(Duration::from_secs(5), || state(&lbs[1])
            .starts_with("drain"))
        .await,
        "{}",
        state(&lbs[1])
    );
    assert_eq!(counter(&lbs[0], "frames_received_v1"), 0);
    assert_eq!(counter(&lbs[1], "frames_received_v1"), 0);

    let (all, _) = relays[0].capture();
    let (all2, sent_to_lb2) = relays[1].capture();
    let all = [all, all2].concat();
    assert!(all.len() > 2_000, "too little captured: {}", all.len());
    assert!(
        contains(&all, b"Upgrade: gearlb-gossip/2"),
        "v2 was negotiated"
    );
    for secret in [
        SECRET.as_bytes(),
        GEAR.as_bytes(),
        ID[0].as_bytes(),
        ID[1].as_bytes(),
        b"app1",
    ] {
        assert!(
            !contains(&all, secret),
            "{:?} in clear on the wire",
            String::from_utf8_lossy(secret)
        );
    }

    // lb1 goes away; lb2 notices.
    lbs[0].signal("KILL");
    let _ = lbs[0].wait(Duration::from_secs(5));
    let alone = eventually(Duration::from_secs(15), || {
        lbs[1].live() == vec![ID[1].to_string()]
    })
    .await;
    assert!(alone, "{:?}", lbs[1].live());
    let received = counter(&lbs[1], "frames_received");
    let refused = counter(&lbs[1], "rejected_handshake");
    // Every session lb1 opened to lb2, replayed byte for byte straight to lb2.
    let replays: Vec<&Vec<u8>> = sent_to_lb2
        .iter()
        .filter(|s| s.starts_with(b"GET "))
        .collect();
    assert!(!replays.is_empty());
    for session in &replays {
        let mut c = TcpStream::connect(lbs[1].proxy).await.unwrap();
        let _ = c.write_all(session).await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(3), c.read_to_end(&mut answer)).await;
        assert!(
            answer.starts_with(b"HTTP/1.1 403"),
            "{}",
            String::from_utf8_lossy(&answer[..answer.len().min(200)])
        );
    }
    assert_eq!(
        counter(&lbs[1], "rejected_handshake"),
        refused + replays.len() as u64
    );
    assert_eq!(counter(&lbs[1], "frames_received"), received);
    // lb1 stays dead to lb2, and the gear stays rotated out.
    assert!(
        !eventually(Duration::from_secs(2), || lbs[1].live().len() > 1).await,
        "a replay brought lb1 back"
    );
    assert_eq!(counter(&lbs[1], "frames_received"), received);
}

/// A rolling upgrade: a balancer of the release before (speaking only v1) and one of
/// this release gossip together; once both run this release, v2 alone. The old one is
/// this binary with `gossip_wire = "v1"`, or, with `GEARLB_OLD_BIN` set to a build of
/// the release before, that very binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_from_v1_keeps_the_cluster_whole() {
    let gear = TestBackend::start("g1").await;
    let real_old = std::env::var_os("GEARLB_OLD_BIN").is_some();
    let old_wire = if real_old { "old" } else { "v1" };
    let (_dirs, lbs, relays) = pair_through_relays([old_wire, "both"], &gear).await;
    let v1 = counter(&lbs[1], "frames_received_v1");
    assert!(v1 > 0, "the new balancer hears the old one in v1");
    if !real_old {
        let old = lbs[0].peers()["gossip"].clone();
        assert_eq!(
            old["frames_received_v1"], old["frames_received"],
            "the old one hears only v1"
        );
    }
    let (all, _) = relays[1].capture();
    assert!(contains(&all, b"Upgrade: gearlb-gossip/1"));
    drop(lbs);
    drop(relays);
    // Both upgraded, one of them already v2-only.
    let (_dirs, lbs, _relays) = pair_through_relays(["both", "v2"], &gear).await;
    for lb in &lbs {
        assert!(counter(lb, "frames_received") > 0);
        assert_eq!(counter(lb, "frames_received_v1"), 0);
    }
}
