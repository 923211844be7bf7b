//! The application's balancers as one cluster: membership, liveness and shared state
//! by gossip (chitchat), over the authenticated transport in [`transport`].
//!
//! Owns the chitchat node (its handle lives as long as the [`Cluster`]), the known
//! membership (the broker's truth, from `cluster.peers` or `gearlb ctl set-peers`), and
//! the [`ClusterView`] snapshot (arc-swap) kept up to date by [`model::Model`] from
//! chitchat's key events and heartbeats, one change at a time. The request path never
//! touches chitchat; it reads the routing table, which [`sync`] keeps in step with the
//! view.
//!
//! Each node writes only its own keys; [`keys`] is the schema. No value grows with the
//! number of gears (chitchat cannot send a value larger than one message, and such a
//! value would stop every later key of its node): gear health is published by
//! exception, in buckets, relative to a subset epoch; rotations and acknowledgments
//! have one key per gear. `load` is published once a second, health when it changes.
//!
//! Liveness is [`liveness`]'s: a peer is dead after [`FAILURE_ROUNDS`] gossip rounds
//! (2 s at the default 200 ms) without a new heartbeat, not counting time this
//! balancer itself was stalled, and a peer saying `ready` = `0` (stopping) is dropped
//! at once. chitchat's own adaptive detector, which only picks gossip targets here,
//! is tuned to agree with it (see [`chitchat_config`]).
//!
//! Files: [`node`] the running node, [`settings`] its settings and chitchat's,
//! [`peers`] the membership at start, [`view`] the view, [`model`] what builds it, [`keys`] the key
//! schema, [`liveness`] who is live, [`sync`] view → routing table, [`transport`] the
//! authenticated gossip transport.

pub mod keys;
pub mod liveness;
pub mod model;
pub mod node;
pub mod peers;
pub mod settings;
pub mod sync;
#[cfg(test)]
mod tests;
pub mod transport;
pub mod view;

pub use node::Cluster;
pub use peers::{combine_peers, peers_fingerprint, PeerSource};
pub use settings::{chitchat_config, failure_timeout, NodeSettings, FAILURE_ROUNDS};
pub use view::{ClusterView, KeyEvent, Load, PeerView, ScalerClaim, Versions};
