//! The node's gear registry, and how a gear uuid the node passes names a gear.
//!
//! Owns reading `$OPENSHIFT_HOMEDIR/gear-registry/gear-registry.json`, which the node
//! rewrites on every `update_cluster` (origin-server `gear_registry.rb`): for each web
//! and proxy gear of the application its uuid, namespace, DNS name, node host and port
//! proxy port. And owns [`label_for_uuid`]: the node's `disable-server` and
//! `enable-server` name gears by uuid (`cartridge_actions.rb`
//! `update_proxy_status_for_gear`), while balancers name them by label
//! `<gearname>-<ns>` (the sticky value, the same on every balancer). The old cartridge
//! mapped this balancer's own uuid to `local-gear`, the application's uuid to the head
//! gear `<app>-<ns>`, and any other uuid to `<uuid>-<ns>`; the registry's DNS names say
//! it for every gear the node knows. Pure apart from [`Registry::load`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::GearIdentity;

/// One gear of the registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub uuid: String,
    pub namespace: String,
    /// `<gearname>-<ns>.<domain>`.
    pub dns: String,
    pub proxy_hostname: String,
    pub proxy_port: String,
}

impl Entry {
    /// The gear's label: the first DNS label, lower-cased.
    pub fn label(&self) -> Option<String> {
        let first = self.dns.split('.').next()?.to_ascii_lowercase();
        crate::gear::is_dns_name(&first).then_some(first)
    }
}

/// The registry's web and proxy gears, by uuid.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Registry {
    pub web: BTreeMap<String, Entry>,
    pub proxy: BTreeMap<String, Entry>,
}

/// Where the node keeps it for the gear whose home is `homedir`.
pub fn path(homedir: &Path) -> PathBuf {
    homedir.join("gear-registry").join("gear-registry.json")
}

/// Largest registry read: a thousand gears take about 200 KiB.
const MAX_REGISTRY_BYTES: u64 = 16 << 20;

impl Registry {
    /// Read the registry; a missing or empty file is an empty registry (the node creates
    /// it empty before the first `update_cluster`).
    pub fn load(path: &Path) -> Result<Registry, String> {
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Registry::default()),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        if meta.len() > MAX_REGISTRY_BYTES {
            return Err(format!(
                "{}: {} bytes is too large",
                path.display(),
                meta.len()
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Registry::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parse the node's JSON: `{"web": {"<uuid>": {"namespace", "dns",
    /// "proxy_hostname", "proxy_port", "platform"}, …}, "proxy": {…}}`. Entries missing
    /// a field the node always writes are skipped; ports may be numbers or strings (the
    /// node writes both).
    pub fn parse(text: &str) -> Result<Registry, String> {
        if text.trim().is_empty() {
            return Ok(Registry::default());
        }
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let top = v.as_object().ok_or("not a JSON object")?;
        let mut reg = Registry::default();
        for (kind, target) in [("web", &mut reg.web), ("proxy", &mut reg.proxy)] {
            let Some(entries) = top.get(kind).and_then(|e| e.as_object()) else {
                continue;
            };
            for (uuid, e) in entries {
                let field = |k: &str| match e.get(k) {
                    Some(serde_json::Value::String(s)) => Some(s.clone()),
                    Some(serde_json::Value::Number(n)) => Some(n.to_string()),
                    _ => None,
                };
                let (Some(namespace), Some(dns)) = (field("namespace"), field("dns")) else {
                    continue;
                };
                target.insert(
                    uuid.clone(),
                    Entry {
                        uuid: uuid.clone(),
                        namespace,
                        dns,
                        proxy_hostname: field("proxy_hostname").unwrap_or_default(),
                        proxy_port: field("proxy_port").unwrap_or_default(),
                    },
                );
            }
        }
        Ok(reg)
    }

    /// The gear with this uuid, web entries first.
    pub fn get(&self, uuid: &str) -> Option<&Entry> {
        self.web.get(uuid).or_else(|| self.proxy.get(uuid))
    }
}

/// What a balancer knows of itself and its application, to name gears by uuid.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Names {
    /// `OPENSHIFT_GEAR_UUID`: its own gear, whose web server is `local-gear`.
    pub own_uuid: Option<String>,
    /// The label of its own gear (`local-gear`'s sticky value).
    pub own_label: Option<String>,
    /// `OPENSHIFT_APP_UUID`: the head gear's uuid.
    pub app_uuid: Option<String>,
    /// `OPENSHIFT_APP_NAME`: the head gear's name.
    pub app_name: Option<String>,
    /// `OPENSHIFT_NAMESPACE`.
    pub namespace: Option<String>,
}

impl Names {
    /// What the gear identity in the configuration says.
    pub fn of(gear: &GearIdentity) -> Self {
        Names {
            own_uuid: gear.uuid.clone(),
            own_label: gear.own_label(),
            app_uuid: gear.app_uuid.clone(),
            app_name: gear.app_name.clone(),
            namespace: gear.namespace.clone(),
        }
    }
}

/// True for what the node passes as a gear uuid (a Mongo object id in practice; any
/// 1-64 letters, digits, `-` or `_`).
pub fn is_uuid(s: &str) -> bool {
    crate::gear::is_peer_id(s)
}

/// The label of the gear the node names by `uuid`: this balancer's own gear, the head
/// gear, a registry entry, or `<uuid>-<ns>` for a gear no one has listed yet (a
/// rotation of it is kept until it appears). `None` when `uuid` is not a uuid or the
/// namespace is unknown.
pub fn label_for_uuid(uuid: &str, names: &Names, registry: &Registry) -> Option<String> {
    if !is_uuid(uuid) {
        return None;
    }
    let same = |known: &Option<String>| {
        known
            .as_deref()
            .is_some_and(|k| k.eq_ignore_ascii_case(uuid))
    };
    if same(&names.own_uuid) {
        if let Some(l) = &names.own_label {
            return Some(l.clone());
        }
    }
    if let Some(label) = registry.get(uuid).and_then(Entry::label) {
        return Some(label);
    }
    let ns = names.namespace.as_deref()?;
    if same(&names.app_uuid) {
        if let Some(app) = &names.app_name {
            return Some(format!("{app}-{ns}").to_ascii_lowercase());
        }
    }
    let label = format!("{uuid}-{ns}").to_ascii_lowercase();
    crate::gear::is_dns_name(&label).then_some(label)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As the node writes it: `JSON.dump` of the registry, web ports as strings
    /// (split from the broker's list), proxy ports as the number 0.
    const NODE_JSON: &str = r#"{"web":{"5a1e0000000000000000aaaa":{"namespace":"ns","dns":"myapp-ns.example.com","proxy_hostname":"node1.example.com","proxy_port":"35561","platform":"linux"},"5a1e0000000000000000bbbb":{"namespace":"ns","dns":"5a1e0000000000000000bbbb-ns.example.com","proxy_hostname":"node2.example.com","proxy_port":"35566","platform":"linux"},"5a1e0000000000000000cccc":{"namespace":"ns","dns":"Web3-NS.example.com","proxy_hostname":"node2.example.com","proxy_port":35571}},"proxy":{"5a1e0000000000000000aaaa":{"namespace":"ns","dns":"myapp-ns.example.com","proxy_hostname":"node1.example.com","proxy_port":0,"platform":"linux"}}}"#;

    fn names() -> Names {
        Names {
            own_uuid: Some("5a1e0000000000000000dddd".into()),
            own_label: Some("5a1e0000000000000000dddd-ns".into()),
            app_uuid: Some("5a1e0000000000000000aaaa".into()),
            app_name: Some("myapp".into()),
            namespace: Some("ns".into()),
        }
    }

    #[test]
    fn reads_the_registry_the_node_writes() {
        let r = Registry::parse(NODE_JSON).unwrap();
        assert_eq!(r.web.len(), 3);
        assert_eq!(r.proxy.len(), 1);
        let e = &r.web["5a1e0000000000000000cccc"];
        assert_eq!(e.proxy_port, "35571");
        assert_eq!(e.label().as_deref(), Some("web3-ns"));
        assert_eq!(Registry::parse("").unwrap(), Registry::default());
        assert_eq!(Registry::parse("{}").unwrap(), Registry::default());
        assert!(Registry::parse("[1]").is_err());
        assert!(Registry::parse("{").is_err());
    }

    #[test]
    fn every_uuid_the_node_passes_has_a_label() {
        let r = Registry::parse(NODE_JSON).unwrap();
        let n = names();
        // This balancer's own gear: local-gear's label.
        assert_eq!(
            label_for_uuid("5a1e0000000000000000dddd", &n, &r).as_deref(),
            Some("5a1e0000000000000000dddd-ns")
        );
        // The head gear: by the registry, and by the old rule without it.
        assert_eq!(
            label_for_uuid("5a1e0000000000000000aaaa", &n, &r).as_deref(),
            Some("myapp-ns")
        );
        assert_eq!(
            label_for_uuid("5a1e0000000000000000aaaa", &n, &Registry::default()).as_deref(),
            Some("myapp-ns")
        );
        // A web gear whose DNS name is not its uuid: the registry knows.
        assert_eq!(
            label_for_uuid("5a1e0000000000000000cccc", &n, &r).as_deref(),
            Some("web3-ns")
        );
        // A gear nobody listed yet.
        assert_eq!(
            label_for_uuid("5a1e0000000000000000eeee", &n, &r).as_deref(),
            Some("5a1e0000000000000000eeee-ns")
        );
        // Not a uuid, or no namespace to name it with.
        assert_eq!(label_for_uuid("a b", &n, &r), None);
        assert_eq!(label_for_uuid("$(reboot)", &n, &r), None);
        let no_ns = Names {
            namespace: None,
            ..names()
        };
        assert_eq!(label_for_uuid("5a1e0000000000000000eeee", &no_ns, &r), None);
    }
}
