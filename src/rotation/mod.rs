//! Rotate-out and rotate-in of web gears, agreed by every balancer: this balancer's
//! copy of the register ([`Rotations`], `store`) and the local drain and
//! acknowledgments ([`drain`]). The register's merge and the completion rule are pure
//! and live in `gearlb_core::rotation` (re-exported here); the driver that waits for a
//! command's completion is `app::rotate`.
//!
//! - **Register.** Per gear, the latest operation wins: an [`RotationOp`] (`out` with a
//!   drain deadline, or `in`) stamped with a hybrid logical clock and the node id, ties
//!   broken by node id ([`merge`], pure). Every balancer publishes the ops it knows
//!   under `rot:<gear>` in its own gossip keys, so an op outlives the balancer that
//!   issued it, and a balancer joining later learns it from gossip and from its state
//!   file. Ops are persistent: nothing but a later op changes a gear's rotation.
//! - **Drain.** For an `out` op, a balancer stops choosing the gear (sticky requests are
//!   redispatched and re-pinned), closes its idle pooled connections, and lets requests
//!   and tunnels in flight finish. When none is left and every connection to the gear is
//!   closed it is drained. At the deadline whatever is left is cut, and counted as forced.
//! - **Acks.** Each balancer publishes `ack:<gear>` = `{epoch, state, inflight, forced}`
//!   for the op in force; the balancer that took the command completes when every live
//!   known peer acked that epoch (see [`complete`]; the driver is `app::rotate`).

pub mod drain;
mod store;

pub use drain::run;
pub use gearlb_core::rotation::{complete, register};
pub use gearlb_core::rotation::{
    merge, merge_into, progress, unix_ms, Ack, AckState, Hlc, Op, Progress, RotationOp,
};
pub use store::Rotations;
