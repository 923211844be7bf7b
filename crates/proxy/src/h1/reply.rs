//! A backend's response head as it goes to an HTTP/1.1 client on the byte path
//! (`downstream::lane`): written from the head's own bytes with the edits a proxy
//! makes, and the framing its body then takes.
//!
//! What goes out is what hyper's HTTP/1 server writes for the same response made by
//! `respond::respond` (its status line, its framing rules, its `Date`, names in lower
//! case), except that the fields keep their order: hop-by-hop fields (RFC 9110 §7.6.1,
//! and those `Connection` names) dropped, a length written several times written once,
//! the balancer's sticky cookie (the backend's own for that name dropped, ours added
//! with `Cache-Control: private` when the response has none), `Connection: close` when
//! the client's connection ends with it.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{BufMut, BytesMut};
use gearlb_core::routing::sticky::Sticky;
use http::{header, HeaderMap, HeaderName, StatusCode};

use super::response::{bodiless, is_text, tokens, BodyLen, Head, Kind, LengthFix};
use super::write::{put_field, put_line, put_status_line, put_status_reason};

/// How the client's response is written, beyond its head.
pub struct Reply<'a> {
    /// The request was `HEAD`.
    pub head_request: bool,
    /// Transfer codings other than `chunked` the body keeps (see `respond::usable`).
    pub codings: Option<&'a [u8]>,
    /// The balancer's sticky cookie name: the backend's own `Set-Cookie` for it goes.
    pub strip_cookie: Option<&'a str>,
    /// The balancer's `Set-Cookie`, when the client gets one.
    pub set_cookie: Option<SetCookie<'a>>,
    /// The client's connection closes after this response.
    pub close: bool,
}

/// The balancer's sticky cookie for a backend, written straight into the head
/// ([`Sticky::put_set_cookie`]: what `Sticky::set_cookie` gives hyper's path).
#[derive(Clone, Copy)]
pub struct SetCookie<'a> {
    pub sticky: &'a Sticky,
    /// The backend's sticky value.
    pub value: &'a str,
    /// The client came over HTTPS: `Secure`.
    pub secure: bool,
    /// Unix seconds, for a sealed cookie's expiry.
    pub now: u64,
}

/// How the body follows the head on the client's connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    Empty,
    /// Exactly this many bytes, as they come.
    Length(u64),
    /// Chunked (the backend's chunked body, or one its connection's end delimits).
    Chunked,
}

/// Whether field `name` is one `head`'s `Connection` names to be dropped (beyond the
/// fixed hop-by-hop fields, known by their [`Kind`]), as `forward::remove_hop_headers`.
fn named_by_connection(head: &Head, name: &[u8]) -> bool {
    head.spans()
        .filter(|f| f.kind == Kind::Connection && is_text(f.value))
        .flat_map(|f| tokens(f.value))
        .any(|t| {
            !(t.is_empty()
                || t.eq_ignore_ascii_case(b"close")
                || t.eq_ignore_ascii_case(b"keep-alive")
                || t.eq_ignore_ascii_case(b"host")
                || t.eq_ignore_ascii_case(b"content-length"))
                && t.eq_ignore_ascii_case(name)
        })
}

/// Write the client's response head for `head` to `out`; returns how its body goes.
pub fn write_reply(head: &Head, r: &Reply<'_>, out: &mut BytesMut) -> Framing {
    let status = head.status;
    let no_body = bodiless(r.head_request, status);
    let framing = match head.body {
        BodyLen::Empty => Framing::Empty,
        BodyLen::Length(n) => Framing::Length(n),
        BodyLen::Chunked | BodyLen::Close => Framing::Chunked,
    };
    out.reserve(head.raw_len() + 160);
    match head.unknown_reason() {
        Some(reason) => put_status_reason(out, status, reason),
        None => put_status_line(out, status, "<none>"),
    }
    // A bodiless answer keeps its length only for HEAD; a chunked one has none.
    let keep_length = match framing {
        Framing::Length(_) => true,
        Framing::Empty => r.head_request,
        Framing::Chunked => false,
    };
    let (mut date, mut cache_control, mut length_done) = (false, false, false);
    for f in head.spans() {
        match f.kind {
            Kind::Hop | Kind::Connection | Kind::TransferEncoding => continue,
            Kind::Date => date = true,
            Kind::CacheControl => cache_control = true,
            // Only where a chunked body could carry them (as hyper).
            Kind::Trailer if no_body => continue,
            Kind::SetCookie => {
                if let Some(ours) = r.strip_cookie {
                    let v = f.value.trim_ascii_start();
                    if v.len() > ours.len()
                        && v[..ours.len()] == *ours.as_bytes()
                        && v[ours.len()] == b'='
                    {
                        continue;
                    }
                }
            }
            Kind::ContentLength => match head.length {
                _ if !keep_length => continue,
                LengthFix::Drop => continue,
                LengthFix::Once(_) if length_done => continue,
                LengthFix::Once(n) => {
                    length_done = true;
                    put_field(out, f.name, itoa::Buffer::new().format(n).as_bytes());
                    continue;
                }
                LengthFix::AsIs => {}
            },
            _ => {}
        }
        if head.named_hops && named_by_connection(head, f.name) {
            continue;
        }
        put_line(out, f.line, f.name, f.value);
    }
    match framing {
        Framing::Empty if !no_body => out.put_slice(b"content-length: 0\r\n"),
        Framing::Chunked => {
            out.put_slice(b"transfer-encoding: ");
            if let Some(c) = r.codings {
                out.put_slice(c);
                out.put_slice(b", ");
            }
            out.put_slice(b"chunked\r\n");
        }
        _ => {}
    }
    if let Some(c) = r.set_cookie {
        let mark = out.len();
        out.put_slice(b"set-cookie: ");
        if c.sticky.put_set_cookie(c.value, c.secure, c.now, out) {
            out.put_slice(b"\r\n");
            // nocache: a shared cache must not hand one client's cookie to everyone.
            if !cache_control {
                out.put_slice(b"cache-control: private\r\n");
            }
        } else {
            out.truncate(mark);
        }
    }
    if r.close {
        out.put_slice(b"connection: close\r\n");
    }
    if !date {
        out.put_slice(b"date: ");
        put_date(out);
        out.put_slice(b"\r\n");
    }
    out.put_slice(b"\r\n");
    if no_body {
        Framing::Empty
    } else {
        framing
    }
}

/// The head of a response the balancer makes itself (an error's), with a body of
/// `len` bytes, as hyper writes one.
pub fn write_local(
    status: StatusCode,
    headers: &HeaderMap,
    len: u64,
    close: bool,
    out: &mut BytesMut,
) {
    out.reserve(160);
    put_status_line(out, status, "<none>");
    for (k, v) in headers {
        put_field(out, k.as_str().as_bytes(), v.as_bytes());
    }
    if close && !headers.contains_key(header::CONNECTION) {
        out.put_slice(b"connection: close\r\n");
    }
    out.put_slice(b"content-length: ");
    out.put_slice(itoa::Buffer::new().format(len).as_bytes());
    out.put_slice(b"\r\n");
    if !headers.contains_key(header::DATE) {
        out.put_slice(b"date: ");
        put_date(out);
        out.put_slice(b"\r\n");
    }
    out.put_slice(b"\r\n");
}

/// The trailer fields a chunked body may end with: those its `Trailer` field declared
/// (as hyper sends them), and never one hyper refuses as a trailer.
pub fn declared_trailers(head: &Head) -> Vec<HeaderName> {
    head.trailer_fields()
        .flat_map(tokens)
        .filter_map(|t| HeaderName::from_bytes(t).ok())
        .filter(|n| {
            !matches!(
                n.as_str(),
                "authorization"
                    | "cache-control"
                    | "content-encoding"
                    | "content-length"
                    | "content-range"
                    | "content-type"
                    | "host"
                    | "max-forwards"
                    | "set-cookie"
                    | "trailer"
                    | "transfer-encoding"
                    | "te"
            )
        })
        .collect()
}

thread_local! {
    /// The `Date` value of the current second, made once a second per thread.
    static DATE: RefCell<(u64, [u8; 29])> = const { RefCell::new((u64::MAX, [b' '; 29])) };
}

/// Append the current time as an HTTP date (IMF-fixdate, 29 bytes).
fn put_date(out: &mut BytesMut) {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with(|d| {
        let mut d = d.borrow_mut();
        if d.0 != secs {
            let text = httpdate::fmt_http_date(now);
            if text.len() == 29 {
                d.1.copy_from_slice(text.as_bytes());
            }
            d.0 = secs;
        }
        out.put_slice(&d.1);
    });
}

#[cfg(test)]
#[path = "reply_tests.rs"]
mod tests;
