//! Request and response rewriting between client and backend: pure functions over
//! `http` parts.
//!
//! Owns what the balancer changes in a message, and promises to change nothing else:
//! the Host header and the path are forwarded exactly as received; hop-by-hop headers
//! (RFC 9110 §7.6.1, plus any named in `Connection`) are removed both ways; the
//! forwarding headers chosen by `[proxy] forwarded_headers` are set (by default
//! `X-Forwarded-For`, appended to, and `X-Forwarded-Proto`; also `X-Forwarded-Host/-Port`
//! and RFC 7239 `Forwarded` when listed).
//!
//! Trust: from a trusted front (`proxy.trust_forwarded`, decided once per connection by
//! its address: [`ClientInfo::trusted`]; in a gear its node and the routers in front),
//! `X-Forwarded-Proto/-Host/-Port` already present are kept and `X-Forwarded-For` and
//! `Forwarded` are appended to, whether gearlb sets them or not; from anyone else the
//! ones gearlb sets are replaced and the others removed, so a client can claim neither
//! another address nor to have come over HTTPS. Where gearlb terminates TLS itself,
//! `X-Forwarded-Proto` is always `https`.
//!
//! Cost: this runs for every request, so it allocates as little as it can. What is the
//! same for every request of a connection (the client address as text, the listener's
//! port) is rendered once in [`ClientInfo`] and shared by reference counting; header
//! values taken from the request (`Host`) are shared, not copied; the values built per
//! request (`Forwarded`, a longer `X-Forwarded-For`) take one buffer each.
//!
//! The parts, each a leaf (no part imports this file): [`request`] (the request head
//! rewritten), [`forwarded`] (`X-Forwarded-*`, `Forwarded`, and the [`ClientInfo`] they
//! are made from), [`hop`] (hop-by-hop headers, both ways, and the response head),
//! [`upgrade`] (what an upgrade request offers a gear, and which `101` may answer it),
//! [`framing`] (what is refused before forwarding, transfer codings), `values`
//! (header values built from bytes).

pub mod forwarded;
pub mod framing;
pub mod head;
pub mod hop;
pub mod request;
pub mod upgrade;
mod values;

pub use forwarded::ClientInfo;
pub use framing::{request_problem, transfer_codings};
pub use hop::{prepare_response, remove_hop_headers};
pub use request::{join_cookies, prepare_request};
pub use upgrade::{is_upgrade, own_protocol, switch_allowed, upgrade_offer, upgrade_problem, Own};

#[cfg(test)]
mod tests;
