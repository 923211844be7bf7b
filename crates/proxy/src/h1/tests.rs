//! Unit tests of the HTTP/1.1 wire format: heads written and read, framing, chunks.

use bytes::BytesMut;
use http::header::HeaderMap;
use http::Method;

use super::chunked::MAX_CHUNK_LINE;
use super::*;

fn parse(raw: &str, method: Method) -> Result<Option<Head>, ParseError> {
    parse_response(&mut BytesMut::from(raw), &method)
}

#[test]
fn request_head_carries_method_target_and_headers_as_given() {
    let (mut parts, ()) = http::Request::post("/a%2Fb?x=1")
        .header("host", "App.Example:81")
        .header("x-forwarded-for", "192.0.2.1")
        .body(())
        .unwrap()
        .into_parts();
    let mut out = BytesMut::new();
    encode_request_head(&parts, ReqFraming::Chunked, &mut out);
    assert_eq!(
        &out[..],
        b"POST /a%2Fb?x=1 HTTP/1.1\r\nhost: App.Example:81\r\nx-forwarded-for: 192.0.2.1\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    parts.uri = http::Uri::from_static("*");
    parts.method = Method::OPTIONS;
    parts.headers.clear();
    out.clear();
    encode_request_head(&parts, ReqFraming::Empty, &mut out);
    assert_eq!(&out[..], b"OPTIONS * HTTP/1.1\r\n\r\n");
}

#[test]
fn request_framing_follows_the_body_and_the_head_agrees() {
    let mut h = HeaderMap::new();
    assert_eq!(request_framing(&mut h, true, Some(0)), ReqFraming::Empty);
    assert_eq!(request_framing(&mut h, false, None), ReqFraming::Chunked);
    assert!(h.is_empty());
    h.insert("content-length", "12".parse().unwrap());
    assert_eq!(
        request_framing(&mut h, false, Some(12)),
        ReqFraming::Length(12)
    );
    assert_eq!(h["content-length"], "12");
    h.insert("content-length", "0".parse().unwrap());
    assert_eq!(
        request_framing(&mut h, true, Some(0)),
        ReqFraming::Length(0)
    );
    // A header that disagrees with the body loses.
    h.insert("content-length", "99".parse().unwrap());
    assert_eq!(
        request_framing(&mut h, false, Some(3)),
        ReqFraming::Length(3)
    );
    assert_eq!(h["content-length"], "3");
    assert_eq!(request_framing(&mut h, false, None), ReqFraming::Chunked);
    assert!(!h.contains_key("content-length"));
    h.insert("content-length", "7".parse().unwrap());
    assert_eq!(request_framing(&mut h, true, Some(0)), ReqFraming::Empty);
    assert!(!h.contains_key("content-length"));
}

#[test]
fn chunks_are_encoded_in_hex() {
    let mut out = BytesMut::new();
    encode_chunk(&[b'x'; 26], &mut out);
    encode_chunk(b"", &mut out);
    assert_eq!(&out[..6], b"1a\r\nxx");
    assert!(out.ends_with(b"x\r\n"));
    assert_eq!(out.len(), 4 + 26 + 2);
}

#[test]
fn response_heads_and_their_framing() {
    let h = parse(
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nX-A: 2\r\n\r\nhello",
        Method::GET,
    )
    .unwrap()
    .unwrap();
    assert_eq!(h.status, 200);
    assert_eq!(h.body, BodyLen::Length(5));
    assert!(h.keep_alive);
    assert_eq!(h.headers().get_all("x-a").iter().count(), 2);
    let h = parse(
        "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n",
        Method::GET,
    )
    .unwrap()
    .unwrap();
    assert_eq!(h.body, BodyLen::Chunked);
    assert!(
        !h.headers().contains_key("content-length"),
        "a length the chunked body overrides is not passed on"
    );

    let cases: &[(&str, Method, BodyLen, bool)] = &[
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n",
            Method::HEAD,
            BodyLen::Empty,
            true,
        ),
        (
            "HTTP/1.1 204 No Content\r\n\r\n",
            Method::GET,
            BodyLen::Empty,
            true,
        ),
        (
            "HTTP/1.1 304 Not Modified\r\ncontent-length: 9\r\n\r\n",
            Method::GET,
            BodyLen::Empty,
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            Method::GET,
            BodyLen::Empty,
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            Method::GET,
            BodyLen::Chunked,
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
            Method::GET,
            BodyLen::Chunked,
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n",
            Method::GET,
            BodyLen::Chunked,
            false,
        ),
        (
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
            Method::GET,
            BodyLen::Close,
            false,
        ),
        (
            "HTTP/1.1 200 OK\r\n\r\n",
            Method::GET,
            BodyLen::Close,
            false,
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\n",
            Method::GET,
            BodyLen::Length(3),
            false,
        ),
        (
            "HTTP/1.0 200 OK\r\ncontent-length: 3\r\n\r\n",
            Method::GET,
            BodyLen::Length(3),
            false,
        ),
        (
            "HTTP/1.0 200 OK\r\ncontent-length: 3\r\nConnection: Keep-Alive\r\n\r\n",
            Method::GET,
            BodyLen::Length(3),
            true,
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 3, 3\r\ncontent-length: 3\r\n\r\n",
            Method::GET,
            BodyLen::Length(3),
            true,
        ),
        (
            "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n",
            Method::GET,
            BodyLen::Empty,
            true,
        ),
        // RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding closes its
        // connection, whatever it says about keep-alive.
        (
            "HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n",
            Method::GET,
            BodyLen::Chunked,
            false,
        ),
        (
            "HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\nconnection: keep-alive\r\n\r\n",
            Method::GET,
            BodyLen::Chunked,
            false,
        ),
    ];
    for (raw, m, body, keep) in cases {
        let h = parse(raw, m.clone()).unwrap().unwrap();
        assert_eq!((h.body, h.keep_alive), (*body, *keep), "{raw:?}");
    }
}

/// RFC 9110 §8.6: a length written as a list of the same number is one length; the
/// client gets it once, as it would from a gear that wrote it so.
#[test]
fn a_length_written_several_times_is_passed_on_once() {
    for raw in [
        "HTTP/1.1 200 OK\r\ncontent-length: 3, 3\r\n\r\n",
        "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 3\r\n\r\n",
        "HTTP/1.1 200 OK\r\ncontent-length: 3,3\r\ncontent-length: 3\r\n\r\n",
    ] {
        let h = parse(raw, Method::GET).unwrap().unwrap();
        assert_eq!(h.body, BodyLen::Length(3));
        let hm = h.headers();
        let cl: Vec<_> = hm.get_all("content-length").iter().collect();
        assert_eq!(cl, ["3"], "{raw:?}");
    }
    let h = parse(
        "HTTP/1.1 200 OK\r\ncontent-length: 7, 7\r\n\r\n",
        Method::HEAD,
    )
    .unwrap()
    .unwrap();
    assert_eq!(h.headers()["content-length"], "7");
    let mut req = HeaderMap::new();
    req.append("content-length", "5, 5".parse().unwrap());
    assert_eq!(
        request_framing(&mut req, false, Some(5)),
        ReqFraming::Length(5)
    );
    assert_eq!(
        req.get_all("content-length").iter().collect::<Vec<_>>(),
        ["5"]
    );
    let mut req = HeaderMap::new();
    req.append("content-length", "0".parse().unwrap());
    req.append("content-length", "0".parse().unwrap());
    assert_eq!(
        request_framing(&mut req, true, Some(0)),
        ReqFraming::Length(0)
    );
    assert_eq!(
        req.get_all("content-length").iter().collect::<Vec<_>>(),
        ["0"]
    );
}

#[test]
fn partial_heads_wait_and_bad_ones_are_errors() {
    assert!(parse("HTTP/1.1 200 OK\r\ncontent-le", Method::GET)
        .unwrap()
        .is_none());
    assert!(parse("", Method::GET).unwrap().is_none());
    for bad in [
        "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\n",
        "HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\ncontent-length: 0x10\r\n\r\n",
        "HTTP/1.1 200 OK\r\ncontent-length: \r\n\r\n",
        "HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n\r\n",
        "SSH-2.0-OpenSSH\r\n\r\n",
        "HTTP/1.1 abc OK\r\n\r\n",
        // Outside 100..=599 (RFC 9110 15): invalid, whatever `StatusCode` would hold.
        "HTTP/1.1 600 X\r\ncontent-length: 0\r\n\r\n",
        "HTTP/1.1 999 X\r\ncontent-length: 0\r\n\r\n",
        "HTTP/1.1 099 X\r\ncontent-length: 0\r\n\r\n",
    ] {
        assert!(parse(bad, Method::GET).is_err(), "{bad:?} accepted");
    }
    // The edges of the range are answers.
    for ok in ["HTTP/1.1 100 Continue\r\n\r\n", "HTTP/1.1 599 X\r\n\r\n"] {
        assert!(parse(ok, Method::GET).unwrap().is_some(), "{ok:?} refused");
    }
    let many: String = (0..MAX_HEADERS + 1)
        .map(|i| format!("x-{i}: v\r\n"))
        .collect();
    let raw = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
    assert_eq!(
        parse(&raw, Method::GET).unwrap_err(),
        ParseError::Head("too many headers")
    );
    let big = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD));
    assert_eq!(parse(&big, Method::GET).unwrap_err(), ParseError::TooLarge);
    // A complete head over the limit is refused too, even when it arrived whole.
    let whole = format!("{big}\r\n\r\n");
    assert_eq!(
        parse(&whole, Method::GET).unwrap_err(),
        ParseError::TooLarge
    );
}

#[test]
fn the_head_leaves_the_body_in_the_buffer() {
    let mut buf = BytesMut::from("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello");
    let h = parse_response(&mut buf, &Method::GET).unwrap().unwrap();
    assert_eq!(&buf[..], b"hello");
    assert_eq!(h.headers()["content-length"], "5");
}

/// Decode `input` fed in pieces of `step` bytes; the data and whether it ended.
fn decode_in_steps(input: &[u8], step: usize) -> Result<(Vec<u8>, bool, BytesMut), ParseError> {
    let mut c = Chunked::default();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in input.chunks(step) {
        buf.extend_from_slice(piece);
        loop {
            match c.decode(&mut buf)? {
                Step::Data(d) => out.extend_from_slice(&d),
                Step::More => break,
                Step::End => return Ok((out, true, buf)),
            }
        }
    }
    Ok((out, false, buf))
}

#[test]
fn chunked_bodies_decode_whatever_the_read_sizes() {
    let body = b"5\r\nhello\r\n1;ext=1\r\n \r\nA \r\n0123456789\r\n0\r\nx-t: 1\r\n\r\nNEXT";
    for step in [1, 2, 3, 7, 100] {
        let (data, ended, rest) = decode_in_steps(body, step).unwrap();
        assert_eq!(data, b"hello 0123456789", "step {step}");
        assert!(ended);
        if step == 100 {
            assert_eq!(&rest[..], b"NEXT", "bytes after the body stay");
        }
    }
    let (data, ended, _) = decode_in_steps(b"3\r\nabc\r\n", 2).unwrap();
    assert_eq!((data.as_slice(), ended), (&b"abc"[..], false));
}

#[test]
fn malformed_chunked_bodies_are_errors() {
    for bad in [
        &b"x\r\n"[..],
        b"3\r\nabcX\r\n",
        b"-1\r\n",
        b"1000000000000000\r\n",
        b"3 junk\r\nabc\r\n",
        b"3\nabc\r\n",
        // A control byte where some parsers end the line: after the size, in an
        // extension, in a trailer line.
        b"3\x0c\r\nabc\r\n",
        b"3\r\r\nabc\r\n",
        b"3;a\rb\r\nabc\r\n",
        b"3;a\x00\r\nabc\r\n",
        b"0;\r\r\n\r\n",
        b"0\r\nx-t: a\rb\r\n\r\n",
        b"0\r\nx-t: a\x00\r\n\r\n",
    ] {
        assert!(decode_in_steps(bad, 64).is_err(), "{bad:?} accepted");
    }
    for good in [
        &b"3\t;x=\"y z\"\r\nabc\r\n0\r\n\r\n"[..],
        b"3 \t\r\nabc\r\n0\r\n\r\n",
    ] {
        let (data, ended, _) = decode_in_steps(good, 64).unwrap();
        assert_eq!((data.as_slice(), ended), (&b"abc"[..], true), "{good:?}");
    }
    let long = vec![b'1'; MAX_CHUNK_LINE + 10];
    assert!(decode_in_steps(&long, 64).is_err());
}

#[test]
fn chunk_sizes_stop_below_2_pow_52_and_leading_zeros_count_for_nothing() {
    // 13 significant digits, however padded, is a size; 14 is not (HAProxy's bound).
    for good in [
        &b"fffffffffffff\r\n"[..],
        b"0000000000000000000fffffffffffff\r\n",
    ] {
        assert!(decode_in_steps(good, 64).is_ok(), "{good:?} refused");
    }
    let (data, ended, _) = decode_in_steps(b"0000000000000000003\r\nabc\r\n0\r\n\r\n", 64).unwrap();
    assert_eq!((data.as_slice(), ended), (&b"abc"[..], true));
    for bad in [&b"10000000000000\r\n"[..], b"0ffffffffffffffff\r\n"] {
        assert!(decode_in_steps(bad, 64).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn an_oversized_size_is_found_in_any_chunk_line_at_hand() {
    for (body, oversized) in [
        (&b""[..], false),
        (b"5\r\nhello\r\n0\r\n\r\n", false),
        (b"fffffffffffff\r\nhello", false),
        (b"000000000000000000005\r\nhello\r\n", false),
        (b"10000000000000\r\n", true),
        (b"ffffffffffffffff;x=y\r\n", true),
        (b"0ffffffffffffffff\r\n", true),
        // Further on, behind whole chunks.
        (b"5\r\nhello\r\n3\r\nabc\r\n8000000000000000\r\n", true),
        // The walk stops where it cannot follow: a line without its LF yet, a line it
        // cannot read, the last chunk, a chunk not whole.
        (b"800000000000000", false),
        (b"x\r\n8000000000000000\r\n", false),
        (b"0\r\n8000000000000000\r\n", false),
        (b"5\r\nhel", false),
        (b"5\r\nhello\r", false),
    ] {
        assert_eq!(oversized_size(body), oversized, "{body:?}");
    }
}

#[test]
fn a_chunked_body_is_checked_as_far_as_its_first_chunk() {
    // Whole or cut short anywhere, a good start passes: the rest is the decoder's.
    let good = b"5;x=\"y\"\r\nhello\r\nzz\r\n";
    for end in 0..=good.len() {
        assert!(check_start(&good[..end]).is_ok(), "{:?}", &good[..end]);
    }
    assert!(check_start(b"0\r\n\r\n").is_ok());
    assert!(check_start(b"0\r\nx-t: 1\r\n\r\n").is_ok());
    for bad in [
        &b"x\r\n"[..],
        b"\r\n",
        b"\n",
        b"2\nok\n0\n\n",
        b"0x2\r\nok\r\n",
        b"FFFFFFFFFFFFFFFF1\r\nok\r\n",
        b"-1\r\n",
        b"3 junk\r\nabc\r\n",
        b"1\r\nok\r\n0\r\n\r\n",
        b"2;a=\"\r\n\"\r\nok\r\n",
        b"3\r\nabcX\r\n",
    ] {
        assert!(check_start(bad).is_err(), "{bad:?} passed");
        assert!(
            decode_in_steps(bad, 64).is_err(),
            "the decoder takes {bad:?}"
        );
    }
    let long = vec![b'1'; MAX_CHUNK_LINE + 10];
    assert!(check_start(&long).is_err());
    assert!(
        check_start(&long[..MAX_CHUNK_LINE]).is_ok(),
        "not yet too long"
    );
}

#[test]
fn transfer_codings_are_read_as_lists_and_refused_when_malformed() {
    for (te, want) in [
        ("chunked,", BodyLen::Chunked),
        ("chunked, ", BodyLen::Chunked),
        ("gzip,,chunked", BodyLen::Chunked),
        ("gzip;q=1, chunked", BodyLen::Chunked),
        ("gzip ; level=\"9\", chunked", BodyLen::Chunked),
        ("chunked, gzip", BodyLen::Close),
        ("", BodyLen::Close),
    ] {
        let raw = format!("HTTP/1.1 200 OK\r\ntransfer-encoding: {te}\r\n\r\n");
        let h = parse(&raw, Method::GET).unwrap().unwrap();
        assert_eq!(h.body, want, "{te:?}");
    }
    for te in [
        &b"\"chunked\""[..],
        b"chunked\xff",
        b"gzip x, chunked",
        b"gzip;=, chunked",
        b"gzip;q, chunked",
    ] {
        let raw = [
            &b"HTTP/1.1 200 OK\r\ntransfer-encoding: "[..],
            te,
            b"\r\n\r\n",
        ]
        .concat();
        let got = parse_response(&mut BytesMut::from(&raw[..]), &Method::GET);
        assert!(got.is_err(), "{:?}: {got:?}", String::from_utf8_lossy(te));
    }
}

#[test]
fn a_bodiless_answer_s_framing_fields_are_checked_and_fixed_as_any_other() {
    for (raw, method) in [
        (
            "HTTP/1.1 200 OK\r\ncontent-length: abc\r\n\r\n",
            Method::HEAD,
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 8\r\n\r\n",
            Method::HEAD,
        ),
        (
            "HTTP/1.1 304 Not Modified\r\ncontent-length: 2, 8\r\n\r\n",
            Method::GET,
        ),
        (
            "HTTP/1.1 103 Early Hints\r\ncontent-length: x\r\n\r\n",
            Method::GET,
        ),
    ] {
        assert!(parse(raw, method.clone()).is_err(), "{method} {raw:?}");
    }
    let h = parse(
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n",
        Method::HEAD,
    )
    .unwrap()
    .unwrap();
    assert_eq!(h.body, BodyLen::Empty);
    assert!(
        !h.headers().contains_key("content-length"),
        "{:?}",
        h.headers()
    );
    // An interim response goes on without framing fields.
    let mut headers = HeaderMap::new();
    headers.insert("content-length", "6".parse().unwrap());
    headers.insert("link", "</a>".parse().unwrap());
    let mut out = BytesMut::new();
    encode_interim(http::StatusCode::EARLY_HINTS, &headers, &mut out);
    assert_eq!(&out[..], b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n");
}

#[test]
fn a_length_with_leading_zeros_goes_on_as_a_number_and_one_past_i64_is_refused() {
    let h = parse(
        "HTTP/1.1 200 OK\r\ncontent-length: 0000000000000000002\r\n\r\nok",
        Method::GET,
    )
    .unwrap()
    .unwrap();
    assert_eq!(h.body, BodyLen::Length(2));
    assert_eq!(h.headers()["content-length"], "2");
    let max = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", i64::MAX);
    assert!(parse(&max, Method::GET).is_ok());
    let over = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
        i64::MAX as u64 + 1
    );
    assert!(parse(&over, Method::GET).is_err());
}
