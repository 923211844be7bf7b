//! What the node platform tells a cartridge, beyond its own variables.
//!
//! Owns finding this gear's web server (`local-gear`) from the primary cartridge, as
//! the old cartridge's `update-cluster` did: the primary cartridge's
//! `Cartridge-Short-Name` from its manifest, then `OPENSHIFT_<SHORT>_IP`/`_PORT`, or the
//! variables named by its first endpoint's `Private-IP-Name`/`Private-Port-Name`. And the
//! address other balancers reach this one at (its public HTTP endpoint, which also
//! carries gossip): the node's `PUBLIC_IP` from `/etc/openshift/node.conf` (which the old
//! cartridge sourced), else the address `OPENSHIFT_GEAR_DNS` resolves to, else the
//! gear's private IP; with the port proxy's `OPENSHIFT_GEARLB_PROXY_PORT`, else the
//! private port. The parsing is pure; [`advertise`] resolves a name.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::Path;

use crate::config::Env;

/// The node's configuration file (shell `KEY="value"` lines).
pub const NODE_CONF: &str = "/etc/openshift/node.conf";
/// Names another node configuration file (tests, unusual nodes).
pub const NODE_CONF_ENV: &str = "GEARLB_NODE_CONF";

/// The short name and first endpoint's private IP and port variable names of a
/// cartridge manifest (the few lines needed, read without a YAML parser: manifests
/// put each of these keys on a line of its own).
pub fn manifest_fields(text: &str) -> (Option<String>, Option<String>, Option<String>) {
    let value = |line: &str, key: &str| -> Option<String> {
        let rest = line.trim_start().trim_start_matches("- ");
        let v = rest.strip_prefix(key)?.strip_prefix(':')?;
        let v = v.trim().trim_matches(|c| c == '"' || c == '\'').trim();
        (!v.is_empty()).then(|| v.to_string())
    };
    let (mut short, mut ip, mut port) = (None, None, None);
    for line in text.lines() {
        if short.is_none() {
            short = value(line, "Cartridge-Short-Name");
        }
        if ip.is_none() {
            ip = value(line, "Private-IP-Name");
        }
        if port.is_none() {
            port = value(line, "Private-Port-Name");
        }
    }
    (short, ip, port)
}

/// `ip:port` of this gear's web server, when it has one (not when the balancer is the
/// primary cartridge itself: a standalone web proxy gear).
pub fn local_gear(env: &dyn Env) -> Option<String> {
    let dir = env.var("OPENSHIFT_PRIMARY_CARTRIDGE_DIR")?;
    let text = std::fs::read_to_string(Path::new(&dir).join("metadata/manifest.yml")).ok()?;
    let (short, ip_name, port_name) = manifest_fields(&text);
    let short = short?.to_ascii_uppercase();
    if short == "GEARLB" {
        return None;
    }
    let var = |suffix: &str, first: &Option<String>| {
        env.var(&format!("OPENSHIFT_{short}_{suffix}")).or_else(|| {
            first
                .as_ref()
                .and_then(|n| env.var(&format!("OPENSHIFT_{short}_{n}")))
        })
    };
    let ip: IpAddr = var("IP", &ip_name)?.trim().parse().ok()?;
    let port: u16 = var("PORT", &port_name)?.trim().parse().ok()?;
    Some(SocketAddr::new(ip, port).to_string())
}

/// `PUBLIC_IP` of a node configuration file's text.
pub fn public_ip(node_conf: &str) -> Option<IpAddr> {
    node_conf.lines().find_map(|line| {
        let v = line.trim().strip_prefix("PUBLIC_IP=")?;
        v.trim()
            .trim_matches(|c| c == '"' || c == '\'')
            .parse()
            .ok()
    })
}

/// The node configuration's text, if readable.
pub fn node_conf(env: &dyn Env) -> Option<String> {
    let path = env
        .var(NODE_CONF_ENV)
        .unwrap_or_else(|| NODE_CONF.to_string());
    std::fs::read_to_string(path).ok()
}

/// Where other balancers reach this one (see the module docs), and how it was found.
pub fn advertise(env: &dyn Env) -> Option<(SocketAddr, &'static str)> {
    let port: u16 = env
        .var("OPENSHIFT_GEARLB_PROXY_PORT")
        .or_else(|| env.var("OPENSHIFT_GEARLB_PORT"))?
        .trim()
        .parse()
        .ok()?;
    if let Some(ip) = node_conf(env).as_deref().and_then(public_ip) {
        return Some((
            SocketAddr::new(ip, port),
            "PUBLIC_IP of the node configuration",
        ));
    }
    if let Some(dns) = env.var("OPENSHIFT_GEAR_DNS") {
        if let Some(a) = (dns.as_str(), port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.find(|a| a.is_ipv4()))
        {
            return Some((a, "OPENSHIFT_GEAR_DNS"));
        }
    }
    let ip: IpAddr = env.var("OPENSHIFT_GEARLB_IP")?.trim().parse().ok()?;
    Some((
        SocketAddr::new(ip, port),
        "OPENSHIFT_GEARLB_IP (reachable from this node only)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn manifest_fields_of_real_manifests() {
        let php = "---\nName: php\nCartridge-Short-Name: PHP\nEndpoints:\n- Private-IP-Name: IP\n  Private-Port-Name: PORT\n  Private-Port: 8080\n";
        assert_eq!(
            manifest_fields(php),
            (Some("PHP".into()), Some("IP".into()), Some("PORT".into()))
        );
        let ews = "Name: jbossews\nCartridge-Short-Name: 'JBOSSEWS'\nEndpoints:\n  - Private-IP-Name:   IP\n    Private-Port-Name: HTTP_PORT\n  - Private-IP-Name: IP\n    Private-Port-Name: JPDA_PORT\n";
        assert_eq!(
            manifest_fields(ews),
            (
                Some("JBOSSEWS".into()),
                Some("IP".into()),
                Some("HTTP_PORT".into())
            )
        );
        assert_eq!(manifest_fields(""), (None, None, None));
    }

    #[test]
    fn local_gear_from_the_primary_cartridge() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("jbossews/metadata")).unwrap();
        std::fs::write(
            dir.path().join("jbossews/metadata/manifest.yml"),
            "Cartridge-Short-Name: JBOSSEWS\nEndpoints:\n- Private-IP-Name: IP\n  Private-Port-Name: HTTP_PORT\n",
        )
        .unwrap();
        let primary = format!("{}/jbossews/", dir.path().display());
        let e = env(&[
            ("OPENSHIFT_PRIMARY_CARTRIDGE_DIR", &primary),
            ("OPENSHIFT_JBOSSEWS_IP", "127.10.0.1"),
            ("OPENSHIFT_JBOSSEWS_HTTP_PORT", "8080"),
        ]);
        assert_eq!(local_gear(&e).as_deref(), Some("127.10.0.1:8080"));
        let no_port = env(&[
            ("OPENSHIFT_PRIMARY_CARTRIDGE_DIR", &primary),
            ("OPENSHIFT_JBOSSEWS_IP", "127.10.0.1"),
        ]);
        assert_eq!(local_gear(&no_port), None);
        assert_eq!(local_gear(&env(&[])), None);
        // The balancer as the primary cartridge: a standalone web proxy, no local gear.
        std::fs::create_dir_all(dir.path().join("gearlb/metadata")).unwrap();
        std::fs::write(
            dir.path().join("gearlb/metadata/manifest.yml"),
            "Cartridge-Short-Name: GEARLB\n",
        )
        .unwrap();
        let standalone = env(&[
            (
                "OPENSHIFT_PRIMARY_CARTRIDGE_DIR",
                &format!("{}/gearlb/", dir.path().display()),
            ),
            ("OPENSHIFT_GEARLB_IP", "127.10.0.2"),
            ("OPENSHIFT_GEARLB_PORT", "8080"),
        ]);
        assert_eq!(local_gear(&standalone), None);
    }

    #[test]
    fn advertise_prefers_the_nodes_public_ip() {
        assert_eq!(
            public_ip("# node\nPUBLIC_HOSTNAME=\"node1.example.com\"\nPUBLIC_IP=\"10.0.0.5\"\n"),
            Some("10.0.0.5".parse().unwrap())
        );
        assert_eq!(public_ip("PUBLIC_IP=nonsense"), None);
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("node.conf");
        std::fs::write(&conf, "PUBLIC_IP=10.0.0.5\n").unwrap();
        let conf = conf.display().to_string();
        let e = env(&[
            (NODE_CONF_ENV, &conf),
            ("OPENSHIFT_GEARLB_IP", "127.10.0.1"),
            ("OPENSHIFT_GEARLB_PORT", "8080"),
            ("OPENSHIFT_GEARLB_PROXY_PORT", "35561"),
        ]);
        assert_eq!(advertise(&e).unwrap().0, "10.0.0.5:35561".parse().unwrap());
        // No node configuration, no resolvable gear name: the private address.
        let e = env(&[
            (NODE_CONF_ENV, "/nonexistent/node.conf"),
            ("OPENSHIFT_GEAR_DNS", "no-such-gear.invalid"),
            ("OPENSHIFT_GEARLB_IP", "127.10.0.1"),
            ("OPENSHIFT_GEARLB_PORT", "8080"),
        ]);
        assert_eq!(advertise(&e).unwrap().0, "127.10.0.1:8080".parse().unwrap());
        assert_eq!(advertise(&env(&[])), None);
    }
}
