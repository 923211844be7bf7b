//! The keys of `[routing_spi]` ([`read_routing_spi`]), every bad value listed with its
//! path; the section's data and defaults are `super::routing_spi`'s.

use std::path::PathBuf;

use super::problem::Problem;
use super::reader::Reader;
use super::routing_spi::RoutingSpiConfig;

fn dns_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// Read `[routing_spi]` (absent: `None`).
pub(super) fn read_routing_spi(
    t: &toml::Table,
    problems: &mut Vec<Problem>,
) -> Option<RoutingSpiConfig> {
    let mut c = RoutingSpiConfig::default();
    let mut r = Reader::new(t, "routing_spi", problems);
    match r.get("brokers") {
        None => r.problem(
            "brokers",
            "required: the STOMP brokers, [\"host:port\", ...]",
        ),
        Some(toml::Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match item.as_str() {
                    Some(s) if s.parse::<crate::gear::Addr>().is_ok() => {
                        c.brokers.push(s.to_string())
                    }
                    _ => r.problem(&format!("brokers[{i}]"), "expected a \"host:port\" string"),
                }
            }
            if items.is_empty() {
                r.problem("brokers", "at least one broker");
            }
        }
        Some(other) => {
            let t = other.type_str();
            r.problem(
                "brokers",
                format!("expected a list of \"host:port\" strings, found {t}"),
            );
        }
    }
    c.destination = r.string("destination", &c.destination);
    if !(c.destination.starts_with("/topic/") || c.destination.starts_with("/queue/"))
        || c.destination.len() < 8
        || c.destination
            .bytes()
            .any(|b| b.is_ascii_control() || b == b':')
    {
        r.problem(
            "destination",
            format!(
                "{:?}: a topic (/topic/NAME) or a queue (/queue/NAME)",
                c.destination
            ),
        );
    }
    c.username = r.str_value("username");
    c.password = r.str_value("password");
    c.client_id = r.str_value("client_id");
    if let Some(id) = &c.client_id {
        let ok = !id.is_empty()
            && id.len() <= 128
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !ok {
            r.problem(
                "client_id",
                format!("{id:?}: 1-128 letters, digits, '-', '_' or '.'"),
            );
        }
    }
    match r.str_value("cloud_domain") {
        Some(d) if dns_ok(d.trim_end_matches('.')) => {
            c.cloud_domain = d.trim_end_matches('.').to_ascii_lowercase()
        }
        Some(d) => r.problem("cloud_domain", format!("{d:?} is not a DNS name")),
        None => r.problem(
            "cloud_domain",
            "required: the platform's domain, as the broker's CLOUD_DOMAIN",
        ),
    }
    c.ha_dns_prefix = r.string("ha_dns_prefix", &c.ha_dns_prefix);
    c.ha_dns_suffix = r.string("ha_dns_suffix", &c.ha_dns_suffix);
    for (key, v) in [
        ("ha_dns_prefix", c.ha_dns_prefix.clone()),
        ("ha_dns_suffix", c.ha_dns_suffix.clone()),
    ] {
        if !v
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        {
            r.problem(key, format!("{v:?}: letters, digits, '-' and '.' only"));
        }
    }
    match r.get("endpoint_types") {
        None => {}
        Some(toml::Value::Array(items)) => {
            let mut types = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item.as_str() {
                    Some(s) if !s.is_empty() => types.push(s.to_string()),
                    _ => r.problem(&format!("endpoint_types[{i}]"), "expected a type name"),
                }
            }
            if items.is_empty() {
                r.problem(
                    "endpoint_types",
                    "at least one type (e.g. \"load_balancer\")",
                );
            }
            c.endpoint_types = types;
        }
        Some(other) => {
            let t = other.type_str();
            r.problem(
                "endpoint_types",
                format!("expected a list of type names, found {t}"),
            );
        }
    }
    c.keep_seen = r.bool("keep_seen", c.keep_seen);
    c.heartbeat = r.duration("heartbeat", c.heartbeat);
    c.max_table_age = r.duration("max_table_age", c.max_table_age);
    c.rest_url = r
        .str_value("rest_url")
        .map(|u| u.trim_end_matches('/').to_string());
    if let Some(u) = &c.rest_url {
        let ok = (u.starts_with("http://") || u.starts_with("https://"))
            && u.parse::<http::Uri>().is_ok();
        if !ok {
            r.problem(
                "rest_url",
                format!("{u:?}: the REST API's URL, https://broker.example.com/broker/rest"),
            );
        }
    }
    c.rest_user = r.str_value("rest_user");
    c.rest_password = r.str_value("rest_password");
    c.rest_ca = r.str_value("rest_ca").map(PathBuf::from);
    c.reconcile_interval = r.duration("reconcile_interval", c.reconcile_interval);
    c.peer_table_timeout = r.duration("peer_table_timeout", c.peer_table_timeout);
    r.finish();
    Some(c)
}
