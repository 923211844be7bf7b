//! Protocol upgrades (`Connection: upgrade`): what an upgrade request may offer a gear
//! (never `h2c`), and which `101 Switching Protocols` may answer it.

use bytes::{BufMut, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};

use super::values::value;
use crate::h1;

/// True for an HTTP/1.1 protocol upgrade request (`Connection: upgrade` + `Upgrade`).
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers.get_all(header::CONNECTION).iter().any(|v| {
            v.to_str().is_ok_and(|s| {
                s.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
        })
}

/// The protocols an upgrade request offers that may go on to a gear, as one `Upgrade`
/// value: all it lists but `h2c` (RFC 9113 §3.1 deprecates it; honoured by a gear, it
/// would open a tunnel in which the client speaks HTTP/2 to the gear directly, every
/// request unseen by the balancer: "h2c smuggling"). `None` for a request that is not
/// an upgrade, or offers nothing else.
pub fn upgrade_offer(headers: &HeaderMap) -> Option<HeaderValue> {
    if !is_upgrade(headers) {
        return None;
    }
    let mut offer = BytesMut::new();
    let mut dropped = false;
    for v in headers.get_all(header::UPGRADE) {
        for t in h1::tokens(v.as_bytes()).filter(|t| !t.is_empty()) {
            if t.eq_ignore_ascii_case(b"h2c") {
                dropped = true;
                continue;
            }
            if !offer.is_empty() {
                offer.put_slice(b", ");
            }
            offer.put_slice(t);
        }
    }
    match (offer.is_empty(), dropped) {
        (true, _) => None,
        // The usual case: one value, as it came (no copy).
        (false, false) if headers.get_all(header::UPGRADE).iter().count() == 1 => {
            headers.get(header::UPGRADE).cloned()
        }
        (false, _) => Some(value(offer)),
    }
}

/// True when the request's `Upgrade` header lists `protocol` (case-insensitive).
pub fn upgrade_names(headers: &HeaderMap, protocol: &str) -> bool {
    headers.get_all(header::UPGRADE).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case(protocol))
        })
    })
}

/// Whether a `101 Switching Protocols` may go to the client: the request asked for an
/// upgrade (`asked`: its `Upgrade` value as sent to the backend), and every protocol the
/// response's `Upgrade` names is one the client listed (RFC 9110 §7.8: "A server MUST NOT
/// switch to a protocol that was not indicated by the client"; §15.2.2: a `101` names the
/// protocols in `Upgrade`). Otherwise the tunnel would carry bytes neither side framed
/// as agreed: a request the balancer never looked at could reach the gear through it.
pub fn switch_allowed(
    asked: Option<&HeaderValue>,
    response: &HeaderMap,
) -> Result<(), &'static str> {
    let Some(asked) = asked else {
        return Err("101 Switching Protocols to a request that asked for no upgrade");
    };
    let asked: Vec<&[u8]> = h1::tokens(asked.as_bytes())
        .filter(|t| !t.is_empty())
        .collect();
    let mut named = 0;
    for v in response.get_all(header::UPGRADE) {
        for t in h1::tokens(v.as_bytes()).filter(|t| !t.is_empty()) {
            if !asked.iter().any(|a| a.eq_ignore_ascii_case(t)) {
                return Err("101 Switching Protocols to a protocol the client did not ask for");
            }
            named += 1;
        }
    }
    if named == 0 {
        return Err("101 Switching Protocols without Upgrade");
    }
    Ok(())
}
