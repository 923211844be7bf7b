//! Backend health checks: active HTTP checks and passive ejection on real traffic.
//!
//! Owns the HTTP check itself ([`HttpChecker`]: `GET <uri>` with `Host` set to the
//! gear's DNS name, on a connection kept between checks, status matched against the
//! `expect` regular expression as HAProxy's `http-check expect rstatus`), and the
//! [`run`] supervisor that keeps one check loop per backend of this balancer's subset.
//! The state machine they feed (`fall` failures → down, `rise` successes → up) is
//! `gearlb_core::health::Machine`.
//!
//! Checks of different backends are spread over the interval (each loop starts at a
//! random phase), so a balancer never sends all its checks at once. The request path
//! reports failures by bumping an atomic counter on the backend's target; only the
//! request that reaches `fall` sends an ejection event here, over a channel. The
//! supervisor is the single owner of every machine and the only writer of health into
//! the routing table.

mod check;
mod layer6;
mod supervisor;

#[cfg(test)]
mod tests;

pub use check::{CheckConn, Checker, HttpChecker};
pub use gearlb_core::health::{HealthSettings, Machine, Transition};
pub use supervisor::{run, EjectSender};
