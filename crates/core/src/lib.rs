//! gearlb-core: the balancer's pure decisions, with no I/O of their own: no tokio, no
//! sockets, no TLS in this crate's dependencies (`tests/layers.rs` checks it).
//!
//! - [`config`]: TOML file + gear environment → one validated `Config` (every problem
//!   listed; one duration rule for every source).
//! - [`gear`]: gear names, addresses and the platform's `update-cluster` entry format.
//! - [`routing`]: the routing table (backends as values with an id), selection,
//!   coverage-limited [`routing::subset`]s, the [`routing::sticky`] cookie and
//!   connection [`routing::affinity`].
//! - [`health`]: the health state machine and the check settings.
//! - [`rotation`]: the rotation register's merge and the completion rule.
//! - [`scaler`]: the election, the scaling policy and scale events.
//! - [`spi`]: a router's table of applications from the broker's routing SPI events,
//!   what it routes, and its reconciliation with the broker's REST API.
//! - [`time`]: wall-clock Unix time.
//! - [`wire`]: TCP mode's byte formats (ClientHello SNI, PROXY protocol, TLS hello check).
//!
//! The data plane (`gearlb-proxy`) and the application (`gearlb`) build on it; it names
//! neither.

#![forbid(unsafe_code)]

pub mod config;
pub mod gear;
pub mod health;
pub mod rotation;
pub mod routing;
pub mod scaler;
pub mod spi;
pub mod time;
pub mod wire;
