//! `bin/setup` (the directories and a default `conf/gearlb.toml`, never overwriting
//! the user's) and the `publish-gearlb-peer` hook (how other balancers reach this one).

use super::convention::{Out, Paths};
use super::node;
use crate::config::Env;

/// `bin/setup [--version V]`: the directories and a default `conf/gearlb.toml`; an
/// existing one (the user's) is kept as it is.
pub(super) fn setup(args: &[String], env: &dyn Env, out: &mut Out) -> Result<i32, String> {
    let paths = Paths::find(env)?;
    let mut version = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-v" | "--version" => version = it.next().cloned(),
            _ => {}
        }
    }
    for d in ["conf", "run", "env"] {
        let p = paths.dir.join(d);
        std::fs::create_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if !paths.conf.exists() {
        std::fs::write(&paths.conf, DEFAULT_CONF)
            .map_err(|e| format!("{}: {e}", paths.conf.display()))?;
    }
    if let Some(v) = version {
        let p = paths.dir.join("env").join("OPENSHIFT_GEARLB_VERSION");
        std::fs::write(&p, format!("{v}\n")).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    out.result("gearlb cartridge set up");
    Ok(0)
}

/// The configuration `setup` writes: the gear environment supplies everything else.
pub const DEFAULT_CONF: &str =
    "# gearlb configuration of this gear. The gear environment supplies the listen
# addresses, the identity and secret of the balancers, the state directory and the
# broker; settings here apply on top (see `gearlb check`, and README for every key).
# This file is yours: setup never overwrites it.

[timeouts]
client = \"1m\"
server = \"1m\"
tunnel = \"1h\"
";

/// `publish-gearlb-peer <gear_name> <namespace> <gear_uuid>`: how the other balancers
/// reach this one, `<gear_uuid>|<ip>:<port>` (its public HTTP endpoint, which carries
/// gossip too).
pub(super) fn publish_peer(args: &[String], env: &dyn Env, out: &mut Out) -> Result<i32, String> {
    let uuid = env
        .var("OPENSHIFT_GEAR_UUID")
        .or_else(|| args.get(2).cloned())
        .ok_or("OPENSHIFT_GEAR_UUID is not set")?;
    let (addr, _) = node::advertise(env).ok_or(
        "no address to publish: OPENSHIFT_GEARLB_IP and OPENSHIFT_GEARLB_PORT are not set",
    )?;
    out.plain(format!("{uuid}|{addr}"));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn setup_keeps_the_users_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let cart = dir.path().join("gearlb");
        let e = env(&[("OPENSHIFT_GEARLB_DIR", &format!("{}/", cart.display()))]);
        let mut out = Out::default();
        assert_eq!(
            setup(&["--version".into(), "0.1".into()], &e, &mut out),
            Ok(0)
        );
        let conf = cart.join("conf/gearlb.toml");
        assert_eq!(std::fs::read_to_string(&conf).unwrap(), DEFAULT_CONF);
        assert_eq!(
            std::fs::read_to_string(cart.join("env/OPENSHIFT_GEARLB_VERSION")).unwrap(),
            "0.1\n"
        );
        // The default configuration is valid as it is.
        assert!(config::from_toml(DEFAULT_CONF, &env(&[])).is_ok());
        std::fs::write(&conf, "[timeouts]\nclient = \"5m\"\n").unwrap();
        assert_eq!(setup(&[], &e, &mut out), Ok(0));
        assert_eq!(
            std::fs::read_to_string(&conf).unwrap(),
            "[timeouts]\nclient = \"5m\"\n"
        );
    }

    #[test]
    fn publish_peer_prints_the_public_http_address() {
        let e = env(&[
            (node::NODE_CONF_ENV, "/nonexistent/node.conf"),
            ("OPENSHIFT_GEAR_UUID", "5a1e01"),
            ("OPENSHIFT_GEARLB_IP", "127.0.0.5"),
            ("OPENSHIFT_GEARLB_PORT", "8080"),
            ("OPENSHIFT_GEARLB_PROXY_PORT", "35561"),
        ]);
        let mut out = Out::default();
        assert_eq!(publish_peer(&[], &e, &mut out), Ok(0));
        assert_eq!(out.0, vec!["5a1e01|127.0.0.5:35561"]);
        let mut out = Out::default();
        assert!(publish_peer(&[], &env(&[("OPENSHIFT_GEAR_UUID", "x")]), &mut out).is_err());
    }
}
