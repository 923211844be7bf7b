//! Hop-by-hop headers (RFC 9110 §7.6.1, plus any named in `Connection`): removed both
//! ways; and the response head rewritten on its way to the client.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Hop-by-hop headers that are never forwarded as they came (RFC 9110 §7.6.1). `Trailer`
/// is not one of them: it is end-to-end (RFC 9110 §6.6.2), and HTTP/1.1 clients get a
/// response's trailer fields only when it names them. `TE: trailers` is set again on a
/// request that carried it (see [`prepare_request`]).
fn fixed_hop_headers() -> [&'static HeaderName; 7] {
    [
        &header::CONNECTION,
        &KEEP_ALIVE,
        &PROXY_CONNECTION,
        &header::TE,
        &header::TRANSFER_ENCODING,
        &header::UPGRADE,
        &header::PROXY_AUTHENTICATE,
    ]
}

fn is_fixed_hop(name: &HeaderName) -> bool {
    fixed_hop_headers().contains(&name)
}

/// Remove hop-by-hop headers, including those the `Connection` header names.
pub fn remove_hop_headers(headers: &mut HeaderMap) {
    // Most messages carry none, or only `Connection`: look before removing (each remove
    // is a hash lookup).
    let mut found: [Option<HeaderName>; 7] = Default::default();
    let mut n = 0;
    for name in headers.keys() {
        if n < found.len()
            && is_fixed_hop(name)
            && !found[..n].iter().any(|f| f.as_ref() == Some(name))
        {
            found[n] = Some(name.clone());
            n += 1;
        }
    }
    if n == 0 {
        return;
    }
    // Header values are reference counted: the clones let us edit the map while
    // reading the tokens. One `Connection` header is the usual case.
    let mut values = headers.get_all(header::CONNECTION).iter();
    if let Some(first) = values.next().cloned() {
        let more: Vec<HeaderValue> = values.cloned().collect();
        remove_connection_named(headers, &first);
        for v in &more {
            remove_connection_named(headers, v);
        }
    }
    for name in found.iter().take(n).flatten() {
        headers.remove(name);
    }
}

/// Remove the headers a `Connection` value names.
fn remove_connection_named(headers: &mut HeaderMap, v: &HeaderValue) {
    let Ok(s) = v.to_str() else { return };
    for token in s.split(',').map(str::trim) {
        // Never let `Connection: host` or similar strip end-to-end essentials; `close`
        // and `keep-alive` are the usual tokens (keep-alive is removed anyway).
        if token.is_empty()
            || token.eq_ignore_ascii_case("close")
            || token.eq_ignore_ascii_case("keep-alive")
            || token.eq_ignore_ascii_case("host")
            || token.eq_ignore_ascii_case("content-length")
        {
            continue;
        }
        // `&str` keys are lower-cased on the stack; invalid names match nothing.
        headers.remove(token);
    }
}

/// Rewrite a backend response head before it goes to the client. A `101 Switching
/// Protocols` keeps its `Connection` and `Upgrade` headers.
pub fn prepare_response(parts: &mut http::response::Parts, switching: bool) {
    let keep = switching.then(|| {
        (
            parts.headers.get(header::UPGRADE).cloned(),
            parts.headers.get(header::CONNECTION).cloned(),
        )
    });
    remove_hop_headers(&mut parts.headers);
    if let Some((upgrade, connection)) = keep {
        if let Some(u) = upgrade {
            parts.headers.insert(header::UPGRADE, u);
        }
        if let Some(c) = connection {
            parts.headers.insert(header::CONNECTION, c);
        }
    }
}
