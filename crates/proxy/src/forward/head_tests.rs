//! The byte path's request head against the `HeaderMap` path's, on the same heads: the
//! same request line and the same fields (each name's values in the same order), so
//! that a gear cannot tell which path a request took but by the fields' order.

use super::*;

/// `limits.max_header_size` by default.
const LIMIT: usize = 32 * 1024;
use crate::forward::{prepare_request, ClientInfo};
use http::header::{HeaderName, HeaderValue};

fn client() -> ClientInfo {
    ClientInfo::new("192.0.2.7:4321".parse().unwrap(), 8080, "http")
}

/// Request line and fields (lower-case names, stable-sorted by name) of a head.
fn fields(raw: &[u8]) -> (String, Vec<(String, String)>) {
    let mut slots = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Request::new(&mut slots);
    assert!(
        r.parse(raw).unwrap().is_complete(),
        "{}",
        String::from_utf8_lossy(raw)
    );
    let line = format!("{} {} {:?}", r.method.unwrap(), r.path.unwrap(), r.version);
    let mut f: Vec<(String, String)> = r
        .headers
        .iter()
        .map(|h| {
            let v = String::from_utf8_lossy(h.value).into_owned();
            (h.name.to_ascii_lowercase(), v)
        })
        .collect();
    f.sort_by(|a, b| a.0.cmp(&b.0));
    (line, f)
}

/// The byte path's head for the backend, and the sticky value it took.
fn by_bytes(raw: &[u8], rw: &Rewrite<'_>) -> (Vec<u8>, Option<Vec<u8>>) {
    let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
    let Read::Head(h) = read(raw, &mut slots, "gearlb-gossip-auth", LIMIT) else {
        panic!("not taken: {}", String::from_utf8_lossy(raw));
    };
    assert_eq!(h.end(), raw.len());
    let mut out = BytesMut::new();
    let cookie = write_upstream(&h, rw, &mut out);
    (out.to_vec(), cookie)
}

/// The `HeaderMap` path's head for the same request (what `request::forward` does).
fn by_map(raw: &[u8], rw: &Rewrite<'_>) -> (Vec<u8>, Option<Vec<u8>>) {
    let mut slots = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Request::new(&mut slots);
    let len = r.parse(raw).unwrap().unwrap();
    // The body after the head, as hyper's server would give it.
    let body = (raw.len() - len) as u64;
    let mut b = http::Request::builder()
        .method(r.method.unwrap())
        .uri(r.path.unwrap());
    for h in r.headers.iter() {
        b = b.header(
            HeaderName::from_bytes(h.name.as_bytes()).unwrap(),
            HeaderValue::from_bytes(h.value).unwrap(),
        );
    }
    let (mut parts, ()) = b.body(()).unwrap().into_parts();
    let cookie = rw.sticky.and_then(|s| s.take(&mut parts.headers));
    prepare_request(&mut parts, rw.client, rw.trust_forwarded, rw.set);
    let framing = h1::request_framing(&mut parts.headers, body == 0, Some(body));
    let mut out = BytesMut::new();
    h1::encode_request_head(&parts, framing, &mut out);
    (out.to_vec(), cookie)
}

const HEADS: &[&str] = &[
    "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n",
    "GET /p/q?x=1&y=%20 HTTP/1.1\r\nhost: a.example:8080\r\nUser-Agent: t\r\nAccept: */*\r\n\r\n",
    "HEAD /h HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nProxy-Connection: x\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 10.0.0.1\r\nx-forwarded-for: 10.0.0.2, 10.0.0.3\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: b\r\nX-Forwarded-Port: 443\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a b\r\nForwarded: for=1.2.3.4\r\nforwarded: by=x\r\n\r\n",
    "DELETE /d HTTP/1.1\r\nHost: a\r\nCookie: a=1; GEAR=web1; b=2\r\nCookie: GEAR=web2\r\nX-A: 1\r\nX-A: 2\r\n\r\n",
    "OPTIONS /o HTTP/1.1\r\nHost: a\r\nCookie: x=y\r\nAccept:  spaced  \r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: \u{e9}\r\nX-Forwarded-For: 1.1.1.1\r\n\r\n",
    "POST /f HTTP/1.1\r\nHost: a\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nabc",
    "PUT /f HTTP/1.1\r\nContent-Length: 0\r\nHost: a\r\nCookie: GEAR=web1\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\ncontent-length:  5 \r\n\r\nhello",
];

#[test]
fn the_byte_path_sends_what_the_header_map_path_sends() {
    let sticky = Sticky::plain("GEAR");
    let tls = ClientInfo::new("192.0.2.7:4321".parse().unwrap(), 443, "https");
    for client in [client(), tls] {
        let client = &client;
        for trust in [false, true] {
            for set in [ForwardedHeaders::default(), ForwardedHeaders::ALL] {
                for sticky in [None, Some(&sticky)] {
                    let rw = Rewrite {
                        client,
                        trust_forwarded: trust,
                        set,
                        sticky,
                    };
                    for raw in HEADS {
                        let (bytes, c1) = by_bytes(raw.as_bytes(), &rw);
                        let (map, c2) = by_map(raw.as_bytes(), &rw);
                        assert_eq!(
                            fields(&bytes),
                            fields(&map),
                            "trust {trust}, {set:?}, sticky {}: {raw:?}",
                            sticky.is_some()
                        );
                        assert_eq!(c1, c2, "{raw:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn fields_keep_their_order_in_lower_case() {
    let client = client();
    let rw = Rewrite {
        client: &client,
        trust_forwarded: false,
        set: ForwardedHeaders::default(),
        sticky: None,
    };
    let (out, _) = by_bytes(
        b"GET /x HTTP/1.1\r\nX-B: 2\r\nHost: h\r\nX-A: 1\r\nX-B: 3\r\n\r\n",
        &rw,
    );
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with("GET /x HTTP/1.1\r\nx-b: 2\r\nhost: h\r\nx-a: 1\r\nx-b: 3\r\n"),
        "{text}"
    );
    assert!(text.ends_with("x-forwarded-for: 192.0.2.7\r\nx-forwarded-proto: http\r\n\r\n"));
}

#[test]
fn what_the_byte_path_leaves_to_hyper() {
    let other = [
        "GET / HTTP/1.0\r\nHost: a\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\nabc",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 03\r\n\r\nabc",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3 3\r\n\r\nabc",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x3\r\n\r\nabc",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 16385\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nConnection: x-secret\r\nX-Secret: 1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nTE: trailers\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nTrailer: x\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        "GET / HTTP/1.1\r\nUser-Agent: x\r\n\r\n",
        "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
        "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
        "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
        "GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nGearlb-Gossip-Auth: x\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: \u{e9}\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
        "\0GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    ];
    for raw in other {
        let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
        assert!(
            matches!(
                read(raw.as_bytes(), &mut slots, "gearlb-gossip-auth", LIMIT),
                Read::Other
            ),
            "{raw:?}"
        );
    }
    let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
    assert!(matches!(
        read(b"GET / HTTP/1.1\r\nHo", &mut slots, "", LIMIT),
        Read::Partial
    ));
    // A head longer than the byte path waits for, or with more fields than it takes.
    let long = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(LANE_HEAD_MAX));
    let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
    assert!(matches!(
        read(long.as_bytes(), &mut slots, "", LIMIT),
        Read::Other
    ));
    // Longer than `limits.max_header_size`: hyper's 431, not the byte path's.
    let big = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n",
        "a".repeat(9000)
    );
    let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
    assert!(matches!(
        read(big.as_bytes(), &mut slots, "", 8192),
        Read::Other
    ));
    let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
    assert!(matches!(
        read(&big.as_bytes()[..8500], &mut slots, "", 8192),
        Read::Other
    ));
    let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
    assert!(matches!(
        read(big.as_bytes(), &mut slots, "", 16384),
        Read::Head(_)
    ));
    let many: String = (0..LANE_FIELDS).map(|i| format!("X-{i}: 1\r\n")).collect();
    let many = format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n");
    let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
    assert!(matches!(
        read(many.as_bytes(), &mut slots, "", LIMIT),
        Read::Other
    ));
}

#[test]
fn pipelined_requests_are_read_one_head_at_a_time() {
    let two = b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
    let Read::Head(h) = read(two, &mut slots, "", LIMIT) else {
        panic!("first head")
    };
    assert_eq!((h.target, h.close), ("/1", false));
    let rest = &two[h.len..];
    let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
    let Read::Head(h) = read(rest, &mut slots, "", LIMIT) else {
        panic!("second head")
    };
    assert_eq!((h.target, h.close, h.len), ("/2", true, rest.len()));
}

/// A body with a length is read whole: the request is taken once all of it came (not
/// before: until then, where it will end), it ends where its length says, and what
/// follows is the next request's.
#[test]
fn a_body_is_read_whole_and_the_next_request_follows_it() {
    let raw = b"POST /1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET /2 HTTP/1.1\r\nHost: a\r\n\r\n";
    let head = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
    assert!(matches!(
        read(&raw[..head - 1], &mut slots, "", LIMIT),
        Read::Partial
    ));
    // The head is whole: where the request will end.
    for cut in [head, head + 1, head + 4] {
        let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
        assert!(
            matches!(read(&raw[..cut], &mut slots, "", LIMIT), Read::Body(end) if end == head + 5),
            "cut at {cut}"
        );
    }
    let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
    let Read::Head(h) = read(raw, &mut slots, "", LIMIT) else {
        panic!("first request")
    };
    assert_eq!(
        (h.len, h.length, h.body, h.end()),
        (head, Some(5), &b"hello"[..], head + 5)
    );
    let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
    let Read::Head(h) = read(&raw[head + 5..], &mut slots, "", LIMIT) else {
        panic!("second request")
    };
    assert_eq!((h.target, h.length, h.body), ("/2", None, &b""[..]));
    // The longest body the byte path reads whole, and `Content-Length: 0`.
    let max = format!(
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {LANE_BODY_MAX}\r\n\r\n{}",
        "x".repeat(LANE_BODY_MAX)
    );
    let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
    assert!(
        matches!(read(max.as_bytes(), &mut slots, "", LIMIT), Read::Head(h) if h.body.len() == LANE_BODY_MAX)
    );
    let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
    let zero = b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n";
    assert!(
        matches!(read(zero, &mut slots, "", LIMIT), Read::Head(h) if h.length == Some(0) && h.end() == zero.len())
    );
}

#[test]
fn targets_as_http_takes_them() {
    // Every byte in the path and in the query, and a few whole targets, against what
    // `PathAndQuery` (hyper's parser) takes; a fragment is left to hyper.
    let mut targets: Vec<Vec<u8>> = Vec::new();
    for b in 0u8..=255 {
        targets.push([b"/a".as_slice(), &[b], b"b"].concat());
        targets.push([b"/a?x".as_slice(), &[b], b"y"].concat());
    }
    for t in ["/", "/?", "/??", "/a?b?c", "/%zz", "/\u{e9}"] {
        targets.push(t.as_bytes().to_vec());
    }
    for t in targets {
        let http_takes = std::str::from_utf8(&t).is_ok_and(|s| {
            !s.contains('#') && http::uri::PathAndQuery::try_from(s).is_ok_and(|p| p.as_str() == s)
        });
        assert_eq!(
            origin_form(&t) && std::str::from_utf8(&t).is_ok(),
            http_takes,
            "{:?}",
            String::from_utf8_lossy(&t)
        );
    }
}

#[test]
fn non_ascii_targets_and_pri_are_left_to_hyper_to_refuse() {
    for raw in [
        "GET /c\u{e9} HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /c?q=\u{e9} HTTP/1.1\r\nHost: a\r\n\r\n",
        "PRI /c HTTP/1.1\r\nHost: a\r\n\r\n",
    ] {
        let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
        assert!(
            matches!(read(raw.as_bytes(), &mut slots, "", LIMIT), Read::Other),
            "{raw:?}"
        );
    }
}
