//! The last-writer-wins register of rotation ops.
//!
//! Per gear, the latest operation wins: a [`RotationOp`] (`out` with a drain deadline,
//! or `in`) stamped with a hybrid logical clock ([`Hlc`]) and the node id, ties broken
//! by node id ([`merge`], pure). A balancer's acknowledgment of the op in force is an
//! [`Ack`]. (The balancer's own copy of the register is the application's
//! `rotation::Rotations`.)

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

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
}
