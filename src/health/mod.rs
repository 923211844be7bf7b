//! Backend health: active HTTP checks and passive ejection on real traffic.
//!
//! Owns the health state machine ([`Machine`]: `fall` consecutive failures → down,
//! `rise` consecutive successful checks → up), the HTTP check itself ([`HttpChecker`]:
//! `GET <uri>` with `Host` set to the gear's DNS name, on a connection kept between
//! checks, status matched against the
//! `expect` regular expression as HAProxy's `http-check expect rstatus`), and the
//! [`run`] supervisor that keeps one check loop per backend of this balancer's subset.
//!
//! Checks of different backends are spread over the interval (each loop starts at a
//! random phase), so a balancer never sends all its checks at once. The request path
//! reports failures by bumping an atomic counter on the backend; only the request that
//! reaches `fall` sends an ejection event here, over a channel. The supervisor is the
//! single owner of every machine and the only writer of health into the routing table.

mod check;
mod machine;
mod settings;
mod supervisor;

#[cfg(test)]
mod tests;

pub use check::{CheckConn, Checker, HttpChecker};
pub use machine::{Machine, Transition};
pub use settings::HealthSettings;
pub use supervisor::{run, EjectSender};
