//! Checks across keys, once file and environment are read: conflicting addresses,
//! certificates, duplicate names, what gossip and sealed cookies need.

use std::collections::HashSet;

use super::problem::Problem;
use super::schema::{Carrier, Config};

pub(super) fn validate(cfg: &Config, problems: &mut Vec<Problem>) {
    validate_services(cfg, problems);
    if cfg.routing_spi.is_some() && cfg.listen.mode != super::tcp::Mode::Http {
        problems.push(Problem {
            path: "routing_spi".into(),
            message: "a router routes HTTP by host name: listen.mode must be \"http\"".into(),
        });
    }
    let l = &cfg.listen;
    if l.proxy == l.status && l.proxy.port() != 0 {
        problems.push(Problem {
            path: "listen.status".into(),
            message: format!("same address as listen.proxy ({})", l.proxy),
        });
    }
    if let Some(tls) = l.tls {
        if (tls == l.proxy || tls == l.status) && tls.port() != 0 {
            problems.push(Problem {
                path: "listen.tls".into(),
                message: format!("same address as listen.proxy or listen.status ({tls})"),
            });
        }
    }
    let t = &cfg.tls;
    match (&t.cert, &t.key) {
        (Some(_), None) => problems.push(Problem {
            path: "tls.key".into(),
            message: "required with tls.cert".into(),
        }),
        (None, Some(_)) => problems.push(Problem {
            path: "tls.cert".into(),
            message: "required with tls.key".into(),
        }),
        _ => {}
    }
    if l.tls.is_some() && t.cert.is_none() && t.key.is_none() && t.dir.is_none() {
        problems.push(Problem {
            path: "listen.tls".into(),
            message: "needs certificates: tls.cert and tls.key, or tls.dir".into(),
        });
    }
    if l.tls.is_some() && l.mode == super::tcp::Mode::Tcp {
        problems.push(Problem {
            path: "listen.tls".into(),
            message: "the HTTPS listener ends TLS and speaks HTTP to the backends, which in \
                      TCP mode (listen.mode = \"tcp\") expect the clients' own TLS: remove \
                      listen.tls"
                .into(),
        });
    }
    for (i, s) in cfg.services.iter().enumerate() {
        if s.listen.is_none() && s.mode != l.mode {
            problems.push(Problem {
                path: format!("services[{i}].mode"),
                message: format!(
                    "{:?} on listen.proxy, which is {:?}: a service without a listener of \
                     its own has the mode of listen.proxy",
                    s.mode.as_str(),
                    l.mode.as_str()
                ),
            });
        }
    }
    let h = &cfg.health;
    if !h.uri.starts_with('/') || h.uri.parse::<http::Uri>().is_err() {
        problems.push(Problem {
            path: "health.uri".into(),
            message: format!("{:?} is not a path starting with '/'", h.uri),
        });
    }
    if let Err(e) = regex_lite::Regex::new(&h.expect) {
        problems.push(Problem {
            path: "health.expect".into(),
            message: format!("{:?} is not a valid regular expression: {e}", h.expect),
        });
    }
    let cookie_ok = !cfg.sticky.cookie.is_empty()
        && cfg.sticky.cookie.len() <= 64
        && cfg
            .sticky
            .cookie
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !cookie_ok {
        problems.push(Problem {
            path: "sticky.cookie".into(),
            message: format!("{:?} is not a valid cookie name", cfg.sticky.cookie),
        });
    }
    if cfg.sticky.seal && cfg.cluster.secret.as_deref().is_none_or(|s| s.len() < 16) {
        problems.push(Problem {
            path: "sticky.seal".into(),
            message: "needs cluster.secret (or OPENSHIFT_SECRET_TOKEN) of at least 16 characters"
                .into(),
        });
    }
    if cfg.cluster.gossip() {
        if cfg.cluster.transport == Carrier::Http
            && cfg.cluster.advertise.is_none()
            && cfg.listen.proxy.ip().is_unspecified()
        {
            problems.push(Problem {
                path: "cluster.advertise".into(),
                message: format!(
                    "gossip on listen.proxy ({}) needs the address peers reach it at",
                    cfg.listen.proxy
                ),
            });
        }
        if cfg.cluster.secret.as_deref().is_none_or(|s| s.len() < 16) {
            problems.push(Problem {
                path: "cluster.secret".into(),
                message: "gossip is authenticated: set a secret of at least 16 characters (or OPENSHIFT_SECRET_TOKEN)".into(),
            });
        }
        match &cfg.cluster.node_id {
            None => problems.push(Problem {
                path: "cluster.node_id".into(),
                message: "required for gossip (or OPENSHIFT_GEAR_UUID)".into(),
            }),
            Some(id) if !crate::gear::is_peer_id(id) => problems.push(Problem {
                path: "cluster.node_id".into(),
                message: format!("{id:?}: use 1-64 letters, digits, '-' or '_'"),
            }),
            Some(_) => {}
        }
    }
    if let Some(url) = &cfg.scaler.broker_url {
        if !(url.starts_with("https://") || url.starts_with("http://"))
            || url.parse::<http::Uri>().is_err()
        {
            problems.push(Problem {
                path: "scaler.broker_url".into(),
                message: format!("{url:?} is not an https:// URL"),
            });
        }
    }
    if cfg.control.socket.as_os_str().len() > 100 {
        problems.push(Problem {
            path: "control.socket".into(),
            message: "path longer than 100 bytes (unix socket paths are limited to 108)".into(),
        });
    }
    let stats_socket = cfg.control.stats_socket_path();
    if stats_socket.as_os_str().len() > 100 {
        problems.push(Problem {
            path: "control.stats_socket".into(),
            message: format!(
                "{} is longer than 100 bytes (unix socket paths are limited to 108)",
                stats_socket.display()
            ),
        });
    }
    if stats_socket == cfg.control.socket {
        problems.push(Problem {
            path: "control.stats_socket".into(),
            message: "must differ from control.socket".into(),
        });
    }
}

/// Services: unique names (`default` is the top-level backends' when they are served),
/// listeners of their own that no other listener has, routes without conflicts.
pub(super) fn validate_services(cfg: &Config, problems: &mut Vec<Problem>) {
    use super::schema::DEFAULT_SERVICE;
    use super::service::default_route;
    use crate::routing::routes::RouteTable;
    let mut names = HashSet::new();
    let mut listens = vec![cfg.listen.proxy, cfg.listen.status];
    listens.extend(cfg.listen.tls);
    listens.extend(cfg.cluster.listen);
    let default = cfg.default_service();
    let mut specs = Vec::new();
    if default {
        specs.push(default_route());
    }
    for (i, s) in cfg.services.iter().enumerate() {
        if !names.insert(s.name.as_str()) {
            problems.push(Problem {
                path: format!("services[{i}].name"),
                message: format!("duplicate service name {:?}", s.name),
            });
        } else if default && s.name == DEFAULT_SERVICE {
            problems.push(Problem {
                path: format!("services[{i}].name"),
                message: format!(
                    "{DEFAULT_SERVICE:?} is the service of the top-level [[backends]]: choose another name"
                ),
            });
        }
        for (key, l) in [("listen", s.listen), ("health.listen", s.health.listen)] {
            let Some(l) = l else { continue };
            if l.port() != 0 && listens.contains(&l) {
                problems.push(Problem {
                    path: format!("services[{i}].{key}"),
                    message: format!("{l} is already another listener's address"),
                });
            }
            listens.push(l);
        }
        specs.push(s.route_spec());
    }
    if let Err(errors) = RouteTable::new(&specs) {
        for e in errors {
            problems.push(Problem {
                path: "services".into(),
                message: e.to_string(),
            });
        }
    }
    if cfg.discovery.ttl < std::time::Duration::from_secs(1) {
        problems.push(Problem {
            path: "discovery.ttl".into(),
            message: "at least 1s".into(),
        });
    }
}

impl Config {
    /// What is allowed but likely a mistake: said by `gearlb check` and logged at start.
    pub fn warnings(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        if !self.cluster.peers.is_empty() && !self.cluster.gossip() {
            out.push(Problem {
                path: "cluster.peers".into(),
                message: format!(
                    "{} peer(s) listed, but gossip is off: set cluster.listen (a gossip port) \
                     or cluster.transport = \"http\" (gossip on the proxy port)",
                    self.cluster.peers.len()
                ),
            });
        }
        out
    }
}
