//! The routing table: which backends exist, what state each is in, and which are
//! selectable right now.
//!
//! Owns the immutable [`RoutingTable`] (one [`Entry`] per [`Backend`], a value with an
//! id), selection ([`select`]: least loaded, best of two), connection affinity
//! ([`affinity`]), the sticky cookie ([`sticky`]), coverage-limited subsets
//! ([`subset`]), the routes that say which service a request is for ([`routes`]) and
//! the versions of a service's backends ([`versions`]).
//! All of it is pure: the data plane (`gearlb_proxy::router`) publishes
//! tables atomically and keeps each backend's pool and counters keyed by its id.

pub mod affinity;
mod backend;
pub mod routes;
pub mod select;
pub mod sticky;
pub mod subset;
mod table;
pub mod versions;

pub use affinity::Affinity;
pub use backend::{Admin, Backend, BackendId, BackendSpec, BackendState, CheckReport, SendProxy};
pub use table::{Entry, RoutingTable};
