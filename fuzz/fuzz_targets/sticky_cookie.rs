//! The sticky cookie: `Sticky::take` (find and strip `GEAR` in a request's `Cookie`
//! headers) and `Sticky::decode`, plain and sealed, then the routing lookup.
//!
//! Oracle: no panic; after `take` no `GEAR` pair is left for the backend and the other
//! headers are still valid; with nothing taken the headers are untouched; a plain value
//! is only ever the restricted alphabet; a sealed value cannot be forged (random input
//! never opens) but round-trips and expires; a decoded value only ever routes to the
//! backend whose sticky value it is.
#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use gearlb::routing::sticky::Sticky;
use gearlb::routing::{BackendSpec, Router};
use http::header::{HeaderMap, HeaderValue, COOKIE};
use libfuzzer_sys::fuzz_target;

const SECRET: &[u8] = b"fuzz-cluster-secret-0123456789";
const MAX_AGE: u64 = 3600;

#[derive(Debug, Arbitrary)]
struct Input {
    cookies: Vec<Vec<u8>>,
    raw: Vec<u8>,
    now: u32,
    flip_at: u16,
}

fn router() -> &'static Router {
    static R: OnceLock<Router> = OnceLock::new();
    R.get_or_init(|| {
        let r = Router::new(0);
        r.replace_backends(
            ["web1-ns", "web2-ns", "gear-x"]
                .iter()
                .enumerate()
                .map(|(i, n)| BackendSpec {
                    name: format!("gear-{n}"),
                    addr: format!("127.0.0.1:{}", 9001 + i).parse().unwrap(),
                    gear_dns: Some(format!("{n}.example.com")),
                    cookie: None,
                    backup: false,
                    max_connections: None,
                    version: None,
                    compatible: Vec::new(),
                    send_proxy: None,
                })
                .collect(),
        );
        r
    })
}

fn has_pair(v: &[u8], name: &[u8]) -> bool {
    v.split(|&b| b == b';').any(|p| {
        let p = p.trim_ascii();
        let k = p.split(|&b| b == b'=').next().unwrap_or(p);
        k.trim_ascii() == name
    })
}

fn check_plain(v: &str) {
    assert!(!v.is_empty() && v.len() <= 128, "{v:?}");
    assert!(
        v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')),
        "{v:?}"
    );
}

fn route(v: &str) {
    if let Some(b) = router().load().sticky_target(v) {
        assert_eq!(b.sticky, v, "a value routed to another backend");
    }
}

fuzz_target!(|input: Input| {
    let plain = Sticky::plain("GEAR");
    static SEALED: OnceLock<Sticky> = OnceLock::new();
    let sealed = SEALED.get_or_init(|| Sticky::sealed("GEAR", SECRET, MAX_AGE));
    let now = u64::from(input.now);

    let mut headers = HeaderMap::new();
    for c in &input.cookies {
        if let Ok(v) = HeaderValue::from_bytes(c) {
            headers.append(COOKIE, v);
        }
    }
    let before = headers.clone();
    let taken = plain.take(&mut headers);
    for v in headers.get_all(COOKIE) {
        assert!(!has_pair(v.as_bytes(), b"GEAR"), "GEAR left: {v:?}");
        assert!(HeaderValue::from_bytes(v.as_bytes()).is_ok());
    }
    match &taken {
        None => assert_eq!(before, headers, "headers changed with no cookie taken"),
        Some(raw) => {
            if let Some(v) = plain.decode(raw, now) {
                check_plain(&v);
                route(&v);
            }
            // Forgery: the fuzzer has no key.
            assert_eq!(sealed.decode(raw, now), None, "forged sealed cookie opened");
        }
    }

    if let Some(v) = plain.decode(&input.raw, now) {
        check_plain(&v);
        route(&v);
    }
    assert_eq!(
        sealed.decode(&input.raw, now),
        None,
        "forged sealed cookie opened"
    );

    // Round trip of a sealed value, expiry, and tampering.
    let value = String::from_utf8_lossy(&input.raw);
    if plain.decode(value.as_bytes(), 0).is_some() {
        let c = sealed.encode(&value, now);
        assert_eq!(sealed.decode(c.as_bytes(), now).as_deref(), Some(&*value));
        assert_eq!(sealed.decode(c.as_bytes(), now + MAX_AGE + 1), None);
        let mut t = c.into_bytes();
        let i = usize::from(input.flip_at) % t.len();
        t[i] ^= 0x01;
        assert_eq!(sealed.decode(&t, now), None, "tampered cookie opened");
        let set = sealed
            .set_cookie(&value, true, now)
            .expect("a valid header");
        assert!(set.to_str().is_ok_and(|s| s.starts_with("GEAR=")));
    }
});
