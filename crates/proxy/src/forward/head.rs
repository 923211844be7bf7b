//! A client's HTTP/1.1 request head kept as bytes, for the byte path of the
//! downstream connection (`downstream::lane`): read once with `httparse` into slices
//! of the connection's buffer, judged ([`read`]: taken, or left to hyper), and written
//! to the backend as its own fields with the balancer's edits ([`write_upstream`]).
//!
//! The byte path takes the plain, common request only: HTTP/1.1, origin-form target,
//! one `Host`, no `Transfer-Encoding`, at most one `Content-Length` field whose value is
//! a plain decimal of at most [`LANE_BODY_MAX`] (the body is read whole before the
//! request goes on: [`Read::Body`] until it is in), no `Expect`, no upgrade, no
//! `TE`, and a `Connection` field that says only `close` or `keep-alive`. Anything else
//! ([`Read::Other`]) goes to hyper's server with the bytes read so far, where every rule
//! of [`super::request`] applies: the byte path decides nothing those rules would decide
//! differently (a longer body, a length written twice or with a sign, a chunked body
//! are all hyper's).
//!
//! The edits are those of [`super::prepare_request`] on the same request: hop-by-hop
//! fields dropped, the sticky cookie taken out of `Cookie`, the forwarding fields set
//! ([`super::forwarded`]'s rules, trust included). The fields keep their order (names
//! in lower case, as hyper and HAProxy write them); the forwarding fields the balancer
//! sets come last.

use bytes::{BufMut, BytesMut};
use http::Method;

use super::forwarded::{put_forwarded_value, ClientInfo};
use crate::h1::{self, is_text, put_field, put_line};
use gearlb_core::config::ForwardedHeaders;
use gearlb_core::routing::sticky::Sticky;

/// Most fields a head the byte path takes may have (more: hyper's, which allows 100).
pub const LANE_FIELDS: usize = 48;

/// Longest head the byte path waits for; a longer one goes to hyper with what was read.
pub const LANE_HEAD_MAX: usize = 16 * 1024;

/// Longest `Content-Length` body the byte path reads whole before the request goes on
/// (within `timeouts.request_header` from its head's end: the head's own bound, given
/// again to the body); a longer one is hyper's, streamed to the gear as it comes.
pub const LANE_BODY_MAX: usize = 16 * 1024;

/// What the start of a connection's buffer holds.
pub enum Read<'h, 'b> {
    /// Part of a head that the byte path may still take: read more.
    Partial,
    /// A whole head the byte path takes, without all of its body yet: the request ends
    /// at this offset of the buffer once the rest has come.
    Body(usize),
    /// A head (or bytes) for hyper's server.
    Other,
    /// A complete head the byte path takes.
    Head(ClientHead<'h, 'b>),
}

/// Which of the fields the balancer sets or edits a head carries.
#[derive(Debug, Default, Clone, Copy)]
struct Present {
    xff: bool,
    proto: bool,
    host: bool,
    port: bool,
    forwarded: bool,
    cookie: bool,
}

/// A complete request head the byte path takes: slices of the connection's buffer.
pub struct ClientHead<'h, 'b> {
    /// The head's length in the buffer (its body follows, then the next request).
    pub len: usize,
    /// The `Content-Length` field's value, when it has one.
    pub length: Option<usize>,
    /// The body: the `length` bytes after the head, read whole.
    pub body: &'b [u8],
    pub method: Method,
    /// Origin-form: path and query, as sent.
    pub target: &'b str,
    /// The `Host` field's value.
    pub host: &'b str,
    /// The client asked to close after this response (`Connection: close`).
    pub close: bool,
    fields: &'h [httparse::Header<'b>],
    present: Present,
    /// The bytes the head was read from.
    buf: &'b [u8],
}

impl<'b> ClientHead<'_, 'b> {
    /// Where the request (head and body) ends in the buffer.
    pub fn end(&self) -> usize {
        self.len + self.body.len()
    }

    /// A field's whole line as it came, when it is `name: value\r\n` exactly.
    fn line(&self, f: &httparse::Header<'b>) -> Option<&'b [u8]> {
        let base = self.buf.as_ptr() as usize;
        let n0 = (f.name.as_ptr() as usize).checked_sub(base)?;
        let v0 = (f.value.as_ptr() as usize).checked_sub(base)?;
        let (n1, v1) = (n0 + f.name.len(), v0 + f.value.len());
        let ok = v0 == n1 + 2
            && self.buf.get(n1..v0) == Some(&b": "[..])
            && self.buf.get(v1..v1 + 2) == Some(&b"\r\n"[..]);
        ok.then(|| &self.buf[n0..v1 + 2])
    }

    /// The target's path (what routes match on).
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or(self.target)
    }

    /// The value of the (last) field `name`, lower case.
    pub fn value(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .rev()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }
}

/// A target `http::uri::PathAndQuery` takes whole (the grammar hyper's parser applies:
/// the WHATWG path and query byte sets, `"{}` let through in the path), starting with
/// `/`, without a fragment (which it would cut off), checked without a copy. The test
/// `targets_as_http_takes_them` holds it to `PathAndQuery` byte by byte.
fn origin_form(t: &[u8]) -> bool {
    let path = |b: u8| {
        matches!(b, 0x21 | 0x24..=0x3B | 0x3D | 0x40..=0x5F | 0x61..=0x7A | 0x7C | 0x7E)
            || matches!(b, b'"' | b'{' | b'}' | 0x80..=0xFF)
    };
    let query = |b: u8| matches!(b, 0x21 | 0x24..=0x3B | 0x3D | 0x3F..=0x7E | 0x80..=0xFF);
    if t.first() != Some(&b'/') || t.len() > (u16::MAX - 1) as usize {
        return false;
    }
    match t.iter().position(|&b| b == b'?') {
        Some(q) => t[..q].iter().all(|&b| path(b)) && t[q + 1..].iter().all(|&b| query(b)),
        None => t.iter().all(|&b| path(b)),
    }
}

/// A `Content-Length` value the byte path takes: digits only, no leading zero (`0`
/// itself excepted), at most [`LANE_BODY_MAX`].
fn body_length(v: &[u8]) -> Option<usize> {
    let plain = !v.is_empty() && v.len() <= 5 && v.iter().all(u8::is_ascii_digit);
    if !plain || (v.len() > 1 && v[0] == b'0') {
        return None;
    }
    let n = v.iter().fold(0, |n, d| n * 10 + usize::from(d - b'0'));
    (n <= LANE_BODY_MAX).then_some(n)
}

/// Read the head at the start of `buf`, its fields into `slots`; `credential` is the
/// balancers' own protocol's header (such a request is hyper's path's to refuse);
/// `max_head` is `limits.max_header_size` (a longer head is hyper's to refuse).
pub fn read<'h, 'b>(
    buf: &'b [u8],
    slots: &'h mut [httparse::Header<'b>; LANE_FIELDS],
    credential: &str,
    max_head: usize,
) -> Read<'h, 'b> {
    let limit = max_head.min(LANE_HEAD_MAX);
    let mut r = httparse::Request::new(slots);
    let len = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n <= limit => n,
        Ok(httparse::Status::Partial) if buf.len() < limit => return Read::Partial,
        _ => return Read::Other,
    };
    let (Some(m), Some(target), Some(1)) = (r.method, r.path, r.version) else {
        return Read::Other;
    };
    let Ok(method) = Method::from_bytes(m.as_bytes()) else {
        return Read::Other;
    };
    // What hyper's parser would make of the target, or refuse: the byte path forwards
    // exactly what it accepts (a fragment would be cut by it: left to it).
    // Non-ASCII and `PRI` are hyper's path's to refuse.
    if method == Method::CONNECT
        || !origin_form(target.as_bytes())
        || !target.is_ascii()
        || m == "PRI"
    {
        return Read::Other;
    }
    let fields: &'h [httparse::Header<'b>] = r.headers;
    let mut host = None;
    let mut length = None;
    let mut close = false;
    let mut present = Present::default();
    for f in fields {
        let name = f.name.as_bytes();
        let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
        match name.len() {
            4 if is("host") => {
                if host.is_some() || !is_text(f.value) {
                    return Read::Other;
                }
                host = std::str::from_utf8(f.value).ok();
            }
            6 if is("cookie") => present.cookie = true,
            6 if is("expect") => return Read::Other,
            2 if is("te") => return Read::Other,
            7 if is("upgrade") || is("trailer") => return Read::Other,
            9 if is("forwarded") => present.forwarded = true,
            10 if is("connection") => {
                for t in h1::tokens(f.value) {
                    if t.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if !(t.is_empty() || t.eq_ignore_ascii_case(b"keep-alive")) {
                        // Fields named to be dropped, an upgrade: hyper's path.
                        return Read::Other;
                    }
                }
            }
            14 if is("content-length") => match (length, body_length(f.value)) {
                (None, Some(n)) => length = Some(n),
                // Written twice, too long, or not a plain decimal: hyper's to judge.
                _ => return Read::Other,
            },
            15 if is("x-forwarded-for") => present.xff = true,
            16 if is("x-forwarded-host") || is("x-forwarded-port") => {
                present.host |= is("x-forwarded-host");
                present.port |= is("x-forwarded-port");
            }
            17 if is("transfer-encoding") || is("x-forwarded-proto") => {
                if is("transfer-encoding") {
                    return Read::Other;
                }
                present.proto = true;
            }
            _ if name.eq_ignore_ascii_case(credential.as_bytes()) => return Read::Other,
            _ => {}
        }
    }
    let Some(host) = host else {
        return Read::Other;
    };
    let end = len + length.unwrap_or(0);
    let Some(body) = buf.get(len..end) else {
        return Read::Body(end);
    };
    Read::Head(ClientHead {
        len,
        length,
        body,
        method,
        target,
        host,
        close,
        fields,
        present,
        buf,
    })
}

/// How the head is rewritten for the backend.
pub struct Rewrite<'a> {
    pub client: &'a ClientInfo,
    pub trust_forwarded: bool,
    pub set: ForwardedHeaders,
    pub sticky: Option<&'a Sticky>,
}

/// Hop-by-hop fields a head the byte path takes may carry: dropped.
fn is_hop(name: &str) -> bool {
    name.eq_ignore_ascii_case("connection")
        || name.eq_ignore_ascii_case("keep-alive")
        || name.eq_ignore_ascii_case("proxy-connection")
        || name.eq_ignore_ascii_case("proxy-authenticate")
}

/// Join the text values of field `name` with `", "` (as `forwarded::append_joined`).
fn joined(h: &ClientHead<'_, '_>, name: &str, out: &mut BytesMut) {
    let mut first = true;
    for f in h
        .fields
        .iter()
        .filter(|f| f.name.eq_ignore_ascii_case(name))
    {
        if !is_text(f.value) {
            continue;
        }
        if !first {
            out.put_slice(b", ");
        }
        first = false;
        out.put_slice(f.value);
    }
}

/// Write the head the backend gets to `out`: the request line as HTTP/1.1, the
/// client's fields with the edits, the forwarding fields. Returns the sticky cookie's
/// value, when the client sent one (the first found; every copy is taken out).
pub fn write_upstream(
    h: &ClientHead<'_, '_>,
    rw: &Rewrite<'_>,
    out: &mut BytesMut,
) -> Option<Vec<u8>> {
    let set = rw.set;
    let trust = rw.trust_forwarded;
    let p = h.present;
    // A field the balancer may set is kept as sent when trusted and (not set by it, or
    // already there); otherwise dropped, and set by the balancer if it sets it.
    let keeps = |sets: bool, present: bool| trust && (!sets || present);
    // Over TLS the balancer says `https` itself, whoever the client is.
    let keep_proto = keeps(set.x_forwarded_proto, p.proto) && rw.client.scheme == "http";
    let keep_host = keeps(set.x_forwarded_host, p.host);
    let keep_port = keeps(set.x_forwarded_port, p.port);
    let keep_forwarded = if set.forwarded { false } else { trust };
    let mut len = h.method.as_str().len() + h.target.len() + 160;
    for f in h.fields {
        len += f.name.len() + f.value.len() + 4;
    }
    out.reserve(len);
    out.put_slice(h.method.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(h.target.as_bytes());
    out.put_slice(b" HTTP/1.1\r\n");
    let mut cookie = None;
    // Only a head with a `Cookie` field has the sticky cookie taken out.
    let sticky = rw.sticky.filter(|_| p.cookie);
    for f in h.fields {
        let name = f.name;
        let taken = match sticky {
            Some(s) if name.eq_ignore_ascii_case("cookie") => s.take_from(f.value),
            _ => None,
        };
        if let Some((value, rest)) = taken {
            cookie.get_or_insert(value);
            if !rest.is_empty() {
                put_field(out, name.as_bytes(), &rest);
            }
            continue;
        }
        let drop = match name.len() {
            9 if name.eq_ignore_ascii_case("forwarded") => !keep_forwarded,
            15 if name.eq_ignore_ascii_case("x-forwarded-for") => set.x_forwarded_for || !trust,
            16 if name.eq_ignore_ascii_case("x-forwarded-host") => !keep_host,
            16 if name.eq_ignore_ascii_case("x-forwarded-port") => !keep_port,
            17 if name.eq_ignore_ascii_case("x-forwarded-proto") => !keep_proto,
            _ => is_hop(name),
        };
        if !drop {
            put_line(out, h.line(f), name.as_bytes(), f.value);
        }
    }
    let client = rw.client;
    if set.x_forwarded_for {
        out.put_slice(b"x-forwarded-for: ");
        let at = out.len();
        // A front's list is appended to; anyone else's is replaced.
        if p.xff && trust {
            joined(h, "x-forwarded-for", out);
        }
        if out.len() > at {
            out.put_slice(b", ");
        }
        out.put_slice(client.ip.as_bytes());
        out.put_slice(b"\r\n");
    }
    if set.x_forwarded_proto && !keep_proto {
        put_field(out, b"x-forwarded-proto", client.scheme.as_bytes());
    }
    if set.x_forwarded_host && !keep_host {
        put_field(out, b"x-forwarded-host", h.host.as_bytes());
    }
    if set.x_forwarded_port && !keep_port {
        put_field(out, b"x-forwarded-port", client.port.as_bytes());
    }
    if set.forwarded {
        out.put_slice(b"forwarded: ");
        if trust && p.forwarded {
            let at = out.len();
            joined(h, "forwarded", out);
            if out.len() > at {
                out.put_slice(b", ");
            }
        }
        out.put_slice(b"for=");
        out.put_slice(&client.node);
        out.put_slice(b";host=");
        put_forwarded_value(out, h.host);
        out.put_slice(b";proto=");
        out.put_slice(client.scheme.as_bytes());
        out.put_slice(b"\r\n");
    }
    out.put_slice(b"\r\n");
    cookie
}

#[cfg(test)]
#[path = "head_tests.rs"]
mod tests;
