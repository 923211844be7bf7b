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
//! Trust: with `trust_forwarded` (the default in a gear, whose only client is the node's
//! proxy or the router), `X-Forwarded-Proto/-Host/-Port` already present are kept and
//! `Forwarded` is appended to, whether gearlb sets them or not; without it the ones
//! gearlb sets are replaced and the others removed, so a client cannot claim to have
//! come over HTTPS.
//!
//! Cost: this runs for every request, so it allocates as little as it can. What is the
//! same for every request of a connection (the client address as text, the listener's
//! port) is rendered once in [`ClientInfo`] and shared by reference counting; header
//! values taken from the request (`Host`) are shared, not copied; the values built per
//! request (`Forwarded`, a longer `X-Forwarded-For`) take one buffer each.

use std::net::{IpAddr, SocketAddr};

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Uri, Version};

use crate::config::ForwardedHeaders;

/// What the proxy knows about the client connection.
#[derive(Clone, Debug)]
pub struct ClientInfo {
    pub peer: SocketAddr,
    /// Port of the listener the client connected to.
    pub local_port: u16,
    /// `http` or `https`.
    pub scheme: &'static str,
    /// The client's IP address as a header value (`X-Forwarded-For`).
    ip: HeaderValue,
    /// The listener's port as a header value (`X-Forwarded-Port`).
    port: HeaderValue,
    /// The RFC 7239 node of the client: `192.0.2.7`, or `"[2001:db8::1]"`.
    node: Bytes,
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
        }
    }
}

/// A header value that later clones only count references (text known to be valid).
fn shared_value(v: Vec<u8>) -> HeaderValue {
    let bytes = BytesMut::from(&v[..]).freeze();
    HeaderValue::from_maybe_shared(bytes).unwrap_or_else(|_| HeaderValue::from_static(""))
}

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
static X_FORWARDED_PORT: HeaderName = HeaderName::from_static("x-forwarded-port");
static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Hop-by-hop headers that are never forwarded as they came (RFC 9110 §7.6.1). `Trailer`
/// is not one of them: it is end-to-end (RFC 9110 §6.6.2), and HTTP/1.1 clients get a
/// response's trailer fields only when it names them. `TE: trailers` is set again on a
/// request that carried it (see [`prepare_request`]).
fn fixed_hop_headers() -> [&'static HeaderName; 7] {
    [
        &header::CONNECTION,
        &KEEP_ALIVE,
        &PROXY_CONNECTION,
        &header::TE,
        &header::TRANSFER_ENCODING,
        &header::UPGRADE,
        &header::PROXY_AUTHENTICATE,
    ]
}

fn is_fixed_hop(name: &HeaderName) -> bool {
    fixed_hop_headers().contains(&name)
}

/// Remove hop-by-hop headers, including those the `Connection` header names.
pub fn remove_hop_headers(headers: &mut HeaderMap) {
    // Most messages carry none, or only `Connection`: look before removing (each remove
    // is a hash lookup).
    let mut found: [Option<HeaderName>; 7] = Default::default();
    let mut n = 0;
    for name in headers.keys() {
        if n < found.len()
            && is_fixed_hop(name)
            && !found[..n].iter().any(|f| f.as_ref() == Some(name))
        {
            found[n] = Some(name.clone());
            n += 1;
        }
    }
    if n == 0 {
        return;
    }
    // Header values are reference counted: the clones let us edit the map while
    // reading the tokens. One `Connection` header is the usual case.
    let mut values = headers.get_all(header::CONNECTION).iter();
    if let Some(first) = values.next().cloned() {
        let more: Vec<HeaderValue> = values.cloned().collect();
        remove_connection_named(headers, &first);
        for v in &more {
            remove_connection_named(headers, v);
        }
    }
    for name in found.iter().take(n).flatten() {
        headers.remove(name);
    }
}

/// Remove the headers a `Connection` value names.
fn remove_connection_named(headers: &mut HeaderMap, v: &HeaderValue) {
    let Ok(s) = v.to_str() else { return };
    for token in s.split(',').map(str::trim) {
        // Never let `Connection: host` or similar strip end-to-end essentials; `close`
        // and `keep-alive` are the usual tokens (keep-alive is removed anyway).
        if token.is_empty()
            || token.eq_ignore_ascii_case("close")
            || token.eq_ignore_ascii_case("keep-alive")
            || token.eq_ignore_ascii_case("host")
            || token.eq_ignore_ascii_case("content-length")
        {
            continue;
        }
        // `&str` keys are lower-cased on the stack; invalid names match nothing.
        headers.remove(token);
    }
}

/// True for an HTTP/1.1 protocol upgrade request (`Connection: upgrade` + `Upgrade`).
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers.get_all(header::CONNECTION).iter().any(|v| {
            v.to_str().is_ok_and(|s| {
                s.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
        })
}

/// The protocols an upgrade request offers that may go on to a gear, as one `Upgrade`
/// value: all it lists but `h2c` (RFC 9113 §3.1 deprecates it; honoured by a gear, it
/// would open a tunnel in which the client speaks HTTP/2 to the gear directly, every
/// request unseen by the balancer: "h2c smuggling"). `None` for a request that is not
/// an upgrade, or offers nothing else.
pub fn upgrade_offer(headers: &HeaderMap) -> Option<HeaderValue> {
    if !is_upgrade(headers) {
        return None;
    }
    let mut offer = BytesMut::new();
    let mut dropped = false;
    for v in headers.get_all(header::UPGRADE) {
        for t in super::h1::tokens(v.as_bytes()).filter(|t| !t.is_empty()) {
            if t.eq_ignore_ascii_case(b"h2c") {
                dropped = true;
                continue;
            }
            if !offer.is_empty() {
                offer.put_slice(b", ");
            }
            offer.put_slice(t);
        }
    }
    match (offer.is_empty(), dropped) {
        (true, _) => None,
        // The usual case: one value, as it came (no copy).
        (false, false) if headers.get_all(header::UPGRADE).iter().count() == 1 => {
            headers.get(header::UPGRADE).cloned()
        }
        (false, _) => Some(value(offer)),
    }
}

/// True when the request's `Upgrade` header lists `protocol` (case-insensitive).
pub fn upgrade_names(headers: &HeaderMap, protocol: &str) -> bool {
    headers.get_all(header::UPGRADE).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case(protocol))
        })
    })
}

/// Whether a `101 Switching Protocols` may go to the client: the request asked for an
/// upgrade (`asked`: its `Upgrade` value as sent to the backend), and every protocol the
/// response's `Upgrade` names is one the client listed (RFC 9110 §7.8: "A server MUST NOT
/// switch to a protocol that was not indicated by the client"; §15.2.2: a `101` names the
/// protocols in `Upgrade`). Otherwise the tunnel would carry bytes neither side framed
/// as agreed: a request the balancer never looked at could reach the gear through it.
pub fn switch_allowed(
    asked: Option<&HeaderValue>,
    response: &HeaderMap,
) -> Result<(), &'static str> {
    let Some(asked) = asked else {
        return Err("101 Switching Protocols to a request that asked for no upgrade");
    };
    let asked: Vec<&[u8]> = super::h1::tokens(asked.as_bytes())
        .filter(|t| !t.is_empty())
        .collect();
    let mut named = 0;
    for v in response.get_all(header::UPGRADE) {
        for t in super::h1::tokens(v.as_bytes()).filter(|t| !t.is_empty()) {
            if !asked.iter().any(|a| a.eq_ignore_ascii_case(t)) {
                return Err("101 Switching Protocols to a protocol the client did not ask for");
            }
            named += 1;
        }
    }
    if named == 0 {
        return Err("101 Switching Protocols without Upgrade");
    }
    Ok(())
}

/// The transfer codings of a message other than `chunked` (RFC 9112 §6.1), as one list
/// (`gzip`), or `None` when there are none. `Err` when `chunked` is applied more than
/// once or is not the final coding: a message the balancer cannot frame faithfully.
pub fn transfer_codings(h: &HeaderMap) -> Result<Option<HeaderValue>, &'static str> {
    if !h.contains_key(header::TRANSFER_ENCODING) {
        return Ok(None);
    }
    let mut others = BytesMut::new();
    let mut chunked_last = false;
    let mut chunked = 0;
    for v in h.get_all(header::TRANSFER_ENCODING) {
        for t in super::h1::tokens(v.as_bytes()).filter(|t| !t.is_empty()) {
            if t.eq_ignore_ascii_case(b"chunked") {
                chunked += 1;
                chunked_last = true;
                continue;
            }
            chunked_last = false;
            if !others.is_empty() {
                others.put_slice(b", ");
            }
            others.put_slice(t);
        }
    }
    if chunked > 1 || (chunked == 1 && !chunked_last) {
        return Err("chunked applied more than once, or not last");
    }
    Ok((!others.is_empty()).then(|| value(others)))
}

/// HTTP/2 carries a request's cookies as several `cookie` fields; before the request
/// goes on as HTTP/1.1 they are joined into one with `"; "` (RFC 9113 §8.2.3): an
/// HTTP/1.1 server reads one `Cookie` header (RFC 6265 §5.4), and PHP or Apache would
/// see only one of the pieces.
pub fn join_cookies(h: &mut HeaderMap) {
    let mut values = h.get_all(header::COOKIE).iter();
    let (Some(first), Some(_)) = (values.next(), values.next()) else {
        return;
    };
    let mut buf = BytesMut::with_capacity(first.len() * 4);
    for v in h.get_all(header::COOKIE) {
        if !buf.is_empty() {
            buf.put_slice(b"; ");
        }
        buf.put_slice(v.as_bytes());
    }
    h.insert(header::COOKIE, value(buf));
}

/// Why a client request must be refused before it reaches a backend, and with which
/// status: framing or target information that the balancer and a backend (or the proxy
/// in front) could read differently. hyper already refuses malformed heads, invalid
/// `Content-Length`s, a `Transfer-Encoding` not ending in `chunked`, and obs-fold; with
/// both `Transfer-Encoding` and `Content-Length` it drops the length and closes the
/// connection after the response (RFC 9112 §6.3). What is left is checked here.
pub fn request_problem(parts: &http::request::Parts) -> Option<(http::StatusCode, &'static str)> {
    use http::{Method, StatusCode};
    let h = &parts.headers;
    let chunked = h
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| super::h1::tokens(v.as_bytes()))
        .filter(|t| t.eq_ignore_ascii_case(b"chunked"))
        .count();
    if chunked > 1 {
        return Some((StatusCode::BAD_REQUEST, "chunked applied more than once"));
    }
    // hyper took the chunked framing off; forwarding the rest (`gzip, chunked`) would
    // hand the gear a body coded in a way its head no longer says, and refusing is what
    // RFC 9112 §6.1 asks of a server that does not implement a coding.
    match transfer_codings(h) {
        Ok(None) => {}
        Ok(Some(_)) => {
            return Some((
                StatusCode::NOT_IMPLEMENTED,
                "transfer coding other than chunked",
            ))
        }
        Err(why) => return Some((StatusCode::BAD_REQUEST, why)),
    }
    let mut hosts = h.get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Some((StatusCode::BAD_REQUEST, "more than one Host header"));
    }
    match (parts.uri.authority(), host) {
        (Some(a), Some(host)) if !host.as_bytes().eq_ignore_ascii_case(a.as_str().as_bytes()) => {
            return Some((
                StatusCode::BAD_REQUEST,
                "Host differs from the request target",
            ));
        }
        (None, None) if parts.version == Version::HTTP_11 => {
            return Some((StatusCode::BAD_REQUEST, "HTTP/1.1 request without Host"));
        }
        _ => {}
    }
    if parts.method == Method::CONNECT {
        return Some((StatusCode::METHOD_NOT_ALLOWED, "CONNECT is not forwarded"));
    }
    if parts.uri.path() == "*" && parts.method != Method::OPTIONS {
        return Some((StatusCode::BAD_REQUEST, "'*' is a target for OPTIONS only"));
    }
    None
}

/// Rewrite a client request head into the head sent to the backend. An upgrade request
/// keeps `Connection: upgrade` and its `Upgrade` header: they are the point of it.
pub fn prepare_request(
    parts: &mut http::request::Parts,
    client: &ClientInfo,
    trust_forwarded: bool,
    set: ForwardedHeaders,
) {
    let upgrade = upgrade_offer(&parts.headers);
    // The client takes trailer fields (RFC 9110 §10.1.4): the gear may send them, they
    // are forwarded. Other `TE` codings are the client's connection's business.
    let te_trailers = parts.headers.contains_key(header::TE)
        && parts.headers.get_all(header::TE).iter().any(|v| {
            super::h1::tokens(v.as_bytes()).any(|t| {
                t.split(|&b| b == b';')
                    .next()
                    .is_some_and(|c| c.trim_ascii().eq_ignore_ascii_case(b"trailers"))
            })
        });
    // HTTP/2 clients carry the host in :authority; HTTP/1.1 backends need Host.
    if !parts.headers.contains_key(header::HOST) {
        match parts
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        {
            Some(v) => {
                parts.headers.insert(header::HOST, v);
            }
            // An HTTP/1.0 request without Host goes on as HTTP/1.1, which must have one:
            // empty when the target has no authority (RFC 9112 §3.2).
            None => {
                parts
                    .headers
                    .insert(header::HOST, HeaderValue::from_static(""));
            }
        }
    }
    // Absolute-form (or h2) URIs become origin-form; the path and query stay as sent.
    if parts.uri.scheme().is_some() || parts.uri.authority().is_some() {
        let pq = parts
            .uri
            .path_and_query()
            .map(|pq| pq.as_str())
            .unwrap_or("/");
        if let Ok(uri) = pq.parse::<Uri>() {
            parts.uri = uri;
        }
    }
    parts.version = Version::HTTP_11;
    remove_hop_headers(&mut parts.headers);
    if let Some(proto) = upgrade {
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        parts.headers.insert(header::UPGRADE, proto);
    }
    if te_trailers {
        parts
            .headers
            .insert(header::TE, HeaderValue::from_static("trailers"));
    }
    // The balancer answers `Expect: 100-continue` itself when it starts reading the
    // body; the backend gets the body straight away.
    parts.headers.remove(header::EXPECT);

    let h = &mut parts.headers;
    if set.x_forwarded_for {
        let mut buf = BytesMut::new();
        if h.contains_key(&X_FORWARDED_FOR) {
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
    }

    own_header(
        h,
        &X_FORWARDED_PROTO,
        set.x_forwarded_proto,
        trust_forwarded,
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

/// One of `X-Forwarded-Proto/-Host/-Port`. What a trusted router sent is kept; else,
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

/// Rewrite a backend response head before it goes to the client. A `101 Switching
/// Protocols` keeps its `Connection` and `Upgrade` headers.
pub fn prepare_response(parts: &mut http::response::Parts, switching: bool) {
    let keep = switching.then(|| {
        (
            parts.headers.get(header::UPGRADE).cloned(),
            parts.headers.get(header::CONNECTION).cloned(),
        )
    });
    remove_hop_headers(&mut parts.headers);
    if let Some((upgrade, connection)) = keep {
        if let Some(u) = upgrade {
            parts.headers.insert(header::UPGRADE, u);
        }
        if let Some(c) = connection {
            parts.headers.insert(header::CONNECTION, c);
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

/// A header value from bytes assembled out of valid header values and tokens; invalid
/// bytes cannot occur, but would give an empty value rather than a panic.
fn value(buf: BytesMut) -> HeaderValue {
    HeaderValue::from_maybe_shared(buf.freeze()).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// RFC 7239 value: a token as is, anything else quoted.
fn put_forwarded_value(buf: &mut BytesMut, v: &str) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ambiguous_requests_are_refused() {
        let parts = |raw: &[(&str, &str)], uri: &str, method: &str, v: Version| {
            let mut b = http::Request::builder().method(method).uri(uri).version(v);
            for (k, val) in raw {
                b = b.header(*k, *val);
            }
            b.body(()).unwrap().into_parts().0
        };
        let ok = |p: &http::request::Parts| request_problem(p).is_none();
        let v11 = Version::HTTP_11;
        assert!(ok(&parts(&[("host", "x")], "/", "GET", v11)));
        assert!(ok(&parts(&[], "/", "GET", Version::HTTP_10)));
        assert!(ok(&parts(&[], "http://x/a", "GET", v11)));
        assert!(ok(&parts(&[("host", "X")], "http://x/a", "GET", v11)));
        assert!(ok(&parts(&[("host", "x")], "*", "OPTIONS", v11)));
        assert!(ok(&parts(
            &[("host", "x"), ("transfer-encoding", "chunked")],
            "/",
            "POST",
            v11
        )));
        // Codings the balancer would take off without saying so: refused, 501.
        assert_eq!(
            request_problem(&parts(
                &[("host", "x"), ("transfer-encoding", "gzip, chunked")],
                "/",
                "POST",
                v11
            ))
            .map(|p| p.0),
            Some(http::StatusCode::NOT_IMPLEMENTED)
        );
        for bad in [
            parts(
                &[
                    ("host", "x"),
                    ("transfer-encoding", "chunked"),
                    ("transfer-encoding", "chunked"),
                ],
                "/",
                "POST",
                v11,
            ),
            parts(
                &[("host", "x"), ("transfer-encoding", "chunked, Chunked")],
                "/",
                "POST",
                v11,
            ),
            parts(&[("host", "a"), ("host", "b")], "/", "GET", v11),
            parts(&[("host", "a"), ("host", "a")], "/", "GET", v11),
            parts(&[("host", "x")], "http://evil.example/", "GET", v11),
            parts(&[], "/", "GET", v11),
            parts(&[("host", "x")], "*", "GET", v11),
            parts(&[("host", "x:443")], "x:443", "CONNECT", v11),
        ] {
            assert!(!ok(&bad), "{bad:?} accepted");
        }
    }

    fn client() -> ClientInfo {
        ClientInfo::new("192.0.2.7:5555".parse().unwrap(), 8080, "http")
    }

    fn req(builder: http::request::Builder) -> http::request::Parts {
        builder.body(()).unwrap().into_parts().0
    }

    #[test]
    fn host_and_path_preserved_forwarding_headers_set() {
        let mut p = req(http::Request::get("/a%2Fb/../c?x=1&y=%20")
            .header("host", "App-NS.Example.com:8000")
            .header("x-forwarded-for", "203.0.113.1"));
        prepare_request(&mut p, &client(), true, ForwardedHeaders::ALL);
        assert_eq!(p.uri.to_string(), "/a%2Fb/../c?x=1&y=%20");
        assert_eq!(p.headers["host"], "App-NS.Example.com:8000");
        assert_eq!(p.headers["x-forwarded-for"], "203.0.113.1, 192.0.2.7");
        assert_eq!(p.headers["x-forwarded-proto"], "http");
        assert_eq!(p.headers["x-forwarded-host"], "App-NS.Example.com:8000");
        assert_eq!(p.headers["x-forwarded-port"], "8080");
        assert_eq!(
            p.headers["forwarded"],
            "for=192.0.2.7;host=\"App-NS.Example.com:8000\";proto=http"
        );
    }

    #[test]
    fn trusted_front_proxy_values_are_kept() {
        let mut p = req(http::Request::get("/")
            .header("host", "h")
            .header("x-forwarded-proto", "https")
            .header("x-forwarded-port", "443")
            .header("forwarded", "for=203.0.113.1;proto=https"));
        prepare_request(&mut p, &client(), true, ForwardedHeaders::ALL);
        assert_eq!(p.headers["x-forwarded-proto"], "https");
        assert_eq!(p.headers["x-forwarded-port"], "443");
        assert_eq!(
            p.headers["forwarded"],
            "for=203.0.113.1;proto=https, for=192.0.2.7;host=h;proto=http"
        );
    }

    #[test]
    fn untrusted_values_are_replaced() {
        let mut p = req(http::Request::get("/")
            .header("host", "h")
            .header("x-forwarded-proto", "https")
            .header("forwarded", "for=evil"));
        prepare_request(&mut p, &client(), false, ForwardedHeaders::ALL);
        assert_eq!(p.headers["x-forwarded-proto"], "http");
        assert_eq!(p.headers["forwarded"], "for=192.0.2.7;host=h;proto=http");
    }

    #[test]
    fn default_set_is_for_and_proto_others_pass_through_when_trusted() {
        let mut p = req(http::Request::get("/")
            .header("host", "h:8000")
            .header("x-forwarded-port", "443")
            .header("forwarded", "for=203.0.113.1;proto=https"));
        prepare_request(&mut p, &client(), true, ForwardedHeaders::default());
        assert_eq!(p.headers["x-forwarded-for"], "192.0.2.7");
        assert_eq!(p.headers["x-forwarded-proto"], "http");
        // Not set by gearlb: what the router sent goes on untouched, nothing is added.
        assert!(!p.headers.contains_key("x-forwarded-host"));
        assert_eq!(p.headers["x-forwarded-port"], "443");
        assert_eq!(p.headers["forwarded"], "for=203.0.113.1;proto=https");
    }

    #[test]
    fn headers_not_set_are_removed_from_untrusted_clients() {
        let mut p = req(http::Request::get("/")
            .header("host", "h")
            .header("x-forwarded-for", "203.0.113.1")
            .header("x-forwarded-proto", "https")
            .header("x-forwarded-host", "evil")
            .header("x-forwarded-port", "443")
            .header("forwarded", "for=evil;proto=https"));
        prepare_request(&mut p, &client(), false, ForwardedHeaders::NONE);
        for gone in [
            "x-forwarded-proto",
            "x-forwarded-host",
            "x-forwarded-port",
            "forwarded",
        ] {
            assert!(!p.headers.contains_key(gone), "{gone} should be removed");
        }
        // X-Forwarded-For is a chain anyone may start; not set means left as it came.
        assert_eq!(p.headers["x-forwarded-for"], "203.0.113.1");
        assert_eq!(p.headers["host"], "h");

        let mut p = req(http::Request::get("/")
            .header("host", "h")
            .header("x-forwarded-proto", "https"));
        prepare_request(&mut p, &client(), true, ForwardedHeaders::NONE);
        assert_eq!(p.headers["x-forwarded-proto"], "https");
        assert!(!p.headers.contains_key("x-forwarded-for"));
    }

    #[test]
    fn hop_by_hop_removed_including_connection_named() {
        let mut p = req(http::Request::get("/")
            .header("host", "h")
            .header("connection", "keep-alive, X-Secret")
            .header("x-secret", "1")
            .header("keep-alive", "timeout=5")
            .header("te", "gzip")
            .header("proxy-connection", "keep-alive")
            .header("expect", "100-continue")
            .header("x-end-to-end", "kept"));
        prepare_request(&mut p, &client(), true, ForwardedHeaders::ALL);
        for gone in [
            "connection",
            "x-secret",
            "keep-alive",
            "te",
            "proxy-connection",
            "expect",
        ] {
            assert!(!p.headers.contains_key(gone), "{gone} should be removed");
        }
        assert_eq!(p.headers["x-end-to-end"], "kept");
    }

    #[test]
    fn te_trailers_is_kept_other_te_codings_are_not() {
        for (te, kept) in [
            ("trailers", true),
            ("gzip, Trailers", true),
            ("trailers;q=1", true),
            ("gzip", false),
            ("trailersx", false),
        ] {
            let mut p = req(http::Request::post("/")
                .header("host", "h")
                .header("connection", "TE")
                .header("te", te));
            prepare_request(&mut p, &client(), true, ForwardedHeaders::NONE);
            let got = p.headers.get("te").map(|v| v.to_str().unwrap());
            assert_eq!(got, kept.then_some("trailers"), "{te}");
        }
    }

    /// RFC 9112 §3.2: an HTTP/1.1 request has a Host, empty when the target has no
    /// authority (an HTTP/1.0 request without one).
    #[test]
    fn an_http_1_0_request_without_host_gets_an_empty_one() {
        let mut p = req(http::Request::get("/").version(Version::HTTP_10));
        prepare_request(&mut p, &client(), true, ForwardedHeaders::NONE);
        assert_eq!(p.version, Version::HTTP_11);
        assert_eq!(p.headers.get_all("host").iter().collect::<Vec<_>>(), [""]);
        let mut p = req(http::Request::get("/")
            .version(Version::HTTP_10)
            .header("host", "h"));
        prepare_request(&mut p, &client(), true, ForwardedHeaders::NONE);
        assert_eq!(p.headers["host"], "h");
    }

    #[test]
    fn split_cookies_are_joined() {
        let mut h = HeaderMap::new();
        h.append("cookie", "a=1".parse().unwrap());
        join_cookies(&mut h);
        assert_eq!(h["cookie"], "a=1", "one piece stays as it is");
        h.append("cookie", "b=2; c=3".parse().unwrap());
        h.append("cookie", "d=4".parse().unwrap());
        join_cookies(&mut h);
        assert_eq!(
            h.get_all("cookie").iter().collect::<Vec<_>>(),
            ["a=1; b=2; c=3; d=4"]
        );
        let mut none = HeaderMap::new();
        join_cookies(&mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn a_switch_must_be_to_a_protocol_the_client_asked_for() {
        let resp = |upgrade: &[&str]| {
            let mut h = HeaderMap::new();
            for u in upgrade {
                h.append("upgrade", u.parse().unwrap());
            }
            h
        };
        let ws = HeaderValue::from_static("websocket");
        let two = HeaderValue::from_static("h2c, WebSocket");
        assert!(switch_allowed(Some(&ws), &resp(&["websocket"])).is_ok());
        assert!(switch_allowed(Some(&ws), &resp(&["WebSocket"])).is_ok());
        assert!(switch_allowed(Some(&two), &resp(&["websocket"])).is_ok());
        for (asked, got) in [
            (None, &["websocket"][..]),
            (Some(&ws), &[][..]),
            (Some(&ws), &[""][..]),
            (Some(&ws), &["h2c"][..]),
            (Some(&ws), &["websocket, h2c"][..]),
            (Some(&ws), &["websocket", "irc"][..]),
            (Some(&ws), &["websocket/2"][..]),
        ] {
            assert!(
                switch_allowed(asked, &resp(got)).is_err(),
                "{asked:?} -> {got:?}"
            );
        }
    }

    #[test]
    fn transfer_codings_other_than_chunked() {
        let h = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append("transfer-encoding", v.parse().unwrap());
            }
            h
        };
        assert_eq!(transfer_codings(&h(&[])), Ok(None));
        assert_eq!(transfer_codings(&h(&["chunked"])), Ok(None));
        assert_eq!(transfer_codings(&h(&["Chunked"])), Ok(None));
        for (te, others) in [
            (&["gzip, chunked"][..], "gzip"),
            (&["gzip", "chunked"][..], "gzip"),
            (&["gzip"][..], "gzip"),
            (&["gzip,  deflate ,chunked"][..], "gzip, deflate"),
        ] {
            assert_eq!(
                transfer_codings(&h(te)),
                Ok(Some(HeaderValue::from_static(others))),
                "{te:?}"
            );
        }
        for bad in [
            &["chunked, gzip"][..],
            &["chunked", "chunked"][..],
            &["chunked, chunked"][..],
        ] {
            assert!(transfer_codings(&h(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn h2c_is_never_offered_to_a_gear() {
        let h = |pairs: &[(&'static str, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.append(*k, v.parse().unwrap());
            }
            h
        };
        let up = |v: &str| h(&[("connection", "upgrade"), ("upgrade", v)]);
        assert_eq!(upgrade_offer(&up("h2c")), None);
        assert_eq!(upgrade_offer(&up("H2C")), None);
        assert_eq!(upgrade_offer(&up("websocket")).unwrap(), "websocket");
        assert_eq!(upgrade_offer(&up("h2c, websocket")).unwrap(), "websocket");
        assert_eq!(
            upgrade_offer(&h(&[
                ("connection", "upgrade"),
                ("upgrade", "websocket"),
                ("upgrade", "foo/2")
            ]))
            .unwrap(),
            "websocket, foo/2"
        );
        assert_eq!(
            upgrade_offer(&h(&[("upgrade", "websocket")])),
            None,
            "no Connection: upgrade"
        );
        let mut p = req(http::Request::get("/")
            .header("host", "h")
            .header("connection", "Upgrade, HTTP2-Settings")
            .header("upgrade", "h2c")
            .header("http2-settings", "AAMAAABk"));
        prepare_request(&mut p, &client(), true, ForwardedHeaders::NONE);
        for gone in ["connection", "upgrade", "http2-settings"] {
            assert!(!p.headers.contains_key(gone), "{gone}");
        }
    }

    #[test]
    fn upgrade_requests_keep_upgrade_headers() {
        let mut p = req(http::Request::get("/ws")
            .header("host", "h")
            .header("connection", "keep-alive, Upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-key", "k"));
        prepare_request(&mut p, &client(), true, ForwardedHeaders::ALL);
        assert_eq!(p.headers["connection"], "upgrade");
        assert_eq!(p.headers["upgrade"], "websocket");
        assert_eq!(p.headers["sec-websocket-key"], "k");
        let mut r = http::Response::builder()
            .status(101)
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .header("keep-alive", "x")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        prepare_response(&mut r, true);
        assert_eq!(r.headers["upgrade"], "websocket");
        assert!(!r.headers.contains_key("keep-alive"));
    }

    #[test]
    fn connection_cannot_strip_host_or_length() {
        let mut h = HeaderMap::new();
        h.insert("connection", "host, content-length".parse().unwrap());
        h.insert("host", "h".parse().unwrap());
        h.insert("content-length", "3".parse().unwrap());
        remove_hop_headers(&mut h);
        assert!(h.contains_key("host") && h.contains_key("content-length"));
    }

    #[test]
    fn absolute_form_and_h2_authority() {
        let mut p = req(http::Request::get("http://example.com:81/p?q").version(Version::HTTP_2));
        prepare_request(&mut p, &client(), true, ForwardedHeaders::ALL);
        assert_eq!(p.uri.to_string(), "/p?q");
        assert_eq!(p.headers["host"], "example.com:81");
        assert_eq!(p.version, Version::HTTP_11);
    }

    #[test]
    fn ipv6_client() {
        let c = ClientInfo::new("[2001:db8::1]:5555".parse().unwrap(), 8080, "http");
        let mut p = req(http::Request::get("/").header("host", "h"));
        prepare_request(&mut p, &c, true, ForwardedHeaders::ALL);
        assert_eq!(p.headers["x-forwarded-for"], "2001:db8::1");
        assert!(p.headers["forwarded"]
            .to_str()
            .unwrap()
            .starts_with("for=\"[2001:db8::1]\""));
    }

    #[test]
    fn lists_are_joined_and_odd_hosts_quoted() {
        let mut p = req(http::Request::get("/")
            .header("host", "we\"ird\\host")
            .header("x-forwarded-for", "203.0.113.1")
            .header("x-forwarded-for", "198.51.100.2")
            .header("forwarded", "for=a")
            .header("forwarded", "for=b"));
        prepare_request(&mut p, &client(), true, ForwardedHeaders::ALL);
        assert_eq!(
            p.headers["x-forwarded-for"],
            "203.0.113.1, 198.51.100.2, 192.0.2.7"
        );
        assert_eq!(
            p.headers["forwarded"],
            "for=a, for=b, for=192.0.2.7;host=\"we\\\"ird\\\\host\";proto=http"
        );
        assert_eq!(p.headers.get_all("x-forwarded-for").iter().count(), 1);
    }

    #[test]
    fn connection_tokens_in_several_headers() {
        let mut h = HeaderMap::new();
        h.append("connection", "X-A".parse().unwrap());
        h.append("connection", "close, x-b".parse().unwrap());
        h.insert("x-a", "1".parse().unwrap());
        h.insert("x-b", "2".parse().unwrap());
        h.insert("x-c", "3".parse().unwrap());
        h.insert("transfer-encoding", "chunked".parse().unwrap());
        remove_hop_headers(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h["x-c"], "3");
    }

    #[test]
    fn response_hop_headers_removed() {
        let mut p = http::Response::builder()
            .header("connection", "close")
            .header("transfer-encoding", "chunked")
            .header("content-type", "text/plain")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        prepare_response(&mut p, false);
        assert!(!p.headers.contains_key("connection"));
        assert!(!p.headers.contains_key("transfer-encoding"));
        assert_eq!(p.headers["content-type"], "text/plain");
    }
}
