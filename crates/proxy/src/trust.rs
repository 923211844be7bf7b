//! Whose forwarding headers a listener keeps, resolved for the request path
//! ([`Trust`]): `proxy.trust_forwarded` (`gearlb_core::config::FrontTrust`) with this
//! host's own addresses read once (from `/proc/net/fib_trie` and `/proc/net/if_inet6`,
//! loopback always) when it trusts them. A connection's client is looked up once, when
//! it is accepted ([`crate::forward::ClientInfo::trusted`]): nothing per request.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use gearlb_core::config::{Cidr, FrontTrust};

/// Whose forwarding headers are kept, ready for lookups.
#[derive(Clone, Debug, Default)]
pub struct Trust {
    everyone: bool,
    ranges: Vec<Cidr>,
    /// This host's own addresses, when trusted.
    host: Option<HashSet<IpAddr>>,
}

impl Trust {
    /// `t` resolved: this host's addresses are read now when it trusts them.
    pub fn of(t: &FrontTrust) -> Self {
        Trust {
            everyone: t.everyone,
            ranges: t.ranges.clone(),
            host: t.this_host.then(host_addresses),
        }
    }

    /// Whether a client at `ip` is a trusted front.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        if self.everyone {
            return true;
        }
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        if let Some(host) = &self.host {
            if ip.is_loopback() || host.contains(&ip) {
                return true;
            }
        }
        self.ranges.iter().any(|r| r.contains(ip))
    }

    /// Nobody is trusted.
    pub fn is_nobody(&self) -> bool {
        !self.everyone && self.ranges.is_empty() && self.host.is_none()
    }
}

/// This host's own addresses: the kernel's local IPv4 routes and IPv6 addresses
/// (loopback is trusted as a range besides). Nothing when `/proc` cannot be read.
pub fn host_addresses() -> HashSet<IpAddr> {
    let mut out = HashSet::new();
    if let Ok(t) = std::fs::read_to_string("/proc/net/fib_trie") {
        out.extend(local_v4(&t).into_iter().map(IpAddr::V4));
    }
    if let Ok(t) = std::fs::read_to_string("/proc/net/if_inet6") {
        out.extend(local_v6(&t).into_iter().map(IpAddr::V6));
    }
    out
}

/// The `/32 host LOCAL` leaves of `/proc/net/fib_trie`: the addresses of this host.
fn local_v4(fib_trie: &str) -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    let mut last: Option<Ipv4Addr> = None;
    for line in fib_trie.lines() {
        let t = line.trim_start_matches([' ', '|', '+', '-']).trim();
        if let Ok(ip) = t.parse::<Ipv4Addr>() {
            last = Some(ip);
        } else if t.starts_with("/32 host LOCAL") {
            if let Some(ip) = last {
                if !out.contains(&ip) {
                    out.push(ip);
                }
            }
        }
    }
    out
}

/// The addresses of `/proc/net/if_inet6` (first field, 32 hex digits).
fn local_v6(if_inet6: &str) -> Vec<Ipv6Addr> {
    if_inet6
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|h| h.len() == 32)
        .filter_map(|h| u128::from_str_radix(h, 16).ok())
        .map(Ipv6Addr::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_host_its_ranges_or_everyone() {
        let nobody = Trust::of(&FrontTrust::nobody());
        assert!(nobody.is_nobody());
        assert!(!nobody.trusts(ip("127.0.0.1")));
        let ranges = Trust::of(&FrontTrust {
            ranges: vec!["192.0.2.0/24".parse().unwrap()],
            ..Default::default()
        });
        assert!(ranges.trusts(ip("192.0.2.9")) && ranges.trusts(ip("::ffff:192.0.2.9")));
        assert!(!ranges.trusts(ip("127.0.0.1")));
        let host = Trust::of(&FrontTrust {
            this_host: true,
            ..Default::default()
        });
        assert!(host.trusts(ip("127.0.0.1")) && host.trusts(ip("127.9.8.7")));
        assert!(host.trusts(ip("::1")));
        assert!(!host.trusts(ip("203.0.113.9")));
        let all = Trust::of(&FrontTrust {
            everyone: true,
            ..Default::default()
        });
        assert!(all.trusts(ip("203.0.113.9")));
    }

    #[test]
    fn local_addresses_from_proc() {
        let fib = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n     \
                   +-- 10.0.0.0/24 2 0 2\n        |-- 10.0.0.0\n           /24 link UNICAST\n        \
                   |-- 10.0.0.7\n           /32 host LOCAL\n        |-- 10.0.0.255\n           \
                   /32 link BROADCAST\n";
        assert_eq!(local_v4(fib), vec!["10.0.0.7".parse::<Ipv4Addr>().unwrap()]);
        let v6 = "00000000000000000000000000000001 01 80 10 80       lo\n\
                  fe800000000000000000000000000001 02 40 20 80     eth0\n";
        assert_eq!(local_v6(v6).len(), 2);
        // This machine's own addresses include loopback's.
        assert!(host_addresses().contains(&ip("127.0.0.1")));
    }
}
