//! The forwarding headers chosen by `[proxy] forwarded_headers`: `X-Forwarded-For`
//! (appended to), `X-Forwarded-Proto/-Host/-Port` (kept from a trusted front proxy,
//! else set or removed) and RFC 7239 `Forwarded`; and [`ClientInfo`], what they are
//! made from, rendered once per connection.

use std::net::{IpAddr, SocketAddr};

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use super::values::{shared_value, value};
use gearlb_core::config::ForwardedHeaders;

/// What the proxy knows about the client connection.
#[derive(Clone, Debug)]
pub struct ClientInfo {
    pub peer: SocketAddr,
    /// Port of the listener the client connected to.
    pub local_port: u16,
    /// `http` or `https`.
    pub scheme: &'static str,
    /// The client's IP address as a header value (`X-Forwarded-For`).
    pub(super) ip: HeaderValue,
    /// The listener's port as a header value (`X-Forwarded-Port`).
    pub(super) port: HeaderValue,
    /// The RFC 7239 node of the client: `192.0.2.7`, or `"[2001:db8::1]"`.
    pub(super) node: Bytes,
    /// The client is a trusted front (`proxy.trust_forwarded`, see
    /// [`crate::trust::Trust`]): the forwarding headers it sends are kept (appended to).
    pub trusted: bool,
}

impl ClientInfo {
    pub fn new(peer: SocketAddr, local_port: u16, scheme: &'static str) -> Self {
        let ip = peer.ip();
        let node = match ip {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("\"[{v6}]\""),
        };
        ClientInfo {
            peer,
            local_port,
            scheme,
            ip: shared_value(ip.to_string().into_bytes()),
            port: shared_value(local_port.to_string().into_bytes()),
            node: Bytes::from(node.into_bytes()),
            trusted: false,
        }
    }

    /// The same client, trusted (or not) as a front.
    pub fn trusted(mut self, trusted: bool) -> Self {
        self.trusted = trusted;
        self
    }
}

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
static X_FORWARDED_PORT: HeaderName = HeaderName::from_static("x-forwarded-port");

/// Set the forwarding headers `set` chooses on a request head on its way to a backend
/// (the last step of [`super::request::prepare_request`]).
#[inline]
pub(super) fn set_forwarding_headers(
    h: &mut HeaderMap,
    client: &ClientInfo,
    trust_forwarded: bool,
    set: ForwardedHeaders,
) {
    if set.x_forwarded_for {
        let mut buf = BytesMut::new();
        // A front's list is appended to; anyone else's is replaced: the client's
        // address comes first for whoever reads it behind.
        if trust_forwarded && h.contains_key(&X_FORWARDED_FOR) {
            buf.reserve(64);
            append_joined(&mut buf, h, &X_FORWARDED_FOR);
        }
        let xff = if buf.is_empty() {
            client.ip.clone()
        } else {
            buf.put_slice(b", ");
            buf.put_slice(client.ip.as_bytes());
            value(buf)
        };
        h.insert(X_FORWARDED_FOR.clone(), xff);
    } else if !trust_forwarded {
        // Not set here: only a front's list goes on.
        h.remove(&X_FORWARDED_FOR);
    }

    // Over TLS the balancer says `https` itself, whoever the client is.
    own_header(
        h,
        &X_FORWARDED_PROTO,
        set.x_forwarded_proto,
        trust_forwarded && client.scheme == "http",
        |_| Some(HeaderValue::from_static(client.scheme)),
    );
    // Shared with the request's own Host value: no copy.
    own_header(
        h,
        &X_FORWARDED_HOST,
        set.x_forwarded_host,
        trust_forwarded,
        |h| h.get(header::HOST).cloned(),
    );
    own_header(
        h,
        &X_FORWARDED_PORT,
        set.x_forwarded_port,
        trust_forwarded,
        |_| Some(client.port.clone()),
    );

    if !set.forwarded {
        if !trust_forwarded {
            h.remove(header::FORWARDED);
        }
        return;
    }
    let mut buf = BytesMut::with_capacity(96);
    if trust_forwarded && h.contains_key(header::FORWARDED) {
        append_joined(&mut buf, h, &header::FORWARDED);
        if !buf.is_empty() {
            buf.put_slice(b", ");
        }
    }
    buf.put_slice(b"for=");
    buf.put_slice(&client.node);
    // A Host that is not text is left out of the element rather than mangled.
    if let Some(host) = h.get(header::HOST).and_then(|v| v.to_str().ok()) {
        buf.put_slice(b";host=");
        put_forwarded_value(&mut buf, host);
    }
    buf.put_slice(b";proto=");
    buf.put_slice(client.scheme.as_bytes());
    h.insert(header::FORWARDED, value(buf));
}

/// One of `X-Forwarded-Proto/-Host/-Port`. What a trusted front sent is kept; else,
/// when gearlb `sets` the header, it becomes `ours(headers)` (removed if that is `None`),
/// and when it does not, an untrusted client's is removed, so that no client can claim
/// to have come over HTTPS.
fn own_header(
    h: &mut HeaderMap,
    name: &HeaderName,
    sets: bool,
    trust_forwarded: bool,
    ours: impl FnOnce(&HeaderMap) -> Option<HeaderValue>,
) {
    if trust_forwarded && (!sets || h.contains_key(name)) {
        return;
    }
    match sets.then(|| ours(h)).flatten() {
        Some(v) => {
            h.insert(name.clone(), v);
        }
        None => {
            h.remove(name);
        }
    }
}

/// Append every valid-text value of a header, joined with ", " (the list form).
fn append_joined(buf: &mut BytesMut, h: &HeaderMap, name: &HeaderName) {
    let mut first = true;
    for v in h.get_all(name) {
        if v.to_str().is_err() {
            continue;
        }
        if !first {
            buf.put_slice(b", ");
        }
        first = false;
        buf.put_slice(v.as_bytes());
    }
}

/// RFC 7239 value: a token as is, anything else quoted.
pub(super) fn put_forwarded_value(buf: &mut BytesMut, v: &str) {
    let token = !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if token {
        buf.put_slice(v.as_bytes());
    } else {
        buf.put_u8(b'"');
        for b in v.bytes() {
            if b == b'"' || b == b'\\' {
                buf.put_u8(b'\\');
            }
            buf.put_u8(b);
        }
        buf.put_u8(b'"');
    }
}
