//! What is refused before a request is forwarded (framing or target information a
//! backend could read differently from the balancer), and transfer codings other than
//! `chunked`, which the balancer does not decode.

use bytes::{BufMut, BytesMut};
use http::header::{self, HeaderValue};
use http::Version;

use super::values::value;
use crate::h1;

/// The transfer codings of a message other than `chunked` (RFC 9112 §6.1), as one list
/// (`gzip`), or `None` when there are none. `Err` when `chunked` is applied more than
/// once or is not the final coding: a message the balancer cannot frame faithfully.
pub fn transfer_codings<'a>(
    values: impl Iterator<Item = &'a [u8]>,
) -> Result<Option<HeaderValue>, &'static str> {
    let mut others = BytesMut::new();
    let mut chunked_last = false;
    let mut chunked = 0;
    for v in values {
        for t in h1::tokens(v).filter(|t| !t.is_empty()) {
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

/// Why the byte path refuses a client's HTTP/1 head itself ([`refused_head`]) rather
/// than hand it to hyper's server, which would take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The target carries a fragment (`#`). No form of request target has one (RFC 9112
    /// §3.2); hyper's URI parser cuts it off and would forward the rest, where HAProxy
    /// answers 400.
    Fragment,
    /// A chunked request whose body bytes read with the head name a chunk size of 2^52
    /// or more ([`h1::oversized_size`]). hyper's server takes sizes up to 2^64 − 1 and
    /// would wait for that many bytes, where HAProxy answers 400.
    ChunkTooLarge,
}

impl Refusal {
    /// The reason logged.
    pub fn why(self) -> &'static str {
        match self {
            Refusal::Fragment => "fragment in the target",
            Refusal::ChunkTooLarge => "chunk size too large",
        }
    }
}

/// The method, path (without the query or the fragment: as logged elsewhere, since a
/// query may carry secrets) and [`Refusal`] of an HTTP/1 request head at the start of
/// `buf` that the balancer answers with 400 at once, before anything is forwarded. The
/// byte path reads an HTTP/1.1 connection's heads first, so only it can see these: a
/// head hyper reads itself (after one it served on the same connection) has its
/// fragment cut off, and a chunk size in a later read is hyper's to wait for (the client
/// then meets its timeout; the bytes behind the size travel as data: nothing is
/// smuggled either way).
pub fn refused_head(buf: &[u8]) -> Option<(http::Method, &str, Refusal)> {
    let mut slots = [httparse::EMPTY_HEADER; h1::MAX_HEADERS];
    let mut r = httparse::Request::new(&mut slots);
    let Ok(httparse::Status::Complete(len)) = r.parse(buf) else {
        return None;
    };
    let target = r.path?;
    let refusal = if target.contains('#') {
        Refusal::Fragment
    } else {
        let chunked = r
            .headers
            .iter()
            .filter(|f| f.name.eq_ignore_ascii_case("transfer-encoding"))
            .flat_map(|f| h1::tokens(f.value))
            .rfind(|t| !t.is_empty())
            .is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"));
        if !chunked || !h1::oversized_size(&buf[len..]) {
            return None;
        }
        Refusal::ChunkTooLarge
    };
    let method = http::Method::from_bytes(r.method?.as_bytes()).ok()?;
    let path = target.split(['?', '#']).next().unwrap_or(target);
    Some((method, path, refusal))
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
        .flat_map(|v| h1::tokens(v.as_bytes()))
        .filter(|t| t.eq_ignore_ascii_case(b"chunked"))
        .count();
    if chunked > 1 {
        return Some((StatusCode::BAD_REQUEST, "chunked applied more than once"));
    }
    // hyper took the chunked framing off; forwarding the rest (`gzip, chunked`) would
    // hand the gear a body coded in a way its head no longer says, and refusing is what
    // RFC 9112 §6.1 asks of a server that does not implement a coding.
    match transfer_codings(
        h.get_all(header::TRANSFER_ENCODING)
            .iter()
            .map(HeaderValue::as_bytes),
    ) {
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
    if parts.uri.scheme().is_none() && parts.uri.authority().is_some() {
        return Some((
            StatusCode::BAD_REQUEST,
            "authority-form is a target for CONNECT only",
        ));
    }
    let target = parts.uri.path_and_query().map_or("", |pq| pq.as_str());
    if !target.is_ascii() {
        // RFC 3986: non-ASCII is percent-encoded; gears would decode raw bytes each
        // their own way (HAProxy refuses them too).
        return Some((StatusCode::BAD_REQUEST, "a request target must be ASCII"));
    }
    if target.starts_with('?') {
        // `http://x?a` (or an HTTP/2 `:path` of `?a`): the path a gear would be sent is
        // `/`, where the client named none (HAProxy refuses it too).
        return Some((StatusCode::BAD_REQUEST, "a target with a query and no path"));
    }
    if parts.version == Version::HTTP_10 && parts.headers.contains_key(header::UPGRADE) {
        // RFC 9110 §7.8: HTTP/1.0 has no upgrade (HAProxy refuses it too).
        return Some((StatusCode::BAD_REQUEST, "Upgrade in an HTTP/1.0 request"));
    }
    if parts.method.as_str() == "PRI" {
        return Some((
            StatusCode::BAD_REQUEST,
            "PRI is HTTP/2's preface, not a method",
        ));
    }
    if parts.uri.path() == "*" && parts.method != Method::OPTIONS {
        return Some((StatusCode::BAD_REQUEST, "'*' is a target for OPTIONS only"));
    }
    None
}
