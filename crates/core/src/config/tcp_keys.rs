//! TCP mode's keys read from the file: `listen.mode` and a service's `mode`, `[tcp]`,
//! a backend's `send_proxy` (the values are `super::tcp`'s).

use super::reader::Reader;
use super::tcp::{Balance, Cidr, Mode, TcpCheck, TcpConfig, UnknownSni};
use crate::routing::SendProxy;

/// One of a few words for `key` (`None`: absent, or not one of them: a problem
/// listing them, with `note` after it when not empty).
fn choice<T: Copy>(
    r: &mut Reader,
    key: &'static str,
    words: &[(&str, T)],
    note: &str,
) -> Option<T> {
    let v = r.str_value(key)?;
    if let Some((_, t)) = words.iter().find(|(w, _)| *w == v) {
        return Some(*t);
    }
    let list = words
        .iter()
        .map(|(w, _)| format!("{w:?}"))
        .collect::<Vec<_>>()
        .join(" or ");
    r.problem(key, format!("{v:?}: expected {list}{note}"));
    None
}

/// Read `listen.mode` (or a service's `mode`).
pub(super) fn read_mode(r: &mut Reader, key: &'static str, default: Mode) -> Mode {
    choice(r, key, &[("http", Mode::Http), ("tcp", Mode::Tcp)], "").unwrap_or(default)
}

/// Read a backend's `send_proxy` (`"v1"` or `"v2"`).
pub(super) fn read_send_proxy(r: &mut Reader) -> Option<SendProxy> {
    let words = [("v1", SendProxy::V1), ("v2", SendProxy::V2)];
    choice(r, "send_proxy", &words, " (the PROXY protocol version)")
}

/// Read `[tcp]`.
pub(super) fn read_tcp(r: &mut Reader, tcp: &mut TcpConfig) {
    let balance = [
        ("leastconn", Balance::LeastConn),
        ("source", Balance::Source),
    ];
    tcp.balance = choice(r, "balance", &balance, "").unwrap_or(tcp.balance);
    let unknown = [
        ("default", UnknownSni::Default),
        ("close", UnknownSni::Close),
    ];
    tcp.unknown_sni = choice(r, "unknown_sni", &unknown, "").unwrap_or(tcp.unknown_sni);
    let check = [
        ("tls-hello", TcpCheck::TlsHello),
        ("connect", TcpCheck::Connect),
    ];
    tcp.check = choice(r, "check", &check, "").unwrap_or(tcp.check);
    // More than zero, as every duration (`parse_duration`).
    tcp.inspect_timeout = r.duration("inspect_timeout", tcp.inspect_timeout);
    match r.get("accept_proxy") {
        None => {}
        Some(toml::Value::Array(items)) => {
            let mut ranges = Vec::new();
            for item in items {
                match item.as_str().map(str::parse::<Cidr>) {
                    Some(Ok(c)) => ranges.push(c),
                    Some(Err(e)) => r.problem("accept_proxy", e),
                    None => r.problem(
                        "accept_proxy",
                        format!("expected address strings, found {}", item.type_str()),
                    ),
                }
            }
            tcp.accept_proxy = ranges;
        }
        Some(other) => r.problem(
            "accept_proxy",
            format!(
                "expected a list of addresses or ranges, found {}",
                other.type_str()
            ),
        ),
    }
}
