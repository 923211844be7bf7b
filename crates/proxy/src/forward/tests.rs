//! Tests of the request and response rewriting ([`super`]).

use super::*;
use gearlb_core::config::ForwardedHeaders;
use http::header::{HeaderMap, HeaderValue};
use http::Version;

#[test]
fn an_oversized_chunk_is_found_behind_a_chunked_head_only() {
    let big = "8000000000000000\r\nhello";
    let with = |head: &str| format!("{head}\r\n{big}");
    let found = |raw: String| {
        framing::refused_head(raw.as_bytes())
            .filter(|(_, _, r)| *r == framing::Refusal::ChunkTooLarge)
            .map(|(m, p, _)| (m.to_string(), p.to_string()))
    };
    assert_eq!(
        found(with(
            "POST /a?b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        )),
        Some(("POST".into(), "/a".into()))
    );
    assert!(found(with(
        "PUT / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: CHUNKED,\r\n"
    ))
    .is_some());
    for head in [
        // Not chunked: the bytes after the head are no chunk.
        "POST / HTTP/1.1\r\nContent-Length: 21\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\n",
    ] {
        assert_eq!(found(with(head)), None, "{head:?}");
    }
    // A head not yet whole, or one httparse cannot read: hyper decides.
    assert_eq!(
        found("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n".into()),
        None
    );
    assert_eq!(
        found(with("POST / HTTP/1.1\r\nTransfer-Encoding chunked\r\n")),
        None
    );
    assert_eq!(
        found("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n".into()),
        None
    );
}

#[test]
fn a_fragment_is_found_in_a_whole_head_only() {
    let found = |raw: &str| {
        framing::refused_head(raw.as_bytes())
            .filter(|(_, _, r)| *r == framing::Refusal::Fragment)
            .map(|(m, p, _)| (m.to_string(), p.to_string()))
    };
    let at = |m: &str, p: &str| Some((m.to_string(), p.to_string()));
    assert_eq!(
        found("GET /c#frag HTTP/1.1\r\nHost: x\r\n\r\n"),
        at("GET", "/c")
    );
    assert_eq!(found("POST /a?b#c HTTP/1.1\r\n\r\n"), at("POST", "/a"));
    assert_eq!(found("GET /#/../admin HTTP/1.1\r\n\r\n"), at("GET", "/"));
    assert_eq!(
        found("GET http://x/a#b HTTP/1.1\r\n\r\n"),
        at("GET", "http://x/a")
    );
    for raw in [
        "GET /c%23frag HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /c HTTP/1.1\r\nX-A: #\r\n\r\n",
        "GET /c#frag HTTP/1.1\r\nHost: x\r\n",
    ] {
        assert_eq!(found(raw), None, "{raw:?}");
    }
}

#[test]
fn ambiguous_requests_are_refused() {
    let parts = |raw: &[(&str, &str)], uri: &str, method: &str, v: Version| {
        let mut b = http::Request::builder().method(method).uri(uri).version(v);
        for (k, val) in raw {
            b = b.header(*k, *val);
        }
        b.body(()).unwrap().into_parts().0
    };
    let ok = |p: &http::request::Parts| request_problem(p).is_none();
    let v11 = Version::HTTP_11;
    assert!(ok(&parts(&[("host", "x")], "/", "GET", v11)));
    assert!(ok(&parts(&[], "/", "GET", Version::HTTP_10)));
    assert!(ok(&parts(&[], "http://x/a", "GET", v11)));
    assert!(ok(&parts(&[("host", "X")], "http://x/a", "GET", v11)));
    assert!(ok(&parts(&[("host", "x")], "*", "OPTIONS", v11)));
    assert!(ok(&parts(
        &[("host", "x"), ("transfer-encoding", "chunked")],
        "/",
        "POST",
        v11
    )));
    // Codings the balancer would take off without saying so: refused, 501.
    assert_eq!(
        request_problem(&parts(
            &[("host", "x"), ("transfer-encoding", "gzip, chunked")],
            "/",
            "POST",
            v11
        ))
        .map(|p| p.0),
        Some(http::StatusCode::NOT_IMPLEMENTED)
    );
    for bad in [
        parts(
            &[
                ("host", "x"),
                ("transfer-encoding", "chunked"),
                ("transfer-encoding", "chunked"),
            ],
            "/",
            "POST",
            v11,
        ),
        parts(
            &[("host", "x"), ("transfer-encoding", "chunked, Chunked")],
            "/",
            "POST",
            v11,
        ),
        parts(&[("host", "a"), ("host", "b")], "/", "GET", v11),
        parts(&[("host", "a"), ("host", "a")], "/", "GET", v11),
        parts(&[("host", "x")], "http://evil.example/", "GET", v11),
        parts(&[], "/", "GET", v11),
        parts(&[("host", "x")], "*", "GET", v11),
        parts(&[("host", "x:443")], "x:443", "CONNECT", v11),
    ] {
        assert!(!ok(&bad), "{bad:?} accepted");
    }
}

fn client() -> ClientInfo {
    ClientInfo::new("192.0.2.7:5555".parse().unwrap(), 8080, "http")
}

fn req(builder: http::request::Builder) -> http::request::Parts {
    builder.body(()).unwrap().into_parts().0
}

#[test]
fn host_and_path_preserved_forwarding_headers_set() {
    let mut p = req(http::Request::get("/a%2Fb/../c?x=1&y=%20")
        .header("host", "App-NS.Example.com:8000")
        .header("x-forwarded-for", "203.0.113.1"));
    prepare_request(&mut p, &client(), true, ForwardedHeaders::ALL);
    assert_eq!(p.uri.to_string(), "/a%2Fb/../c?x=1&y=%20");
    assert_eq!(p.headers["host"], "App-NS.Example.com:8000");
    assert_eq!(p.headers["x-forwarded-for"], "203.0.113.1, 192.0.2.7");
    assert_eq!(p.headers["x-forwarded-proto"], "http");
    assert_eq!(p.headers["x-forwarded-host"], "App-NS.Example.com:8000");
    assert_eq!(p.headers["x-forwarded-port"], "8080");
    assert_eq!(
        p.headers["forwarded"],
        "for=192.0.2.7;host=\"App-NS.Example.com:8000\";proto=http"
    );
}

#[test]
fn trusted_front_proxy_values_are_kept() {
    let mut p = req(http::Request::get("/")
        .header("host", "h")
        .header("x-forwarded-proto", "https")
        .header("x-forwarded-port", "443")
        .header("forwarded", "for=203.0.113.1;proto=https"));
    prepare_request(&mut p, &client(), true, ForwardedHeaders::ALL);
    assert_eq!(p.headers["x-forwarded-proto"], "https");
    assert_eq!(p.headers["x-forwarded-port"], "443");
    assert_eq!(
        p.headers["forwarded"],
        "for=203.0.113.1;proto=https, for=192.0.2.7;host=h;proto=http"
    );
}

#[test]
fn untrusted_values_are_replaced() {
    let mut p = req(http::Request::get("/")
        .header("host", "h")
        .header("x-forwarded-proto", "https")
        .header("forwarded", "for=evil"));
    prepare_request(&mut p, &client(), false, ForwardedHeaders::ALL);
    assert_eq!(p.headers["x-forwarded-proto"], "http");
    assert_eq!(p.headers["forwarded"], "for=192.0.2.7;host=h;proto=http");
}

#[test]
fn an_untrusted_clients_address_chain_is_replaced_a_fronts_appended_to() {
    let mut p = req(http::Request::get("/")
        .header("host", "h")
        .header("x-forwarded-for", "10.9.9.9"));
    prepare_request(&mut p, &client(), false, ForwardedHeaders::default());
    assert_eq!(p.headers["x-forwarded-for"], "192.0.2.7");
    let mut p = req(http::Request::get("/")
        .header("host", "h")
        .header("x-forwarded-for", "203.0.113.1"));
    prepare_request(&mut p, &client(), true, ForwardedHeaders::default());
    assert_eq!(p.headers["x-forwarded-for"], "203.0.113.1, 192.0.2.7");
}

#[test]
fn over_tls_the_proto_is_https_whoever_the_client_is() {
    let tls = ClientInfo::new("192.0.2.7:5555".parse().unwrap(), 443, "https");
    for trusted in [false, true] {
        let mut p = req(http::Request::get("/")
            .header("host", "h")
            .header("x-forwarded-proto", "http"));
        prepare_request(&mut p, &tls, trusted, ForwardedHeaders::default());
        assert_eq!(p.headers["x-forwarded-proto"], "https", "trusted {trusted}");
    }
}

#[test]
fn default_set_is_for_and_proto_others_pass_through_when_trusted() {
    let mut p = req(http::Request::get("/")
        .header("host", "h:8000")
        .header("x-forwarded-port", "443")
        .header("forwarded", "for=203.0.113.1;proto=https"));
    prepare_request(&mut p, &client(), true, ForwardedHeaders::default());
    assert_eq!(p.headers["x-forwarded-for"], "192.0.2.7");
    assert_eq!(p.headers["x-forwarded-proto"], "http");
    // Not set by gearlb: what the router sent goes on untouched, nothing is added.
    assert!(!p.headers.contains_key("x-forwarded-host"));
    assert_eq!(p.headers["x-forwarded-port"], "443");
    assert_eq!(p.headers["forwarded"], "for=203.0.113.1;proto=https");
}

#[test]
fn headers_not_set_are_removed_from_untrusted_clients() {
    let mut p = req(http::Request::get("/")
        .header("host", "h")
        .header("x-forwarded-for", "203.0.113.1")
        .header("x-forwarded-proto", "https")
        .header("x-forwarded-host", "evil")
        .header("x-forwarded-port", "443")
        .header("forwarded", "for=evil;proto=https"));
    prepare_request(&mut p, &client(), false, ForwardedHeaders::NONE);
    for gone in [
        "x-forwarded-proto",
        "x-forwarded-host",
        "x-forwarded-port",
        "forwarded",
    ] {
        assert!(!p.headers.contains_key(gone), "{gone} should be removed");
    }
    // Not set by gearlb, an untrusted client's X-Forwarded-For goes too.
    assert!(!p.headers.contains_key("x-forwarded-for"));
    assert_eq!(p.headers["host"], "h");

    let mut p = req(http::Request::get("/")
        .header("host", "h")
        .header("x-forwarded-proto", "https"));
    prepare_request(&mut p, &client(), true, ForwardedHeaders::NONE);
    assert_eq!(p.headers["x-forwarded-proto"], "https");
    assert!(!p.headers.contains_key("x-forwarded-for"));
}

#[test]
fn hop_by_hop_removed_including_connection_named() {
    let mut p = req(http::Request::get("/")
        .header("host", "h")
        .header("connection", "keep-alive, X-Secret")
        .header("x-secret", "1")
        .header("keep-alive", "timeout=5")
        .header("te", "gzip")
        .header("proxy-connection", "keep-alive")
        .header("expect", "100-continue")
        .header("x-end-to-end", "kept"));
    prepare_request(&mut p, &client(), true, ForwardedHeaders::ALL);
    for gone in [
        "connection",
        "x-secret",
        "keep-alive",
        "te",
        "proxy-connection",
        "expect",
    ] {
        assert!(!p.headers.contains_key(gone), "{gone} should be removed");
    }
    assert_eq!(p.headers["x-end-to-end"], "kept");
}

#[test]
fn te_trailers_is_kept_other_te_codings_are_not() {
    for (te, kept) in [
        ("trailers", true),
        ("gzip, Trailers", true),
        ("trailers;q=1", true),
        ("gzip", false),
        ("trailersx", false),
    ] {
        let mut p = req(http::Request::post("/")
            .header("host", "h")
            .header("connection", "TE")
            .header("te", te));
        prepare_request(&mut p, &client(), true, ForwardedHeaders::NONE);
        let got = p.headers.get("te").map(|v| v.to_str().unwrap());
        assert_eq!(got, kept.then_some("trailers"), "{te}");
    }
}

/// RFC 9112 §3.2: an HTTP/1.1 request has a Host, empty when the target has no
/// authority (an HTTP/1.0 request without one).
#[test]
fn an_http_1_0_request_without_host_gets_an_empty_one() {
    let mut p = req(http::Request::get("/").version(Version::HTTP_10));
    prepare_request(&mut p, &client(), true, ForwardedHeaders::NONE);
    assert_eq!(p.version, Version::HTTP_11);
    assert_eq!(p.headers.get_all("host").iter().collect::<Vec<_>>(), [""]);
    let mut p = req(http::Request::get("/")
        .version(Version::HTTP_10)
        .header("host", "h"));
    prepare_request(&mut p, &client(), true, ForwardedHeaders::NONE);
    assert_eq!(p.headers["host"], "h");
}

#[test]
fn split_cookies_are_joined() {
    let mut h = HeaderMap::new();
    h.append("cookie", "a=1".parse().unwrap());
    join_cookies(&mut h);
    assert_eq!(h["cookie"], "a=1", "one piece stays as it is");
    h.append("cookie", "b=2; c=3".parse().unwrap());
    h.append("cookie", "d=4".parse().unwrap());
    join_cookies(&mut h);
    assert_eq!(
        h.get_all("cookie").iter().collect::<Vec<_>>(),
        ["a=1; b=2; c=3; d=4"]
    );
    let mut none = HeaderMap::new();
    join_cookies(&mut none);
    assert!(none.is_empty());
}

#[test]
fn a_switch_must_be_to_a_protocol_the_client_asked_for() {
    let resp = |upgrade: &[&str]| {
        let mut h = HeaderMap::new();
        for u in upgrade {
            h.append("upgrade", u.parse().unwrap());
        }
        h
    };
    let ws = HeaderValue::from_static("websocket");
    let two = HeaderValue::from_static("h2c, WebSocket");
    assert!(switch_allowed(Some(&ws), &resp(&["websocket"])).is_ok());
    assert!(switch_allowed(Some(&ws), &resp(&["WebSocket"])).is_ok());
    assert!(switch_allowed(Some(&two), &resp(&["websocket"])).is_ok());
    for (asked, got) in [
        (None, &["websocket"][..]),
        (Some(&ws), &[][..]),
        (Some(&ws), &[""][..]),
        (Some(&ws), &["h2c"][..]),
        (Some(&ws), &["websocket, h2c"][..]),
        (Some(&ws), &["websocket", "irc"][..]),
        (Some(&ws), &["websocket/2"][..]),
    ] {
        assert!(
            switch_allowed(asked, &resp(got)).is_err(),
            "{asked:?} -> {got:?}"
        );
    }
}

#[test]
fn transfer_codings_other_than_chunked() {
    let h = |values: &[&'static str]| values.iter().map(|v| v.as_bytes()).collect::<Vec<_>>();
    assert_eq!(transfer_codings(h(&[]).into_iter()), Ok(None));
    assert_eq!(transfer_codings(h(&["chunked"]).into_iter()), Ok(None));
    assert_eq!(transfer_codings(h(&["Chunked"]).into_iter()), Ok(None));
    for (te, others) in [
        (&["gzip, chunked"][..], "gzip"),
        (&["gzip", "chunked"][..], "gzip"),
        (&["gzip"][..], "gzip"),
        (&["gzip,  deflate ,chunked"][..], "gzip, deflate"),
    ] {
        assert_eq!(
            transfer_codings(h(te).into_iter()),
            Ok(Some(HeaderValue::from_static(others))),
            "{te:?}"
        );
    }
    for bad in [
        &["chunked, gzip"][..],
        &["chunked", "chunked"][..],
        &["chunked, chunked"][..],
    ] {
        assert!(transfer_codings(h(bad).into_iter()).is_err(), "{bad:?}");
    }
}

#[test]
fn h2c_is_never_offered_to_a_gear() {
    let h = |pairs: &[(&'static str, &str)]| {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    };
    let up = |v: &str| h(&[("connection", "upgrade"), ("upgrade", v)]);
    assert_eq!(upgrade_offer(&up("h2c")), None);
    assert_eq!(upgrade_offer(&up("H2C")), None);
    assert_eq!(upgrade_offer(&up("websocket")).unwrap(), "websocket");
    assert_eq!(upgrade_offer(&up("h2c, websocket")).unwrap(), "websocket");
    assert_eq!(
        upgrade_offer(&h(&[
            ("connection", "upgrade"),
            ("upgrade", "websocket"),
            ("upgrade", "foo/2")
        ]))
        .unwrap(),
        "websocket, foo/2"
    );
    assert_eq!(
        upgrade_offer(&h(&[("upgrade", "websocket")])),
        None,
        "no Connection: upgrade"
    );
    let mut p = req(http::Request::get("/")
        .header("host", "h")
        .header("connection", "Upgrade, HTTP2-Settings")
        .header("upgrade", "h2c")
        .header("http2-settings", "AAMAAABk"));
    prepare_request(&mut p, &client(), true, ForwardedHeaders::NONE);
    for gone in ["connection", "upgrade", "http2-settings"] {
        assert!(!p.headers.contains_key(gone), "{gone}");
    }
}

#[test]
fn upgrade_requests_keep_upgrade_headers() {
    let mut p = req(http::Request::get("/ws")
        .header("host", "h")
        .header("connection", "keep-alive, Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-key", "k"));
    prepare_request(&mut p, &client(), true, ForwardedHeaders::ALL);
    assert_eq!(p.headers["connection"], "upgrade");
    assert_eq!(p.headers["upgrade"], "websocket");
    assert_eq!(p.headers["sec-websocket-key"], "k");
    let mut r = http::Response::builder()
        .status(101)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("keep-alive", "x")
        .body(())
        .unwrap()
        .into_parts()
        .0;
    prepare_response(&mut r, true);
    assert_eq!(r.headers["upgrade"], "websocket");
    assert!(!r.headers.contains_key("keep-alive"));
}

#[test]
fn connection_cannot_strip_host_or_length() {
    let mut h = HeaderMap::new();
    h.insert("connection", "host, content-length".parse().unwrap());
    h.insert("host", "h".parse().unwrap());
    h.insert("content-length", "3".parse().unwrap());
    remove_hop_headers(&mut h);
    assert!(h.contains_key("host") && h.contains_key("content-length"));
}

#[test]
fn absolute_form_and_h2_authority() {
    let mut p = req(http::Request::get("http://example.com:81/p?q").version(Version::HTTP_2));
    prepare_request(&mut p, &client(), true, ForwardedHeaders::ALL);
    assert_eq!(p.uri.to_string(), "/p?q");
    assert_eq!(p.headers["host"], "example.com:81");
    assert_eq!(p.version, Version::HTTP_11);
}

#[test]
fn ipv6_client() {
    let c = ClientInfo::new("[2001:db8::1]:5555".parse().unwrap(), 8080, "http");
    let mut p = req(http::Request::get("/").header("host", "h"));
    prepare_request(&mut p, &c, true, ForwardedHeaders::ALL);
    assert_eq!(p.headers["x-forwarded-for"], "2001:db8::1");
    assert!(p.headers["forwarded"]
        .to_str()
        .unwrap()
        .starts_with("for=\"[2001:db8::1]\""));
}

#[test]
fn lists_are_joined_and_odd_hosts_quoted() {
    let mut p = req(http::Request::get("/")
        .header("host", "we\"ird\\host")
        .header("x-forwarded-for", "203.0.113.1")
        .header("x-forwarded-for", "198.51.100.2")
        .header("forwarded", "for=a")
        .header("forwarded", "for=b"));
    prepare_request(&mut p, &client(), true, ForwardedHeaders::ALL);
    assert_eq!(
        p.headers["x-forwarded-for"],
        "203.0.113.1, 198.51.100.2, 192.0.2.7"
    );
    assert_eq!(
        p.headers["forwarded"],
        "for=a, for=b, for=192.0.2.7;host=\"we\\\"ird\\\\host\";proto=http"
    );
    assert_eq!(p.headers.get_all("x-forwarded-for").iter().count(), 1);
}

#[test]
fn connection_tokens_in_several_headers() {
    let mut h = HeaderMap::new();
    h.append("connection", "X-A".parse().unwrap());
    h.append("connection", "close, x-b".parse().unwrap());
    h.insert("x-a", "1".parse().unwrap());
    h.insert("x-b", "2".parse().unwrap());
    h.insert("x-c", "3".parse().unwrap());
    h.insert("transfer-encoding", "chunked".parse().unwrap());
    remove_hop_headers(&mut h);
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h["x-c"], "3");
}

#[test]
fn response_hop_headers_removed() {
    let mut p = http::Response::builder()
        .header("connection", "close")
        .header("transfer-encoding", "chunked")
        .header("content-type", "text/plain")
        .body(())
        .unwrap()
        .into_parts()
        .0;
    prepare_response(&mut p, false);
    assert!(!p.headers.contains_key("connection"));
    assert!(!p.headers.contains_key("transfer-encoding"));
    assert_eq!(p.headers["content-type"], "text/plain");
}

#[test]
fn targets_gears_could_read_otherwise_are_refused_or_made_origin_form() {
    let parts = |uri: &str, method: &str| {
        req(http::Request::builder()
            .method(method)
            .uri(uri)
            .header("host", "x:80"))
    };
    // Authority-form is for CONNECT only; raw non-ASCII bytes in a target; `PRI`.
    for (uri, method) in [
        ("x:80", "GET"),
        ("x:80", "POST"),
        ("/c\u{e9}", "GET"),
        ("/c?q=\u{e9}", "GET"),
        ("/c", "PRI"),
    ] {
        let p = parts(uri, method);
        assert_eq!(
            request_problem(&p).map(|r| r.0),
            Some(http::StatusCode::BAD_REQUEST),
            "{method} {uri}"
        );
    }
    assert!(request_problem(&parts("/c%C3%A9?q=%E9", "GET")).is_none());
    // An absolute-form target with a query and no path; a path-less one is `/`.
    for (uri, ok) in [
        ("http://x:80?a=b", false),
        ("http://x:80?", false),
        ("http://x:80", true),
        ("http://x:80/p?a", true),
    ] {
        assert_eq!(request_problem(&parts(uri, "GET")).is_none(), ok, "{uri}");
    }
}

#[test]
fn an_upgrade_in_an_http_1_0_request_is_refused() {
    let h10 = req(http::Request::get("/u")
        .version(Version::HTTP_10)
        .header("host", "x")
        .header("connection", "keep-alive, Upgrade")
        .header("upgrade", "websocket"));
    assert_eq!(
        request_problem(&h10).map(|r| r.0),
        Some(http::StatusCode::BAD_REQUEST)
    );
    let h11 = req(http::Request::get("/u")
        .header("host", "x")
        .header("connection", "Upgrade")
        .header("upgrade", "websocket"));
    assert!(request_problem(&h11).is_none());
}
