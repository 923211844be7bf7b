//! Rotate-out and rotate-in of web gears, agreed by every balancer.
//!
//! Owns the rotation register ([`register`]), the local drain and acknowledgments
//! ([`drain`]), and the rule that says when a rotate command is complete ([`complete`],
//! pure). Declarations and re-exports only.
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

pub mod complete;
pub mod drain;
pub mod register;

pub use complete::{progress, Progress};
pub use drain::run;
pub use register::{merge, merge_into, unix_ms, Ack, AckState, Hlc, Op, RotationOp, Rotations};
