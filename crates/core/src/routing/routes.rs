//! Routes: which service a request is for, from its host and path (pure).
//!
//! A service claims hosts and path prefixes ([`RouteSpec`]). A host is
//!
//! - exact: `shop.example.com`;
//! - a wildcard: `*.example.com`, any name under it (one label or more), not the name
//!   itself;
//! - a regular expression: `~^shop-[0-9]+\.example\.com$`, as HAProxy's
//!   `hdr_reg(host)`: it matches anywhere in the name unless anchored;
//! - any host: `*` (a default service).
//!
//! Hosts are matched case-insensitively, without the port and a trailing dot
//! ([`normalize_host`]). A path prefix matches element-wise, as Kubernetes' `Prefix`
//! paths: `/api` matches `/api`, `/api/` and `/api/v1`, not `/apiary`; `/` matches
//! every path. Paths are compared as sent (no percent-decoding), without the query.
//!
//! **Which route.** Host groups are tried from the most specific: the exact host, then
//! wildcards from the longest, then the regular expressions in the order given, then
//! any-host routes. The first group with a prefix of the request's path decides, and
//! within it the longest prefix wins. So `api.example.com/v2` can go to one service and
//! every other path of that host to another, while `*.example.com` takes the rest of
//! the domain.
//!
//! **Cost.** Exact hosts are one map lookup; wildcards one map lookup per parent name
//! of the request's host (its number of labels); paths a walk down a tree of path
//! elements. A lookup grows with the length of the host and the path, and with the
//! number of regular-expression hosts (tried in turn), never with the number of exact
//! or wildcard routes.
//!
//! **Conflicts.** Two services claiming the same host pattern with the same path prefix
//! are refused ([`RouteError::Conflict`]), naming both; the one given first keeps it.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use regex_lite::{Regex, RegexBuilder};

/// The host part of a route.
#[derive(Clone, Debug)]
pub enum HostPattern {
    /// Every host.
    Any,
    /// One name, lowercase, without a trailing dot.
    Exact(String),
    /// Every name under this one (lowercase, without the `*.`).
    Wildcard(String),
    /// Names the expression matches (case-insensitively).
    Regex(Regex),
}

impl HostPattern {
    /// Parse a host as written in a service (see the module doc).
    pub fn parse(text: &str) -> Result<HostPattern, String> {
        let t = text.trim();
        if t == "*" {
            return Ok(HostPattern::Any);
        }
        if let Some(re) = t.strip_prefix('~') {
            if re.is_empty() {
                return Err(format!("host {text:?}: an empty regular expression"));
            }
            return RegexBuilder::new(re)
                .case_insensitive(true)
                .build()
                .map(HostPattern::Regex)
                .map_err(|e| format!("host {text:?}: not a regular expression: {e}"));
        }
        if let Some(parent) = t.strip_prefix("*.") {
            let name = check_name(parent).map_err(|why| format!("host {text:?}: {why}"))?;
            return Ok(HostPattern::Wildcard(name));
        }
        check_name(t)
            .map(HostPattern::Exact)
            .map_err(|why| format!("host {text:?}: {why}"))
    }

    /// The pattern as written canonically: what conflicts are told by.
    pub fn key(&self) -> String {
        match self {
            HostPattern::Any => "*".into(),
            HostPattern::Exact(h) => h.clone(),
            HostPattern::Wildcard(h) => format!("*.{h}"),
            HostPattern::Regex(r) => format!("~{}", r.as_str()),
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

/// A host name or address as a route may name it: lowercase, no trailing dot, no
/// port, no space, slash or wildcard.
fn check_name(name: &str) -> Result<String, String> {
    let n = name.trim_end_matches('.').to_ascii_lowercase();
    if n.is_empty() {
        return Err("an empty name".into());
    }
    if n.len() > 253 {
        return Err("longer than 253 characters".into());
    }
    let bracketed = n.starts_with('[') && n.ends_with(']');
    let ok = n.chars().all(|c| {
        c.is_ascii_alphanumeric()
            || matches!(c, '-' | '.' | '_')
            || (bracketed && "[]:".contains(c))
    });
    if !ok {
        return Err("not a host name (letters, digits, '-', '_' and '.'; '*.' only at the start; a port is not part of it)".into());
    }
    if n.split('.').any(str::is_empty) && !bracketed {
        return Err("an empty label".into());
    }
    Ok(n)
}

/// A request's `Host` (or `:authority`) as routes see it: lowercase, without the port
/// and a trailing dot. `[::1]:8080` gives `[::1]`.
pub fn normalize_host(host: &str) -> Cow<'_, str> {
    let h = host.trim();
    let h = if h.starts_with('[') {
        match h.find(']') {
            Some(end) => &h[..=end],
            None => h,
        }
    } else {
        match h.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => h,
        }
    };
    let h = h.trim_end_matches('.');
    if h.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(h.to_ascii_lowercase())
    } else {
        Cow::Borrowed(h)
    }
}

/// One service's claim: hosts and path prefixes (every host with every prefix).
#[derive(Clone, Debug)]
pub struct RouteSpec {
    pub service: String,
    pub hosts: Vec<HostPattern>,
    /// Path prefixes, each starting with `/`; `["/"]` when the service gave none.
    pub paths: Vec<String>,
}

/// Why a set of routes was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("service {service:?}: path {path:?} does not start with '/'")]
    BadPath { service: String, path: String },
    #[error(
        "service {later:?} claims host {host} path {path} already routed to service {first:?}"
    )]
    Conflict {
        host: String,
        path: String,
        first: String,
        later: String,
    },
}

/// A spec's path prefixes: `/` when it gave none.
fn paths_of(spec: &RouteSpec) -> impl Iterator<Item = &str> {
    let default: &[&str] = if spec.paths.is_empty() { &["/"] } else { &[] };
    default
        .iter()
        .copied()
        .chain(spec.paths.iter().map(String::as_str))
}

/// The path elements of a prefix or a request path: `/a//b/` → `a`, `b`.
fn elements(path: &str) -> impl Iterator<Item = &str> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    path.split('/').filter(|e| !e.is_empty())
}

/// A tree of path elements: the service at each prefix that has one.
#[derive(Debug, Default)]
struct PathTree {
    service: Option<usize>,
    children: HashMap<Box<str>, PathTree>,
}

impl PathTree {
    /// Claim `prefix` for `service`; the service already there if it is taken.
    fn insert(&mut self, prefix: &str, service: usize) -> Result<(), usize> {
        let mut node = self;
        for e in elements(prefix) {
            node = node.children.entry(e.into()).or_default();
        }
        match node.service {
            Some(first) if first != service => Err(first),
            _ => {
                node.service = Some(service);
                Ok(())
            }
        }
    }

    /// The service claiming exactly `prefix`.
    fn at(&self, prefix: &str) -> Option<usize> {
        let mut node = self;
        for e in elements(prefix) {
            node = node.children.get(e)?;
        }
        node.service
    }

    /// The service of the longest prefix of `path`.
    fn longest(&self, path: &str) -> Option<usize> {
        let mut node = self;
        let mut best = node.service;
        for e in elements(path) {
            match node.children.get(e) {
                Some(next) => {
                    node = next;
                    best = node.service.or(best);
                }
                None => break,
            }
        }
        best
    }
}

/// Every route of a balancer, ready for lookups.
#[derive(Debug, Default)]
pub struct RouteTable {
    services: Vec<String>,
    exact: HashMap<String, PathTree>,
    wildcard: HashMap<String, PathTree>,
    regex: Vec<(Regex, PathTree)>,
    any: PathTree,
    routes: usize,
}

impl RouteTable {
    /// Build the table from every service's claims, in order. Every problem is
    /// returned (a path without its `/`, each conflict), and nothing is built then.
    pub fn new(specs: &[RouteSpec]) -> Result<RouteTable, Vec<RouteError>> {
        let mut t = RouteTable::default();
        let mut errors = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for spec in specs {
            let s = *index.entry(spec.service.as_str()).or_insert_with(|| {
                t.services.push(spec.service.clone());
                t.services.len() - 1
            });
            errors.extend(t.insert_spec(spec, s));
        }
        if errors.is_empty() {
            Ok(t)
        } else {
            Err(errors)
        }
    }

    /// Build the table from every service's claims, in order, refusing a service whose
    /// claims conflict with those of a service before it (or that has a bad path):
    /// the others are routed, and each refused service is returned with its errors.
    /// This is how sources that change at run time (watched files, registrations) are
    /// applied: the later claimant is refused, never the one already serving.
    pub fn build(specs: &[RouteSpec]) -> (RouteTable, Vec<(String, Vec<RouteError>)>) {
        let mut t = RouteTable::default();
        let mut refused = Vec::new();
        for spec in specs {
            let errors = t.conflicts(spec);
            if !errors.is_empty() {
                refused.push((spec.service.clone(), errors));
                continue;
            }
            if let Err(e) = RouteTable::new(std::slice::from_ref(spec)) {
                refused.push((spec.service.clone(), e));
                continue;
            }
            let s = match t.services.iter().position(|n| *n == spec.service) {
                Some(s) => s,
                None => {
                    t.services.push(spec.service.clone());
                    t.services.len() - 1
                }
            };
            // Checked above: every claim is free.
            t.insert_spec(spec, s);
        }
        (t, refused)
    }

    /// The claims of `spec` that another service already has here.
    fn conflicts(&self, spec: &RouteSpec) -> Vec<RouteError> {
        let mut errors = Vec::new();
        for path in paths_of(spec) {
            for host in &spec.hosts {
                let tree = match host {
                    HostPattern::Any => Some(&self.any),
                    HostPattern::Exact(h) => self.exact.get(h),
                    HostPattern::Wildcard(h) => self.wildcard.get(h),
                    HostPattern::Regex(r) => self
                        .regex
                        .iter()
                        .find(|(x, _)| x.as_str() == r.as_str())
                        .map(|(_, t)| t),
                };
                let taken = tree.and_then(|t| t.at(path));
                if let Some(first) = taken.filter(|&i| self.services[i] != spec.service) {
                    errors.push(RouteError::Conflict {
                        host: host.key(),
                        path: path.to_string(),
                        first: self.services[first].clone(),
                        later: spec.service.clone(),
                    });
                }
            }
        }
        errors
    }

    /// Insert every claim of `spec` as service `s`; the conflicts are returned.
    fn insert_spec(&mut self, spec: &RouteSpec, s: usize) -> Vec<RouteError> {
        let mut errors = Vec::new();
        for path in paths_of(spec) {
            if !path.starts_with('/') {
                errors.push(RouteError::BadPath {
                    service: spec.service.clone(),
                    path: path.to_string(),
                });
                continue;
            }
            for host in &spec.hosts {
                let tree = match host {
                    HostPattern::Any => &mut self.any,
                    HostPattern::Exact(h) => self.exact.entry(h.clone()).or_default(),
                    HostPattern::Wildcard(h) => self.wildcard.entry(h.clone()).or_default(),
                    HostPattern::Regex(r) => {
                        let i = match self
                            .regex
                            .iter()
                            .position(|(x, _)| x.as_str() == r.as_str())
                        {
                            Some(i) => i,
                            None => {
                                self.regex.push((r.clone(), PathTree::default()));
                                self.regex.len() - 1
                            }
                        };
                        &mut self.regex[i].1
                    }
                };
                match tree.insert(path, s) {
                    Ok(()) => self.routes += 1,
                    Err(first) => errors.push(RouteError::Conflict {
                        host: host.key(),
                        path: path.to_string(),
                        first: self.services[first].clone(),
                        later: spec.service.clone(),
                    }),
                }
            }
        }
        errors
    }

    /// The services routed to, in the order given: [`RouteTable::lookup_index`]'s
    /// numbers index this.
    pub fn services(&self) -> &[String] {
        &self.services
    }

    /// How many (host, path) routes the table holds.
    pub fn len(&self) -> usize {
        self.routes
    }

    pub fn is_empty(&self) -> bool {
        self.routes == 0
    }

    /// The service for a request to `host` (a `Host` header as sent: any case, with a
    /// port or not) and `path` (with its query or not); `None`: no route (a 404).
    pub fn lookup(&self, host: &str, path: &str) -> Option<&str> {
        let host = normalize_host(host);
        self.lookup_normalized(&host, path)
            .map(|i| self.services[i].as_str())
    }

    /// As [`RouteTable::lookup`], the service's number in [`RouteTable::services`].
    pub fn lookup_index(&self, host: &str, path: &str) -> Option<usize> {
        let host = normalize_host(host);
        self.lookup_normalized(&host, path)
    }

    fn lookup_normalized(&self, host: &str, path: &str) -> Option<usize> {
        if let Some(s) = self.exact.get(host).and_then(|t| t.longest(path)) {
            return Some(s);
        }
        if !self.wildcard.is_empty() {
            // The parent names of `host`, longest first: a.b.example.com gives
            // b.example.com, then example.com, then com.
            let mut rest = host;
            while let Some((_, parent)) = rest.split_once('.') {
                if let Some(s) = self.wildcard.get(parent).and_then(|t| t.longest(path)) {
                    return Some(s);
                }
                rest = parent;
            }
        }
        for (re, tree) in &self.regex {
            if re.is_match(host) {
                if let Some(s) = tree.longest(path) {
                    return Some(s);
                }
            }
        }
        self.any.longest(path)
    }

    /// The service claiming every host (`*`) for `path`, if one does: where a TLS
    /// connection without a known server name goes.
    pub fn lookup_any(&self, path: &str) -> Option<usize> {
        self.any.longest(path)
    }
}

#[cfg(test)]
mod tests;
