//! Gossip transport: chitchat's messages in encrypted frames over a connection
//! upgraded from HTTP on the proxy port (or over a TCP or UDP port of its own).
//!
//! Owns the frame format, its authentication, and moving frames between balancers.
//! In a gear the only public port is the HTTP one: the node announces every public
//! endpoint of a `web_proxy` cartridge to the routers as an application endpoint, and
//! its port proxy forwards TCP only. So by default ([`Carrier::Http`]) a balancer opens
//! one cached connection per peer to the peer's public HTTP address, asks for
//! `Upgrade: gearlb-gossip/2` with an authenticated handshake (`session`),
//! and after the `101` writes frames on it; the peer's proxy hands such connections
//! over ([`GossipUpgrade`], an [`UpgradeEndpoint`](crate::proxy::UpgradeEndpoint)) and no request asking for that
//! protocol ever reaches a web gear. [`Carrier::Tcp`] and [`Carrier::Udp`] carry the
//! same frames on a port of their own (`cluster.listen`, standalone set-ups). Incoming
//! connections only ever carry frames towards this balancer; replies go out on its own
//! connection to the sender's advertised address.
//!
//! The same frames carry notes ([`notes`]): a message from one balancer straight to
//! another outside gossip (a rotation acknowledgment for the balancer waiting for it).
//!
//! **Wire v2** (this release): a connection starts with an upgrade bound to it — a
//! nonce from each side, keys derived from the cluster secret — and every frame is
//! encrypted and authenticated in sequence (`session`); UDP datagrams are sealed one
//! by one with a replay window (`datagram`). **Wire v1** (the release before's,
//! spoken for one release: [`crate::config::GossipWire`]) is
//! `"GLB1" | cluster tag (8) | addr len (1) | address | message | HMAC-SHA256 (32)`
//! behind a `u32` length on connections, after a `gearlb-gossip/1` upgrade on the proxy
//! port or straight away on `cluster.listen` ([`Auth`]). `inbound` tells the two
//! apart and checks the handshakes; `outbound` offers v2 and falls back to v1 for a
//! peer of the release before.
//!
//! The cluster tag is a hash of the cluster id (the application), so frames from another
//! application's balancers are told apart from forgeries. A frame that fails is dropped
//! and counted; a connection that sends one is closed. The sender's address inside the
//! frame is what chitchat sees as `from`, so replies go to the peer's advertised (public)
//! address.
//!
//! chitchat 0.13 keeps its message encoding crate-private; rather than re-implement its
//! wire format, [`Codec`] borrows chitchat's own UDP socket over a private loopback pair
//! to turn envelopes into bytes and back. Gossip is a few messages per interval, so the

mod codec;
mod datagram;
mod delta;
mod frame;
mod inbound;
mod limits;
mod net;
pub mod notes;
mod outbound;
mod session;
mod slots;

pub use crate::config::Carrier;
pub use codec::Codec;
pub use frame::Auth;
pub use limits::{
    FrameError, GossipCounters, GossipStats, AUTH_HEADER, MAX_FRAME, UPGRADE_PATH, UPGRADE_PROTOCOL,
};
pub use net::{GossipTransport, GossipUpgrade, InboundStream};
pub use notes::{Note, Notes};
pub use session::UPGRADE_PROTOCOL_V2;
