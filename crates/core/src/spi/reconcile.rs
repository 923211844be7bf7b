//! The table against the broker's REST API ([`diff`] → [`Repair`]s, [`repair`]),
//! and the API's answers read ([`parse_applications`], [`parse_gear_groups`]), pure.
//!
//! The routing events are sent without a receipt and may come out of order or not at
//! all; the broker's own records are the reference. origin-server's REST API lists the
//! applications a user may see (`GET /broker/rest/applications`: name, domain, aliases
//! with `has_private_ssl_certificate`), and each application's gears with their
//! endpoints (`GET /broker/rest/application/<id>/gear_groups?include=endpoints`). It
//! never gives a certificate or key: an alias the broker says has a certificate gets
//! back the last one the events gave (turned off by a `remove_ssl` that came after the
//! `add_ssl` it preceded), and one the events never gave is reported, not repaired.
//!
//! One caveat of origin-server's own (`Gear#move` within a district): the move's last
//! `remove_public_endpoint` also erases the gear's *new* endpoint record in the
//! broker's database, so the API may not list an endpoint that serves. An endpoint the
//! API does not list is therefore removed only when it is not in service (its health
//! check fails); otherwise it is kept and reported.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::event::{endpoint_key, service_name};
use super::table::{App, EndpointRecord, Table};

/// An application as the REST API describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestApp {
    /// The broker's id of the application (for its gear groups).
    pub id: String,
    /// Lower-cased.
    pub app: String,
    /// Lower-cased.
    pub namespace: String,
    pub scalable: Option<bool>,
    pub ha: Option<bool>,
    /// Alias → has a certificate of its own.
    pub aliases: BTreeMap<String, bool>,
    /// Every endpoint of its gears.
    pub endpoints: Vec<EndpointRecord>,
    /// The node (address) of its head gear, when a gear's endpoint says it.
    pub head_node: Option<String>,
}

impl RestApp {
    pub fn service(&self) -> String {
        service_name(&self.app, &self.namespace)
    }
}

/// One difference between the table and the broker, and what is done about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Repair {
    /// An application the broker has and the table does not.
    AddApp(RestApp),
    /// An application the table has and the broker does not.
    DropApp(String),
    AddEndpoint(String, EndpointRecord),
    DropEndpoint(String, String),
    /// Not listed by the broker but in service: kept (see the module's doc).
    KeepEndpoint(String, String),
    AddAlias(String, String),
    DropAlias(String, String),
    /// The broker says the alias has a certificate: the last one received is served.
    CertOn(String, String),
    /// The broker says it has none: the default certificate answers for it.
    CertOff(String, String),
    /// The broker says it has one that no event ever gave: nothing to serve.
    CertMissing(String, String),
}

impl Repair {
    /// Whether repairing it changes the table (the others are only reported).
    pub fn changes(&self) -> bool {
        !matches!(self, Repair::KeepEndpoint(..) | Repair::CertMissing(..))
    }

    /// For the log and the report.
    pub fn describe(&self) -> String {
        match self {
            Repair::AddApp(a) => format!(
                "application {} missing: added ({} endpoints, {} aliases)",
                a.service(),
                a.endpoints.len(),
                a.aliases.len()
            ),
            Repair::DropApp(s) => format!("application {s} no longer exists: removed"),
            Repair::AddEndpoint(s, e) => format!("endpoint {} of {s} missing: added", e.key()),
            Repair::DropEndpoint(s, k) => format!("endpoint {k} of {s} no longer exists: removed"),
            Repair::KeepEndpoint(s, k) => format!(
                "endpoint {k} of {s} not listed by the broker but in service: kept (a gear move's record?)"
            ),
            Repair::AddAlias(s, a) => format!("alias {a} of {s} missing: added"),
            Repair::DropAlias(s, a) => format!("alias {a} of {s} no longer exists: removed"),
            Repair::CertOn(s, a) => format!(
                "alias {a} of {s} has a certificate by the broker: the last one received is served again"
            ),
            Repair::CertOff(s, a) => format!(
                "alias {a} of {s} has no certificate by the broker: the default certificate answers"
            ),
            Repair::CertMissing(s, a) => format!(
                "alias {a} of {s} has a certificate by the broker that no event gave: the default certificate answers"
            ),
        }
    }
}

/// The differences between `table` and the broker's applications `rest`, as repairs.
/// Endpoints are compared for the routed `types` only. `in_service(service, key)` says
/// whether an endpoint the broker does not list serves now (then it is kept).
pub fn diff(
    table: &Table,
    rest: &[RestApp],
    types: &[String],
    in_service: impl Fn(&str, &str) -> bool,
) -> Vec<Repair> {
    let mut out = Vec::new();
    let by_name: BTreeMap<String, &RestApp> = rest.iter().map(|a| (a.service(), a)).collect();
    for (name, r) in &by_name {
        let Some(app) = table.apps.get(name) else {
            out.push(Repair::AddApp((*r).clone()));
            continue;
        };
        let wanted: BTreeMap<String, &EndpointRecord> = r
            .endpoints
            .iter()
            .filter(|e| e.routed(types))
            .map(|e| (e.key(), e))
            .collect();
        for (key, e) in &wanted {
            if !app.endpoints.get(key).is_some_and(|k| k.routed(types)) {
                out.push(Repair::AddEndpoint(name.clone(), (*e).clone()));
            }
        }
        for (key, e) in &app.endpoints {
            if e.routed(types) && !wanted.contains_key(key) {
                if in_service(name, key) {
                    out.push(Repair::KeepEndpoint(name.clone(), key.clone()));
                } else {
                    out.push(Repair::DropEndpoint(name.clone(), key.clone()));
                }
            }
        }
        for alias in r.aliases.keys() {
            if !app.aliases.contains(alias) {
                out.push(Repair::AddAlias(name.clone(), alias.clone()));
            }
        }
        for alias in &app.aliases {
            if !r.aliases.contains_key(alias) {
                out.push(Repair::DropAlias(name.clone(), alias.clone()));
            }
        }
        for (alias, has) in &r.aliases {
            match (app.certs.get(alias), has) {
                (Some(c), true) if !c.active => {
                    out.push(Repair::CertOn(name.clone(), alias.clone()))
                }
                (None, true) => out.push(Repair::CertMissing(name.clone(), alias.clone())),
                (Some(c), false) if c.active => {
                    out.push(Repair::CertOff(name.clone(), alias.clone()))
                }
                _ => {}
            }
        }
    }
    for name in table.apps.keys() {
        if !by_name.contains_key(name) {
            out.push(Repair::DropApp(name.clone()));
        }
    }
    out
}

/// Repair the table; true when it changed.
pub fn repair(table: &mut Table, r: &Repair) -> bool {
    match r {
        Repair::AddApp(a) => {
            let mut app = App {
                app: a.app.clone(),
                namespace: a.namespace.clone(),
                created: true,
                scalable: a.scalable,
                ha: a.ha,
                head_node: a.head_node.clone(),
                ..Default::default()
            };
            for e in &a.endpoints {
                app.endpoints.insert(e.key(), e.clone());
            }
            app.aliases = a.aliases.keys().cloned().collect();
            table.apps.insert(a.service(), app);
            true
        }
        Repair::DropApp(s) => table.apps.remove(s).is_some(),
        Repair::AddEndpoint(s, e) => table
            .apps
            .get_mut(s)
            .map(|a| a.endpoints.insert(e.key(), e.clone()))
            .is_some(),
        Repair::DropEndpoint(s, k) => table
            .apps
            .get_mut(s)
            .is_some_and(|a| a.endpoints.remove(k).is_some()),
        Repair::AddAlias(s, alias) => table
            .apps
            .get_mut(s)
            .is_some_and(|a| a.aliases.insert(alias.clone())),
        Repair::DropAlias(s, alias) => table.apps.get_mut(s).is_some_and(|a| {
            a.certs.remove(alias);
            a.aliases.remove(alias)
        }),
        Repair::CertOn(s, alias) | Repair::CertOff(s, alias) => {
            let on = matches!(r, Repair::CertOn(..));
            match table.apps.get_mut(s).and_then(|a| a.certs.get_mut(alias)) {
                Some(c) if c.active != on => {
                    c.active = on;
                    true
                }
                _ => false,
            }
        }
        Repair::KeepEndpoint(..) | Repair::CertMissing(..) => false,
    }
}

/// Keep the head gear's node of each application the broker listed.
pub fn note_heads(table: &mut Table, rest: &[RestApp]) {
    for r in rest {
        if let Some(app) = table.apps.get_mut(&r.service()) {
            app.head_node = r.head_node.clone();
        }
    }
}

/// The `data` of a REST answer (`{"data": …, "status": "ok", …}`).
fn data(body: &[u8]) -> Result<Value, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    match v {
        Value::Object(mut m) => m
            .remove("data")
            .ok_or_else(|| "no data in the answer".to_string()),
        _ => Err("not a REST answer (a JSON object with data)".into()),
    }
}

fn string(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The applications of `GET /broker/rest/applications` (their endpoints come from
/// each one's gear groups).
pub fn parse_applications(body: &[u8]) -> Result<Vec<RestApp>, String> {
    let Value::Array(list) = data(body)? else {
        return Err("applications: data is not a list".into());
    };
    let mut out = Vec::new();
    for a in &list {
        let (Some(id), Some(name), Some(ns)) =
            (string(a, "id"), string(a, "name"), string(a, "domain_id"))
        else {
            return Err("an application without id, name or domain_id".into());
        };
        let mut aliases = BTreeMap::new();
        for al in a
            .get("aliases")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            // API 1.6 and later: objects; earlier: names.
            let (fqdn, has) = match al {
                Value::String(s) => (s.clone(), false),
                other => (
                    string(other, "id").unwrap_or_default(),
                    other
                        .get("has_private_ssl_certificate")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                ),
            };
            if crate::gear::is_dns_name(&fqdn) {
                aliases.insert(fqdn.trim_end_matches('.').to_ascii_lowercase(), has);
            }
        }
        out.push(RestApp {
            id,
            app: name.to_ascii_lowercase(),
            namespace: ns.to_ascii_lowercase(),
            scalable: a.get("scalable").and_then(Value::as_bool),
            ha: a.get("ha").and_then(Value::as_bool),
            aliases,
            endpoints: Vec::new(),
            head_node: None,
        });
    }
    Ok(out)
}

/// Fill `app`'s endpoints (and its head gear's node) from its
/// `gear_groups?include=endpoints`.
pub fn parse_gear_groups(app: &mut RestApp, body: &[u8]) -> Result<(), String> {
    let Value::Array(groups) = data(body)? else {
        return Err("gear_groups: data is not a list".into());
    };
    let head_host = format!("{}-{}.", app.app, app.namespace);
    let mut seen = BTreeSet::new();
    for g in &groups {
        for gear in g
            .get("gears")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let gear_id = string(gear, "id").unwrap_or_default();
            let head = string(gear, "ssh_url")
                .and_then(|u| u.rsplit('@').next().map(str::to_ascii_lowercase))
                .is_some_and(|host| host.starts_with(&head_host));
            for e in gear
                .get("endpoints")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let address = string(e, "external_address")
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                let port = string(e, "external_port").and_then(|p| p.parse::<u16>().ok());
                let Some(port) = port.filter(|p| *p > 0) else {
                    continue;
                };
                if address.is_empty() || !seen.insert(endpoint_key(&address, port)) {
                    continue;
                }
                if head && app.head_node.is_none() {
                    app.head_node = Some(address.clone());
                }
                app.endpoints.push(EndpointRecord {
                    gear_id: gear_id.clone(),
                    address,
                    port,
                    cartridge: string(e, "cartridge_name"),
                    protocols: strings(e, "protocols"),
                    types: strings(e, "types"),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spi::event::parse;
    use crate::spi::table::Cert;

    fn lb() -> Vec<String> {
        vec!["load_balancer".into()]
    }

    /// Answers in the shape origin-server's REST models give them
    /// (`RestApplication`, `RestAlias`, `RestGearGroup` with `PortInterface#to_hash`).
    const APPS: &str = r#"{"api_version":1.7,"type":"applications","status":"ok","messages":[],
      "data":[{"id":"5a1e0000000000000000aaaa","name":"myapp","domain_id":"ns1","scalable":true,"ha":true,
               "aliases":[{"id":"www.example.org","has_private_ssl_certificate":true,"certificate_added_at":"2026-11-28"},
                          {"id":"new.example.org","has_private_ssl_certificate":false}]},
              {"id":"5a1e0000000000000000bbbb","name":"Other","domain_id":"ns1","scalable":false,"ha":false,"aliases":[]}]}"#;
    const GROUPS: &str = r#"{"api_version":1.7,"type":"gear_groups","status":"ok","data":[
      {"id":"g1","name":"g1","gear_profile":"small","cartridges":[],"gears":[
        {"id":"5a1e0000000000000000aaaa","state":"started","ssh_url":"ssh://5a1e0000000000000000aaaa@myapp-ns1.example.com",
         "endpoints":[{"cartridge_name":"gearlb-0.1","external_address":"10.0.0.1","external_port":"35541",
                       "internal_address":"127.1.2.3","internal_port":"8080","protocols":["http","ws"],
                       "types":["load_balancer"],"mappings":[]},
                      {"cartridge_name":"php-5.4","external_address":"10.0.0.1","external_port":"35542",
                       "internal_address":"127.1.2.3","internal_port":"8081","protocols":["http"],
                       "types":["web_framework"],"mappings":[]}]},
        {"id":"5a1e00000000000000000ccc","state":"started","ssh_url":"ssh://5a1e00000000000000000ccc@5a1e00000000000000000ccc-ns1.example.com",
         "endpoints":[{"cartridge_name":"gearlb-0.1","external_address":"10.0.0.2","external_port":"35541",
                       "protocols":["http"],"types":["load_balancer"],"mappings":[]}]}]}]}"#;

    fn rest() -> Vec<RestApp> {
        let mut apps = parse_applications(APPS.as_bytes()).unwrap();
        parse_gear_groups(&mut apps[0], GROUPS.as_bytes()).unwrap();
        apps
    }

    #[test]
    fn the_rest_answers_are_read() {
        let apps = rest();
        assert_eq!(apps.len(), 2);
        let a = &apps[0];
        assert_eq!(a.service(), "myapp-ns1");
        assert_eq!(a.aliases.get("www.example.org"), Some(&true));
        assert_eq!(a.endpoints.len(), 3);
        assert_eq!(a.head_node.as_deref(), Some("10.0.0.1"));
        assert_eq!(apps[1].service(), "other-ns1");
        assert!(parse_applications(b"{\"data\":7}").is_err());
        assert!(parse_applications(b"<html>").is_err());
    }

    fn ev(t: &mut Table, body: &str, cert: Option<Cert>) {
        let e =
            parse(format!("---\n:app_name: myapp\n:namespace: ns1\n{body}").as_bytes()).unwrap();
        t.apply(&e, cert);
    }

    #[test]
    fn differences_are_repaired_and_reported() {
        let mut t = Table::default();
        ev(&mut t, ":action: :add_public_endpoint\n:gear_id: x\n:public_address: 10.0.0.1\n:public_port: 35541\n:types:\n- load_balancer\n", None);
        ev(&mut t, ":action: :add_public_endpoint\n:gear_id: x\n:public_address: 10.0.0.7\n:public_port: 35541\n:types:\n- load_balancer\n", None);
        ev(&mut t, ":action: :add_public_endpoint\n:gear_id: x\n:public_address: 10.0.0.8\n:public_port: 35541\n:types:\n- load_balancer\n", None);
        ev(
            &mut t,
            ":action: :add_alias\n:alias: gone.example.org\n",
            None,
        );
        // Swapped: the new certificate, then the old one's removal.
        let cert = Cert {
            cert_pem: "c".into(),
            key_pem: "k".into(),
            fingerprint: "new".into(),
            active: true,
        };
        ev(
            &mut t,
            ":action: :add_ssl\n:alias: www.example.org\n:ssl: c\n:private_key: k\n",
            Some(cert),
        );
        ev(
            &mut t,
            ":action: :remove_ssl\n:alias: www.example.org\n",
            None,
        );
        let mut stale = t.clone();
        stale.apps.insert(
            "ghost-ns1".into(),
            App {
                app: "ghost".into(),
                namespace: "ns1".into(),
                created: true,
                ..Default::default()
            },
        );
        t = stale;
        let rest = rest();
        // 10.0.0.8 serves (a move's record), 10.0.0.7 does not.
        let repairs = diff(&t, &rest, &lb(), |_, k| k == "10.0.0.8:35541");
        let text: Vec<String> = repairs.iter().map(Repair::describe).collect();
        for want in [
            "endpoint 10.0.0.2:35541 of myapp-ns1 missing: added",
            "endpoint 10.0.0.7:35541 of myapp-ns1 no longer exists: removed",
            "endpoint 10.0.0.8:35541 of myapp-ns1 not listed by the broker but in service: kept",
            "alias new.example.org of myapp-ns1 missing: added",
            "alias gone.example.org of myapp-ns1 no longer exists: removed",
            "alias www.example.org of myapp-ns1 has a certificate by the broker: the last one received is served again",
            "application other-ns1 missing: added",
            "application ghost-ns1 no longer exists: removed",
        ] {
            assert!(text.iter().any(|t| t.starts_with(want)), "{want} not in {text:#?}");
        }
        assert_eq!(text.len(), 8, "{text:#?}");
        for r in &repairs {
            assert_eq!(repair(&mut t, r), r.changes(), "{r:?}");
        }
        note_heads(&mut t, &rest);
        // Repaired, a second look finds only what is kept.
        let again = diff(&t, &rest, &lb(), |_, k| k == "10.0.0.8:35541");
        assert!(again.iter().all(|r| !r.changes()), "{again:?}");
        let app = &t.apps["myapp-ns1"];
        assert!(app.certs["www.example.org"].active);
        assert_eq!(app.head_node.as_deref(), Some("10.0.0.1"));
        // The web_framework endpoint is not routed, and not taken in.
        assert!(!app.endpoints.contains_key("10.0.0.1:35542"));
    }

    #[test]
    fn a_certificate_never_received_is_reported_not_invented() {
        let mut t = Table::default();
        ev(
            &mut t,
            ":action: :add_alias\n:alias: www.example.org\n",
            None,
        );
        ev(
            &mut t,
            ":action: :add_alias\n:alias: new.example.org\n",
            None,
        );
        let mut r = rest();
        r.truncate(1);
        let repairs = diff(&t, &r, &lb(), |_, _| false);
        assert!(repairs.contains(&Repair::CertMissing(
            "myapp-ns1".into(),
            "www.example.org".into()
        )));
        assert!(!repair(
            &mut t,
            &Repair::CertMissing("myapp-ns1".into(), "www.example.org".into())
        ));
    }
}
