//! What a client sends on the byte path: `forward::head::read` (which request heads the
//! byte path takes) and `forward::head::write_upstream` (the head a gear gets).
//!
//! Oracle: no panic; a head the byte path takes (with the body its `Content-Length`
//! gives, read whole) is taken from the same bytes read in any prefix as incomplete
//! first (a part of the head; or the head, where the request ends, and part of the
//! body), never as something else; it ends within the input; the head written for the gear is one complete HTTP/1.1 request head with the
//! same method and target; and it carries the same fields (each name's values in the
//! same order) as the `HeaderMap` path's head for the same request under the same
//! settings (`http::Request` built from the same parse, `Sticky::take`,
//! `prepare_request`, `request_framing` for a body of the length taken,
//! `encode_request_head`). A head `http` would refuse (a name or value
//! it does not take) must not be taken by the byte path either: the builder's refusal
//! fails the oracle. `forward::framing::refused_head` (a head refused for a chunk size
//! in the bytes read with it, or for its target's fragment) never panics and finds only
//! heads the byte path does not take.
#![no_main]

use bytes::BytesMut;
use gearlb::proxy::forward::head::{read, write_upstream, Read, Rewrite, LANE_FIELDS};
use gearlb::proxy::forward::{framing, prepare_request, ClientInfo};
use gearlb::proxy::h1;
use gearlb_core::config::ForwardedHeaders;
use gearlb_core::routing::sticky::Sticky;
use http::header::{HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;

/// `limits.max_header_size` by default.
const LIMIT: usize = 32 * 1024;

/// The input: one byte of settings (bit 0 trust, bit 1 sticky cookie), one byte of
/// which forwarding fields are set (five bits), then the client's bytes.
struct Input<'a> {
    trust: bool,
    set: u8,
    sticky: bool,
    bytes: &'a [u8],
}

impl<'a> Input<'a> {
    fn new(data: &'a [u8]) -> Option<Self> {
        let (&flags, rest) = data.split_first()?;
        let (&set, bytes) = rest.split_first()?;
        Some(Input {
            trust: flags & 1 != 0,
            set,
            sticky: flags & 2 != 0,
            bytes,
        })
    }
}

/// Request line and fields (lower-case names, stable-sorted by name) of a head.
fn fields(raw: &[u8]) -> (String, Vec<(String, Vec<u8>)>) {
    let mut slots = [httparse::EMPTY_HEADER; 128];
    let mut r = httparse::Request::new(&mut slots);
    let n = match r.parse(raw) {
        Ok(httparse::Status::Complete(n)) => n,
        other => panic!("not one complete head: {other:?} {:?}", String::from_utf8_lossy(raw)),
    };
    assert_eq!(n, raw.len(), "bytes after the head");
    let line = format!("{} {} {:?}", r.method.unwrap(), r.path.unwrap(), r.version);
    let mut f: Vec<(String, Vec<u8>)> = r
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
        .collect();
    f.sort_by(|a, b| a.0.cmp(&b.0));
    (line, f)
}

fuzz_target!(|data: &[u8]| {
    let Some(input) = Input::new(data) else {
        return;
    };
    let credential = "gearlb-gossip-auth";
    let bytes = input.bytes;
    // Refused for its chunk size (a chunked head) or its target's fragment: heads the
    // byte path never takes.
    if framing::refused_head(bytes).is_some() {
        let mut s = [httparse::EMPTY_HEADER; LANE_FIELDS];
        assert!(!matches!(read(bytes, &mut s, credential, LIMIT), Read::Head(_)));
    }
    let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
    let Read::Head(h) = read(bytes, &mut slots, credential, LIMIT) else {
        return;
    };
    assert!(h.end() <= bytes.len());
    assert_eq!(h.body.len(), h.length.unwrap_or(0));
    // Every shorter prefix of the request is incomplete, not another request: a part of
    // the head, or the whole head with part of the body, ending where this one does.
    for cut in [0, 1, h.len / 2, h.len.saturating_sub(1), h.len, h.end().saturating_sub(1)] {
        let mut s = [httparse::EMPTY_HEADER; LANE_FIELDS];
        if cut < h.len {
            assert!(
                matches!(read(&bytes[..cut], &mut s, credential, LIMIT), Read::Partial),
                "prefix of {cut} bytes"
            );
        } else if cut < h.end() {
            assert!(
                matches!(read(&bytes[..cut], &mut s, credential, LIMIT), Read::Body(e) if e == h.end()),
                "prefix of {cut} bytes"
            );
        }
    }
    let set = ForwardedHeaders {
        x_forwarded_for: input.set & 1 != 0,
        x_forwarded_proto: input.set & 2 != 0,
        x_forwarded_host: input.set & 4 != 0,
        x_forwarded_port: input.set & 8 != 0,
        forwarded: input.set & 16 != 0,
    };
    let sticky = Sticky::plain("GEAR");
    let client = ClientInfo::new("192.0.2.7:4321".parse().unwrap(), 8080, "http");
    let rw = Rewrite {
        client: &client,
        trust_forwarded: input.trust,
        set,
        sticky: input.sticky.then_some(&sticky),
    };
    let mut out = BytesMut::new();
    let cookie = write_upstream(&h, &rw, &mut out);

    // The HeaderMap path, on the same parse.
    let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
    let mut r = httparse::Request::new(&mut slots);
    assert!(r.parse(bytes).unwrap().is_complete());
    let mut b = http::Request::builder()
        .method(r.method.unwrap())
        .uri(r.path.unwrap());
    for f in r.headers.iter() {
        let name = HeaderName::from_bytes(f.name.as_bytes()).expect("a name http takes");
        let value = HeaderValue::from_bytes(f.value).expect("a value http takes");
        b = b.header(name, value);
    }
    let (mut parts, ()) = b.body(()).expect("a request http takes").into_parts();
    let cookie_map = rw.sticky.and_then(|s| s.take(&mut parts.headers));
    prepare_request(&mut parts, &client, input.trust, set);
    let body = h.body.len() as u64;
    let framing = h1::request_framing(&mut parts.headers, body == 0, Some(body));
    let mut map = BytesMut::new();
    h1::encode_request_head(&parts, framing, &mut map);

    assert_eq!(fields(&out), fields(&map));
    assert_eq!(cookie, cookie_map);
});
