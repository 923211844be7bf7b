//! `[idler]`: keeping the application's head gear seen by the node's idler while the
//! application serves ([`IdlerConfig`]): whether, how often, how long a request may take.
//!
//! The node's idler (origin-server `oo-last-access`, then `oo-auto-idler`) counts only
//! the requests its node frontend (Apache on port 80) logged for a gear's DNS name, and
//! ignores those from the node's own addresses; an HA application's traffic reaches its
//! balancers through the port proxies instead, so its head gear idles while it serves.
//! A balancer can keep a peer balancer's gear seen by requesting it through that peer's
//! node frontend (see `gearlb::idler`); these settings say whether and how often. Plain
//! data: the file's keys are read in `file`, the gear variables in `env`.

use std::time::Duration;

/// `[idler]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdlerConfig {
    /// Request the peer balancers' gears through their nodes' frontends while the
    /// application serves. `None` (the default): on in a gear (cartridge mode), off
    /// otherwise (a set-up without node frontends). Env
    /// `OPENSHIFT_GEARLB_IDLER_KEEP_SEEN`.
    pub keep_seen: Option<bool>,
    /// Time between two rounds of requests while the application serves. Default 10m,
    /// well under the idler's threshold (whole hours, 1 at the least).
    /// Env `OPENSHIFT_GEARLB_IDLER_INTERVAL`.
    pub interval: Duration,
    /// The longest one request may take, name lookup and connect included. Default 5s.
    pub timeout: Duration,
    /// The node frontend's port on every node. Default 80.
    pub frontend_port: u16,
}

impl Default for IdlerConfig {
    fn default() -> Self {
        IdlerConfig {
            keep_seen: None,
            interval: Duration::from_secs(600),
            timeout: Duration::from_secs(5),
            frontend_port: 80,
        }
    }
}

impl IdlerConfig {
    /// Whether this balancer keeps its peers' gears seen: as configured, else when it
    /// runs `in_gear` (the node's gear registry, under `OPENSHIFT_HOMEDIR`, lists the
    /// peers; an application with one balancer has none, and nothing is sent).
    pub fn keep_seen_on(&self, in_gear: bool) -> bool {
        self.keep_seen.unwrap_or(in_gear)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{from_toml, Config};
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn on(c: &Config) -> bool {
        c.idler
            .keep_seen_on(c.gear.homedir.is_some() && c.gear.uuid.is_some())
    }

    #[test]
    fn on_in_a_gear_off_alone_unless_configured() {
        let alone = from_toml("", &env(&[])).unwrap();
        assert_eq!(alone.idler, IdlerConfig::default());
        assert!(!on(&alone));
        let gear = env(&[
            ("OPENSHIFT_GEAR_UUID", "5a1e0000000000000000aaaa"),
            (
                "OPENSHIFT_HOMEDIR",
                "/var/lib/openshift/5a1e0000000000000000aaaa/",
            ),
        ]);
        let c = from_toml("", &gear).unwrap();
        assert!(on(&c));
        let mut off = gear.clone();
        off.insert("OPENSHIFT_GEARLB_IDLER_KEEP_SEEN".into(), "false".into());
        let c = from_toml("", &off).unwrap();
        assert!(!on(&c));
        // The file can turn it on outside a gear, or off in one.
        let c = from_toml("[idler]\nkeep_seen = true\n", &env(&[])).unwrap();
        assert!(on(&c));
        let c = from_toml("[idler]\nkeep_seen = false\n", &gear).unwrap();
        assert!(!on(&c));
        // The gear's variable wins over the file, as every gear variable does.
        let mut yes = gear.clone();
        yes.insert("OPENSHIFT_GEARLB_IDLER_KEEP_SEEN".into(), " On ".into());
        let c = from_toml("[idler]\nkeep_seen = false\n", &yes).unwrap();
        assert!(on(&c));
    }

    #[test]
    fn keys_and_their_problems() {
        let c = from_toml(
            "[idler]\ninterval = \"90s\"\ntimeout = \"2s\"\nfrontend_port = 8000\n",
            &env(&[("OPENSHIFT_GEARLB_IDLER_INTERVAL", "5m")]),
        )
        .unwrap();
        assert_eq!(c.idler.interval, Duration::from_secs(300));
        assert_eq!(c.idler.timeout, Duration::from_secs(2));
        assert_eq!(c.idler.frontend_port, 8000);
        let e = from_toml(
            "[idler]\nkeep_seen = \"yes\"\nfrontend_port = 0\ninterval = \"soon\"\nport = 80\n",
            &env(&[
                ("OPENSHIFT_GEARLB_IDLER_KEEP_SEEN", "maybe"),
                ("OPENSHIFT_GEARLB_IDLER_INTERVAL", "0s"),
            ]),
        )
        .unwrap_err();
        let paths: Vec<&str> = e.0.iter().map(|p| p.path.as_str()).collect();
        for want in [
            "idler.keep_seen",
            "idler.frontend_port",
            "idler.interval",
            "idler.port",
            "env OPENSHIFT_GEARLB_IDLER_KEEP_SEEN",
            "env OPENSHIFT_GEARLB_IDLER_INTERVAL",
        ] {
            assert!(paths.contains(&want), "{want} not in {paths:?}");
        }
    }
}
