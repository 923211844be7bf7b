//! The routing table: which backends exist, what state each is in, and which are
//! selectable right now.
//!
//! Owns the immutable [`RoutingTable`] snapshot and the [`Router`] that swaps it
//! atomically (arc-swap). The request path only ever `load()`s a snapshot and picks from
//! it: no lock, no waiting. Writers (control socket, config reload, later health and
//! cluster) are serialised by a mutex that the request path never touches.
//!
//! A [`Backend`] is the long-lived part of a backend (counters, connection pool) and is
//! carried over from one snapshot to the next while its name and address stay the same,
//! so an unchanged gear keeps its state and connections across `update-cluster`. A
//! request holds an `Arc<Backend>` for its whole life, so it finishes on the backend it
//! started on even if that backend is removed meanwhile.

pub mod affinity;
mod backend;
mod router;
pub mod select;
pub mod sticky;
pub mod subset;
mod table;
#[cfg(test)]
mod tests;

pub use affinity::Affinity;
pub use backend::{Admin, Backend, BackendSpec, BackendState, CheckReport};
pub use router::{Change, Router};
pub use table::{Entry, RoutingTable};
