//! Rotate-out and rotate-in, the pure part: the register's merge ([`register`]) and
//! the rule that says when a rotate command is complete ([`complete`]).
//!
//! Per gear, the latest operation wins: a [`RotationOp`] (`out` with a drain deadline,
//! or `in`) stamped with a hybrid logical clock and the node id, ties broken by node id
//! ([`merge`]). Each balancer acknowledges the op in force with an [`Ack`]; the balancer
//! that took the command completes when every live known peer acked that epoch
//! ([`complete::round`]). The drain itself and the driver are the application's.

pub mod complete;
pub mod register;

pub use complete::{progress, Progress};
pub use register::{merge, merge_into, unix_ms, Ack, AckState, Hlc, Op, RotationOp};
