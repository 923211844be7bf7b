//! Gossip transport: chitchat's messages in authenticated frames over a connection
//! upgraded from HTTP on the proxy port (or over a TCP or UDP port of its own).
//!
//! Owns the frame format, its authentication, and moving frames between balancers.
//! In a gear the only public port is the HTTP one: the node announces every public
//! endpoint of a `web_proxy` cartridge to the routers as an application endpoint, and
//! its port proxy forwards TCP only. So by default ([`Carrier::Http`]) a balancer opens
//! one cached connection per peer to the peer's public HTTP address, asks for
//! `Upgrade: gearlb-gossip/1` with an authenticated handshake ([`Auth::handshake`]),
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
//! Frame (`u32` big-endian length prefix on TCP; the datagram itself on UDP):
//!
//! ```text
//! "GLB1" | cluster tag (8) | addr len (1) | sender's advertised gossip address | message | HMAC-SHA256 (32)
//! ```
//!
//! The cluster tag is a hash of the cluster id (the application), so frames from another
//! application's balancers are told apart from forgeries; the HMAC (key derived with
//! HKDF from the cluster secret) covers everything before it. A frame that is too short,
//! too long, from another cluster or badly tagged is dropped and counted; a TCP
//! connection that sends one is closed. The sender's address inside the frame is what
//! chitchat sees as `from`, so replies go to the peer's advertised (public) address.
//!
//! chitchat 0.13 keeps its message encoding crate-private; rather than re-implement its
//! wire format, [`Codec`] borrows chitchat's own UDP socket over a private loopback pair
//! to turn envelopes into bytes and back. Gossip is a few messages per interval, so the

mod codec;
mod frame;
mod net;
pub mod notes;
mod outbound;
mod slots;

pub use crate::config::Carrier;
pub use codec::Codec;
pub use frame::{
    Auth, FrameError, GossipCounters, GossipStats, AUTH_HEADER, MAX_FRAME, UPGRADE_PATH,
    UPGRADE_PROTOCOL,
};
pub use net::{GossipTransport, GossipUpgrade, InboundStream};
pub use notes::{Note, Notes};
