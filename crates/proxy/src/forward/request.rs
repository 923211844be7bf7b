//! The request head as it goes to a backend: Host, origin-form target, HTTP/1.1,
//! hop-by-hop headers removed (an upgrade's kept), `TE: trailers` kept, `Expect`
//! answered here, the forwarding headers set ([`super::forwarded`]); and an HTTP/2
//! request's cookies joined into one field.

use bytes::{BufMut, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Uri, Version};

use super::forwarded::{set_forwarding_headers, ClientInfo};
use super::hop::remove_hop_headers;
use super::upgrade::upgrade_offer;
use super::values::value;
use crate::h1;
use gearlb_core::config::ForwardedHeaders;

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
            h1::tokens(v.as_bytes()).any(|t| {
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

    set_forwarding_headers(&mut parts.headers, client, trust_forwarded, set);
}
