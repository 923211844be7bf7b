//! The client's head on the byte path, as hyper's server would write the same response
//! (`respond::respond` then hyper's encoder), field order and case aside.

use super::*;
use crate::h1::parse_response;
use bytes::BytesMut;
use http::Method;

fn head(raw: impl AsRef<[u8]>, method: &Method) -> Head {
    parse_response(&mut BytesMut::from(raw.as_ref()), method)
        .unwrap()
        .unwrap()
}

fn reply(raw: &str, method: &Method, r: &Reply<'_>) -> (String, Framing) {
    let h = head(raw, method);
    let mut out = BytesMut::new();
    let f = write_reply(&h, r, &mut out);
    (String::from_utf8(out.to_vec()).unwrap(), f)
}

const PLAIN: Reply<'static> = Reply {
    head_request: false,
    codings: None,
    strip_cookie: None,
    set_cookie: None,
    close: false,
};

#[test]
fn a_plain_response_keeps_its_fields_in_order_and_gets_a_date() {
    let (out, f) = reply(
        "HTTP/1.1 200 Fine\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nX-A: 1\r\n\r\n",
        &Method::GET,
        &PLAIN,
    );
    assert_eq!(f, Framing::Length(5));
    assert!(
        out.starts_with(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\nx-a: 1\r\ndate: "
        ),
        "{out}"
    );
    assert!(out.ends_with(" GMT\r\n\r\n"), "{out}");
    let (out, _) = reply(
        "HTTP/1.0 404 Nope\r\nDate: Thu, 01 Jan 2026 00:00:00 GMT\r\nContent-Length: 0\r\n\r\n",
        &Method::GET,
        &PLAIN,
    );
    assert_eq!(
        out,
        "HTTP/1.1 404 Not Found\r\ndate: Thu, 01 Jan 2026 00:00:00 GMT\r\ncontent-length: 0\r\n\r\n"
    );
}

#[test]
fn a_status_without_a_canonical_reason_keeps_the_backends() {
    let status_line = |raw: &str| {
        let (out, _) = reply(raw, &Method::GET, &PLAIN);
        out.lines().next().unwrap_or_default().to_string()
    };
    assert_eq!(
        status_line("HTTP/1.1 419 Page Expired\r\nContent-Length: 0\r\n\r\n"),
        "HTTP/1.1 419 Page Expired"
    );
    // None came: none goes (hyper would write `<none>`).
    assert_eq!(
        status_line("HTTP/1.1 599\r\nContent-Length: 0\r\n\r\n"),
        "HTTP/1.1 599 "
    );
    // A reason with bytes beyond ASCII (obs-text, which httparse gives as empty) goes
    // as it came, after empty lines before the status line too.
    for raw in [
        &b"HTTP/1.1 599 \xe9t\xe9 ok\r\nContent-Length: 0\r\n\r\n"[..],
        b"\r\n\r\nHTTP/1.1 599 \xe9t\xe9 ok\nContent-Length: 0\n\n",
    ] {
        let h = head(raw, &Method::GET);
        assert_eq!(h.unknown_reason(), Some(&b"\xe9t\xe9 ok"[..]));
        let reason = h.to_parts();
        let reason = reason.extensions.get::<hyper::ext::ReasonPhrase>().unwrap();
        assert_eq!(reason.as_bytes(), b"\xe9t\xe9 ok");
        let mut out = BytesMut::new();
        write_reply(&h, &PLAIN, &mut out);
        assert!(out.starts_with(b"HTTP/1.1 599 \xe9t\xe9 ok\r\n"), "{out:?}");
    }
    // hyper's path is told the same reason (it writes the extension as it is).
    let h = head("HTTP/1.1 419 Page Expired\r\n\r\n", &Method::GET);
    let parts = h.to_parts();
    let reason = parts.extensions.get::<hyper::ext::ReasonPhrase>().unwrap();
    assert_eq!(reason.as_bytes(), b"Page Expired");
    // A canonical reason is the one written, whatever came, with no extension.
    let h = head("HTTP/1.1 404 Nope\r\n\r\n", &Method::GET);
    assert!(h.unknown_reason().is_none());
    assert!(h
        .to_parts()
        .extensions
        .get::<hyper::ext::ReasonPhrase>()
        .is_none());
}

#[test]
fn hop_by_hop_fields_and_those_connection_names_are_dropped() {
    let (out, _) = reply(
        "HTTP/1.1 200 OK\r\nConnection: close, X-Private\r\nKeep-Alive: 5\r\nX-Private: s\r\n\
         Upgrade: h2c\r\nProxy-Authenticate: x\r\nTE: y\r\nX-Kept: k\r\nContent-Length: 1\r\n\r\n",
        &Method::GET,
        &PLAIN,
    );
    for gone in [
        "connection",
        "keep-alive",
        "x-private",
        "upgrade",
        "proxy-authenticate",
        "\r\nte:",
    ] {
        assert!(!out.contains(gone), "{gone} in {out}");
    }
    assert!(out.contains("x-kept: k\r\n") && out.contains("content-length: 1\r\n"));
}

#[test]
fn framing_as_hyper_writes_it() {
    // Chunked from the backend, its length dropped: chunked to the client.
    let (out, f) = reply(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n",
        &Method::GET,
        &PLAIN,
    );
    assert_eq!(f, Framing::Chunked);
    assert!(out.contains("transfer-encoding: chunked\r\n") && !out.contains("content-length"));
    // Delimited by the connection's end: chunked too, with other codings kept.
    let r = Reply {
        codings: Some(b"gzip"),
        ..PLAIN
    };
    let (out, f) = reply(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        &Method::GET,
        &r,
    );
    assert_eq!(f, Framing::Chunked);
    assert!(
        out.contains("transfer-encoding: gzip, chunked\r\n"),
        "{out}"
    );
    let (out, f) = reply("HTTP/1.1 200 OK\r\nX: y\r\n\r\n", &Method::GET, &PLAIN);
    assert_eq!(f, Framing::Chunked);
    assert!(out.contains("transfer-encoding: chunked\r\n"));
    // A length written twice goes once.
    let (out, f) = reply(
        "HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\nContent-Length: 3\r\n\r\n",
        &Method::GET,
        &PLAIN,
    );
    assert_eq!(f, Framing::Length(3));
    assert_eq!(out.matches("content-length: 3\r\n").count(), 1, "{out}");
    // HEAD keeps the length it would have had, and has no body.
    let r = Reply {
        head_request: true,
        ..PLAIN
    };
    let (out, f) = reply(
        "HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n",
        &Method::HEAD,
        &r,
    );
    assert_eq!(f, Framing::Empty);
    assert!(out.contains("content-length: 42\r\n") && !out.contains("content-length: 0"));
    // 204 and 304: no length at all.
    for status in ["204 No Content", "304 Not Modified"] {
        let (out, f) = reply(
            &format!("HTTP/1.1 {status}\r\nContent-Length: 7\r\nTrailer: x\r\n\r\n"),
            &Method::GET,
            &PLAIN,
        );
        assert_eq!(f, Framing::Empty);
        assert!(
            !out.to_ascii_lowercase().contains("content-length"),
            "{out}"
        );
        assert!(!out.to_ascii_lowercase().contains("trailer"), "{out}");
    }
    // An empty 200: `content-length: 0`.
    let (out, f) = reply(
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        &Method::GET,
        &PLAIN,
    );
    assert_eq!(f, Framing::Empty);
    assert!(
        out.matches("content-length").count() == 1 && out.contains("content-length: 0\r\n"),
        "{out}"
    );
}

#[test]
fn the_sticky_cookie_is_the_balancers() {
    let sticky = Sticky::plain("GEAR");
    let cookie = SetCookie {
        sticky: &sticky,
        value: "web2",
        secure: false,
        now: 0,
    };
    let r = Reply {
        strip_cookie: Some("GEAR"),
        set_cookie: Some(cookie),
        ..PLAIN
    };
    let (out, _) = reply(
        "HTTP/1.1 200 OK\r\nSet-Cookie: GEAR=forged\r\nSet-Cookie: GEARS=kept\r\nContent-Length: 0\r\n\r\n",
        &Method::GET,
        &r,
    );
    assert!(!out.contains("GEAR=forged") && out.contains("set-cookie: GEARS=kept\r\n"));
    assert!(
        out.contains("set-cookie: GEAR=web2; path=/; HttpOnly\r\ncache-control: private\r\n"),
        "{out}"
    );
    let (out, _) = reply(
        "HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: 0\r\n\r\n",
        &Method::GET,
        &r,
    );
    assert!(!out.contains("private"), "{out}");
    // Over HTTPS it is Secure; a value no field can carry sends no cookie at all (as
    // hyper's path, where it is no header value), and no half-written field.
    let secure = Reply {
        set_cookie: Some(SetCookie {
            secure: true,
            ..cookie
        }),
        ..r
    };
    let (out, _) = reply(
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        &Method::GET,
        &secure,
    );
    assert!(
        out.contains("set-cookie: GEAR=web2; path=/; HttpOnly; Secure\r\n"),
        "{out}"
    );
    let bad = Reply {
        set_cookie: Some(SetCookie {
            value: "web\r\n2",
            ..cookie
        }),
        ..r
    };
    let (out, _) = reply(
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        &Method::GET,
        &bad,
    );
    assert!(
        !out.contains("set-cookie") && !out.contains("private"),
        "{out}"
    );
    assert!(
        out.ends_with("\r\n\r\n") && out.matches("\r\n\r\n").count() == 1,
        "{out}"
    );
}

#[test]
fn a_closing_connection_says_so() {
    let r = Reply {
        close: true,
        ..PLAIN
    };
    let (out, _) = reply(
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        &Method::GET,
        &r,
    );
    assert!(out.contains("connection: close\r\n"));
}

#[test]
fn declared_trailers_only_and_never_framing_ones() {
    let h = head(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum, Content-Length\r\n\r\n",
        &Method::GET,
    );
    assert_eq!(
        declared_trailers(&h),
        vec![HeaderName::from_static("x-sum")]
    );
}

#[test]
fn a_field_written_loosely_is_written_plainly() {
    let (out, _) = reply(
        "HTTP/1.1 200 OK\r\nX-A:\tv\r\nx-b:v  \r\nX-C: w\r\nContent-Length: 0\r\n\r\n",
        &Method::GET,
        &PLAIN,
    );
    assert!(out.contains("\r\nx-a: v\r\nx-b: v\r\nx-c: w\r\n"), "{out}");
}

#[test]
fn connection_names_only_from_a_text_value() {
    // `HeaderValue::to_str` refuses obs-text: such a value names nothing (as the
    // HeaderMap path's `remove_hop_headers`).
    let (out, _) = reply(
        "HTTP/1.1 200 OK\r\nConnection: x-a, \u{e9}\r\nX-A: 1\r\nConnection: x-b\r\nX-B: 2\r\nContent-Length: 0\r\n\r\n",
        &Method::GET,
        &PLAIN,
    );
    assert!(out.contains("x-a: 1\r\n") && !out.contains("x-b"), "{out}");
}
