//! The four sources of services merged into one list (pure): the configuration's
//! `[[services]]` first, then the watched files (by path), then the registrations of
//! instances. A later source never takes a name an earlier one defines: a file naming
//! a configured service is refused; an instance registered to a defined service joins
//! its backends (its routes are the definition's, so it may not give others).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::config::{ServiceBackend, ServiceConfig};
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
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Default => f.write_str("the top-level backends"),
            Origin::Config => f.write_str("the configuration file"),
            Origin::File(p) => write!(f, "file {}", p.display()),
            Origin::Registration => f.write_str("registration"),
        }
    }
}

/// One registered instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    pub service: String,
    pub backend: String,
    pub addr: Addr,
    /// Routes it announces (for a service no other source defines).
    pub hosts: Vec<String>,
    pub paths: Vec<String>,
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
    files: &BTreeMap<PathBuf, ServiceConfig>,
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
    for (path, s) in files {
        if let Some(first) = out.iter().find(|d| d.config.name == s.name) {
            refused.push(Refusal {
                service: s.name.clone(),
                origin: Origin::File(path.clone()),
                backend: None,
                why: format!(
                    "service {:?} is already defined by {}",
                    s.name, first.origin
                ),
            });
            continue;
        }
        out.push(Desired {
            config: s.clone(),
            origin: Origin::File(path.clone()),
        });
    }
    for r in registrations {
        let refuse = |why: String| Refusal {
            service: r.service.clone(),
            origin: Origin::Registration,
            backend: Some(r.backend.clone()),
            why,
        };
        match out.iter_mut().find(|d| d.config.name == r.service) {
            Some(d) => {
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
                } else if d.config.backends.iter().any(|b| b.name == r.backend) {
                    if d.origin != Origin::Registration {
                        refused.push(refuse(format!(
                            "backend {:?} of service {:?} is defined by {}",
                            r.backend, r.service, d.origin
                        )));
                    }
                } else {
                    d.config.backends.push(backend_of(r));
                }
            }
            None if r.hosts.is_empty() => refused.push(refuse(format!(
                "service {:?} is not defined: the first instance must name its hosts (--host)",
                r.service
            ))),
            None => out.push(Desired {
                config: ServiceConfig {
                    name: r.service.clone(),
                    hosts: r.hosts.clone(),
                    paths: if r.paths.is_empty() {
                        vec!["/".into()]
                    } else {
                        r.paths.clone()
                    },
                    listen: None,
                    sticky_cookie: None,
                    queue_timeout: None,
                    health: Default::default(),
                    timeouts: Default::default(),
                    backends: vec![backend_of(r)],
                },
                origin: Origin::Registration,
            }),
        }
    }
    (out, refused)
}

fn backend_of(r: &Registration) -> ServiceBackend {
    ServiceBackend {
        name: r.backend.clone(),
        addr: r.addr.clone(),
        backup: false,
        max_connections: None,
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
            sticky_cookie: None,
            queue_timeout: None,
            health: Default::default(),
            timeouts: Default::default(),
            backends: vec![],
        }
    }

    fn reg(service: &str, backend: &str, hosts: &[&str]) -> Registration {
        Registration {
            service: service.into(),
            backend: backend.into(),
            addr: "127.0.0.1:9000".parse().unwrap(),
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            paths: vec![],
        }
    }

    #[test]
    fn a_file_cannot_take_a_configured_name() {
        let files = BTreeMap::from([
            (PathBuf::from("/d/a.yaml"), service("shop", "x.example.com")),
            (PathBuf::from("/d/b.yaml"), service("blog", "b.example.com")),
        ]);
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
        let (out, refused) = merge(
            &[service("shop", "shop.example.com")],
            &BTreeMap::new(),
            &regs,
        );
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
}
