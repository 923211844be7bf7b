//! What a router's table routes ([`services`]): each application with at least one
//! endpoint whose `types` meet `endpoint_types` is the service `<app>-<namespace>`,
//! for its HA name (`<ha_dns_prefix><app>-<namespace><ha_dns_suffix>.<cloud_domain>`)
//! and its aliases, every path, to those endpoints' `address:port`. Applications
//! without such an endpoint are pending: known, not routed. The certificates a router
//! serves are the active ones of the routed applications' aliases ([`certificates`]).
//!
//! [`digest`] sums up what a table routes (applications, endpoints, aliases,
//! certificates by fingerprint), so that routers of one cluster can tell, from a
//! gossip key, whether their tables agree.

use sha2::{Digest, Sha256};

use super::table::{Cert, EndpointRecord, Table};
use crate::config::{RoutingSpiConfig, ServiceBackend, ServiceConfig};

/// A backend's name for an endpoint: the gear and where it listens, in the characters
/// a backend name may have (`<gear>_<address>_<port>`).
pub fn backend_name(e: &EndpointRecord) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let gear = if e.gear_id.is_empty() {
        "gear".to_string()
    } else {
        clean(&e.gear_id)
    };
    let mut name = format!("{gear}_{}_{}", clean(&e.address), e.port);
    name.truncate(128);
    name
}

/// The services the table routes, by name.
pub fn services(table: &Table, cfg: &RoutingSpiConfig) -> Vec<ServiceConfig> {
    table
        .apps
        .values()
        .filter_map(|app| {
            let backends: Vec<ServiceBackend> = app
                .endpoints
                .values()
                .filter(|e| e.routed(&cfg.endpoint_types))
                .filter_map(|e| {
                    let addr = e.key().parse().ok()?;
                    Some(ServiceBackend {
                        name: backend_name(e),
                        addr,
                        backup: false,
                        max_connections: None,
                        version: None,
                        compatible: Vec::new(),
                        send_proxy: None,
                    })
                })
                .collect();
            if backends.is_empty() {
                return None;
            }
            let mut hosts = vec![cfg.ha_name(&app.app, &app.namespace)];
            hosts.extend(app.aliases.iter().cloned());
            hosts.dedup();
            Some(ServiceConfig {
                name: app.service(),
                hosts,
                paths: vec!["/".into()],
                listen: None,
                mode: Default::default(),
                sticky_cookie: None,
                sticky: false,
                queue_timeout: None,
                health: Default::default(),
                timeouts: Default::default(),
                backends,
                versions: Default::default(),
            })
        })
        .collect()
}

/// The certificates served: `(alias, certificate)` for each active certificate of a
/// routed application's alias.
pub fn certificates<'a>(table: &'a Table, cfg: &RoutingSpiConfig) -> Vec<(&'a str, &'a Cert)> {
    table
        .apps
        .values()
        .filter(|a| a.endpoints.values().any(|e| e.routed(&cfg.endpoint_types)))
        .flat_map(|a| {
            a.certs
                .iter()
                .filter(|(alias, c)| c.active && a.aliases.contains(*alias))
                .map(|(alias, c)| (alias.as_str(), c))
        })
        .collect()
}

/// A short digest of what the table routes: equal tables give equal digests.
pub fn digest(table: &Table) -> String {
    let mut h = Sha256::new();
    for (name, app) in &table.apps {
        h.update(name.as_bytes());
        h.update([0]);
        for (key, e) in &app.endpoints {
            h.update(key.as_bytes());
            h.update([1]);
            h.update(e.gear_id.as_bytes());
            for t in &e.types {
                h.update([2]);
                h.update(t.as_bytes());
            }
        }
        for alias in &app.aliases {
            h.update([3]);
            h.update(alias.as_bytes());
        }
        for (alias, c) in app.certs.iter().filter(|(_, c)| c.active) {
            h.update([4]);
            h.update(alias.as_bytes());
            h.update(c.fingerprint.as_bytes());
        }
        h.update([5]);
    }
    let out = h.finalize();
    out.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::from_toml;
    use crate::spi::event::parse;
    use std::collections::HashMap;

    fn cfg() -> RoutingSpiConfig {
        from_toml(
            "[routing_spi]\nbrokers = [\"127.0.0.1:61613\"]\ncloud_domain = \"example.com\"\n",
            &HashMap::<String, String>::new(),
        )
        .unwrap()
        .routing_spi
        .unwrap()
    }

    fn apply(t: &mut Table, app: &str, body: &str) {
        let e =
            parse(format!("---\n:app_name: {app}\n:namespace: ns1\n{body}").as_bytes()).unwrap();
        t.apply(&e, None);
    }

    fn endpoint(t: &mut Table, app: &str, addr: &str, types: &str) {
        apply(
            t,
            app,
            &format!(
                ":action: :add_public_endpoint\n:gear_id: 5a1e00aa\n:public_address: {addr}\n\
                 :public_port: 35541\n:types:\n- {types}\n"
            ),
        );
    }

    #[test]
    fn applications_with_a_load_balancer_endpoint_are_routed() {
        let mut t = Table::default();
        apply(&mut t, "pending", ":action: :create_application\n");
        apply(
            &mut t,
            "pending",
            ":action: :add_alias\n:alias: p.example.org\n",
        );
        endpoint(&mut t, "db", "10.0.0.5", "database");
        endpoint(&mut t, "myapp", "10.0.0.1", "load_balancer");
        endpoint(&mut t, "myapp", "2001:db8::1", "load_balancer");
        endpoint(&mut t, "myapp", "10.0.0.3", "web_framework");
        apply(
            &mut t,
            "myapp",
            ":action: :add_alias\n:alias: www.example.org\n",
        );
        let s = services(&t, &cfg());
        assert_eq!(s.len(), 1, "{s:?}");
        let s = &s[0];
        assert_eq!(s.name, "myapp-ns1");
        assert_eq!(s.hosts, ["ha-myapp-ns1.example.com", "www.example.org"]);
        assert!(!s.sticky, "a router leaves the application's cookie alone");
        let names: Vec<&str> = s.backends.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(
            names,
            ["5a1e00aa_10.0.0.1_35541", "5a1e00aa_2001_db8__1_35541"]
        );
        assert!(names.iter().all(|n| crate::gear::is_backend_name(n)));
        assert_eq!(s.backends[1].addr.to_string(), "[2001:db8::1]:35541");
        // Every route a service may have.
        assert!(s.route_spec().hosts.len() == 2);
    }

    #[test]
    fn the_digest_follows_what_is_routed() {
        let mut a = Table::default();
        let mut b = Table::default();
        endpoint(&mut a, "myapp", "10.0.0.1", "load_balancer");
        endpoint(&mut b, "myapp", "10.0.0.1", "load_balancer");
        b.remember("ID:1");
        assert_eq!(digest(&a), digest(&b), "the ids applied are not routing");
        apply(
            &mut b,
            "myapp",
            ":action: :add_alias\n:alias: www.example.org\n",
        );
        assert_ne!(digest(&a), digest(&b));
        assert_eq!(digest(&a).len(), 16);
    }
}
