//! A service: a named set of routes (hosts and path prefixes), an optional listener of
//! its own, its backends and its own policy ([`ServiceConfig`]). The same fields are
//! read from a `[[services]]` table of the configuration file and from a watched
//! file ([`parse_service_file`]: YAML or TOML by extension, one service at the top
//! level), with one reader, so both sources accept and refuse exactly the same things.
//!
//! Keys of a service: `name` (required), `hosts` (list; `["*"]`, any host, when absent
//! and the service has no `listen`), `paths` (list of prefixes, default `["/"]`),
//! `listen` (`ip:port`), `sticky` (default true), `sticky_cookie`, `queue_timeout`, `[health]` (`path`, `expect`,
//! `port`, `listen`), `[timeouts]` (`connect`, `server`) and `[[backends]]` (`name`, `addr`,
//! `backup`, `max_connections`, `version`, `compatible`), `[versions]` (`rule`, `prefer`,
//! `canary`).

use std::path::Path;
use std::time::Duration;

pub(super) mod types;

pub use types::{
    default_route, is_service_name, ServiceBackend, ServiceConfig, ServiceHealth, ServiceTimeouts,
    VersionsConfig,
};

use super::problem::{ConfigErrors, Problem};
use super::reader::Reader;
use super::tcp::Mode;
use super::tcp_keys::{read_mode, read_send_proxy};
use crate::gear::{is_backend_name, Addr};
use crate::routing::routes::HostPattern;
use crate::routing::versions::{Prefer, Rule, Version};

/// Read one service out of a table; `at` is the table's path in problems
/// (`services[2]`, or empty for a watched file's top level). `None` when it has
/// problems (all of them pushed).
pub(super) fn read_service(
    t: &toml::Table,
    at: &str,
    problems: &mut Vec<Problem>,
) -> Option<ServiceConfig> {
    let before = problems.len();
    let mut r = Reader::new(t, at, problems);
    let name = r.required_string("name").unwrap_or_default();
    if !name.is_empty() && !is_service_name(&name) {
        r.problem(
            "name",
            format!("{name:?}: letters, digits, '-', '_' and '.' (at most 128)"),
        );
    }
    let listen = r.str_value("listen").and_then(|s| match s.parse() {
        Ok(a) => Some(a),
        Err(_) => {
            r.problem("listen", format!("{s:?} is not an ip:port address"));
            None
        }
    });
    let mode = read_mode(&mut r, "mode", Mode::Http);
    let mut hosts = strings(&mut r, "hosts");
    for h in &hosts {
        if let Err(why) = HostPattern::parse(h) {
            r.problem("hosts", why);
        }
    }
    if hosts.is_empty() && listen.is_none() && t.get("hosts").is_none() {
        hosts.push("*".into());
    }
    let mut paths = strings(&mut r, "paths");
    for p in &paths {
        if !p.starts_with('/') {
            r.problem("paths", format!("{p:?} does not start with '/'"));
        }
    }
    if paths.is_empty() {
        paths.push("/".into());
    }
    if mode == Mode::Tcp && paths.iter().any(|p| p != "/") {
        r.problem(
            "paths",
            "a TCP service is routed by the TLS server name only: no paths",
        );
    }
    let sticky = r.bool("sticky", true);
    let sticky_cookie = r.str_value("sticky_cookie");
    if let Some(c) = &sticky_cookie {
        let token = !c.is_empty()
            && c.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            r.problem("sticky_cookie", format!("{c:?} is not a cookie name"));
        }
    }
    let queue_timeout = r
        .get("queue_timeout")
        .is_some()
        .then(|| r.duration("queue_timeout", Duration::ZERO));
    let health = match sub_table(&mut r, "health") {
        None => ServiceHealth::default(),
        Some(h) => {
            let path = format!("{}health", prefix(at));
            let mut hr = Reader::new(h, &path, r.problems());
            let hp = hr.str_value("path");
            if let Some(p) = &hp {
                if !p.starts_with('/') {
                    hr.problem("path", format!("{p:?} does not start with '/'"));
                }
            }
            let expect = hr.str_value("expect");
            if let Some(e) = &expect {
                if regex_lite::Regex::new(e).is_err() {
                    hr.problem("expect", format!("{e:?} is not a regular expression"));
                }
            }
            let port = hr
                .get("port")
                .is_some()
                .then(|| hr.uint("port", 0, 1, 65535) as u16)
                .filter(|p| *p != 0);
            let listen = hr.str_value("listen").and_then(|l| match l.parse() {
                Ok(a) => Some(a),
                Err(_) => {
                    hr.problem("listen", format!("{l:?} is not an ip:port address"));
                    None
                }
            });
            hr.finish();
            ServiceHealth {
                path: hp,
                expect,
                port,
                listen,
            }
        }
    };
    let timeouts = match sub_table(&mut r, "timeouts") {
        None => ServiceTimeouts::default(),
        Some(tt) => {
            let path = format!("{}timeouts", prefix(at));
            let mut tr = Reader::new(tt, &path, r.problems());
            let connect = tr
                .get("connect")
                .is_some()
                .then(|| tr.duration("connect", Duration::ZERO));
            let server = tr
                .get("server")
                .is_some()
                .then(|| tr.duration("server", Duration::ZERO));
            tr.finish();
            ServiceTimeouts { connect, server }
        }
    };
    let versions = match sub_table(&mut r, "versions") {
        None => VersionsConfig::default(),
        Some(vt) => {
            let path = format!("{}versions", prefix(at));
            let mut vr = Reader::new(vt, &path, r.problems());
            let v = read_versions(&mut vr);
            vr.finish();
            v
        }
    };
    let backends = read_backends(&mut r, at);
    r.finish();
    (problems.len() == before).then_some(ServiceConfig {
        name,
        hosts,
        paths,
        listen,
        mode,
        sticky_cookie,
        sticky,
        queue_timeout,
        health,
        timeouts,
        backends,
        versions,
    })
}

/// `[versions]`: `rule` ("major.minor", "major", "explicit"), `prefer` ("newer",
/// "older"), `canary` ("5%").
fn read_versions(r: &mut Reader) -> VersionsConfig {
    let mut v = VersionsConfig::default();
    if let Some(rule) = r.str_value("rule") {
        v.rule = match rule.as_str() {
            "major.minor" => Rule::MajorMinor,
            "major" => Rule::Major,
            "explicit" => Rule::Explicit,
            _ => {
                r.problem(
                    "rule",
                    format!("{rule:?}: use \"major.minor\", \"major\" or \"explicit\""),
                );
                Rule::MajorMinor
            }
        };
    }
    if let Some(p) = r.str_value("prefer") {
        v.prefer = match p.as_str() {
            "newer" => Prefer::Newer,
            "older" => Prefer::Older,
            "any" => Prefer::Any,
            _ => {
                r.problem(
                    "prefer",
                    format!("{p:?}: use \"newer\", \"older\" or \"any\""),
                );
                Prefer::Any
            }
        };
    }
    if let Some(c) = r.str_value("canary") {
        match parse_share(&c) {
            Some(pm) => v.canary_per_mille = pm,
            None => r.problem(
                "canary",
                format!("{c:?}: a share such as \"5%\" or \"0.5%\" (0-100%)"),
            ),
        }
    }
    v
}

/// `"5%"`, `"0.5%"` as per mille.
pub fn parse_share(text: &str) -> Option<u32> {
    let n = text.trim().strip_suffix('%')?.trim();
    let x: f64 = n.parse().ok()?;
    (x.is_finite() && (0.0..=100.0).contains(&x)).then(|| (x * 10.0).round() as u32)
}

fn prefix(at: &str) -> String {
    if at.is_empty() {
        String::new()
    } else {
        format!("{at}.")
    }
}

fn sub_table<'a>(r: &mut Reader<'a>, key: &'static str) -> Option<&'a toml::Table> {
    match r.get(key)? {
        toml::Value::Table(t) => Some(t),
        other => {
            let t = other.type_str();
            r.problem(key, format!("expected a table, found {t}"));
            None
        }
    }
}

/// A list of strings (a lone string is a list of one).
fn strings(r: &mut Reader, key: &'static str) -> Vec<String> {
    match r.get(key) {
        None => Vec::new(),
        Some(toml::Value::String(s)) => vec![s.clone()],
        Some(toml::Value::Array(items)) => {
            let mut out = Vec::new();
            for (i, v) in items.iter().enumerate() {
                match v {
                    toml::Value::String(s) => out.push(s.clone()),
                    other => {
                        let t = other.type_str();
                        r.problem(
                            &format!("{key}[{i}]"),
                            format!("expected a string, found {t}"),
                        );
                    }
                }
            }
            out
        }
        Some(other) => {
            let t = other.type_str();
            r.problem(key, format!("expected a list of strings, found {t}"));
            Vec::new()
        }
    }
}

fn read_backends(r: &mut Reader, at: &str) -> Vec<ServiceBackend> {
    let items = match r.get("backends") {
        None => return Vec::new(),
        Some(toml::Value::Array(items)) => items,
        Some(other) => {
            let t = other.type_str();
            r.problem(
                "backends",
                format!("expected a list of backends, found {t}"),
            );
            return Vec::new();
        }
    };
    let mut out: Vec<ServiceBackend> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("{}backends[{i}]", prefix(at));
        let Some(t) = item.as_table() else {
            r.problem(&format!("backends[{i}]"), "expected a table (name, addr)");
            continue;
        };
        let mut br = Reader::new(t, &path, r.problems());
        let name = br.required_string("name");
        if let Some(n) = &name {
            if !is_backend_name(n) {
                br.problem("name", format!("{n:?}: letters, digits, '-', '_' and '.'"));
            } else if !seen.insert(n.clone()) {
                br.problem("name", format!("duplicate backend name {n:?}"));
            }
        }
        let addr = br
            .required_string("addr")
            .and_then(|a| match a.parse::<Addr>() {
                Ok(a) => Some(a),
                Err(e) => {
                    br.problem("addr", e);
                    None
                }
            });
        let backup = br.bool("backup", false);
        let max_connections = br
            .get("max_connections")
            .is_some()
            .then(|| br.uint("max_connections", 1, 1, 1_000_000) as u32);
        let version = br.str_value("version");
        if let Some(Err(e)) = version.as_deref().map(Version::parse) {
            br.problem("version", e);
        }
        let compatible = strings(&mut br, "compatible");
        for c in &compatible {
            if let Err(e) = Version::parse(c) {
                br.problem("compatible", e);
            }
        }
        let send_proxy = read_send_proxy(&mut br);
        br.finish();
        if let (Some(name), Some(addr)) = (name, addr) {
            out.push(ServiceBackend {
                name,
                addr,
                backup,
                max_connections,
                version,
                compatible,
                send_proxy,
            });
        }
    }
    out
}

/// Which format a watched file is in, by its extension; `None`: not a service file
/// (ignored: editors' and consul-template's temporary files have other names).
pub fn service_file_format(path: &Path) -> Option<FileFormat> {
    match path.extension()?.to_str()? {
        "yml" | "yaml" => Some(FileFormat::Yaml),
        "toml" => Some(FileFormat::Toml),
        _ => None,
    }
}

/// The formats of a watched service file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    Yaml,
    Toml,
}

/// Read one service from a watched file's text. Every problem is returned, each with
/// the key it is about (the caller names the file).
pub fn parse_service_file(format: FileFormat, text: &str) -> Result<ServiceConfig, ConfigErrors> {
    let problem = |message: String| {
        ConfigErrors(vec![Problem {
            path: "file".into(),
            message,
        }])
    };
    let table: toml::Table = match format {
        FileFormat::Toml => super::reader::parse(text)?,
        FileFormat::Yaml => {
            if text.trim().is_empty() {
                return Err(problem("empty".into()));
            }
            match serde_saphyr::from_str::<toml::Value>(text) {
                Ok(toml::Value::Table(t)) => t,
                Ok(other) => {
                    return Err(problem(format!(
                        "expected a mapping of a service's keys, found {}",
                        other.type_str()
                    )))
                }
                Err(e) => return Err(problem(format!("not valid YAML: {e}"))),
            }
        }
    };
    let mut problems = Vec::new();
    match read_service(&table, "", &mut problems) {
        Some(s) if problems.is_empty() => Ok(s),
        _ => Err(ConfigErrors(problems)),
    }
}

#[cfg(test)]
mod tests;
