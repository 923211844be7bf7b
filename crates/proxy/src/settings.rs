//! [`Settings`]: what the proxy reads per connection or request, built from the
//! configuration (and a service's own policy); a leaf of the proxy.

use std::time::Duration;

use gearlb_core::config::Config;
use gearlb_core::routing::sticky::Sticky;

/// Settings the proxy reads per connection or request; swapped on reload.
#[derive(Clone, Debug)]
pub struct Settings {
    pub timeouts: gearlb_core::config::Timeouts,
    /// Whose forwarding headers are kept (looked up once per connection).
    pub trust_forwarded: std::sync::Arc<crate::trust::Trust>,
    pub forwarded_headers: gearlb_core::config::ForwardedHeaders,
    pub h2c: bool,
    pub max_header_size: usize,
    pub retries: u32,
    /// Requests in a row a client connection may send to the backend of its previous
    /// request (see [`gearlb_core::routing::affinity`]); 0 = every request chosen afresh.
    pub connection_affinity: u32,
    /// Streams an HTTP/2 client connection may have open at once.
    pub h2_max_concurrent_streams: u32,
    /// How long a backend host name's addresses are used (`proxy.dns_ttl`).
    pub dns_ttl: Duration,
    /// Consecutive failures on live traffic that eject a backend; 0 = never.
    pub eject_after: u32,
    pub sticky: Option<Sticky>,
    /// How long a request waits for a slot on a backend at its `max_connections`
    /// before a 503 (HAProxy's `timeout queue`; default `timeouts.connect`).
    pub queue_timeout: Duration,
    /// One info line per request (`[log] requests`, `--log-requests`).
    pub log_requests: bool,
    /// hyper's HTTP/1 server settings, built once (not per connection).
    pub h1: hyper::server::conn::http1::Builder,
    /// What the listener speaks (`listen.mode`, or a TCP service's own listener).
    pub mode: gearlb_core::config::Mode,
    /// TCP mode's settings (`[tcp]`).
    pub tcp: gearlb_core::config::TcpConfig,
}

impl Settings {
    pub fn from_config(c: &Config) -> Self {
        let sticky = c
            .sticky
            .enabled
            .then(|| match (&c.cluster.secret, c.sticky.seal) {
                (Some(secret), true) => Sticky::sealed(
                    &c.sticky.cookie,
                    secret.as_bytes(),
                    c.sticky.max_age.as_secs(),
                ),
                _ => Sticky::plain(&c.sticky.cookie),
            });
        let mut h1 = hyper::server::conn::http1::Builder::new();
        // The request head timeout is the connection's own (see `downstream::watchdog`): no timer
        // per request.
        h1.header_read_timeout(None)
            .max_buf_size(c.limits.max_header_size)
            .max_header_size(c.limits.max_header_size)
            .writev(false)
            .keep_alive(true);
        Settings {
            h1,
            timeouts: c.timeouts.clone(),
            trust_forwarded: std::sync::Arc::new(crate::trust::Trust::of(
                &c.proxy.front_trust(c.gear.homedir.is_some()),
            )),
            forwarded_headers: c.proxy.forwarded_headers,
            h2c: c.proxy.h2c,
            max_header_size: c.limits.max_header_size,
            retries: c.proxy.retries,
            connection_affinity: c.proxy.connection_affinity,
            h2_max_concurrent_streams: c.proxy.h2_max_concurrent_streams,
            dns_ttl: c.proxy.dns_ttl,
            eject_after: if c.health.enabled { c.health.fall } else { 0 },
            sticky,
            queue_timeout: c.timeouts.connect,
            log_requests: c.log.requests || c.log.requests_forced,
            mode: c.listen.mode,
            tcp: c.tcp.clone(),
        }
    }
}
