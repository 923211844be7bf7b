//! The gear environment: where variables come from ([`Env`]), which file to read
//! ([`config_path`]), and the variables of cartridge mode laid over the file's values.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::duration::parse_duration;
use super::problem::Problem;
use super::schema::{Carrier, Config, GearIdentity};
use crate::gear::Addr;

/// Environment variable naming the config file when `--config` is not given.
pub const CONFIG_ENV: &str = "GEARLB_CONFIG";

/// Where environment variables come from; a map in tests, the process otherwise.
pub trait Env: Sync {
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

impl Env for HashMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned().filter(|v| !v.is_empty())
    }
}

/// The config file to use: `--config`, else `$GEARLB_CONFIG`, else none (defaults + env).
pub fn config_path(flag: Option<&Path>, env: &dyn Env) -> Option<PathBuf> {
    flag.map(Path::to_path_buf)
        .or_else(|| env.var(CONFIG_ENV).map(PathBuf::from))
}

/// Gear environment (cartridge mode). Each variable applies only when set.
pub(super) fn apply_env(env: &dyn Env, cfg: &mut Config, problems: &mut Vec<Problem>) {
    if let Some(v) = env.var(super::trust::TRUSTED_FRONTS_ENV) {
        match super::trust::parse_fronts(&v) {
            Ok(r) => cfg.proxy.gear_fronts = r,
            Err(e) => problems.push(Problem {
                path: format!("env {}", super::trust::TRUSTED_FRONTS_ENV),
                message: e,
            }),
        }
    }
    // A router's secrets may stay out of its file.
    if let Some(spi) = cfg.routing_spi.as_mut() {
        if let Some(p) = env.var(super::routing_spi::PASSWORD_ENV) {
            spi.password = Some(p);
        }
        if let Some(p) = env.var(super::routing_spi::REST_PASSWORD_ENV) {
            spi.rest_password = Some(p);
        }
    }
    let mut listen = |ip_var: &str, port_var: &str, target: &mut SocketAddr| match (
        env.var(ip_var),
        env.var(port_var),
    ) {
        (None, None) => {}
        (Some(ip), Some(port)) => {
            let ip_ok = ip.parse::<std::net::IpAddr>();
            let port_ok = port.parse::<u16>();
            match (ip_ok, port_ok) {
                (Ok(ip), Ok(port)) => *target = SocketAddr::new(ip, port),
                (Err(_), _) => problems.push(Problem {
                    path: format!("env {ip_var}"),
                    message: format!("{ip:?} is not an IP address"),
                }),
                (_, Err(_)) => problems.push(Problem {
                    path: format!("env {port_var}"),
                    message: format!("{port:?} is not a port number"),
                }),
            }
        }
        (ip, _) => problems.push(Problem {
            path: format!("env {}", if ip.is_none() { ip_var } else { port_var }),
            message: format!("{ip_var} and {port_var} must be set together"),
        }),
    };
    listen(
        "OPENSHIFT_GEARLB_IP",
        "OPENSHIFT_GEARLB_PORT",
        &mut cfg.listen.proxy,
    );
    listen(
        "OPENSHIFT_GEARLB_STATUS_IP",
        "OPENSHIFT_GEARLB_STATUS_PORT",
        &mut cfg.listen.status,
    );
    if let Some(dir) = env.var("OPENSHIFT_DATA_DIR") {
        cfg.state.dir = Path::new(&dir).join("gearlb");
    }
    if let Some(dir) = env.var("OPENSHIFT_GEARLB_DIR") {
        cfg.control.socket = Path::new(&dir).join("run").join("control.sock");
        cfg.control.stats_socket = Some(Path::new(&dir).join("run").join("stats"));
    }
    let first = |names: &[&str]| names.iter().find_map(|n| env.var(n));
    if let Some(uri) = first(&[
        "OPENSHIFT_GEARLB_HTTPCHK_URI",
        "OPENSHIFT_HAPROXY_HTTPCHK_URI",
        "HAPROXY_CARTRIDGE_HTTPCHK_URI",
    ]) {
        cfg.health.uri = uri;
    }
    if let Some(expect) = first(&[
        "OPENSHIFT_GEARLB_HTTPCHK_EXPECT_RSTATUS",
        "OPENSHIFT_HAPROXY_HTTPCHK_EXPECT_RSTATUS",
        "HAPROXY_CARTRIDGE_HTTPCHK_EXPECT_RSTATUS",
    ]) {
        cfg.health.expect = expect;
    }
    if let Some(secret) = env.var("OPENSHIFT_SECRET_TOKEN") {
        cfg.cluster.secret = Some(secret);
    }
    if let Some(uuid) = env.var("OPENSHIFT_GEAR_UUID") {
        cfg.cluster.node_id = Some(uuid);
        // A gear: the HTTP port is the only public one, and gossip rides it (unless the
        // file opened a gossip port of its own).
        if env.var("OPENSHIFT_GEARLB_PORT").is_some() && cfg.cluster.listen.is_none() {
            cfg.cluster.transport = Carrier::Http;
        }
    }
    // Set by `gearlb cartridge control start`: the node's public IP and the port proxy's
    // public port of the HTTP endpoint.
    if let Some(a) = env.var("GEARLB_GOSSIP_ADVERTISE") {
        match a.parse() {
            Ok(a) => cfg.cluster.advertise = Some(a),
            Err(_) => problems.push(Problem {
                path: "env GEARLB_GOSSIP_ADVERTISE".into(),
                message: format!("{a:?} is not an ip:port address"),
            }),
        }
    }
    // An operator's choice for the gear (`rhc env set GEARLB_GOSSIP_WIRE=v2`).
    if let Some(w) = env.var("GEARLB_GOSSIP_WIRE") {
        match super::wire::GossipWire::parse(w.trim()) {
            Ok(w) => cfg.cluster.gossip_wire = w,
            Err(message) => problems.push(Problem {
                path: "env GEARLB_GOSSIP_WIRE".into(),
                message,
            }),
        }
    }
    if let Some(app) = env.var("OPENSHIFT_APP_UUID") {
        cfg.cluster.id = app;
    }
    if let Some(t) = env.var("OPENSHIFT_GEARLB_ROTATE_TIMEOUT") {
        match parse_duration(&t) {
            Ok(d) => cfg.rotate.timeout = d,
            Err(message) => problems.push(Problem {
                path: "env OPENSHIFT_GEARLB_ROTATE_TIMEOUT".into(),
                message,
            }),
        }
    }
    if let Some(a) = env.var("GEARLB_LOCAL_GEAR") {
        match a.parse::<Addr>() {
            Ok(a) => cfg.local_gear = Some(a),
            Err(e) => problems.push(Problem {
                path: "env GEARLB_LOCAL_GEAR".into(),
                message: e,
            }),
        }
    }
    if let Some(r) = first(&[
        "OPENSHIFT_GEARLB_GEAR_RATIO",
        "OPENSHIFT_HAPROXY_GEAR_RATIO",
    ]) {
        match r.trim().parse::<i64>() {
            Ok(v) if v >= -1 => cfg.scaler.gear_ratio = v,
            _ => problems.push(Problem {
                path: "env OPENSHIFT_GEARLB_GEAR_RATIO".into(),
                message: format!("{r:?}: an integer, -1 (off) or more"),
            }),
        }
    }
    if let Some(p) = env.var("OPENSHIFT_GEARLB_SCALER_GEAR") {
        cfg.scaler.preferred = Some(p);
    }
    if let Some(host) = env.var("OPENSHIFT_BROKER_HOST") {
        cfg.scaler.broker_url = Some(if host.contains("://") {
            host
        } else {
            format!("https://{host}")
        });
    }
    if let Some(m) = env.var("OPENSHIFT_MAX_SESSIONS_PER_GEAR") {
        match m.parse::<f64>() {
            Ok(v) if v >= 1.0 && v.is_finite() => cfg.scaler.max_sessions_per_gear = v,
            _ => problems.push(Problem {
                path: "env OPENSHIFT_MAX_SESSIONS_PER_GEAR".into(),
                message: format!("{m:?} is not a number of sessions (1 or more)"),
            }),
        }
    }
    if let Some(c) = env.var("OPENSHIFT_GEARLB_COVERAGE") {
        match c.trim_end_matches('%').parse::<u32>() {
            Ok(v) if (1..=100).contains(&v) => cfg.subset.coverage = v,
            _ => problems.push(Problem {
                path: "env OPENSHIFT_GEARLB_COVERAGE".into(),
                message: format!("{c:?} is not a percentage from 1 to 100"),
            }),
        }
    }
    // The node writes `.env/SSL_TO_GEAR` (`1`, no newline) when the web cartridge's
    // endpoint has `ssl_to_gear`: TLS then goes through to the gears, which hold the
    // certificates, as the old cartridge's `mode tcp` + `option ssl-hello-chk` did.
    // Only in a gear, and only on exactly `1` (after trimming), as its template read it.
    if env.var("OPENSHIFT_GEARLB_PORT").is_some()
        && env.var("SSL_TO_GEAR").is_some_and(|v| v.trim() == "1")
    {
        cfg.listen.mode = super::tcp::Mode::Tcp;
        cfg.tcp.check = super::tcp::TcpCheck::TlsHello;
    }
    if let Some(v) = env.var("OPENSHIFT_GEARLB_IDLER_KEEP_SEEN") {
        match v.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => cfg.idler.keep_seen = Some(true),
            "0" | "false" | "no" | "off" => cfg.idler.keep_seen = Some(false),
            _ => problems.push(Problem {
                path: "env OPENSHIFT_GEARLB_IDLER_KEEP_SEEN".into(),
                message: format!("{v:?}: use true or false (also 1/0, yes/no, on/off)"),
            }),
        }
    }
    if let Some(t) = env.var("OPENSHIFT_GEARLB_IDLER_INTERVAL") {
        match parse_duration(&t) {
            Ok(d) => cfg.idler.interval = d,
            Err(message) => problems.push(Problem {
                path: "env OPENSHIFT_GEARLB_IDLER_INTERVAL".into(),
                message,
            }),
        }
    }
    cfg.gear = GearIdentity {
        app_uuid: env.var("OPENSHIFT_APP_UUID"),
        app_name: env.var("OPENSHIFT_APP_NAME"),
        app_dns: env.var("OPENSHIFT_APP_DNS"),
        homedir: env.var("OPENSHIFT_HOMEDIR").map(PathBuf::from),
        repo_dir: env.var("OPENSHIFT_REPO_DIR").map(PathBuf::from),
        uuid: env.var("OPENSHIFT_GEAR_UUID"),
        name: env.var("OPENSHIFT_GEAR_NAME"),
        namespace: env.var("OPENSHIFT_NAMESPACE"),
        dns: env.var("OPENSHIFT_GEAR_DNS"),
    };
}
