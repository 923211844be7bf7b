//! The balancer's own protocols on the proxy port: what a protocol reached by an
//! HTTP/1.1 upgrade must provide (gossip between balancers). A leaf: the cluster
//! implements it, the request path answers it (see `respond::endpoint_upgrade`).

/// upgrade (gossip between balancers: in a gear the HTTP port is the only public one).
/// A request asking to upgrade to [`UpgradeEndpoint::protocol`] never reaches a gear: it
/// is answered `101` when [`UpgradeEndpoint::admit`] accepts its credentials, else `403`.
pub trait UpgradeEndpoint: Send + Sync {
    /// The `Upgrade` token it answers (compared case-insensitively).
    fn protocol(&self) -> &'static str;
    /// Whether the request proves it may use the protocol (checked before the `101`).
    fn admit(&self, headers: &http::HeaderMap) -> bool;
    /// The header carrying that proof: a request with it is never forwarded to a gear,
    /// whatever else it says.
    fn credential_header(&self) -> &http::HeaderName;
    /// Take the upgraded connection.
    fn accept(&self, io: hyper::upgrade::Upgraded, peer: std::net::SocketAddr);
}
