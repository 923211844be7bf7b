//! TCP mode's settings as data: the mode of a listener ([`Mode`], `listen.mode` and a
//! service's `mode`), the `[tcp]` section ([`TcpConfig`]: balancing, the ClientHello's
//! wait, what an unknown server name gets, the active check, trusted PROXY fronts),
//! with the address ranges ([`Cidr`]). Read by `tcp_keys`.

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What a listener speaks: HTTP (requests routed by host and path) or TCP (connections
/// forwarded as bytes, TLS routed by its server name).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Http,
    Tcp,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Http => "http",
            Mode::Tcp => "tcp",
        }
    }
}

/// How a TCP connection's backend is chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Balance {
    /// The backend with the fewest connections (HAProxy's `leastconn`).
    #[default]
    LeastConn,
    /// By the client's address, the same backend on every balancer while the backend
    /// set is the same (HAProxy's `balance source`, by rendezvous hashing).
    Source,
}

/// The active check of TCP backends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TcpCheck {
    /// HAProxy's `option ssl-hello-chk`: a TLS ClientHello answered by a handshake or
    /// an alert record.
    #[default]
    TlsHello,
    /// The connection is accepted.
    Connect,
}

/// What a TLS connection whose server name no service claims gets (also a hello
/// without a name, a malformed one, or none in time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnknownSni {
    /// The listener's default service (one claiming every host), else closed.
    #[default]
    Default,
    /// Closed.
    Close,
}

/// `[tcp]`: settings of the TCP listeners.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpConfig {
    /// Default `leastconn`.
    pub balance: Balance,
    /// Longest wait for a complete ClientHello when the listener routes by server name
    /// (HAProxy's `tcp-request inspect-delay`); also bounds the PROXY header. Default 5s.
    pub inspect_timeout: Duration,
    /// Default `default`.
    pub unknown_sni: UnknownSni,
    /// Default `tls-hello`.
    pub check: TcpCheck,
    /// Fronts trusted to send a PROXY protocol header (v1 or v2), which then must start
    /// each of their connections; from anyone else none is read. Default none.
    pub accept_proxy: Vec<Cidr>,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            balance: Balance::LeastConn,
            inspect_timeout: Duration::from_secs(5),
            unknown_sni: UnknownSni::Default,
            check: TcpCheck::TlsHello,
            accept_proxy: Vec::new(),
        }
    }
}

/// An address range: `10.0.0.0/8`, `2001:db8::/32`, or one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (ip, prefix) = match s.split_once('/') {
            Some((ip, p)) => (ip, Some(p)),
            None => (s, None),
        };
        let net: IpAddr = ip
            .parse()
            .map_err(|_| format!("{s:?}: expected an address or address/prefix"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(p) if p <= max => p,
                _ => return Err(format!("{s:?}: the prefix must be 0 to {max}")),
            },
        };
        Ok(Cidr { net, prefix })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_hold_their_addresses() {
        let c: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(c.contains("10.1.200.3".parse().unwrap()));
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.0.9".parse().unwrap()), "v4-mapped");
        let one: Cidr = "192.0.2.7".parse().unwrap();
        assert!(one.contains("192.0.2.7".parse().unwrap()));
        assert!(!one.contains("192.0.2.8".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("203.0.113.1".parse().unwrap()));
        assert!(!all.contains("2001:db8::1".parse().unwrap()));
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains("2001:db8:1::1".parse().unwrap()));
        assert!(!v6.contains("2001:db9::1".parse().unwrap()));
        for bad in [
            "10.0.0.0/33",
            "10.0.0.0/",
            "10.0.0/8",
            "x",
            "::/129",
            "1.2.3.4/-1",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}
