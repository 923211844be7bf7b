//! Writing HTTP/1.1: a request head and its body's framing for a backend, chunks and
//! the last chunk with trailer fields, and interim response heads for a client.

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::StatusCode;

use super::response::content_length_pieces;

/// How a request body is framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReqFraming {
    /// No body.
    Empty,
    /// `Content-Length`, sent as the client gave it.
    Length(u64),
    /// `Transfer-Encoding: chunked` (the client's length is unknown).
    Chunked,
}

/// Write the head of `parts` to `out`. `Transfer-Encoding: chunked` is added for a
/// chunked body (hop-by-hop headers were removed from `parts` already).
pub fn encode_request_head(parts: &http::request::Parts, framing: ReqFraming, out: &mut BytesMut) {
    let target = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .filter(|s| !s.is_empty())
        .unwrap_or("/");
    let mut len = parts.method.as_str().len() + target.len() + 16;
    for (k, v) in &parts.headers {
        len += k.as_str().len() + v.len() + 4;
    }
    out.reserve(len + 32);
    out.put_slice(parts.method.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(target.as_bytes());
    out.put_slice(b" HTTP/1.1\r\n");
    for (k, v) in &parts.headers {
        out.put_slice(k.as_str().as_bytes());
        out.put_slice(b": ");
        out.put_slice(v.as_bytes());
        out.put_slice(b"\r\n");
    }
    if framing == ReqFraming::Chunked {
        out.put_slice(b"transfer-encoding: chunked\r\n");
    }
    out.put_slice(b"\r\n");
}

/// The framing of a request body, from what the body itself knows (`empty`, and its
/// exact length if known): the length the client's framing gave, or chunked. The
/// `Content-Length` header is made to agree with it, so that the head never announces a
/// length the body does not have.
pub fn request_framing(headers: &mut HeaderMap, empty: bool, exact: Option<u64>) -> ReqFraming {
    // `Content-Length: 3, 3` (or the header twice) is one length written several times:
    // the gear gets it once (RFC 9110 §8.6).
    let (declared, pieces) = content_length_pieces(
        headers
            .get_all(header::CONTENT_LENGTH)
            .iter()
            .map(HeaderValue::as_bytes),
    )
    .map_or((None, 0), |(n, pieces)| (n, pieces.count));
    let once = pieces == 1;
    match (empty, exact) {
        (true, _) if declared == Some(0) => {
            if !once {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
            }
            ReqFraming::Length(0)
        }
        (true, _) => {
            headers.remove(header::CONTENT_LENGTH);
            ReqFraming::Empty
        }
        (false, Some(n)) => {
            if declared != Some(n) || !once {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
            }
            ReqFraming::Length(n)
        }
        (false, None) => {
            headers.remove(header::CONTENT_LENGTH);
            ReqFraming::Chunked
        }
    }
}

/// Append one chunk of a chunked body.
pub fn encode_chunk(data: &[u8], out: &mut BytesMut) {
    if data.is_empty() {
        return;
    }
    out.reserve(data.len() + 20);
    let hex = format!("{:x}\r\n", data.len());
    out.put_slice(hex.as_bytes());
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

/// The end of a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// The end of a chunked body carrying trailer fields (RFC 9112 §7.1.2), those a
/// recipient may take as trailers (see [`trailer_allowed`]).
pub fn last_chunk(trailers: &HeaderMap) -> Bytes {
    let mut out = BytesMut::with_capacity(64);
    out.put_slice(b"0\r\n");
    for (k, v) in trailers {
        if trailer_allowed(k) {
            out.put_slice(k.as_str().as_bytes());
            out.put_slice(b": ");
            out.put_slice(v.as_bytes());
            out.put_slice(b"\r\n");
        }
    }
    out.put_slice(b"\r\n");
    out.freeze()
}

/// Whether a field may travel as a trailer: not one that frames, routes or controls the
/// message, which must be known before the body (RFC 9110 §6.5.1), nor a hop-by-hop one,
/// nor one of the forwarding fields the balancer sets (a server merging trailers into
/// the head would take a client's for the balancer's).
pub fn trailer_allowed(name: &HeaderName) -> bool {
    !matches!(
        name.as_str(),
        "content-length"
            | "transfer-encoding"
            | "trailer"
            | "te"
            | "host"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "upgrade"
            | "content-type"
            | "content-encoding"
            | "content-range"
            | "cache-control"
            | "expect"
            | "max-forwards"
            | "authorization"
            | "proxy-authorization"
            | "proxy-authenticate"
            | "www-authenticate"
            | "set-cookie"
            | "cookie"
            | "age"
            | "expires"
            | "date"
            | "location"
            | "retry-after"
            | "vary"
            | "warning"
            // What the balancer vouches for in the head: a trailer must not restate it.
            | "x-forwarded-for"
            | "x-forwarded-proto"
            | "x-forwarded-host"
            | "x-forwarded-port"
            | "forwarded"
    )
}

/// Trailer fields as a recipient may take them ([`trailer_allowed`]); `None` if none is.
pub fn allowed_trailers(mut t: HeaderMap) -> Option<HeaderMap> {
    if t.keys().any(|k| !trailer_allowed(k)) {
        let names: Vec<HeaderName> = t.keys().filter(|k| !trailer_allowed(k)).cloned().collect();
        for n in names {
            t.remove(n);
        }
    }
    (!t.is_empty()).then_some(t)
}

/// An interim (`1xx`) response head as it goes to an HTTP/1.1 client: the status line
/// and its fields, hop-by-hop ones removed by the caller.
pub fn encode_interim(status: StatusCode, headers: &HeaderMap, out: &mut BytesMut) {
    out.reserve(64);
    put_status_line(out, status, "");
    // No framing field on a 1xx (RFC 9110 §8.6, RFC 9112 §6.1): a client framing it by
    // one would take the final response's head for its body.
    for (k, v) in headers
        .iter()
        .filter(|(k, _)| *k != header::CONTENT_LENGTH && *k != header::TRANSFER_ENCODING)
    {
        out.put_slice(k.as_str().as_bytes());
        out.put_slice(b": ");
        out.put_slice(v.as_bytes());
        out.put_slice(b"\r\n");
    }
    out.put_slice(b"\r\n");
}

/// `HTTP/1.1 <code> <reason>\r\n`: the canonical reason, else `unknown` (hyper writes
/// `<none>` for a final response, nothing for an interim one).
pub fn put_status_line(out: &mut BytesMut, status: StatusCode, unknown: &str) {
    if status == StatusCode::OK {
        out.put_slice(b"HTTP/1.1 200 OK\r\n");
        return;
    }
    let reason = status.canonical_reason().unwrap_or(unknown);
    put_status_reason(out, status, reason.as_bytes());
}

/// `HTTP/1.1 <code> <reason>\r\n` with the given reason (a backend's, for a status
/// without a canonical one).
pub fn put_status_reason(out: &mut BytesMut, status: StatusCode, reason: &[u8]) {
    out.put_slice(b"HTTP/1.1 ");
    out.put_slice(status.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(reason);
    out.put_slice(b"\r\n");
}

/// One field, `name: value\r\n`, the name in lower case (as hyper and HAProxy write
/// names).
pub fn put_field(out: &mut BytesMut, name: &[u8], value: &[u8]) {
    let at = out.len();
    out.put_slice(name);
    out[at..].make_ascii_lowercase();
    out.put_slice(b": ");
    out.put_slice(value);
    out.put_slice(b"\r\n");
}

/// One field as it came: its whole `line` in one copy when it is `name: value\r\n`
/// already (the name, its first `name_len` bytes, lowered), else written anew.
pub fn put_line(out: &mut BytesMut, line: Option<&[u8]>, name: &[u8], value: &[u8]) {
    match line {
        Some(line) => {
            let at = out.len();
            out.put_slice(line);
            out[at..at + name.len()].make_ascii_lowercase();
        }
        None => put_field(out, name, value),
    }
}
