//! The TOML file: its syntax, then each section and key read into a [`Config`], every
//! bad value and unknown key listed with its path.

use std::path::PathBuf;

use super::problem::Problem;
use super::reader::Reader;
use super::schema::{BackendConfig, Config, Limits, ScalerConfig, StickyConfig, Timeouts};
use super::schema::{Carrier, HealthConfig, TlsConfig};
use super::service::read_service;
use super::tcp_keys::{read_mode, read_send_proxy, read_tcp};
use crate::gear::{is_backend_name, Addr};

const SECTIONS: &[&str] = &[
    "runtime",
    "listen",
    "control",
    "state",
    "backends",
    "timeouts",
    "limits",
    "proxy",
    "log",
    "health",
    "sticky",
    "cluster",
    "subset",
    "rotate",
    "scaler",
    "local_gear",
    "tls",
    "services",
    "discovery",
    "upstream",
    "tcp",
    "idler",
    "routing_spi",
];

pub(super) fn read_file(table: &toml::Table, cfg: &mut Config, problems: &mut Vec<Problem>) {
    for key in table.keys() {
        if !SECTIONS.contains(&key.as_str()) {
            problems.push(Problem {
                path: key.clone(),
                message: format!("unknown section or key (known: {})", SECTIONS.join(", ")),
            });
        }
    }
    let empty = toml::Table::new();
    let section = |name: &str, problems: &mut Vec<Problem>| -> toml::Table {
        match table.get(name) {
            None => empty.clone(),
            Some(toml::Value::Table(t)) => t.clone(),
            Some(other) => {
                problems.push(Problem {
                    path: name.into(),
                    message: format!("expected a table [{name}], found {}", other.type_str()),
                });
                empty.clone()
            }
        }
    };

    let t = section("runtime", problems);
    let mut r = Reader::new(&t, "runtime", problems);
    cfg.runtime.threads = r.uint("threads", cfg.runtime.threads as u64, 0, 1024) as usize;
    r.finish();

    let t = section("listen", problems);
    let mut r = Reader::new(&t, "listen", problems);
    cfg.listen.proxy = r.socket_addr("proxy", cfg.listen.proxy);
    cfg.listen.status = r.socket_addr("status", cfg.listen.status);
    cfg.listen.tls = r.str_value("tls").and_then(|s| match s.parse() {
        Ok(a) => Some(a),
        Err(_) => {
            r.problem("tls", format!("{s:?} is not an ip:port address"));
            None
        }
    });
    cfg.listen.mode = read_mode(&mut r, "mode", cfg.listen.mode);
    r.finish();

    let t = section("tcp", problems);
    let mut r = Reader::new(&t, "tcp", problems);
    read_tcp(&mut r, &mut cfg.tcp);
    r.finish();

    let t = section("idler", problems);
    let mut r = Reader::new(&t, "idler", problems);
    match r.get("keep_seen") {
        None => {}
        Some(toml::Value::Boolean(b)) => cfg.idler.keep_seen = Some(*b),
        Some(other) => {
            let t = other.type_str();
            r.problem("keep_seen", format!("expected true or false, found {t}"));
        }
    }
    cfg.idler.interval = r.duration("interval", cfg.idler.interval);
    cfg.idler.timeout = r.duration("timeout", cfg.idler.timeout);
    let port = r.uint("frontend_port", cfg.idler.frontend_port.into(), 1, 65_535);
    cfg.idler.frontend_port = port as u16;
    r.finish();

    let t = section("tls", problems);
    let mut r = Reader::new(&t, "tls", problems);
    let path = |r: &mut Reader, key: &'static str| match r.str_value(key) {
        Some(s) if s.is_empty() => {
            r.problem(key, "must not be empty");
            None
        }
        other => other.map(PathBuf::from),
    };
    cfg.tls = TlsConfig {
        cert: path(&mut r, "cert"),
        key: path(&mut r, "key"),
        dir: path(&mut r, "dir"),
    };
    r.finish();

    let t = section("control", problems);
    let mut r = Reader::new(&t, "control", problems);
    cfg.control.socket = r.path("socket", &cfg.control.socket);
    cfg.control.stats_socket = match r.str_value("stats_socket") {
        Some(s) if s.is_empty() => {
            r.problem("stats_socket", "must not be empty");
            cfg.control.stats_socket.clone()
        }
        Some(s) => Some(PathBuf::from(s)),
        None => cfg.control.stats_socket.clone(),
    };
    r.finish();

    let t = section("state", problems);
    let mut r = Reader::new(&t, "state", problems);
    cfg.state.dir = r.path("dir", &cfg.state.dir);
    r.finish();

    let t = section("timeouts", problems);
    let mut r = Reader::new(&t, "timeouts", problems);
    let d = cfg.timeouts.clone();
    cfg.timeouts = Timeouts {
        connect: r.duration("connect", d.connect),
        client: r.duration("client", d.client),
        server: r.duration("server", d.server),
        tunnel: r.duration("tunnel", d.tunnel),
        request_header: r.duration("request_header", d.request_header),
        upstream_idle: r.duration("upstream_idle", d.upstream_idle),
        shutdown_grace: r.duration("shutdown_grace", d.shutdown_grace),
    };
    r.finish();

    let t = section("limits", problems);
    let mut r = Reader::new(&t, "limits", problems);
    let l = cfg.limits.clone();
    cfg.limits = Limits {
        max_connections: r.uint("max_connections", l.max_connections as u64, 1, 1_000_000) as usize,
        max_header_size: r.uint("max_header_size", l.max_header_size as u64, 8192, 1 << 20)
            as usize,
        max_idle_per_backend: r.uint(
            "max_idle_per_backend",
            l.max_idle_per_backend as u64,
            0,
            65_536,
        ) as usize,
    };
    r.finish();

    let t = section("proxy", problems);
    let mut r = Reader::new(&t, "proxy", problems);
    match r.get("trust_forwarded") {
        None => {}
        Some(toml::Value::Boolean(b)) => {
            cfg.proxy.trust_forwarded = Some(super::trust::FrontTrust {
                everyone: *b,
                ..Default::default()
            })
        }
        Some(toml::Value::Array(items)) => {
            let mut ranges = Vec::new();
            for item in items {
                match item.as_str().map(str::parse::<super::tcp::Cidr>) {
                    Some(Ok(c)) => ranges.push(c),
                    Some(Err(e)) => r.problem("trust_forwarded", e),
                    None => r.problem(
                        "trust_forwarded",
                        format!("expected address strings, found {}", item.type_str()),
                    ),
                }
            }
            cfg.proxy.trust_forwarded = Some(super::trust::FrontTrust {
                ranges,
                ..Default::default()
            });
        }
        Some(other) => {
            let t = other.type_str();
            r.problem(
                "trust_forwarded",
                format!("expected true, false or a list of addresses and ranges, found {t}"),
            );
        }
    }
    cfg.proxy.forwarded_headers =
        r.forwarded_headers("forwarded_headers", cfg.proxy.forwarded_headers);
    cfg.proxy.h2c = r.bool("h2c", cfg.proxy.h2c);
    cfg.proxy.retries = r.uint("retries", cfg.proxy.retries as u64, 0, 16) as u32;
    cfg.proxy.connection_affinity = r.uint(
        "connection_affinity",
        cfg.proxy.connection_affinity as u64,
        0,
        1_000_000,
    ) as u32;
    cfg.proxy.h2_max_concurrent_streams = r.uint(
        "h2_max_concurrent_streams",
        cfg.proxy.h2_max_concurrent_streams as u64,
        1,
        10_000,
    ) as u32;
    cfg.proxy.dns_ttl = r.duration("dns_ttl", cfg.proxy.dns_ttl);
    r.finish();

    let t = section("log", problems);
    let mut r = Reader::new(&t, "log", problems);
    cfg.log.requests = r.bool("requests", cfg.log.requests);
    r.finish();

    let t = section("health", problems);
    let mut r = Reader::new(&t, "health", problems);
    let h = cfg.health.clone();
    cfg.health = HealthConfig {
        enabled: r.bool("enabled", h.enabled),
        uri: r.string("uri", &h.uri),
        expect: r.string("expect", &h.expect),
        interval: r.duration("interval", h.interval),
        timeout: r.duration("timeout", h.timeout),
        fall: r.uint("fall", h.fall as u64, 1, 100) as u32,
        rise: r.uint("rise", h.rise as u64, 1, 100) as u32,
    };
    r.finish();

    let t = section("sticky", problems);
    let mut r = Reader::new(&t, "sticky", problems);
    let st = cfg.sticky.clone();
    cfg.sticky = StickyConfig {
        enabled: r.bool("enabled", st.enabled),
        cookie: r.string("cookie", &st.cookie),
        seal: r.bool("seal", st.seal),
        max_age: r.duration("max_age", st.max_age),
    };
    r.finish();

    let t = section("cluster", problems);
    let mut r = Reader::new(&t, "cluster", problems);
    cfg.cluster.secret = r.str_value("secret");
    cfg.cluster.listen = r.str_value("listen").and_then(|s| match s.parse() {
        Ok(a) => Some(a),
        Err(_) => {
            r.problem("listen", format!("{s:?} is not an ip:port address"));
            None
        }
    });
    cfg.cluster.advertise = r.str_value("advertise").and_then(|s| match s.parse() {
        Ok(a) => Some(a),
        Err(_) => {
            r.problem("advertise", format!("{s:?} is not an ip:port address"));
            None
        }
    });
    cfg.cluster.node_id = r.str_value("node_id");
    cfg.cluster.id = r.string("id", &cfg.cluster.id);
    cfg.cluster.gossip_interval = r.duration("gossip_interval", cfg.cluster.gossip_interval);
    if let Some(w) = r.str_value("gossip_wire") {
        match super::wire::GossipWire::parse(&w) {
            Ok(w) => cfg.cluster.gossip_wire = w,
            Err(e) => r.problem("gossip_wire", e),
        }
    }
    if let Some(t) = r.str_value("transport") {
        match t.as_str() {
            "http" if cfg.cluster.listen.is_some() => r.problem(
                "transport",
                "\"http\" carries gossip on listen.proxy: remove cluster.listen, or use \"tcp\" or \"udp\"",
            ),
            "http" => cfg.cluster.transport = Carrier::Http,
            "tcp" | "udp" if cfg.cluster.listen.is_none() => r.problem(
                "transport",
                format!("{t:?} needs cluster.listen (or use \"http\": gossip on listen.proxy)"),
            ),
            "tcp" => cfg.cluster.transport = Carrier::Tcp,
            "udp" => cfg.cluster.transport = Carrier::Udp,
            _ => r.problem(
                "transport",
                format!("{t:?}: use \"http\", \"tcp\" or \"udp\""),
            ),
        }
    }
    match r.get("peers") {
        None => {}
        Some(toml::Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match item.as_str().map(str::parse::<Addr>) {
                    Some(Ok(a)) => cfg.cluster.peers.push(a),
                    Some(Err(e)) => r.problem(&format!("peers[{i}]"), e),
                    None => r.problem(&format!("peers[{i}]"), "expected a \"host:port\" string"),
                }
            }
        }
        Some(other) => {
            let t = other.type_str();
            r.problem(
                "peers",
                format!("expected an array of \"host:port\" strings, found {t}"),
            );
        }
    }
    r.finish();

    let t = section("scaler", problems);
    let mut r = Reader::new(&t, "scaler", problems);
    let sc = cfg.scaler.clone();
    cfg.scaler = ScalerConfig {
        enabled: r.bool("enabled", sc.enabled),
        preferred: r.str_value("preferred").filter(|p| !p.is_empty()),
        broker_url: r.str_value("broker_url"),
        broker_ca: r.str_value("broker_ca").map(PathBuf::from),
        max_sessions_per_gear: r.uint(
            "max_sessions_per_gear",
            sc.max_sessions_per_gear as u64,
            1,
            100_000,
        ) as f64,
        up_threshold: r.uint("up_threshold", sc.up_threshold as u64, 1, 1000) as f64,
        down_checks: r.uint("down_checks", sc.down_checks as u64, 1, 10_000) as u32,
        check_interval: r.duration("check_interval", sc.check_interval),
        flap_protection: r.duration("flap_protection", sc.flap_protection),
        error_backoff: r.duration("error_backoff", sc.error_backoff),
        up_cooldown: r.duration("up_cooldown", sc.up_cooldown),
        average_window: r.duration("average_window", sc.average_window),
        broker_timeout: r.duration("broker_timeout", sc.broker_timeout),
        gear_ratio: match r.get("gear_ratio") {
            None => sc.gear_ratio,
            Some(toml::Value::Integer(i)) if *i >= -1 => *i,
            Some(_) => {
                r.problem("gear_ratio", "expected an integer, -1 (off) or more");
                sc.gear_ratio
            }
        },
    };
    r.finish();

    let t = section("local_gear", problems);
    let mut r = Reader::new(&t, "local_gear", problems);
    if let Some(a) = r.str_value("addr") {
        match a.parse::<Addr>() {
            Ok(a) => cfg.local_gear = Some(a),
            Err(e) => r.problem("addr", e),
        }
    }
    r.finish();

    let t = section("rotate", problems);
    let mut r = Reader::new(&t, "rotate", problems);
    cfg.rotate.timeout = r.duration("timeout", cfg.rotate.timeout);
    r.finish();

    let t = section("subset", problems);
    let mut r = Reader::new(&t, "subset", problems);
    cfg.subset.coverage = r.uint("coverage", cfg.subset.coverage as u64, 1, 100) as u32;
    r.finish();

    match table.get("backends") {
        None => {}
        Some(toml::Value::Array(items)) => {
            // Names as written, whether or not the rest of their entry is good: a
            // duplicate is reported with the other problems, not after they are fixed.
            let mut names = std::collections::HashSet::new();
            for (i, item) in items.iter().enumerate() {
                let path = format!("backends[{i}]");
                let Some(t) = item.as_table() else {
                    problems.push(Problem {
                        path,
                        message: "expected a table with name and addr".into(),
                    });
                    continue;
                };
                let mut r = Reader::new(t, &path, problems);
                let name = r.required_string("name");
                let addr = r.required_string("addr");
                let addr = addr.and_then(|a| match a.parse::<Addr>() {
                    Ok(a) => Some(a),
                    Err(e) => {
                        r.problem("addr", e);
                        None
                    }
                });
                if let Some(n) = &name {
                    if !names.insert(n.clone()) {
                        r.problem("name", format!("duplicate backend name {n:?}"));
                    }
                    if !is_backend_name(n) {
                        r.problem(
                            "name",
                            format!("{n:?}: use 1-128 letters, digits, '-', '_' or '.'"),
                        );
                    }
                }
                let send_proxy = read_send_proxy(&mut r);
                r.finish();
                if let (Some(name), Some(addr)) = (name, addr) {
                    cfg.backends.push(BackendConfig {
                        name,
                        addr,
                        send_proxy,
                    });
                }
            }
        }
        Some(other) => problems.push(Problem {
            path: "backends".into(),
            message: format!(
                "expected an array of tables [[backends]], found {}",
                other.type_str()
            ),
        }),
    }
    read_services(table, cfg, problems);
    read_upstream(table, cfg, problems);
    match table.get("routing_spi") {
        None => {}
        Some(toml::Value::Table(t)) => {
            cfg.routing_spi = super::spi_keys::read_routing_spi(t, problems)
        }
        Some(other) => problems.push(Problem {
            path: "routing_spi".into(),
            message: format!("expected a table [routing_spi], found {}", other.type_str()),
        }),
    }

    let t = section("discovery", problems);
    let mut r = Reader::new(&t, "discovery", problems);
    cfg.discovery.dir = r.str_value("dir").and_then(|d| {
        if d.is_empty() {
            r.problem("dir", "must not be empty");
            None
        } else {
            Some(PathBuf::from(d))
        }
    });
    cfg.discovery.ttl = r.duration("ttl", cfg.discovery.ttl);
    cfg.discovery.token = r.str_value("token");
    if cfg.discovery.token.as_ref().is_some_and(|t| t.len() < 16) {
        r.problem("token", "at least 16 characters");
    }
    match r.get("etcd") {
        None => {}
        Some(toml::Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match item.as_str() {
                    Some(u)
                        if (u.starts_with("http://") || u.starts_with("https://"))
                            && u.parse::<http::Uri>().is_ok() =>
                    {
                        cfg.discovery.etcd.push(u.trim_end_matches('/').to_string())
                    }
                    _ => r.problem(
                        &format!("etcd[{i}]"),
                        "expected an endpoint URL \"http://host:port\"",
                    ),
                }
            }
        }
        Some(other) => {
            let t = other.type_str();
            r.problem(
                "etcd",
                format!("expected a list of endpoint URLs, found {t}"),
            );
        }
    }
    let prefix = r.string("etcd_prefix", &cfg.discovery.etcd_prefix);
    if prefix.starts_with('/') && prefix.ends_with('/') {
        cfg.discovery.etcd_prefix = prefix;
    } else {
        r.problem(
            "etcd_prefix",
            format!("{prefix:?} must start and end with '/'"),
        );
    }
    r.finish();
}

fn read_upstream(table: &toml::Table, cfg: &mut Config, problems: &mut Vec<Problem>) {
    let t = match table.get("upstream") {
        None => return,
        Some(toml::Value::Table(t)) => t.clone(),
        Some(other) => {
            problems.push(Problem {
                path: "upstream".into(),
                message: format!("expected a table [upstream], found {}", other.type_str()),
            });
            return;
        }
    };
    let mut r = Reader::new(&t, "upstream", problems);
    if let Some(v) = r.get("balancers") {
        match v.as_array() {
            Some(items) => {
                for (i, item) in items.iter().enumerate() {
                    match item.as_str() {
                        Some(u)
                            if (u.starts_with("http://") || u.starts_with("https://"))
                                && u.parse::<http::Uri>().is_ok() =>
                        {
                            cfg.upstream
                                .balancers
                                .push(u.trim_end_matches('/').to_string())
                        }
                        _ => r.problem(
                            &format!("balancers[{i}]"),
                            "expected a status listener URL \"http://host:port\"",
                        ),
                    }
                }
            }
            None => r.problem("balancers", "expected a list of URLs"),
        }
    }
    cfg.upstream.token = r.str_value("token");
    cfg.upstream.advertise = r.str_value("advertise");
    if let Some(a) = &cfg.upstream.advertise {
        if a.parse::<crate::gear::Addr>().is_err() {
            r.problem("advertise", format!("{a:?} is not a host:port address"));
        }
    }
    cfg.upstream.ttl = r.duration("ttl", cfg.upstream.ttl);
    if !cfg.upstream.balancers.is_empty() && cfg.upstream.token.is_none() {
        r.problem(
            "token",
            "required with balancers (the upstream's discovery.token)",
        );
    }
    r.finish();
}

fn read_services(table: &toml::Table, cfg: &mut Config, problems: &mut Vec<Problem>) {
    match table.get("services") {
        None => {}
        Some(toml::Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let at = format!("services[{i}]");
                match item.as_table() {
                    Some(t) => cfg.services.extend(read_service(t, &at, problems)),
                    None => problems.push(Problem {
                        path: at,
                        message: "expected a table [[services]]".into(),
                    }),
                }
            }
        }
        Some(other) => problems.push(Problem {
            path: "services".into(),
            message: format!(
                "expected an array of tables [[services]], found {}",
                other.type_str()
            ),
        }),
    }
}
