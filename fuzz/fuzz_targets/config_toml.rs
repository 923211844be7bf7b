//! The configuration: a TOML file and the gear environment, loaded by
//! `config::from_toml` (also what SIGHUP / `ctl reload` re-read).
//!
//! Oracle: no panic; a refusal lists at least one problem; an accepted configuration
//! holds every documented invariant (ranges, names, secrets, regex).
#![no_main]

use std::collections::HashMap;

use gearlb::config::from_toml;
use gearlb::gear::{is_backend_name, is_peer_id};
use libfuzzer_sys::fuzz_target;

/// Every environment variable the loader reads.
const ENV: &[&str] = &[
    "OPENSHIFT_GEARLB_IP",
    "OPENSHIFT_GEARLB_PORT",
    "OPENSHIFT_GEARLB_STATUS_IP",
    "OPENSHIFT_GEARLB_STATUS_PORT",
    "OPENSHIFT_DATA_DIR",
    "OPENSHIFT_GEARLB_DIR",
    "OPENSHIFT_GEARLB_HTTPCHK_URI",
    "OPENSHIFT_HAPROXY_HTTPCHK_URI",
    "OPENSHIFT_GEARLB_HTTPCHK_EXPECT_RSTATUS",
    "OPENSHIFT_SECRET_TOKEN",
    "OPENSHIFT_GEARLB_GOSSIP_IP",
    "OPENSHIFT_GEARLB_GOSSIP_PORT",
    "OPENSHIFT_GEAR_UUID",
    "OPENSHIFT_APP_UUID",
    "OPENSHIFT_GEARLB_ROTATE_TIMEOUT",
    "OPENSHIFT_GEARLB_COVERAGE",
    "OPENSHIFT_GEAR_NAME",
    "OPENSHIFT_NAMESPACE",
    "OPENSHIFT_GEAR_DNS",
];

fuzz_target!(|data: &[u8]| {
    // The TOML text, then NUL-separated variables: one byte choosing the name, the value.
    let mut parts = data.split(|&b| b == 0);
    let Ok(text) = std::str::from_utf8(parts.next().unwrap_or_default()) else {
        return;
    };
    let env: HashMap<String, String> = parts
        .filter_map(|p| p.split_first())
        .map(|(k, v)| {
            let name = ENV[usize::from(*k) % ENV.len()].to_string();
            (name, String::from_utf8_lossy(v).into_owned())
        })
        .collect();
    match from_toml(text, &env) {
        Err(e) => assert!(!e.0.is_empty()),
        Ok(c) => {
            assert!((8192..=1 << 20).contains(&c.limits.max_header_size));
            assert!((1..=1_000_000).contains(&c.limits.max_connections));
            assert!((1..=100).contains(&c.subset.coverage));
            assert!(c.proxy.retries <= 16);
            assert!(!c.timeouts.connect.is_zero() && !c.timeouts.request_header.is_zero());
            assert!(c.health.uri.starts_with('/'));
            assert!(regex_lite::Regex::new(&c.health.expect).is_ok());
            let _ = gearlb::health::HealthSettings::from_config(&c.health);
            let mut names = std::collections::HashSet::new();
            for b in &c.backends {
                assert!(is_backend_name(&b.name), "{:?}", b.name);
                assert!(names.insert(b.name.clone()));
            }
            if c.cluster.listen.is_some() {
                assert!(c.cluster.secret.as_ref().is_some_and(|s| s.len() >= 16));
                assert!(c.cluster.node_id.as_deref().is_some_and(is_peer_id));
            }
            if c.sticky.seal {
                assert!(c.cluster.secret.as_ref().is_some_and(|s| s.len() >= 16));
            }
            assert!(!c.sticky.cookie.is_empty() && c.sticky.cookie.len() <= 64);
            // The proxy settings are built from any accepted configuration.
            let _ = gearlb::proxy::Settings::from_config(&c);
        }
    }
});
