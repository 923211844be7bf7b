//! The sources of services merged into one list (pure): the configuration's
//! `[[services]]` first, then the services of watched files (this balancer's and its
//! peers', by name), then the registrations of instances (here or at a peer). A later
//! source never takes a name an earlier one defines: a file naming a configured service
//! is refused; an instance registered to a defined service joins its backends (its
//! routes are the definition's, so it may not give others).
//!
//! Every balancer of a cluster merges the same inputs in the same order
//! ([`order_files`], [`order_registrations`]), so they all route the same way.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::config::{Mode, ServiceBackend, ServiceConfig};
use crate::gear::Addr;

/// Where a service's definition comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "path")]
pub enum Origin {
    /// The top-level `[[backends]]` (or the cartridge's gears).
    Default,
    /// `[[services]]` of the configuration file.
    Config,
    /// A watched file.
    File(PathBuf),
    /// Instances that registered themselves.
    Registration,
    /// A key of etcd.
    Etcd(String),
    /// An application of the broker's routing SPI (the destination it came from).
    Spi(String),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Default => f.write_str("the top-level backends"),
            Origin::Config => f.write_str("the configuration file"),
            Origin::File(p) => write!(f, "file {}", p.display()),
            Origin::Registration => f.write_str("registration"),
            Origin::Etcd(k) => write!(f, "etcd key {k}"),
            Origin::Spi(d) => write!(f, "routing SPI {d}"),
        }
    }
}

/// One registered instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Registration {
    pub service: String,
    pub backend: String,
    pub addr: Addr,
    /// Routes it announces (for a service no other source defines).
    pub hosts: Vec<String>,
    pub paths: Vec<String>,
    /// The version it runs, and those it is compatible with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compatible: Vec<String>,
}

impl Registration {
    /// This registration with a version (and compatible versions), checked.
    pub fn with_version(
        mut self,
        version: Option<String>,
        compatible: Vec<String>,
    ) -> Result<Registration, String> {
        use crate::routing::versions::Version;
        let bad: Vec<String> = version
            .iter()
            .chain(&compatible)
            .filter_map(|v| Version::parse(v).err())
            .collect();
        if !bad.is_empty() {
            return Err(format!("registration refused: {}", bad.join("; ")));
        }
        self.version = version;
        self.compatible = compatible;
        Ok(self)
    }
}

/// A service to run, with where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub config: ServiceConfig,
    pub origin: Origin,
}

/// A definition or registration that was not taken, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Refusal {
    pub service: String,
    pub origin: Origin,
    /// The instance, for a registration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    pub why: String,
}

/// Merge the sources, in precedence order; every refusal is returned.
pub fn merge(
    config: &[ServiceConfig],
    files: &[(Origin, ServiceConfig)],
    registrations: &[Registration],
) -> (Vec<Desired>, Vec<Refusal>) {
    let mut out: Vec<Desired> = config
        .iter()
        .map(|c| Desired {
            config: c.clone(),
            origin: Origin::Config,
        })
        .collect();
    let mut refused = Vec::new();
    // Where each service is in `out`, and its backends' names: lookups that do not grow
    // with the number of services and instances.
    let mut index: HashMap<String, (usize, HashSet<String>)> = HashMap::new();
    let names = |c: &ServiceConfig| c.backends.iter().map(|b| b.name.clone()).collect();
    for (i, d) in out.iter().enumerate() {
        index.insert(d.config.name.clone(), (i, names(&d.config)));
    }
    for (origin, s) in files {
        if let Some(first) = index.get(&s.name).map(|(i, _)| &out[*i]) {
            refused.push(Refusal {
                service: s.name.clone(),
                origin: origin.clone(),
                backend: None,
                why: format!(
                    "service {:?} is already defined by {}",
                    s.name, first.origin
                ),
            });
            continue;
        }
        index.insert(s.name.clone(), (out.len(), names(s)));
        out.push(Desired {
            config: s.clone(),
            origin: origin.clone(),
        });
    }
    for r in registrations {
        let refuse = |why: String| Refusal {
            service: r.service.clone(),
            origin: Origin::Registration,
            backend: Some(r.backend.clone()),
            why,
        };
        match index.get_mut(&r.service) {
            Some((i, backends)) => {
                let d = &mut out[*i];
                let routes_differ = (!r.hosts.is_empty() && r.hosts != d.config.hosts)
                    || (!r.paths.is_empty() && r.paths != d.config.paths);
                if routes_differ && d.origin != Origin::Registration {
                    refused.push(refuse(format!(
                        "service {:?} is defined by {} with hosts {:?} paths {:?}: register without routes, or with the same",
                        r.service, d.origin, d.config.hosts, d.config.paths
                    )));
                } else if routes_differ {
                    refused.push(refuse(format!(
                        "service {:?} is registered with hosts {:?} paths {:?}: an instance cannot announce others",
                        r.service, d.config.hosts, d.config.paths
                    )));
                } else if backends.contains(&r.backend) {
                    if d.origin != Origin::Registration {
                        refused.push(refuse(format!(
                            "backend {:?} of service {:?} is defined by {}",
                            r.backend, r.service, d.origin
                        )));
                    }
                } else {
                    backends.insert(r.backend.clone());
                    d.config.backends.push(backend_of(r));
                }
            }
            None if r.hosts.is_empty() => refused.push(refuse(format!(
                "service {:?} is not defined: the first instance must name its hosts (--host)",
                r.service
            ))),
            None => {
                index.insert(
                    r.service.clone(),
                    (out.len(), HashSet::from([r.backend.clone()])),
                );
                out.push(Desired {
                    config: ServiceConfig {
                        name: r.service.clone(),
                        hosts: r.hosts.clone(),
                        paths: if r.paths.is_empty() {
                            vec!["/".into()]
                        } else {
                            r.paths.clone()
                        },
                        listen: None,
                        // Registered services are routed on listen.proxy, in its mode.
                        mode: Default::default(),
                        sticky_cookie: None,
                        sticky: true,
                        queue_timeout: None,
                        health: Default::default(),
                        timeouts: Default::default(),
                        backends: vec![backend_of(r)],
                        versions: Default::default(),
                    },
                    origin: Origin::Registration,
                });
            }
        }
    }
    (out, refused)
}

/// File services from every balancer (`(balancer, path, service)`, this one's
/// included) in the order every balancer merges them: by service name, then balancer
/// and path. The same definition from several balancers (consul-template renders the
/// same files on every host) counts once; a different one is refused.
pub fn order_files(
    mut all: Vec<(String, PathBuf, ServiceConfig)>,
    self_id: &str,
) -> (Vec<(Origin, ServiceConfig)>, Vec<Refusal>) {
    all.sort_by(|a, b| (&a.2.name, &a.0, &a.1).cmp(&(&b.2.name, &b.0, &b.1)));
    let mut out: Vec<(Origin, ServiceConfig)> = Vec::new();
    let mut refused = Vec::new();
    for (node, path, s) in all {
        let origin = if node == self_id {
            Origin::File(path)
        } else {
            Origin::File(PathBuf::from(format!("{node}:{}", path.display())))
        };
        match out.last() {
            Some((_, prev)) if prev.name == s.name && *prev == s => {}
            Some((first, prev)) if prev.name == s.name => refused.push(Refusal {
                service: s.name.clone(),
                origin,
                backend: None,
                why: format!("service {:?} is defined differently by {first}", s.name),
            }),
            _ => out.push((origin, s)),
        }
    }
    (out, refused)
}

/// Registrations from every balancer (`(balancer, registration)`), in the order every
/// balancer merges them: by service, those that name routes first, then by backend;
/// one instance registered at two balancers counts once (the lower balancer id's).
pub fn order_registrations(mut all: Vec<(String, Registration)>) -> Vec<Registration> {
    all.sort_by(|a, b| {
        let key = |x: &(String, Registration)| {
            (
                x.1.service.clone(),
                x.1.hosts.is_empty(),
                x.1.backend.clone(),
                x.0.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    let mut out: Vec<Registration> = Vec::new();
    let mut seen: HashSet<(String, String)> = HashSet::new();
    for (_, r) in all {
        if seen.insert((r.service.clone(), r.backend.clone())) {
            out.push(r);
        }
    }
    out
}

/// A registration as asked for, checked: names, address, routes, lease (1 s to 1 day).
pub fn registration(
    service: String,
    backend: String,
    addr: &str,
    hosts: Vec<String>,
    paths: Vec<String>,
    ttl: Duration,
) -> Result<Registration, String> {
    let mut problems = Vec::new();
    if !crate::config::is_service_name(&service) {
        problems.push(format!(
            "service {service:?}: letters, digits, '-', '_' and '.'"
        ));
    }
    if !crate::gear::is_backend_name(&backend) {
        problems.push(format!(
            "backend {backend:?}: letters, digits, '-', '_' and '.'"
        ));
    }
    let addr = addr
        .parse::<crate::gear::Addr>()
        .map_err(|e| problems.push(format!("address: {e}")))
        .ok();
    for h in &hosts {
        if let Err(e) = crate::routing::routes::HostPattern::parse(h) {
            problems.push(e);
        }
    }
    for p in paths.iter().filter(|p| !p.starts_with('/')) {
        problems.push(format!("path {p:?} does not start with '/'"));
    }
    if !(Duration::from_secs(1)..=Duration::from_secs(86_400)).contains(&ttl) {
        problems.push(format!("lease {ttl:?}: from 1s to 1 day"));
    }
    match addr {
        Some(addr) if problems.is_empty() => Ok(Registration {
            service,
            backend,
            addr,
            hosts,
            paths,
            version: None,
            compatible: Vec::new(),
        }),
        _ => Err(format!("registration refused: {}", problems.join("; "))),
    }
}

/// Refuse the later claimant of every route (the default service's, when it is served,
/// comes first): it leaves `desired`, unless it runs now with another definition
/// (`running`), which it keeps when that one conflicts with nothing (a file edited into
/// a conflict keeps serving as it was). Every refusal is pushed, naming both services.
pub fn resolve_conflicts(
    desired: &mut Vec<Desired>,
    default: bool,
    running: impl Fn(&str) -> Option<ServiceConfig>,
    refused: &mut Vec<Refusal>,
) {
    for pass in 0..3 {
        let mut specs = Vec::new();
        if default {
            specs.push(crate::config::default_route());
        }
        specs.extend(desired.iter().map(|d| d.config.route_spec()));
        let (_, conflicts) = crate::routing::routes::RouteTable::build(&specs);
        let mut again = false;
        for (service, errors) in conflicts {
            let Some(i) = desired.iter().position(|d| d.config.name == service) else {
                continue;
            };
            let mut why: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            let last_good = running(&service).filter(|c| *c != desired[i].config && pass < 2);
            let origin = desired[i].origin.clone();
            match last_good {
                Some(c) => {
                    why.push("its last good definition is kept".into());
                    desired[i].config = c;
                    again = true;
                }
                None => {
                    desired.remove(i);
                }
            }
            refused.push(Refusal {
                service,
                origin,
                backend: None,
                why: why.join("; "),
            });
        }
        if !again {
            break;
        }
    }
}

/// A service without a listener of its own is routed on listen.proxy, in its mode
/// (`main`): a registration's service takes it, a definition in another mode is
/// refused.
pub fn fit_modes(desired: &mut Vec<Desired>, main: Mode, refused: &mut Vec<Refusal>) {
    desired.retain_mut(|d| {
        if d.origin == Origin::Registration {
            d.config.mode = main;
        }
        if d.config.listen.is_some() || d.config.mode == main {
            return true;
        }
        refused.push(Refusal {
            service: d.config.name.clone(),
            origin: d.origin.clone(),
            backend: None,
            why: format!(
                "mode {:?} without a listener of its own, but listen.proxy is {:?}",
                d.config.mode.as_str(),
                main.as_str()
            ),
        });
        false
    });
}

fn backend_of(r: &Registration) -> ServiceBackend {
    ServiceBackend {
        name: r.backend.clone(),
        addr: r.addr.clone(),
        backup: false,
        max_connections: None,
        version: r.version.clone(),
        compatible: r.compatible.clone(),
        send_proxy: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(name: &str, host: &str) -> ServiceConfig {
        ServiceConfig {
            name: name.into(),
            hosts: vec![host.into()],
            paths: vec!["/".into()],
            listen: None,
            mode: Default::default(),
            sticky_cookie: None,
            sticky: true,
            queue_timeout: None,
            health: Default::default(),
            timeouts: Default::default(),
            backends: vec![],
            versions: Default::default(),
        }
    }

    fn reg(service: &str, backend: &str, hosts: &[&str]) -> Registration {
        Registration {
            service: service.into(),
            backend: backend.into(),
            addr: "127.0.0.1:9000".parse().unwrap(),
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            paths: vec![],
            version: None,
            compatible: vec![],
        }
    }

    #[test]
    fn a_file_cannot_take_a_configured_name() {
        let files = [
            (
                Origin::File("/d/a.yaml".into()),
                service("shop", "x.example.com"),
            ),
            (
                Origin::File("/d/b.yaml".into()),
                service("blog", "b.example.com"),
            ),
        ];
        let (out, refused) = merge(&[service("shop", "shop.example.com")], &files, &[]);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].config.hosts, ["shop.example.com"]);
        assert_eq!(out[1].origin, Origin::File("/d/b.yaml".into()));
        assert_eq!(refused.len(), 1);
        assert!(refused[0].why.contains("configuration file"), "{refused:?}");
    }

    #[test]
    fn instances_join_a_defined_service_or_define_one() {
        let regs = [
            reg("shop", "i1", &[]),
            reg("api", "a1", &["api.example.com"]),
            reg("api", "a2", &[]),
            reg("api", "a3", &["other.example.com"]),
            reg("ghost", "g1", &[]),
            reg("shop", "i2", &["elsewhere.example.com"]),
        ];
        let (out, refused) = merge(&[service("shop", "shop.example.com")], &[], &regs);
        let names = |d: &Desired| -> Vec<String> {
            d.config.backends.iter().map(|b| b.name.clone()).collect()
        };
        assert_eq!(names(&out[0]), ["i1"]);
        assert_eq!(out[1].config.name, "api");
        assert_eq!(names(&out[1]), ["a1", "a2"]);
        let why: Vec<(&str, &str)> = refused
            .iter()
            .map(|r| (r.backend.as_deref().unwrap(), r.why.as_str()))
            .collect();
        assert_eq!(why.len(), 3, "{why:?}");
        assert_eq!(why[0].0, "a3");
        assert!(why[1].1.contains("--host"));
        assert!(why[2].1.contains("configuration file"));
    }

    #[test]
    fn every_balancer_orders_the_same_inputs_the_same_way() {
        let a = service("api", "a.example.com");
        let mut b = service("api", "b.example.com");
        let inputs = vec![
            ("lb2".to_string(), PathBuf::from("/d/api.yaml"), a.clone()),
            ("lb1".to_string(), PathBuf::from("/d/api.yaml"), a.clone()),
            ("lb3".to_string(), PathBuf::from("/d/x.yaml"), b.clone()),
        ];
        let (files1, refused1) = order_files(inputs.clone(), "lb1");
        let mut reversed = inputs.clone();
        reversed.reverse();
        let (files2, refused2) = order_files(reversed, "lb2");
        assert_eq!(files1.len(), 1, "the same definition twice counts once");
        assert_eq!(files1[0].1, files2[0].1);
        assert_eq!(
            files1[0].0,
            Origin::File("/d/api.yaml".into()),
            "lb1's own file"
        );
        assert_eq!(files2[0].0, Origin::File("lb1:/d/api.yaml".into()));
        assert_eq!((refused1.len(), refused2.len()), (1, 1));
        b.name = "other".into();
        let regs = vec![
            ("lb2".to_string(), reg("api", "i2", &[])),
            ("lb1".to_string(), reg("api", "i9", &["api.example.com"])),
            ("lb1".to_string(), reg("api", "i2", &[])),
        ];
        let ordered = order_registrations(regs);
        let names: Vec<&str> = ordered.iter().map(|r| r.backend.as_str()).collect();
        assert_eq!(names, ["i9", "i2"], "routes first; one instance once");
    }

    #[test]
    fn a_conflicting_edit_keeps_the_last_good_definition_and_a_new_claimant_goes() {
        let d = |s: ServiceConfig| Desired {
            config: s,
            origin: Origin::File("/d/x.yaml".into()),
        };
        let mut desired = vec![
            d(service("a", "a.example.com")),
            d(service("b", "a.example.com")),
            d(service("c", "a.example.com")),
        ];
        let running_b = service("b", "b.example.com");
        let mut refused = Vec::new();
        resolve_conflicts(
            &mut desired,
            false,
            |name| (name == "b").then(|| running_b.clone()),
            &mut refused,
        );
        let names: Vec<(&str, &str)> = desired
            .iter()
            .map(|d| (d.config.name.as_str(), d.config.hosts[0].as_str()))
            .collect();
        assert_eq!(names, [("a", "a.example.com"), ("b", "b.example.com")]);
        assert_eq!(refused.len(), 2);
        assert!(refused[0].why.contains("last good"), "{refused:?}");
        assert!(refused.iter().all(|r| r.why.contains("\"a\"")));
        // The default service's any-host route comes first.
        let mut desired = vec![d(service("all", "*"))];
        let mut refused = Vec::new();
        resolve_conflicts(&mut desired, true, |_| None, &mut refused);
        assert!(desired.is_empty());
        assert!(refused[0].why.contains("\"default\""));
    }
}
