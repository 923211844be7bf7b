//! Protocol upgrades (`Connection: upgrade`): what an upgrade request may offer a gear
//! (never `h2c`), and which `101 Switching Protocols` may answer it.

use bytes::{BufMut, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};

use super::values::value;
use crate::h1;

/// A problem with a request's `Upgrade` header, which must be a list of protocols, each
/// a token with an optional `/version` token (RFC 9110 §7.8): any other byte (a space
/// inside a name, a control or a non-ASCII byte) is refused, so that no two readers of
/// the header can see different protocols in it.
pub fn upgrade_problem(headers: &HeaderMap) -> Option<&'static str> {
    let bad = headers.get_all(header::UPGRADE).iter().any(|v| {
        h1::tokens(v.as_bytes()).any(|t| {
            let mut parts = t.splitn(2, |&b| b == b'/');
            let name = parts.next().unwrap_or_default();
            let version = parts.next();
            !(name.iter().all(|&b| h1::is_tchar(b))
                && version.is_none_or(|v| !v.is_empty() && v.iter().all(|&b| h1::is_tchar(b)))
                && (!name.is_empty() || t.is_empty()))
        })
    });
    bad.then_some("malformed Upgrade header")
}

/// What a request is to the balancer's own upgrade protocols (`protocols`, proven by
/// the `credential` header).
#[derive(Debug, PartialEq, Eq)]
pub enum Own {
    /// Nothing of it: the request may go to a gear.
    Not,
    /// An HTTP/1.1 upgrade to this one of them (the first of `protocols` it names):
    /// answered by the balancer.
    Upgrade(&'static str),
    /// It names one or carries its credential without being a proper upgrade to it:
    /// never forwarded (400).
    Refused(&'static str),
}

/// Whether a request is for the balancer's own protocols; `has_upgrade`: it has an
/// `Upgrade` header, already known to be well formed ([`upgrade_problem`]). A request
/// without one costs a single lookup (the credential header).
pub fn own_protocol(
    headers: &HeaderMap,
    has_upgrade: bool,
    protocols: &[&'static str],
    credential: &header::HeaderName,
) -> Own {
    let named = |p: &str| {
        headers
            .get_all(header::UPGRADE)
            .iter()
            .any(|v| h1::tokens(v.as_bytes()).any(|t| t.eq_ignore_ascii_case(p.as_bytes())))
    };
    let chosen = if has_upgrade {
        protocols.iter().copied().find(|p| named(p))
    } else {
        None
    };
    if let Some(p) = chosen {
        if is_upgrade(headers) {
            Own::Upgrade(p)
        } else {
            Own::Refused("the balancers' own protocol, asked without Connection: upgrade")
        }
    } else if headers.contains_key(credential) {
        Own::Refused("a header only the balancers' own protocol carries")
    } else {
        Own::Not
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_bytes(v).unwrap(),
            );
        }
        h
    }

    const AUTH: header::HeaderName = header::HeaderName::from_static("gearlb-gossip-auth");

    #[test]
    fn upgrade_values_outside_the_token_grammar_are_refused() {
        for ok in [
            &b"websocket"[..],
            b"gearlb-gossip/1",
            b"h2c, websocket",
            b"WebSocket ,  foo/2",
            b"",
        ] {
            assert_eq!(
                upgrade_problem(&headers(&[("upgrade", ok)])),
                None,
                "{ok:?}"
            );
        }
        for bad in [
            &b"gearlb-gossip/1, x\xff"[..],
            b"gearlb-gossip/1\xa0",
            b"gearlb-gossip /1",
            b"web\tsocket",
            b"foo/",
            b"/1",
            b"a/b/c",
        ] {
            assert!(
                upgrade_problem(&headers(&[("upgrade", bad)])).is_some(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_own_protocol_is_taken_or_refused_never_passed_on() {
        let own = |h: &HeaderMap| {
            own_protocol(
                h,
                h.contains_key(header::UPGRADE),
                &["gearlb-gossip/2", "gearlb-gossip/1"],
                &AUTH,
            )
        };
        let up = ("connection", &b"upgrade"[..]);
        assert_eq!(
            own(&headers(&[("upgrade", b"gearlb-gossip/1"), up])),
            Own::Upgrade("gearlb-gossip/1")
        );
        assert_eq!(
            own(&headers(&[("upgrade", b"websocket, GEARLB-GOSSIP/1"), up])),
            Own::Upgrade("gearlb-gossip/1")
        );
        // The endpoint's preference wins over the request's order.
        assert_eq!(
            own(&headers(&[
                ("upgrade", b"gearlb-gossip/1, gearlb-gossip/2"),
                up
            ])),
            Own::Upgrade("gearlb-gossip/2")
        );
        // A version the endpoint does not speak, with the credential: never forwarded.
        assert!(matches!(
            own(&headers(&[
                ("upgrade", b"gearlb-gossip/3"),
                up,
                ("gearlb-gossip-auth", b"v3")
            ])),
            Own::Refused(_)
        ));
        assert!(matches!(
            own(&headers(&[("upgrade", b"gearlb-gossip/1")])),
            Own::Refused(_)
        ));
        assert!(matches!(
            own(&headers(&[
                ("upgrade", b"websocket"),
                up,
                ("gearlb-gossip-auth", b"x")
            ])),
            Own::Refused(_)
        ));
        assert!(matches!(
            own(&headers(&[("gearlb-gossip-auth", b"x")])),
            Own::Refused(_)
        ));
        assert_eq!(own(&headers(&[("upgrade", b"websocket"), up])), Own::Not);
        assert_eq!(own(&headers(&[])), Own::Not);
    }
}
