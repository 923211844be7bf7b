//! `proxy.trust_forwarded`: whose forwarding headers (`X-Forwarded-For/-Proto/-Host/
//! -Port`, `Forwarded`) a balancer keeps ([`FrontTrust`]). A client is trusted by its
//! address only: a front (a router, the node's frontend) that forwards for others.
//! Everyone else's are replaced by what the balancer saw, so no client can claim
//! another address or to have come over HTTPS.
//!
//! In the file: `true` (every client: only where the balancer's only clients are
//! fronts), `false` (nobody), or a list of addresses and ranges as `tcp.accept_proxy`
//! lists them. When the file says nothing: nobody, except in a gear, where the fronts
//! are the gear's node (its frontend and port proxy: this host's own addresses,
//! loopback included) and the routers named by `OPENSHIFT_GEARLB_TRUSTED_FRONTS`.

use std::net::IpAddr;

use super::tcp::Cidr;

/// The gear variable naming the routers in front of a gear (addresses or ranges,
/// separated by commas or spaces).
pub const TRUSTED_FRONTS_ENV: &str = "OPENSHIFT_GEARLB_TRUSTED_FRONTS";

/// Whose forwarding headers are kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrontTrust {
    /// Every client.
    pub everyone: bool,
    /// The fronts' addresses and ranges.
    pub ranges: Vec<Cidr>,
    /// This host's own addresses too (loopback included).
    pub this_host: bool,
}

impl FrontTrust {
    /// Nobody's.
    pub fn nobody() -> Self {
        FrontTrust::default()
    }

    /// Whether `ip` is a listed front (`this_host` is resolved by the caller, which
    /// knows the host's addresses).
    pub fn lists(&self, ip: IpAddr) -> bool {
        self.everyone || self.ranges.iter().any(|r| r.contains(ip))
    }

    /// What is in force: `configured` (the file's), else in a gear this host and the
    /// routers of `OPENSHIFT_GEARLB_TRUSTED_FRONTS` (`gear_fronts`), else nobody. The
    /// gear's routers are trusted beside a configured list too.
    pub fn resolve(configured: Option<&FrontTrust>, in_gear: bool, gear_fronts: &[Cidr]) -> Self {
        let mut t = match configured {
            Some(t) => t.clone(),
            None if in_gear => FrontTrust {
                this_host: true,
                ..Default::default()
            },
            None => return FrontTrust::nobody(),
        };
        if in_gear {
            t.ranges.extend(gear_fronts.iter().cloned());
        }
        t
    }
}

/// Parse `OPENSHIFT_GEARLB_TRUSTED_FRONTS`: addresses or ranges, by commas or spaces.
pub fn parse_fronts(text: &str) -> Result<Vec<Cidr>, String> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(str::parse::<Cidr>)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::from_toml;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn nobody_by_default_outside_a_gear_and_the_node_and_routers_in_one() {
        let alone = from_toml("", &env(&[])).unwrap();
        let t = alone.proxy.front_trust(false);
        assert_eq!(t, FrontTrust::nobody());
        assert!(!t.lists(ip("127.0.0.1")));
        let gear = env(&[
            ("OPENSHIFT_GEAR_UUID", "5a1e0000000000000000aaaa"),
            (
                "OPENSHIFT_HOMEDIR",
                "/var/lib/openshift/5a1e0000000000000000aaaa/",
            ),
            (TRUSTED_FRONTS_ENV, "192.0.2.10, 198.51.100.0/24"),
        ]);
        let c = from_toml("", &gear).unwrap();
        let t = c.proxy.front_trust(c.gear.homedir.is_some());
        assert!(t.this_host && !t.everyone);
        assert!(t.lists(ip("192.0.2.10")) && t.lists(ip("198.51.100.7")));
        assert!(!t.lists(ip("203.0.113.9")));
        // A configured list keeps the gear's routers beside it.
        let c = from_toml("[proxy]\ntrust_forwarded = [\"10.0.0.0/8\"]\n", &gear).unwrap();
        let t = c.proxy.front_trust(true);
        assert!(!t.this_host && t.lists(ip("10.2.3.4")) && t.lists(ip("192.0.2.10")));
    }

    #[test]
    fn the_file_says_true_false_or_a_list() {
        let c = from_toml("[proxy]\ntrust_forwarded = true\n", &env(&[])).unwrap();
        assert!(c.proxy.front_trust(false).lists(ip("203.0.113.9")));
        let c = from_toml("[proxy]\ntrust_forwarded = false\n", &env(&[])).unwrap();
        assert_eq!(c.proxy.front_trust(true), FrontTrust::nobody());
        let c = from_toml(
            "[proxy]\ntrust_forwarded = [\"192.0.2.7\", \"2001:db8::/32\"]\n",
            &env(&[]),
        )
        .unwrap();
        let t = c.proxy.front_trust(false);
        assert!(t.lists(ip("192.0.2.7")) && t.lists(ip("2001:db8::1")));
        assert!(!t.lists(ip("192.0.2.8")));
        let e = from_toml(
            "[proxy]\ntrust_forwarded = [\"10.0.0.0/33\", 7]\n",
            &env(&[(TRUSTED_FRONTS_ENV, "nope")]),
        )
        .unwrap_err();
        let paths: Vec<&str> = e.0.iter().map(|p| p.path.as_str()).collect();
        assert!(paths.contains(&"proxy.trust_forwarded"), "{paths:?}");
        let e = from_toml(
            "",
            &env(&[
                ("OPENSHIFT_HOMEDIR", "/var/lib/openshift/x/"),
                (TRUSTED_FRONTS_ENV, "nope"),
            ]),
        )
        .unwrap_err();
        assert_eq!(e.0[0].path, format!("env {TRUSTED_FRONTS_ENV}"));
    }
}
