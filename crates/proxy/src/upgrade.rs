//! The balancer's own protocols on the proxy port: what a protocol reached by an
//! HTTP/1.1 upgrade must provide (gossip between balancers). A leaf: the cluster
//! implements it, the request path answers it (see `respond::endpoint_upgrade`).

use std::any::Any;

/// A protocol the balancer itself speaks on the proxy port, reached by an HTTP/1.1
/// upgrade (gossip between balancers: in a gear the HTTP port is the only public one).
/// A request asking to upgrade to one of [`UpgradeEndpoint::protocols`] never reaches
/// a gear: it is answered `101` when [`UpgradeEndpoint::admit`] accepts its
/// credentials, else `403`.
pub trait UpgradeEndpoint: Send + Sync {
    /// The `Upgrade` tokens it answers (compared case-insensitively), preferred first:
    /// a request offering several gets the first of these it names.
    fn protocols(&self) -> &[&'static str];
    /// Whether the request proves it may use `protocol` (checked before the `101`):
    /// what the `101` adds and what the connection is handed over with.
    fn admit(&self, protocol: &'static str, headers: &http::HeaderMap) -> Option<Admission>;
    /// The header carrying that proof: a request with it is never forwarded to a gear,
    /// whatever else it says.
    fn credential_header(&self) -> &http::HeaderName;
    /// Take the upgraded connection, with what [`UpgradeEndpoint::admit`] gave it.
    fn accept(
        &self,
        io: hyper::upgrade::Upgraded,
        peer: std::net::SocketAddr,
        session: Box<dyn Any + Send>,
    );
}

/// An accepted upgrade request: headers for the `101` and the connection's state.
pub struct Admission {
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub session: Box<dyn Any + Send>,
}
