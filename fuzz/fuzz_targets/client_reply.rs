//! What a client gets on the byte path: `h1::write_reply` on any head
//! `h1::parse_response` takes from a backend.
//!
//! Oracle: no panic; what is written is one complete HTTP/1.1 response head with the
//! backend's status (and its reason where the status has no canonical one); no
//! hop-by-hop field goes through (`connection` only as the balancer's own `close`,
//! `transfer-encoding` only as its chunked framing); the framing
//! is one of: no body (no length but `0`; a `HEAD` answer's lengths as the `HeaderMap`
//! path keeps them), one `content-length` equal to the body's length, or chunked with
//! no length; the backend's own `Set-Cookie` for the balancer's cookie never goes
//! through; and every other field is the one the `HeaderMap` path gives the client
//! (`Head::to_parts`, `forward::prepare_response`, `Sticky::strip_set_cookie`), each
//! name's values in the same order.
#![no_main]

use bytes::BytesMut;
use gearlb::proxy::forward::prepare_response;
use gearlb::proxy::h1::{self, Framing, Reply};
use gearlb_core::routing::sticky::Sticky;
use http::Method;
use libfuzzer_sys::fuzz_target;

/// The input: one byte of settings (bits: `HEAD`, closing, sticky cookie stripped,
/// sticky cookie set, gzip passed on), then the backend's bytes.
struct Input<'a> {
    head_request: bool,
    close: bool,
    sticky: bool,
    set_cookie: bool,
    gzip: bool,
    bytes: &'a [u8],
}

impl<'a> Input<'a> {
    fn new(data: &'a [u8]) -> Option<Self> {
        let (&f, bytes) = data.split_first()?;
        Some(Input {
            head_request: f & 1 != 0,
            close: f & 2 != 0,
            sticky: f & 4 != 0,
            set_cookie: f & 8 != 0,
            gzip: f & 16 != 0,
            bytes,
        })
    }
}

/// Fields the balancer writes itself, checked apart.
const OWN: [&str; 7] = [
    "content-length",
    "transfer-encoding",
    "date",
    "connection",
    "trailer",
    "set-cookie",
    "cache-control",
];

fuzz_target!(|data: &[u8]| {
    let Some(input) = Input::new(data) else {
        return;
    };
    let method = if input.head_request {
        Method::HEAD
    } else {
        Method::GET
    };
    let mut buf = BytesMut::from(input.bytes);
    let Ok(Some(head)) = h1::parse_response(&mut buf, &method) else {
        return;
    };
    if head.status.is_informational() {
        return;
    }
    let sticky = Sticky::plain("GEAR");
    let codings = (input.gzip && matches!(head.body, h1::BodyLen::Chunked | h1::BodyLen::Close))
        .then_some(&b"gzip"[..]);
    let r = Reply {
        head_request: input.head_request,
        codings,
        strip_cookie: input.sticky.then_some("GEAR"),
        set_cookie: (input.sticky && input.set_cookie).then_some(h1::SetCookie {
            sticky: &sticky,
            value: "w1",
            secure: false,
            now: 0,
        }),
        close: input.close,
    };
    let mut out = BytesMut::new();
    let framing = h1::write_reply(&head, &r, &mut out);

    let mut slots = [httparse::EMPTY_HEADER; 256];
    let mut p = httparse::Response::new(&mut slots);
    let n = match p.parse(&out) {
        Ok(httparse::Status::Complete(n)) => n,
        other => panic!("not a complete head: {other:?} {:?}", String::from_utf8_lossy(&out)),
    };
    assert_eq!(n, out.len());
    assert_eq!(p.code, Some(head.status.as_u16()));
    assert_eq!(p.version, Some(1));
    // The reason: the canonical one, else the backend's own as its status line has it,
    // bytes beyond ASCII too (never hyper's `<none>`).
    let want_reason = match head.status.canonical_reason() {
        Some(r) => r.as_bytes(),
        None => backend_reason(input.bytes),
    };
    let line_end = out.iter().position(|&b| b == b'\r').unwrap();
    assert_eq!(&out[..13], format!("HTTP/1.1 {:03} ", head.status.as_u16()).as_bytes());
    assert_eq!(&out[13..line_end], want_reason);
    let got: Vec<(String, Vec<u8>)> = p
        .headers
        .iter()
        .map(|h| (h.name.to_string(), h.value.to_vec()))
        .collect();
    for (name, _) in &got {
        assert_eq!(*name, name.to_ascii_lowercase(), "names in lower case");
    }
    let values = |n: &str| -> Vec<&[u8]> {
        got.iter()
            .filter(|(k, _)| k == n)
            .map(|(_, v)| &v[..])
            .collect()
    };
    for hop in ["keep-alive", "proxy-connection", "te", "upgrade", "proxy-authenticate"] {
        assert!(values(hop).is_empty(), "{hop} went through");
    }
    let connection = values("connection");
    assert!(connection.is_empty() || (input.close && connection == [&b"close"[..]]));
    let lengths = values("content-length");
    let te = values("transfer-encoding");
    match framing {
        Framing::Empty if input.head_request => {
            // A HEAD answer keeps the lengths it would have had, as the HeaderMap path
            // (hyper writes them as they are).
            assert!(te.is_empty());
            let parts = head.to_parts();
            let want: Vec<&[u8]> = parts
                .headers
                .get_all("content-length")
                .iter()
                .map(|v| v.as_bytes())
                .collect();
            assert_eq!(lengths, want);
        }
        Framing::Empty => assert!(te.is_empty() && (lengths.is_empty() || lengths == [b"0"])),
        Framing::Length(len) => {
            assert!(te.is_empty());
            // The backend's own digits (`09` stays `09`, as hyper wrote it), once.
            assert_eq!(lengths.len(), 1);
            let n: u64 = std::str::from_utf8(lengths[0]).unwrap().parse().unwrap();
            assert_eq!(n, len);
        }
        Framing::Chunked => {
            assert!(lengths.is_empty());
            assert_eq!(te.len(), 1);
            assert!(te[0].ends_with(b"chunked"));
        }
    }
    assert!(values("set-cookie")
        .iter()
        .all(|v| !input.sticky || !v.trim_ascii_start().starts_with(b"GEAR=") || *v == b"GEAR=w1; path=/; HttpOnly"));

    // Every other field as the HeaderMap path has it.
    let mut parts = head.to_parts();
    prepare_response(&mut parts, false);
    if input.sticky {
        sticky.strip_set_cookie(&mut parts.headers);
    }
    let mut want: Vec<(String, Vec<u8>)> = parts
        .headers
        .iter()
        .filter(|(k, _)| !OWN.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str().to_string(), v.as_bytes().to_vec()))
        .collect();
    let mut have: Vec<(String, Vec<u8>)> = got
        .into_iter()
        .filter(|(k, _)| !OWN.contains(&k.as_str()))
        .collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    have.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(have, want);
});

/// The reason phrase of the status line in `raw` (after any empty lines before it):
/// what follows `HTTP/1.x NNN `, up to the line's end.
fn backend_reason(raw: &[u8]) -> &[u8] {
    let start = raw.iter().take_while(|&&b| b == b'\r' || b == b'\n').count();
    let line = &raw[start..];
    let mut line = &line[..line.iter().position(|&b| b == b'\n').unwrap()];
    if let [rest @ .., b'\r'] = line {
        line = rest;
    }
    line.get(13..).unwrap_or_default()
}
