//! TCP mode's keys read from the file: `listen.mode` and a service's `mode`, `[tcp]`,
//! a backend's `send_proxy` (the values are `super::tcp`'s).

use super::reader::Reader;
use super::tcp::{Balance, Cidr, Mode, TcpCheck, TcpConfig, UnknownSni};
use crate::routing::SendProxy;

/// Read `listen.mode`.
pub(super) fn read_mode(r: &mut Reader, key: &'static str, default: Mode) -> Mode {
    match r.str_value(key).as_deref() {
        None => default,
        Some("http") => Mode::Http,
        Some("tcp") => Mode::Tcp,
        Some(other) => {
            r.problem(key, format!("{other:?}: expected \"http\" or \"tcp\""));
            default
        }
    }
}

/// Read a backend's `send_proxy` (`"v1"` or `"v2"`).
pub(super) fn read_send_proxy(r: &mut Reader) -> Option<SendProxy> {
    match r.str_value("send_proxy").as_deref() {
        None => None,
        Some("v1") => Some(SendProxy::V1),
        Some("v2") => Some(SendProxy::V2),
        Some(other) => {
            r.problem(
                "send_proxy",
                format!("{other:?}: expected \"v1\" or \"v2\" (the PROXY protocol version)"),
            );
            None
        }
    }
}

/// Read `[tcp]`.
pub(super) fn read_tcp(r: &mut Reader, tcp: &mut TcpConfig) {
    let choice = |r: &mut Reader, key: &'static str, allowed: &[&'static str]| {
        let v = r.str_value(key)?;
        match allowed.iter().position(|a| *a == v) {
            Some(i) => Some(i),
            None => {
                let list = allowed
                    .iter()
                    .map(|a| format!("{a:?}"))
                    .collect::<Vec<_>>()
                    .join(" or ");
                r.problem(key, format!("{v:?}: expected {list}"));
                None
            }
        }
    };
    if let Some(i) = choice(r, "balance", &["leastconn", "source"]) {
        tcp.balance = [Balance::LeastConn, Balance::Source][i];
    }
    if let Some(i) = choice(r, "unknown_sni", &["default", "close"]) {
        tcp.unknown_sni = [UnknownSni::Default, UnknownSni::Close][i];
    }
    if let Some(i) = choice(r, "check", &["tls-hello", "connect"]) {
        tcp.check = [TcpCheck::TlsHello, TcpCheck::Connect][i];
    }
    tcp.inspect_timeout = r.duration("inspect_timeout", tcp.inspect_timeout);
    if tcp.inspect_timeout.is_zero() {
        r.problem("inspect_timeout", "must be more than 0s");
        tcp.inspect_timeout = TcpConfig::default().inspect_timeout;
    }
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
