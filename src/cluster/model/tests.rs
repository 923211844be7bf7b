use super::*;

const TIMEOUT: Duration = Duration::from_secs(2);
const ROUND: Duration = Duration::from_millis(200);

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn node(id: &str, generation: u64, port: u16) -> ChitchatId {
    ChitchatId::new(id.to_string(), generation, addr(port))
}

fn peer(id: Option<&str>, port: u16) -> PeerSpec {
    PeerSpec {
        id: id.map(str::to_string),
        addr: addr(port).into(),
        learned: false,
    }
}

fn set(m: &mut Model, n: &ChitchatId, key: &str, value: &str) {
    m.apply(KeyEvent {
        node: n.clone(),
        key: key.into(),
        value: value.into(),
    });
}

/// Two rounds of heartbeats (the first sight is no proof of life) for `nodes`.
async fn beat(m: &mut Model, nodes: &[&ChitchatId], hb: &mut u64) {
    for _ in 0..2 {
        *hb += 1;
        let now = Instant::now();
        m.heartbeats(now, nodes.iter().map(|n| ((*n).clone(), *hb)));
        tokio::time::advance(ROUND).await;
    }
}

fn model(known: Vec<PeerSpec>) -> Model {
    Model::new("a", 1, addr(1), known, TIMEOUT, ROUND)
}

#[tokio::test(start_paused = true)]
async fn known_ids_limit_membership() {
    let mut m = model(vec![
        peer(Some("a"), 1),
        peer(Some("b"), 2),
        peer(Some("c"), 3),
    ]);
    let (b, intruder) = (node("b", 1, 2), node("intruder", 1, 9));
    for n in [&b, &intruder] {
        set(&mut m, n, "ready", "1");
    }
    set(&mut m, &b, "load", r#"{"s":3,"a":2.5,"r":10,"f":1}"#);
    set(
        &mut m,
        &intruder,
        "rot:g1",
        r#"{"gear":"g1","op":"out","ts":9,"by":"intruder"}"#,
    );
    let mut hb = 0;
    beat(&mut m, &[&b, &intruder], &mut hb).await;
    let v = m.build().unwrap();
    assert_eq!(*v.live, vec!["a", "b"]);
    assert_eq!(v.known_count, 3);
    assert_eq!(v.peers.len(), 2, "{:?}", v.peers);
    let c = v
        .peers
        .iter()
        .find(|p| p.id.as_deref() == Some("c"))
        .unwrap();
    assert!(!c.live && c.known);
    assert_eq!(v.loads["b"].sessions, 3);
    assert!(
        v.rotations.is_empty(),
        "an op from a node the broker does not list"
    );
    assert_eq!(v.addrs.get("b"), Some(&addr(2)));
    assert!(!v.addrs.contains_key("intruder"));
}

#[tokio::test(start_paused = true)]
async fn address_only_peers_learn_ids() {
    let mut m = model(vec![peer(None, 2)]);
    let (b, c) = (node("b", 1, 2), node("c", 1, 3));
    for n in [&b, &c] {
        set(&mut m, n, "ready", "1");
    }
    let mut hb = 0;
    beat(&mut m, &[&b, &c], &mut hb).await;
    let v = m.build().unwrap();
    assert_eq!(*v.live, vec!["a", "b", "c"]);
    assert_eq!(v.peers[0].id.as_deref(), Some("b"));
    assert!(v.peers[0].known);
    assert!(!v.peers[1].known);
}

#[tokio::test(start_paused = true)]
async fn address_only_peers_keep_the_identity_learnt_when_they_die() {
    let mut m = model(vec![peer(None, 2), peer(None, 3)]);
    let (b, c, d) = (node("b", 1, 2), node("c", 1, 3), node("d", 1, 4));
    for n in [&b, &c, &d] {
        set(&mut m, n, "ready", "1");
    }
    let mut hb = 0;
    beat(&mut m, &[&b, &c, &d], &mut hb).await;
    m.build();
    let learnt = m.learned_known().expect("ids learnt");
    assert_eq!(learnt[0].id.as_deref(), Some("b"));
    assert!(learnt[0].learned && learnt[1].learned);
    m.set_known(learnt);
    assert!(m.learned_known().is_none(), "nothing more to learn");
    let v = m.build().unwrap();
    assert_eq!(
        *v.live,
        vec!["a", "b", "c", "d"],
        "address-only: d counts too"
    );
    // b and c die: they stay known, by id, and the quorum base stays 3.
    for _ in 0..12 {
        tokio::time::advance(ROUND).await;
        hb += 1;
        m.heartbeats(
            Instant::now(),
            [(b.clone(), 1), (c.clone(), 1), (d.clone(), hb)],
        );
    }
    let v = m.build().unwrap();
    assert_eq!(*v.live, vec!["a", "d"]);
    assert_eq!(v.known_count, 3);
    let ids: Vec<_> = v
        .peers
        .iter()
        .filter(|p| p.known)
        .map(|p| (p.id.clone(), p.live))
        .collect();
    assert_eq!(
        ids,
        vec![(Some("b".into()), false), (Some("c".into()), false)]
    );
}

#[tokio::test(start_paused = true)]
async fn dead_after_the_timeout_and_gone_at_once_when_not_ready() {
    let mut m = model(vec![]);
    let (b, c) = (node("b", 1, 2), node("c", 1, 3));
    for n in [&b, &c] {
        set(&mut m, n, "ready", "1");
    }
    let mut hb = 0;
    beat(&mut m, &[&b, &c], &mut hb).await;
    assert_eq!(*m.build().unwrap().live, vec!["a", "b", "c"]);
    // c says it is stopping: gone at the next build, no timeout.
    set(&mut m, &c, "ready", "0");
    m.heartbeats(Instant::now(), [(b.clone(), hb), (c.clone(), hb)]);
    assert_eq!(*m.build().unwrap().live, vec!["a", "b"]);
    // b goes silent: still live for the timeout, then dead.
    let silent_since = Instant::now();
    let mut died = None;
    for _ in 0..20 {
        tokio::time::advance(ROUND).await;
        m.heartbeats(Instant::now(), [(b.clone(), hb), (c.clone(), hb)]);
        if let Some(v) = m.build() {
            if !v.live.contains(&"b".to_string()) {
                died = Some(silent_since.elapsed());
                break;
            }
        }
    }
    let died = died.expect("b declared dead");
    assert!(
        died > TIMEOUT - ROUND && died <= TIMEOUT + 2 * ROUND,
        "{died:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_key_change_rebuilds_only_its_part() {
    let mut m = model(vec![]);
    let b = node("b", 1, 2);
    set(&mut m, &b, "ready", "1");
    let mut hb = 0;
    beat(&mut m, &[&b], &mut hb).await;
    let v0 = m.build().unwrap();
    set(&mut m, &b, "load", r#"{"s":1,"a":0,"r":0,"f":0}"#);
    let v1 = m.build().unwrap();
    assert_eq!(v1.versions.loads, v0.versions.loads + 1);
    let same = |a: &Versions, b: &Versions| {
        (a.members, a.reports, a.rotations, a.acks, a.scaler)
            == (b.members, b.reports, b.rotations, b.acks, b.scaler)
    };
    assert!(same(&v0.versions, &v1.versions));
    assert!(Arc::ptr_eq(&v0.reports, &v1.reports) && Arc::ptr_eq(&v0.acks, &v1.acks));
    set(
        &mut m,
        &b,
        "ack:g1",
        r#"{"epoch":"1.b","state":"drained","inflight":0,"forced":0}"#,
    );
    let v2 = m.build().unwrap();
    assert_eq!(v2.versions.acks, v1.versions.acks + 1);
    assert_eq!(v2.versions.loads, v1.versions.loads);
    assert_eq!(v2.acks["b"]["g1"].epoch, "1.b");
    // Heartbeats that change nothing build nothing.
    hb += 1;
    m.heartbeats(Instant::now(), [(b.clone(), hb)]);
    assert!(m.build().is_none());
}

#[tokio::test(start_paused = true)]
async fn newest_incarnation_wins_and_health_merges() {
    let mut m = model(vec![]);
    let (old, new, c) = (node("b", 1, 2), node("b", 2, 2), node("c", 1, 3));
    for n in [&old, &new, &c] {
        set(&mut m, n, "ready", "1");
    }
    set(&mut m, &old, "hs", "e1");
    set(&mut m, &old, "hd:00", r#"["g1"]"#);
    set(&mut m, &new, "hs", "e1");
    set(&mut m, &new, "hd:00", r#"["g2"]"#);
    set(&mut m, &c, "hs", "e0");
    set(&mut m, &c, "hd:00", r#"["g2","g3"]"#);
    let mut hb = 0;
    beat(&mut m, &[&old, &new, &c], &mut hb).await;
    let v = m.build().unwrap();
    assert_eq!(*v.live, vec!["a", "b", "c"]);
    // b (in epoch e1, as this balancer) covers g1..g3; c's epoch is another.
    let covers = |peer: &str, g: &str| peer == "b" && ["g1", "g2", "g3"].contains(&g);
    assert_eq!(
        v.remote_health("g1", "e1", covers),
        Some(true),
        "b's old report is gone"
    );
    assert_eq!(
        v.remote_health("g2", "e1", covers),
        Some(false),
        "down for all"
    );
    assert_eq!(
        v.remote_health("g3", "e1", covers),
        Some(true),
        "b covers it and says nothing"
    );
    assert_eq!(
        v.remote_health("g4", "e1", covers),
        None,
        "nobody covers it"
    );
    // All gears at once say what each says alone, for subsets really computed.
    let all = gearlb_core::routing::subset::Assignment::new(
        &[("a", 0), ("b", 0), ("c", 0)],
        &["g1", "g2", "g3", "g4", "g5", "g6"],
        40,
    );
    for epoch in ["e0", "e1", "e9"] {
        let at_once = v.remote_health_all(epoch, &all);
        for g in ["g1", "g2", "g3", "g4", "g5", "g6", "unknown"] {
            let alone = v.remote_health(g, epoch, |p, l| all.covers(p, l));
            assert_eq!(at_once.get(g), alone, "{g} in {epoch}");
        }
    }
    // In another epoch b's silence is no evidence; explicit reports still are.
    assert_eq!(v.remote_health("g1", "e9", covers), None);
    assert_eq!(v.remote_health("g3", "e9", covers), Some(false));
    // A bucket emptied: the gear is no longer reported down.
    set(&mut m, &c, "hd:00", "[]");
    let v = m.build().unwrap();
    assert_eq!(v.remote_health("g3", "e9", covers), None);
}

#[tokio::test(start_paused = true)]
async fn rotation_ops_merge_as_they_arrive() {
    let mut m = model(vec![]);
    let b = node("b", 1, 2);
    set(
        &mut m,
        &b,
        "rot:g1",
        r#"{"gear":"g1","op":"out","ts":10,"by":"b"}"#,
    );
    set(
        &mut m,
        &b,
        "rot:g1",
        r#"{"gear":"g1","op":"in","ts":9,"by":"c"}"#,
    );
    set(
        &mut m,
        &b,
        "rot:g2",
        r#"{"gear":"wrong","op":"in","ts":9,"by":"c"}"#,
    );
    let v = m.build().unwrap();
    assert_eq!(v.rotations.len(), 1, "a key naming another gear is refused");
    assert_eq!(v.rotations["g1"].ts, 10, "an older op does not win");
}
