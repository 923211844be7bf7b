//! When the rotate command's wait is over, and whether it succeeded: the completion
//! rule, pure (no I/O, no async, no clock reads: the time since the command started is
//! passed in). The driver (`app::rotate`) looks at the register, its own acks and the
//! cluster view, calls [`round`], and waits for news until it says the wait is over.
//!
//! The rule, one round at a time:
//! - **Concurrent commands.** Two balancers took the same command at once: the later
//!   op of the same direction wins everywhere, and is the epoch waited for from then on
//!   (acknowledgments of the earlier epoch count as none).
//! - **Superseded.** A later op in the other direction ends the wait, failed.
//! - **Quorum of acknowledgments.** The wait is over once this balancer and every
//!   *live* peer with an id acknowledged the epoch in its final state (drained for
//!   `out`, active for `in`); known peers that are dead in gossip are not waited for.
//! - **Timeout.** Over at `give_up` after the start ([`give_up`]: `out` → the drain
//!   timeout + 5 s, `in` → 10 s), failed unless everyone acknowledged.
//! - **The node's call** (`node`): success is this balancer's own acknowledgment;
//!   once it is seen, peers get [`NODE_PEER_GRACE`] more, then the wait is over all the
//!   same (peers that did not acknowledge are reported, not failed).
//! - **Start.** Without the node, a command needs at least half of the known
//!   balancers reachable ([`refused_for_quorum`]).

use std::collections::BTreeMap;
use std::time::Duration;

use super::register::{Ack, AckState, Op, RotationOp};

/// How long the node's rotate call waits for peers once this balancer is done.
pub const NODE_PEER_GRACE: Duration = Duration::from_secs(5);

/// A command may not start: gossip is on and fewer than half of the known balancers
/// are reachable (`live * 2 < known`). The node's call needs no quorum: draining is
/// always safe, and the op reaches the others when they are back.
pub fn refused_for_quorum(node: bool, gossip: bool, live: usize, known: usize) -> bool {
    !node && gossip && live * 2 < known
}

/// When the wait for `op` fails, from the command's start: an `out` gets its drain
/// `timeout` and 5 s more; `in` has no drain, so peers get a bounded 10 s to confirm.
pub fn give_up(op: Op, timeout: Duration) -> Duration {
    match op {
        Op::Out => timeout + Duration::from_secs(5),
        Op::In => Duration::from_secs(10),
    }
}

/// The acknowledged state that completes `op` on a balancer.
pub fn done_state(op: Op) -> AckState {
    match op {
        Op::Out => AckState::Drained,
        Op::In => AckState::Active,
    }
}

/// A peer's acknowledgment of the op of `epoch` as the waiting balancer knows it, from
/// two sources: the peer's `ack:` key in gossip and the note it sent straight here.
/// Either may be behind the other (a lost note; gossip a few rounds late), and within
/// one epoch a peer only moves towards `done` (draining, then drained): gossip's wins
/// when it already acknowledges a later op (the peer moved on), else the one for
/// `epoch` in the done state, then the one for `epoch`, then gossip's.
pub fn newest_ack<'a>(
    gossip: Option<&'a Ack>,
    direct: Option<&'a Ack>,
    epoch: &str,
    done: AckState,
) -> Option<&'a Ack> {
    // An epoch is `<timestamp>.<node id>`; ops are ordered by both.
    fn order(e: &str) -> (u64, &str) {
        let (ts, by) = e.split_once('.').unwrap_or((e, ""));
        (ts.parse::<u64>().unwrap_or(0), by)
    }
    if gossip.is_some_and(|g| order(&g.epoch) > order(epoch)) {
        return gossip;
    }
    let rank = |a: Option<&Ack>| match a {
        Some(a) if a.epoch == epoch && a.state == done => 2,
        Some(a) if a.epoch == epoch => 1,
        _ => 0,
    };
    if rank(direct) > rank(gossip) {
        direct
    } else {
        gossip.or(direct)
    }
}

/// Where one rotation stands, as the balancer waiting for it sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Balancers that acknowledged the epoch in its final state (drained, or active
    /// again for a rotate-in), sorted.
    pub acked: Vec<String>,
    /// Live balancers that did not yet, sorted.
    pub pending: Vec<String>,
    /// Requests and tunnels still open to the gear, summed over the balancers
    /// acknowledging this epoch.
    pub inflight: u64,
    /// Requests and tunnels cut at the deadline, by balancer.
    pub forced: BTreeMap<String, u64>,
}

/// The progress of the op `epoch` (whose final state is `done`) from this balancer's
/// own acknowledgment and those of the live peers (pure). Acknowledgments of another
/// epoch count as none.
pub fn progress<'a>(
    self_id: &'a str,
    own: Option<&'a Ack>,
    live_peers: impl IntoIterator<Item = (&'a str, Option<&'a Ack>)>,
    epoch: &str,
    done: AckState,
) -> Progress {
    let mut p = Progress::default();
    let all = std::iter::once((self_id, own)).chain(live_peers);
    let mut seen: BTreeMap<&str, Option<&Ack>> = BTreeMap::new();
    for (id, ack) in all {
        seen.entry(id).or_insert(ack);
    }
    for (id, ack) in seen {
        let current = ack.filter(|a| a.epoch == epoch);
        if let Some(a) = current {
            p.inflight += a.inflight;
            p.forced.insert(id.to_string(), a.forced);
        }
        if current.is_some_and(|a| a.state == done) {
            p.acked.push(id.to_string());
        } else {
            p.pending.push(id.to_string());
        }
    }
    p
}

/// What a command waits for, fixed for its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command<'a> {
    /// This balancer's id in the cluster.
    pub self_id: &'a str,
    pub op: Op,
    /// The node platform's call (see the module's documentation).
    pub node: bool,
    /// From the start, when the wait fails ([`give_up`]).
    pub give_up: Duration,
}

/// What one round carries to the next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    /// The epoch waited for (it follows a later op of the same direction).
    pub epoch: String,
    /// The node's call: when (time since the start) this balancer was first seen
    /// done. Kept once set.
    pub self_done_at: Option<Duration>,
}

impl Waiting {
    /// The wait for the op `epoch`, just started.
    pub fn new(epoch: String) -> Self {
        Waiting {
            epoch,
            self_done_at: None,
        }
    }
}

/// A peer balancer as the cluster view shows it, with its acknowledgment of the gear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer<'a> {
    /// Its id, once learnt (a peer known by address only is not waited for).
    pub id: Option<&'a str>,
    /// Alive in gossip.
    pub live: bool,
    pub ack: Option<&'a Ack>,
}

/// One look at the register, this balancer's own acknowledgment and the peers'.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen<'a> {
    /// The gear's op in force in this balancer's register.
    pub in_force: Option<&'a RotationOp>,
    /// This balancer's own acknowledgment of the gear.
    pub own: Option<&'a Ack>,
    pub peers: &'a [Peer<'a>],
    /// Time since the command started.
    pub elapsed: Duration,
}

/// The wait is over: how it went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The command's result: `self_ok` for the node's call, else every live balancer
    /// acknowledged and nothing superseded the op.
    pub ok: bool,
    /// This balancer acknowledged and nothing superseded the op.
    pub self_ok: bool,
}

/// One round of the rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Round {
    /// For the next round.
    pub waiting: Waiting,
    pub progress: Progress,
    /// A later op in the other direction, which ended the wait.
    pub superseded: Option<RotationOp>,
    /// Time left before `give_up`.
    pub left: Duration,
    /// `Some` once the wait is over.
    pub outcome: Option<Outcome>,
}

/// One round of the completion rule (pure): from what the command waits for, what the
/// last round carried, and what is seen now, where the command stands and whether the
/// wait is over.
pub fn round(cmd: &Command<'_>, waiting: &Waiting, seen: &Seen<'_>) -> Round {
    let mut epoch = waiting.epoch.clone();
    // Two balancers took the same command at once: the later op of the same direction
    // wins everywhere, and is the one to wait for.
    if let Some(o) = seen.in_force {
        if o.op == cmd.op && o.epoch() != epoch {
            epoch = o.epoch();
        }
    }
    let progress = progress(
        cmd.self_id,
        seen.own,
        seen.peers
            .iter()
            .filter(|p| p.live)
            .filter_map(|p| Some((p.id?, p.ack))),
        &epoch,
        done_state(cmd.op),
    );
    // Only a later op in the other direction undoes this one (a later one in the same
    // direction is followed above).
    let superseded = seen
        .in_force
        .filter(|o| o.epoch() != epoch && o.op != cmd.op)
        .cloned();
    let left = cmd.give_up.saturating_sub(seen.elapsed);
    let self_done = progress.acked.iter().any(|id| id == cmd.self_id);
    let mut self_done_at = waiting.self_done_at;
    if cmd.node && self_done && self_done_at.is_none() {
        self_done_at = Some(seen.elapsed);
    }
    let peers_waited_enough =
        self_done_at.is_some_and(|t| seen.elapsed.saturating_sub(t) >= NODE_PEER_GRACE);
    let over = progress.pending.is_empty()
        || superseded.is_some()
        || left.is_zero()
        || peers_waited_enough;
    let outcome = over.then(|| {
        let all_acked = progress.pending.is_empty() && superseded.is_none();
        let self_ok = self_done && superseded.is_none();
        Outcome {
            ok: if cmd.node { self_ok } else { all_acked },
            self_ok,
        }
    });
    Round {
        waiting: Waiting {
            epoch,
            self_done_at,
        },
        progress,
        superseded,
        left,
        outcome,
    }
}

#[cfg(test)]
mod tests;
