//! The completion rule's table: every case of the rule, one row each.

use super::*;

const S: u64 = 1000;

fn ack(epoch: &str, state: AckState) -> Ack {
    Ack {
        epoch: epoch.into(),
        state,
        inflight: 0,
        forced: 0,
    }
}

fn op(o: Op, ts: u64, by: &str) -> RotationOp {
    RotationOp {
        gear: "web1-ns".into(),
        op: o,
        ts,
        by: by.into(),
        deadline_ms: 0,
    }
}

use AckState::{Active, Drained, Draining};
use Op::{In, Out};

/// One row: the command, what the last round carried, what is seen; what the round
/// must say.
struct Case {
    name: &'static str,
    op: Op,
    node: bool,
    /// The epoch waited for so far.
    epoch: &'static str,
    /// ms since the start.
    self_done_at: Option<u64>,
    in_force: Option<RotationOp>,
    own: Option<Ack>,
    /// (id, live, ack)
    peers: Vec<(Option<&'static str>, bool, Option<Ack>)>,
    elapsed: u64,
    // Expected:
    next_epoch: &'static str,
    next_self_done_at: Option<u64>,
    acked: &'static [&'static str],
    pending: &'static [&'static str],
    superseded: bool,
    /// `Some((ok, self_ok))` once over.
    outcome: Option<(bool, bool)>,
}

const E: &str = "100.lb1";
const LATER: &str = "150.lb2";

fn base(name: &'static str) -> Case {
    Case {
        name,
        op: Out,
        node: false,
        epoch: E,
        self_done_at: None,
        in_force: Some(op(Out, 100, "lb1")),
        own: Some(ack(E, Drained)),
        peers: vec![],
        elapsed: S,
        next_epoch: E,
        next_self_done_at: None,
        acked: &["lb1"],
        pending: &[],
        superseded: false,
        outcome: Some((true, true)),
    }
}

fn peer(id: &'static str, a: Option<Ack>) -> (Option<&'static str>, bool, Option<Ack>) {
    (Some(id), true, a)
}

fn cases() -> Vec<Case> {
    vec![
        base("alone: own drain acknowledged, done"),
        Case {
            own: Some(ack(E, Draining)),
            acked: &[],
            pending: &["lb1"],
            outcome: None,
            ..base("alone: still draining, waits")
        },
        Case {
            own: None,
            acked: &[],
            pending: &["lb1"],
            outcome: None,
            ..base("alone: no acknowledgment yet, waits")
        },
        Case {
            peers: vec![
                peer("lb2", Some(ack(E, Drained))),
                peer("lb3", Some(ack(E, Drained))),
            ],
            acked: &["lb1", "lb2", "lb3"],
            ..base("quorum: every live peer acknowledged, done")
        },
        Case {
            peers: vec![
                peer("lb2", Some(ack(E, Drained))),
                peer("lb3", Some(ack(E, Draining))),
            ],
            acked: &["lb1", "lb2"],
            pending: &["lb3"],
            outcome: None,
            ..base("quorum not reached: a live peer still draining, time left, waits")
        },
        Case {
            peers: vec![peer("lb2", None)],
            pending: &["lb2"],
            outcome: None,
            ..base("a live peer that never acknowledged, waits")
        },
        Case {
            peers: vec![peer("lb2", Some(ack("99.lb2", Drained)))],
            pending: &["lb2"],
            outcome: None,
            ..base("an acknowledgment of another epoch counts as none")
        },
        Case {
            peers: vec![
                peer("lb2", Some(ack(E, Drained))),
                (Some("lb3"), false, None),
            ],
            acked: &["lb1", "lb2"],
            ..base("unreachable peer (dead in gossip) not waited for, done")
        },
        Case {
            peers: vec![(None, true, None)],
            ..base("a live peer known by address only is not waited for")
        },
        Case {
            peers: vec![peer("lb1", None)],
            ..base("this balancer listed among the peers counts once, with its own ack")
        },
        Case {
            peers: vec![peer("lb2", Some(ack(E, Draining)))],
            elapsed: 65 * S - 1,
            pending: &["lb2"],
            outcome: None,
            ..base("timeout not yet (out: drain timeout + 5 s), waits")
        },
        Case {
            peers: vec![peer("lb2", Some(ack(E, Draining)))],
            elapsed: 65 * S,
            pending: &["lb2"],
            outcome: Some((false, true)),
            ..base("timeout with a peer pending: failed")
        },
        Case {
            own: Some(ack(E, Draining)),
            elapsed: 70 * S,
            acked: &[],
            pending: &["lb1"],
            outcome: Some((false, false)),
            ..base("timeout with this balancer still draining: failed")
        },
        Case {
            in_force: Some(op(In, 200, "lb2")),
            peers: vec![peer("lb2", Some(ack(E, Drained)))],
            acked: &["lb1", "lb2"],
            superseded: true,
            outcome: Some((false, false)),
            ..base("superseded by a later op in the other direction: failed")
        },
        Case {
            in_force: Some(op(Out, 150, "lb2")),
            own: Some(ack(LATER, Drained)),
            peers: vec![peer("lb2", Some(ack(LATER, Drained)))],
            next_epoch: LATER,
            acked: &["lb1", "lb2"],
            ..base("concurrent same direction: the later op is followed, done on its acks")
        },
        Case {
            in_force: Some(op(Out, 150, "lb2")),
            own: Some(ack(E, Drained)),
            peers: vec![peer("lb2", Some(ack(E, Drained)))],
            next_epoch: LATER,
            acked: &[],
            pending: &["lb1", "lb2"],
            outcome: None,
            ..base("concurrent same direction: acks of the earlier op no longer count")
        },
        Case {
            epoch: LATER,
            in_force: Some(op(Out, 150, "lb2")),
            own: Some(ack(LATER, Drained)),
            next_epoch: LATER,
            ..base("the followed epoch is kept")
        },
        Case {
            in_force: None,
            ..base("no op in force in the register: the epoch stays, not superseded")
        },
        Case {
            node: true,
            peers: vec![peer("lb2", Some(ack(E, Draining)))],
            pending: &["lb2"],
            next_self_done_at: Some(S),
            outcome: None,
            ..base("node: own drain done, a peer pending: waits, the grace starts")
        },
        Case {
            node: true,
            self_done_at: Some(S),
            peers: vec![peer("lb2", Some(ack(E, Draining)))],
            elapsed: 6 * S - 1,
            pending: &["lb2"],
            next_self_done_at: Some(S),
            outcome: None,
            ..base("node: peers' grace (NODE_PEER_GRACE) not over, waits")
        },
        Case {
            node: true,
            self_done_at: Some(S),
            peers: vec![peer("lb2", Some(ack(E, Draining)))],
            elapsed: 6 * S,
            pending: &["lb2"],
            next_self_done_at: Some(S),
            outcome: Some((true, true)),
            ..base("node: peers' grace over: success on own drain, the peer reported")
        },
        Case {
            node: true,
            peers: vec![peer("lb2", Some(ack(E, Drained)))],
            acked: &["lb1", "lb2"],
            next_self_done_at: Some(S),
            outcome: Some((true, true)),
            ..base("node: everyone acknowledged: done at once")
        },
        Case {
            node: true,
            own: Some(ack(E, Draining)),
            peers: vec![peer("lb2", Some(ack(E, Drained)))],
            elapsed: 65 * S,
            acked: &["lb2"],
            pending: &["lb1"],
            outcome: Some((false, false)),
            ..base("node: own drain not done at the timeout: failed, whatever the peers")
        },
        Case {
            node: true,
            self_done_at: Some(S),
            in_force: Some(op(Out, 150, "lb2")),
            own: Some(ack(E, Drained)),
            peers: vec![peer("lb2", Some(ack(LATER, Draining)))],
            elapsed: 6 * S,
            next_epoch: LATER,
            next_self_done_at: Some(S),
            acked: &[],
            pending: &["lb1", "lb2"],
            outcome: Some((false, false)),
            ..base("node: the grace, once started, runs on when a later op is followed")
        },
        Case {
            node: true,
            in_force: Some(op(In, 200, "lb2")),
            next_self_done_at: Some(S),
            superseded: true,
            outcome: Some((false, false)),
            ..base("node: superseded: failed although drained")
        },
        Case {
            peers: vec![peer("lb2", Some(ack(E, Draining)))],
            elapsed: 30 * S,
            pending: &["lb2"],
            outcome: None,
            ..base("not the node: no grace, a pending peer is waited for until the timeout")
        },
        Case {
            op: In,
            in_force: Some(op(In, 100, "lb1")),
            own: Some(ack(E, Active)),
            peers: vec![peer("lb2", Some(ack(E, Active)))],
            acked: &["lb1", "lb2"],
            ..base("rotate-in: every balancer active again, done")
        },
        Case {
            op: In,
            in_force: Some(op(In, 100, "lb1")),
            own: Some(ack(E, Active)),
            peers: vec![peer("lb2", Some(ack(E, Drained)))],
            elapsed: 10 * S - 1,
            pending: &["lb2"],
            outcome: None,
            ..base("rotate-in: a drained acknowledgment is not done; within 10 s, waits")
        },
        Case {
            op: In,
            in_force: Some(op(In, 100, "lb1")),
            own: Some(ack(E, Active)),
            peers: vec![peer("lb2", None)],
            elapsed: 10 * S,
            pending: &["lb2"],
            outcome: Some((false, true)),
            ..base("rotate-in: 10 s whatever the drain timeout, then failed")
        },
        Case {
            op: In,
            in_force: Some(op(Out, 200, "lb2")),
            own: Some(ack(E, Active)),
            superseded: true,
            outcome: Some((false, false)),
            ..base("rotate-in superseded by a later rotate-out")
        },
    ]
}

#[test]
fn completion_rule_table() {
    let ms = Duration::from_millis;
    for c in cases() {
        let cmd = Command {
            self_id: "lb1",
            op: c.op,
            node: c.node,
            give_up: give_up(c.op, Duration::from_secs(60)),
        };
        let waiting = Waiting {
            epoch: c.epoch.into(),
            self_done_at: c.self_done_at.map(ms),
        };
        let peers: Vec<Peer<'_>> = c
            .peers
            .iter()
            .map(|(id, live, ack)| Peer {
                id: *id,
                live: *live,
                ack: ack.as_ref(),
            })
            .collect();
        let seen = Seen {
            in_force: c.in_force.as_ref(),
            own: c.own.as_ref(),
            peers: &peers,
            elapsed: ms(c.elapsed),
        };
        let r = round(&cmd, &waiting, &seen);
        let name = c.name;
        assert_eq!(r.waiting.epoch, c.next_epoch, "{name}: epoch");
        assert_eq!(
            r.waiting.self_done_at,
            c.next_self_done_at.map(ms),
            "{name}: self_done_at"
        );
        assert_eq!(r.progress.acked, c.acked, "{name}: acked");
        assert_eq!(r.progress.pending, c.pending, "{name}: pending");
        assert_eq!(r.superseded.is_some(), c.superseded, "{name}: superseded");
        assert_eq!(
            r.outcome.map(|o| (o.ok, o.self_ok)),
            c.outcome,
            "{name}: outcome"
        );
        assert_eq!(
            r.left,
            cmd.give_up.saturating_sub(ms(c.elapsed)),
            "{name}: left"
        );
    }
}

#[test]
fn in_flight_and_forced_are_summed_over_the_current_epoch() {
    let mut own = ack(E, Draining);
    own.inflight = 2;
    let mut lb2 = ack(E, Drained);
    lb2.forced = 4;
    let mut old = ack("99.lb3", Draining);
    old.inflight = 7;
    let peers = [
        Peer {
            id: Some("lb2"),
            live: true,
            ack: Some(&lb2),
        },
        Peer {
            id: Some("lb3"),
            live: true,
            ack: Some(&old),
        },
    ];
    let in_force = op(Out, 100, "lb1");
    let r = round(
        &Command {
            self_id: "lb1",
            op: Out,
            node: false,
            give_up: give_up(Out, Duration::from_secs(60)),
        },
        &Waiting::new(E.into()),
        &Seen {
            in_force: Some(&in_force),
            own: Some(&own),
            peers: &peers,
            elapsed: Duration::ZERO,
        },
    );
    assert_eq!(r.progress.inflight, 2);
    assert_eq!(
        r.progress.forced,
        BTreeMap::from([("lb1".to_string(), 0), ("lb2".to_string(), 4)])
    );
    assert_eq!(r.outcome, None);
}

#[test]
fn quorum_to_start() {
    // (node, gossip, live, known) → refused
    for (node, gossip, live, known, refused) in [
        (false, true, 1, 3, true),
        (false, true, 2, 3, false),
        (false, true, 2, 4, false),
        (false, true, 1, 4, true),
        (false, true, 0, 0, false),
        (false, false, 1, 3, false),
        (true, true, 1, 3, false),
    ] {
        assert_eq!(
            refused_for_quorum(node, gossip, live, known),
            refused,
            "node {node}, gossip {gossip}, {live} of {known} live"
        );
    }
}

#[test]
fn give_up_and_done_states() {
    assert_eq!(
        give_up(Out, Duration::from_secs(60)),
        Duration::from_secs(65)
    );
    assert_eq!(
        give_up(In, Duration::from_secs(60)),
        Duration::from_secs(10)
    );
    assert_eq!(done_state(Out), Drained);
    assert_eq!(done_state(In), Active);
}

#[test]
fn the_newest_acknowledgment_of_the_epoch_wins_from_either_source() {
    let draining = ack("2.lb1", AckState::Draining);
    let drained = ack("2.lb1", AckState::Drained);
    let old = ack("1.lb1", AckState::Drained);
    let pick = |g, d| newest_ack(g, d, "2.lb1", AckState::Drained).cloned();
    // The note came first (gossip is still on the old epoch, or silent).
    assert_eq!(pick(Some(&old), Some(&draining)), Some(draining.clone()));
    assert_eq!(pick(None, Some(&drained)), Some(drained.clone()));
    // Gossip is ahead of a lost note.
    assert_eq!(pick(Some(&drained), Some(&draining)), Some(drained.clone()));
    // Both on the epoch: the one done wins, whichever it is.
    assert_eq!(pick(Some(&draining), Some(&drained)), Some(drained.clone()));
    // Gossip already shows the peer on a later op: not the note's older news.
    let later = ack("3.lb2", AckState::Draining);
    assert_eq!(pick(Some(&later), Some(&drained)), Some(later.clone()));
    // Nothing for the epoch anywhere: gossip's, as before notes.
    assert_eq!(pick(Some(&old), None), Some(old.clone()));
    assert_eq!(pick(None, None), None);
}
