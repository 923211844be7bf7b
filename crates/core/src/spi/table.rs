//! A router's table of applications ([`Table`]) and how an event changes it
//! ([`Table::apply`]), pure and persisted as JSON by the application.
//!
//! Every change is idempotent: an event applied twice (a redelivery after a crash
//! between applying it and acknowledging it) leaves the table as once; and the ids of
//! the events applied lately are kept ([`Table::seen`]), so a redelivered event is
//! recognised and not counted again.
//!
//! Events may arrive out of order (the plugin sends each on a new connection, without
//! a receipt). What order can be recovered is: an endpoint, alias or certificate for an
//! application not yet created creates it; a `remove_public_endpoint` removes only what
//! was added, and only for the gear that added it (a port taken over by another gear
//! stays); a `remove_ssl` keeps the certificate it turns off, so that when the broker
//! says the alias still has one (a certificate change is `remove_ssl` then `add_ssl`,
//! and swapped it would end without), reconciliation turns it back on
//! (`super::reconcile`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::event::{service_name, Action, Endpoint, Event};

/// How many applied events' ids are kept to recognise a redelivery.
pub const RECENT: usize = 4096;

/// An endpoint as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointRecord {
    pub gear_id: String,
    pub address: String,
    pub port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cartridge: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protocols: Vec<String>,
    #[serde(default)]
    pub types: Vec<String>,
}

impl From<&Endpoint> for EndpointRecord {
    fn from(e: &Endpoint) -> Self {
        EndpointRecord {
            gear_id: e.gear_id.clone(),
            address: e.address.clone(),
            port: e.port,
            cartridge: e.cartridge.clone(),
            protocols: e.protocols.clone(),
            types: e.types.clone(),
        }
    }
}

impl EndpointRecord {
    /// Whether one of its types is routed.
    pub fn routed(&self, types: &[String]) -> bool {
        self.types.iter().any(|t| types.contains(t))
    }

    pub fn key(&self) -> String {
        super::event::endpoint_key(&self.address, self.port)
    }
}

/// An alias's certificate, checked, with its key decrypted (the table file is mode
/// 0600).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cert {
    /// The chain, PEM.
    pub cert_pem: String,
    /// The private key, plain PEM.
    pub key_pem: String,
    /// SHA-256 of the leaf certificate, hex.
    pub fingerprint: String,
    /// Served (`add_ssl`), or turned off (`remove_ssl`) and kept for reconciliation.
    pub active: bool,
}

impl std::fmt::Debug for Cert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cert")
            .field("fingerprint", &self.fingerprint)
            .field("active", &self.active)
            .finish()
    }
}

/// One application.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct App {
    pub app: String,
    pub namespace: String,
    /// `create_application` was seen (else it was created by a later event that came
    /// first, or by reconciliation).
    #[serde(default)]
    pub created: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalable: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ha: Option<bool>,
    /// By `address:port`.
    #[serde(default)]
    pub endpoints: BTreeMap<String, EndpointRecord>,
    #[serde(default)]
    pub aliases: BTreeSet<String>,
    /// By alias.
    #[serde(default)]
    pub certs: BTreeMap<String, Cert>,
    /// The node of the head gear, when the broker's REST API said which it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_node: Option<String>,
}

impl App {
    fn new(app: &str, namespace: &str) -> Self {
        App {
            app: app.to_string(),
            namespace: namespace.to_string(),
            ..Default::default()
        }
    }

    /// `<app>-<namespace>`.
    pub fn service(&self) -> String {
        service_name(&self.app, &self.namespace)
    }

    /// Nothing is known of it but its name.
    fn is_empty(&self) -> bool {
        !self.created
            && self.endpoints.is_empty()
            && self.aliases.is_empty()
            && self.certs.is_empty()
    }
}

/// What applying one event did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The table changed.
    pub changed: bool,
    /// For the log: what was done, or why nothing was.
    pub note: String,
}

impl Applied {
    fn changed(note: impl Into<String>) -> Self {
        Applied {
            changed: true,
            note: note.into(),
        }
    }

    fn same(note: impl Into<String>) -> Self {
        Applied {
            changed: false,
            note: note.into(),
        }
    }
}

/// A router's table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Table {
    /// By service name (`<app>-<namespace>`).
    #[serde(default)]
    pub apps: BTreeMap<String, App>,
    /// The ids of the events applied lately, oldest first (at most [`RECENT`]).
    #[serde(default)]
    pub recent: VecDeque<String>,
    /// Events applied since the table began (a redelivery is not counted again).
    #[serde(default)]
    pub applied: u64,
    /// When the table was last known current (Unix ms): a broker was connected, or a
    /// peer or the REST API gave it.
    #[serde(default)]
    pub current_ms: u64,
}

impl Table {
    /// Whether the event with this id was applied lately (a redelivery).
    pub fn seen(&self, id: &str) -> bool {
        !id.is_empty() && self.recent.iter().any(|r| r == id)
    }

    /// Remember that the event `id` was applied, and count it.
    pub fn remember(&mut self, id: &str) {
        self.applied += 1;
        if id.is_empty() || self.seen(id) {
            return;
        }
        self.recent.push_back(id.to_string());
        while self.recent.len() > RECENT {
            self.recent.pop_front();
        }
    }

    fn entry(&mut self, ev: &Event) -> (&mut App, bool) {
        let name = ev.service();
        let new = !self.apps.contains_key(&name);
        let app = self
            .apps
            .entry(name)
            .or_insert_with(|| App::new(&ev.app, &ev.namespace));
        (app, new)
    }

    /// Apply one event. `cert` is an `add_ssl`'s certificate, already checked (an
    /// `add_ssl` without one changes nothing: its certificate was refused).
    pub fn apply(&mut self, ev: &Event, cert: Option<Cert>) -> Applied {
        let service = ev.service();
        match &ev.action {
            Action::CreateApplication => {
                let (app, new) = self.entry(ev);
                let before = (app.created, app.scalable, app.ha);
                app.created = true;
                app.scalable = ev.scalable.or(app.scalable);
                app.ha = ev.ha.or(app.ha);
                if new {
                    Applied::changed(format!("application {service} created"))
                } else if before != (app.created, app.scalable, app.ha) {
                    Applied::changed(format!(
                        "application {service} known (it came after its first change)"
                    ))
                } else {
                    Applied::same(format!("application {service} already known"))
                }
            }
            Action::DeleteApplication => match self.apps.remove(&service) {
                Some(_) => Applied::changed(format!("application {service} deleted")),
                None => Applied::same(format!(
                    "application {service} not known: nothing to delete"
                )),
            },
            Action::AddPublicEndpoint => {
                let Some(ep) = &ev.endpoint else {
                    return Applied::same("no endpoint");
                };
                let rec = EndpointRecord::from(ep);
                let (app, _) = self.entry(ev);
                let key = ep.key();
                if app.endpoints.get(&key) == Some(&rec) {
                    return Applied::same(format!("endpoint {key} of {service} already known"));
                }
                let types = rec.types.join(",");
                app.endpoints.insert(key.clone(), rec);
                Applied::changed(format!("endpoint {key} ({types}) of {service} added"))
            }
            Action::RemovePublicEndpoint => {
                let Some(ep) = &ev.endpoint else {
                    return Applied::same("no endpoint");
                };
                let key = ep.key();
                let Some(app) = self.apps.get_mut(&service) else {
                    return Applied::same(format!(
                        "endpoint {key} of {service}: application not known"
                    ));
                };
                let Some(known) = app.endpoints.get(&key) else {
                    return Applied::same(format!(
                        "endpoint {key} of {service} not known: nothing to remove"
                    ));
                };
                if !ep.gear_id.is_empty()
                    && !known.gear_id.is_empty()
                    && known.gear_id != ep.gear_id
                {
                    return Applied::same(format!(
                        "endpoint {key} of {service} belongs to gear {}, not {}: kept",
                        known.gear_id, ep.gear_id
                    ));
                }
                app.endpoints.remove(&key);
                let note = format!("endpoint {key} of {service} removed");
                self.drop_if_empty(&service);
                Applied::changed(note)
            }
            Action::AddAlias => {
                let Some(alias) = &ev.alias else {
                    return Applied::same("no alias");
                };
                let (app, _) = self.entry(ev);
                if app.aliases.insert(alias.clone()) {
                    Applied::changed(format!("alias {alias} of {service} added"))
                } else {
                    Applied::same(format!("alias {alias} of {service} already known"))
                }
            }
            Action::RemoveAlias => {
                let Some(alias) = &ev.alias else {
                    return Applied::same("no alias");
                };
                let Some(app) = self.apps.get_mut(&service) else {
                    return Applied::same(format!(
                        "alias {alias} of {service}: application not known"
                    ));
                };
                let had = app.aliases.remove(alias);
                // The alias's key goes with it.
                let cert = app.certs.remove(alias).is_some();
                self.drop_if_empty(&service);
                if had || cert {
                    Applied::changed(format!("alias {alias} of {service} removed"))
                } else {
                    Applied::same(format!("alias {alias} of {service} not known"))
                }
            }
            Action::AddSsl => {
                let (Some(alias), Some(cert)) = (&ev.alias, cert) else {
                    return Applied::same("no certificate");
                };
                let (app, _) = self.entry(ev);
                let added = app.aliases.insert(alias.clone());
                let fp = cert.fingerprint.clone();
                if app.certs.get(alias) == Some(&cert) && !added {
                    return Applied::same(format!("certificate {fp} of {alias} already served"));
                }
                app.certs.insert(alias.clone(), cert);
                Applied::changed(format!(
                    "certificate {} of alias {alias} ({service}) served",
                    short(&fp)
                ))
            }
            Action::RemoveSsl => {
                let Some(alias) = &ev.alias else {
                    return Applied::same("no alias");
                };
                let Some(c) = self
                    .apps
                    .get_mut(&service)
                    .and_then(|a| a.certs.get_mut(alias))
                else {
                    return Applied::same(format!("alias {alias} of {service} has no certificate"));
                };
                if !c.active {
                    return Applied::same(format!("certificate of {alias} already off"));
                }
                c.active = false;
                Applied::changed(format!(
                    "certificate of alias {alias} ({service}) off: the default certificate answers for it"
                ))
            }
            Action::Other(name) => {
                Applied::same(format!("action {name} is not a routing change: left alone"))
            }
        }
    }

    /// Drop an application nothing is known of any more (never one that was created).
    fn drop_if_empty(&mut self, service: &str) {
        if self.apps.get(service).is_some_and(App::is_empty) {
            self.apps.remove(service);
        }
    }
}

/// The first 12 hex digits of a fingerprint, for the log.
pub fn short(fp: &str) -> &str {
    &fp[..fp.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spi::event::parse;

    fn ev(body: &str) -> Event {
        parse(format!("---\n:app_name: myapp\n:namespace: ns1\n{body}").as_bytes()).unwrap()
    }

    fn endpoint(action: &str, gear: &str, addr: &str, port: u16) -> Event {
        ev(&format!(
            ":action: :{action}\n:gear_id: {gear}\n:public_address: {addr}\n:public_port: {port}\n\
             :types:\n- load_balancer\n:protocols:\n- http\n"
        ))
    }

    fn cert(fp: &str) -> Cert {
        Cert {
            cert_pem: format!("cert {fp}"),
            key_pem: "key".into(),
            fingerprint: fp.into(),
            active: true,
        }
    }

    #[test]
    fn every_change_applied_twice_is_applied_once() {
        let events = [
            ev(":action: :create_application\n:scalable: true\n:ha: true\n"),
            endpoint("add_public_endpoint", "g1", "10.0.0.1", 35541),
            endpoint("add_public_endpoint", "g2", "10.0.0.2", 35541),
            ev(":action: :add_alias\n:alias: www.example.org\n"),
            ev(":action: :remove_alias\n:alias: www.example.org\n"),
            endpoint("remove_public_endpoint", "g1", "10.0.0.1", 35541),
            ev(":action: :remove_ssl\n:alias: www.example.org\n"),
            ev(":action: :delete_application\n"),
        ];
        let mut once = Table::default();
        let mut twice = Table::default();
        for e in &events {
            let a = once.apply(e, None);
            twice.apply(e, None);
            let again = twice.apply(e, None);
            assert!(
                !again.changed,
                "{e:?} changed the table twice: {}",
                again.note
            );
            assert_eq!(once, twice, "after {a:?}");
        }
        assert!(once.apps.is_empty());
        let mut t = Table::default();
        let ssl = ev(":action: :add_ssl\n:alias: a.example.org\n:ssl: c\n:private_key: k\n");
        assert!(t.apply(&ssl, Some(cert("aa"))).changed);
        assert!(!t.apply(&ssl, Some(cert("aa"))).changed);
    }

    #[test]
    fn redeliveries_are_recognised_and_counted_once() {
        let mut t = Table::default();
        assert!(!t.seen("ID:1"));
        t.remember("ID:1");
        t.remember("ID:1");
        assert!(t.seen("ID:1"));
        assert_eq!(t.recent.len(), 1);
        for i in 0..RECENT + 10 {
            t.remember(&format!("ID:x{i}"));
        }
        assert_eq!(t.recent.len(), RECENT);
        assert!(!t.seen("ID:1"), "the oldest ids are forgotten");
        assert!(!t.seen(""));
    }

    #[test]
    fn changes_for_an_application_not_yet_created_create_it() {
        let mut t = Table::default();
        assert!(
            t.apply(
                &endpoint("add_public_endpoint", "g1", "10.0.0.1", 35541),
                None
            )
            .changed
        );
        assert!(
            t.apply(&ev(":action: :add_alias\n:alias: www.example.org\n"), None)
                .changed
        );
        let app = &t.apps["myapp-ns1"];
        assert!(!app.created);
        assert_eq!(app.endpoints.len(), 1);
        // The creation that came late is taken in, and changes what it says.
        let late = t.apply(
            &ev(":action: :create_application\n:scalable: true\n:ha: true\n"),
            None,
        );
        assert!(late.changed && t.apps["myapp-ns1"].created, "{late:?}");
        assert_eq!(t.apps["myapp-ns1"].endpoints.len(), 1);
    }

    #[test]
    fn removals_take_out_only_what_was_added() {
        let mut t = Table::default();
        let rm = endpoint("remove_public_endpoint", "g1", "10.0.0.1", 35541);
        assert!(
            !t.apply(&rm, None).changed,
            "an unknown application is not created"
        );
        assert!(t.apps.is_empty());
        t.apply(&ev(":action: :create_application\n"), None);
        t.apply(
            &endpoint("add_public_endpoint", "g2", "10.0.0.1", 35541),
            None,
        );
        let kept = t.apply(&rm, None);
        assert!(
            !kept.changed && kept.note.contains("belongs to gear g2"),
            "{kept:?}"
        );
        // A gear that moves: the new address comes, then the old one goes.
        t.apply(
            &endpoint("add_public_endpoint", "g2", "10.0.0.9", 35541),
            None,
        );
        let moved = t.apply(
            &endpoint("remove_public_endpoint", "g2", "10.0.0.1", 35541),
            None,
        );
        assert!(moved.changed);
        let keys: Vec<&String> = t.apps["myapp-ns1"].endpoints.keys().collect();
        assert_eq!(keys, ["10.0.0.9:35541"]);
        // An application that was never created goes once nothing of it is left.
        let mut t = Table::default();
        t.apply(
            &endpoint("add_public_endpoint", "g1", "10.0.0.1", 35541),
            None,
        );
        t.apply(&rm, None);
        assert!(t.apps.is_empty());
    }

    #[test]
    fn a_removed_certificate_is_kept_off_and_an_alias_removal_drops_it() {
        let mut t = Table::default();
        let add = ev(":action: :add_ssl\n:alias: www.example.org\n:ssl: c\n:private_key: k\n");
        let rm = ev(":action: :remove_ssl\n:alias: www.example.org\n");
        // Swapped: the new certificate, then the removal of the old one.
        t.apply(&add, Some(cert("new")));
        assert!(t.apply(&rm, None).changed);
        let c = &t.apps["myapp-ns1"].certs["www.example.org"];
        assert!(!c.active && c.fingerprint == "new");
        assert!(t.apps["myapp-ns1"].aliases.contains("www.example.org"));
        t.apply(
            &ev(":action: :remove_alias\n:alias: www.example.org\n"),
            None,
        );
        assert!(t.apps.get("myapp-ns1").is_none_or(|a| a.certs.is_empty()));
        // Refused (no checked certificate): nothing changes.
        let mut t = Table::default();
        assert!(!t.apply(&add, None).changed);
        assert!(t.apps.is_empty());
    }

    #[test]
    fn the_table_round_trips_as_json() {
        let mut t = Table::default();
        t.apply(
            &endpoint("add_public_endpoint", "g1", "2001:db8::1", 35541),
            None,
        );
        t.apply(
            &ev(":action: :add_ssl\n:alias: a.example.org\n:ssl: c\n:private_key: k\n"),
            Some(cert("ff")),
        );
        t.remember("ID:9");
        let text = serde_json::to_string(&t).unwrap();
        assert!(text.contains("[2001:db8::1]:35541"));
        let back: Table = serde_json::from_str(&text).unwrap();
        assert_eq!(back, t);
    }
}
