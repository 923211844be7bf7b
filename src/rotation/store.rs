//! [`Rotations`]: this balancer's copy of the rotation register (the ops in force, as
//! `gearlb_core::rotation::register` merges them) and its own acknowledgments of them,
//! as the drain loop sets them, with notifications for the drain loop and the driver.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use gearlb_core::rotation::register::{merge, merge_into, unix_ms, Ack, Hlc, Op, RotationOp};
use tokio::sync::watch;

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
    fn learning_keeps_the_latest() {
        let r = Rotations::new(vec![op("g1", Op::Out, 10, "lb1")]);
        assert!(!r.learn(&[op("g1", Op::In, 9, "lb2")]), "older op ignored");
        assert!(r.learn(&[op("g1", Op::In, 12, "lb2")]));
        assert_eq!(r.ops()["g1"].op, Op::In);
        assert!(r.hlc.now() > 12);
    }
}
