//! The last-writer-wins register of rotation ops, and this balancer's copy of it.
//!
//! Per gear, the latest operation wins: a [`RotationOp`] (`out` with a drain deadline,
//! or `in`) stamped with a hybrid logical clock ([`Hlc`]) and the node id, ties broken
//! by node id ([`merge`], pure). [`Rotations`] holds the ops in force on this balancer
//! and its own acknowledgments ([`Ack`]) of them, as the drain loop sets them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// The two operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Out,
    In,
}

/// One rotation command, as every balancer stores and gossips it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RotationOp {
    /// The gear's sticky label, `<gearname>-<ns>`.
    pub gear: String,
    pub op: Op,
    /// Hybrid logical timestamp (microseconds).
    pub ts: u64,
    /// Node id of the balancer that took the command.
    pub by: String,
    /// `out`: when remaining requests and tunnels are cut (Unix milliseconds).
    #[serde(default)]
    pub deadline_ms: u64,
}

impl RotationOp {
    /// Identifies this op in acknowledgments.
    pub fn epoch(&self) -> String {
        format!("{}.{}", self.ts, self.by)
    }

    fn order(&self) -> (u64, &str) {
        (self.ts, &self.by)
    }
}

/// Per gear, the op in force: the latest by (timestamp, node id).
pub fn merge<'a>(ops: impl IntoIterator<Item = &'a RotationOp>) -> BTreeMap<String, RotationOp> {
    let mut out: BTreeMap<String, RotationOp> = BTreeMap::new();
    for op in ops {
        match out.get(&op.gear) {
            Some(cur) if cur.order() >= op.order() => {}
            _ => {
                out.insert(op.gear.clone(), op.clone());
            }
        }
    }
    out
}

/// Merge one op into a register of ops in force; true when it changed the register.
pub fn merge_into(register: &mut BTreeMap<String, RotationOp>, op: RotationOp) -> bool {
    match register.get(&op.gear) {
        Some(cur) if cur.order() >= op.order() => false,
        _ => {
            register.insert(op.gear.clone(), op);
            true
        }
    }
}

/// Where a balancer is with the op in force for a gear.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AckState {
    Draining,
    Drained,
    Active,
}

/// A balancer's acknowledgment of a gear's op.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    pub epoch: String,
    pub state: AckState,
    /// Requests and tunnels to the gear still open on this balancer.
    pub inflight: u64,
    /// Requests and tunnels cut at the deadline.
    pub forced: u64,
}

/// Hybrid logical clock: wall-clock microseconds, never going backwards and always
/// past every timestamp seen.
#[derive(Debug, Default)]
pub struct Hlc {
    last: AtomicU64,
}

pub use crate::time::unix_ms;

impl Hlc {
    pub fn now(&self) -> u64 {
        let wall = crate::time::unix_us();
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let next = wall.max(last.saturating_add(1));
            match self
                .last
                .compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }

    pub fn observe(&self, ts: u64) {
        self.last.fetch_max(ts, Ordering::Relaxed);
    }
}

/// This balancer's rotation register and drain state.
pub struct Rotations {
    pub(super) ops: Mutex<BTreeMap<String, RotationOp>>,
    pub(super) acks: Mutex<BTreeMap<String, Ack>>,
    /// Forced counts by epoch.
    pub(super) forced: Mutex<HashMap<String, u64>>,
    pub hlc: Hlc,
    pub(super) changed: watch::Sender<u64>,
    pub(super) acks_changed: watch::Sender<u64>,
    /// Epochs of ops to gossip to every live peer once published.
    pub(super) fan_out: Mutex<HashSet<String>>,
}

impl Rotations {
    /// Start from the persisted ops.
    pub fn new(saved: Vec<RotationOp>) -> Self {
        let hlc = Hlc::default();
        for op in &saved {
            hlc.observe(op.ts);
        }
        Rotations {
            ops: Mutex::new(merge(&saved)),
            acks: Mutex::new(BTreeMap::new()),
            forced: Mutex::new(HashMap::new()),
            hlc,
            changed: watch::Sender::new(0),
            acks_changed: watch::Sender::new(0),
            fan_out: Mutex::new(HashSet::new()),
        }
    }

    /// The ops in force, by gear.
    pub fn ops(&self) -> BTreeMap<String, RotationOp> {
        self.ops.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// This balancer's own acknowledgments, by gear.
    pub fn acks(&self) -> BTreeMap<String, Ack> {
        self.acks.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// Take a new op (from a command). Returns it stamped.
    pub fn submit(&self, gear: &str, op: Op, by: &str, timeout: Duration) -> RotationOp {
        let op = RotationOp {
            gear: gear.to_string(),
            op,
            ts: self.hlc.now(),
            by: by.to_string(),
            deadline_ms: match op {
                // Saturating: a control request may name any timeout (`timeout_ms`).
                Op::Out => {
                    unix_ms().saturating_add(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX))
                }
                Op::In => 0,
            },
        };
        if let Ok(mut ops) = self.ops.lock() {
            ops.insert(op.gear.clone(), op.clone());
        }
        self.changed.send_modify(|g| *g += 1);
        op
    }

    /// Notified when an op is submitted or learnt.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Merge ops learnt from peers; true when the ops in force changed.
    pub(super) fn learn<'a>(&self, remote: impl IntoIterator<Item = &'a RotationOp>) -> bool {
        let Ok(mut ops) = self.ops.lock() else {
            return false;
        };
        let mut changed = false;
        for op in remote {
            self.hlc.observe(op.ts);
            changed |= merge_into(&mut ops, op.clone());
        }
        changed
    }

    /// Notified when this balancer's acknowledgments change.
    pub fn subscribe_acks(&self) -> watch::Receiver<u64> {
        self.acks_changed.subscribe()
    }

    /// Ask [`run`](super::drain::run) to gossip the op of `epoch` to every live peer as soon as it is
    /// published (the balancer that took a command, once: peers then have it after one
    /// round trip instead of a few gossip rounds).
    pub fn fan_out(&self, epoch: String) {
        if let Ok(mut f) = self.fan_out.lock() {
            f.insert(epoch);
        }
        self.changed.send_modify(|g| *g += 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(gear: &str, op: Op, ts: u64, by: &str) -> RotationOp {
        RotationOp {
            gear: gear.into(),
            op,
            ts,
            by: by.into(),
            deadline_ms: 0,
        }
    }

    #[test]
    fn latest_op_wins_ties_by_node_id() {
        let a = op("g1", Op::Out, 10, "lb1");
        let b = op("g1", Op::In, 11, "lb2");
        let c = op("g2", Op::Out, 5, "lb1");
        let d = op("g2", Op::In, 5, "lb2");
        // Any order, same result: a commutative, idempotent merge.
        for ops in [
            vec![&a, &b, &c, &d],
            vec![&d, &c, &b, &a],
            vec![&b, &a, &a, &d, &c],
        ] {
            let m = merge(ops);
            assert_eq!(m["g1"], b);
            assert_eq!(m["g2"], d, "same timestamp: the higher node id wins");
        }
    }

    #[test]
    fn hlc_is_monotonic_and_passes_observed_times() {
        let h = Hlc::default();
        let a = h.now();
        let b = h.now();
        assert!(b > a);
        h.observe(b + 10_000_000_000);
        assert!(h.now() > b + 10_000_000_000);
    }

    #[test]
    fn learning_keeps_the_latest() {
        let r = Rotations::new(vec![op("g1", Op::Out, 10, "lb1")]);
        assert!(!r.learn(&[op("g1", Op::In, 9, "lb2")]), "older op ignored");
        assert!(r.learn(&[op("g1", Op::In, 12, "lb2")]));
        assert_eq!(r.ops()["g1"].op, Op::In);
        assert!(r.hlc.now() > 12);
    }
}
