//! Configuration: built-in defaults < TOML file < gear environment, into one validated
//! [`Config`].
//!
//! Owns every configuration key, its default and its validation. Loading never stops at
//! the first problem: it walks the whole file and environment and returns every
//! [`Problem`] with the key path (`timeouts.connect`, `backends[2].addr`,
//! `env OPENSHIFT_GEARLB_PORT`), so `gearlb check` can list them all at once. Unknown keys
//! are problems too: a typo must not silently fall back to a default.
//!
//! Relative paths (`control.socket`, `state.dir`) are relative to the working directory
//! of the process, which is what the cartridge's `bin/control` sets.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::gear::{is_backend_name, Addr};

/// Exit code for configuration and usage errors (sysexits `EX_USAGE`).
pub const EXIT_CONFIG: i32 = 64;

/// Environment variable naming the config file when `--config` is not given.
pub const CONFIG_ENV: &str = "GEARLB_CONFIG";

/// One thing wrong with the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Where: a key path such as `timeouts.connect`, or `env NAME`.
    pub path: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found while loading; never empty.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{} configuration problem(s):\n{}", .0.len(), .0.iter().map(|p| format!("  {p}")).collect::<Vec<_>>().join("\n"))]
pub struct ConfigErrors(pub Vec<Problem>);

/// The validated configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The file it came from, if any (re-read on SIGHUP / `reload`).
    pub file: Option<PathBuf>,
    pub runtime: RuntimeConfig,
    pub listen: ListenConfig,
    pub control: ControlConfig,
    pub state: StateConfig,
    /// `[[backends]]`: the static backend set (standalone use).
    pub backends: Vec<BackendConfig>,
    pub timeouts: Timeouts,
    pub limits: Limits,
    pub proxy: ProxyConfig,
    pub log: LogConfig,
    pub health: HealthConfig,
    pub sticky: StickyConfig,
    pub cluster: ClusterConfig,
    pub subset: SubsetConfig,
    pub rotate: RotateConfig,
    pub scaler: ScalerConfig,
    /// The web server in this balancer's own gear (`local-gear`). Env `GEARLB_LOCAL_GEAR`
    /// (set by the cartridge's `bin/control` from `OPENSHIFT_<PRIMARY>_IP/_PORT`).
    pub local_gear: Option<Addr>,
    /// Certificates of the HTTPS listener (`listen.tls`).
    pub tls: TlsConfig,
    /// Identity of this gear, from the platform's environment (cartridge mode).
    pub gear: GearIdentity,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Worker threads for the proxy; 0 = one per CPU. Default 0.
    pub threads: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenConfig {
    /// Client traffic. Default `127.0.0.1:8080`.
    pub proxy: SocketAddr,
    /// Status and health listener (never serves application traffic). Default `127.0.0.1:8081`.
    pub status: SocketAddr,
    /// Optional HTTPS listener for client traffic (certificates in `[tls]`). Default none.
    pub tls: Option<SocketAddr>,
}

/// Certificates of the HTTPS listener (see `crate::tls`); files are read by `gearlb
/// check`, at start and on reload, not by config loading.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM certificate chain of the default certificate.
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    pub key: Option<PathBuf>,
    /// Directory of `<name>.pem` + `<name>.key` pairs chosen by SNI name.
    pub dir: Option<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlConfig {
    /// Unix socket of the control API, created mode 0600. Default `run/control.sock`.
    pub socket: PathBuf,
    /// HAProxy-compatible stats socket (`crate::status::socket`), created mode 0600.
    /// Default (`None`): `stats` next to `socket`, e.g. `run/stats`.
    pub stats_socket: Option<PathBuf>,
}

impl ControlConfig {
    /// Where the stats socket is: `stats_socket`, else `stats` in the control socket's
    /// directory.
    pub fn stats_socket_path(&self) -> PathBuf {
        match &self.stats_socket {
            Some(p) => p.clone(),
            None => match self.socket.parent() {
                Some(dir) => dir.join("stats"),
                None => PathBuf::from("stats"),
            },
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateConfig {
    /// Directory for the persisted state file. Default `data`.
    pub dir: PathBuf,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendConfig {
    pub name: String,
    pub addr: Addr,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP connect to a backend. Default 10s.
    pub connect: Duration,
    /// Client inactivity (HAProxy's `timeout client`): no byte from or to the client
    /// while the balancer waits on it (its request body, or taking the response; an
    /// HTTP/2 stream's own). Default 1m.
    pub client: Duration,
    /// Backend inactivity (HAProxy's `timeout server`): no byte taken while the request
    /// body waits on the backend, no response head this long after the request was
    /// sent, no byte of the response body while the client waits for it. Default 1m.
    pub server: Duration,
    /// Idle time of an upgraded connection (WebSocket). Default 1h.
    pub tunnel: Duration,
    /// Time for a client to send a complete request head. Default 10s.
    pub request_header: Duration,
    /// How long an idle pooled backend connection is kept. Default 4s, under the 5s
    /// keep-alive of Apache httpd, which serves most web gears.
    pub upstream_idle: Duration,
    /// Longest graceful stop on SIGTERM before remaining connections are cut. Default 30s.
    pub shutdown_grace: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Concurrent client connections; more are closed at once. Default 10000.
    pub max_connections: usize,
    /// Largest request head in bytes (request line + headers); more gets 431.
    /// Default 32768; at least 8192.
    pub max_header_size: usize,
    /// Idle pooled connections kept per backend. Default 256.
    pub max_idle_per_backend: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyConfig {
    /// Keep `X-Forwarded-Proto/-Host/-Port` and `Forwarded` set by the router or node
    /// proxy in front of the gear, instead of replacing them. Default true: in a gear the
    /// only client is the node's proxy.
    pub trust_forwarded: bool,
    /// The forwarding headers the balancer sets on requests to the backends
    /// (`forwarded_headers`). Default `X-Forwarded-For` and `X-Forwarded-Proto`.
    pub forwarded_headers: ForwardedHeaders,
    /// Accept HTTP/2 cleartext (h2c prior knowledge) from clients. Default true.
    pub h2c: bool,
    /// Further backends tried when one cannot be reached (every request), or fails
    /// before answering an idempotent request without a body. Default 3.
    pub retries: u32,
    /// Requests in a row a client connection may send to the gear that took its previous
    /// request, while that gear is no busier than the least-loaded choice (warm
    /// connections; HAProxy's `prefer-last-server`, bounded). 0: every request is
    /// chosen afresh. Default 16.
    pub connection_affinity: u32,
    /// Streams an HTTP/2 client connection may have open at once
    /// (`SETTINGS_MAX_CONCURRENT_STREAMS`; HAProxy's `tune.h2.max-concurrent-streams`).
    /// Default 100.
    pub h2_max_concurrent_streams: u32,
    /// How long a backend host name's addresses are used before they are looked up
    /// again, in the background (HAProxy's resolvers `hold valid`); a backend whose
    /// addresses all refuse is looked up again at once. Default 10s.
    pub dns_ttl: Duration,
}

/// Which forwarding headers gearlb sets: `[proxy] forwarded_headers`, a list of header
/// names. The default sets the two only the balancer knows: the address it was connected
/// from (`X-Forwarded-For`, appended to) and the scheme it was spoken to with
/// (`X-Forwarded-Proto`). `X-Forwarded-Host` (a copy of `Host`, which is forwarded
/// unchanged), `X-Forwarded-Port` (the gear's own listener port, not the public one) and
/// RFC 7239 `Forwarded` are set only when listed. `[]` sets none, as the old cartridge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardedHeaders {
    pub x_forwarded_for: bool,
    pub x_forwarded_proto: bool,
    pub x_forwarded_host: bool,
    pub x_forwarded_port: bool,
    pub forwarded: bool,
}

impl ForwardedHeaders {
    /// The names `forwarded_headers` accepts, in the order the docs give them.
    pub const NAMES: [&'static str; 5] = [
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-forwarded-host",
        "x-forwarded-port",
        "forwarded",
    ];

    /// None set.
    pub const NONE: ForwardedHeaders = ForwardedHeaders {
        x_forwarded_for: false,
        x_forwarded_proto: false,
        x_forwarded_host: false,
        x_forwarded_port: false,
        forwarded: false,
    };

    /// Every one of them.
    pub const ALL: ForwardedHeaders = ForwardedHeaders {
        x_forwarded_for: true,
        x_forwarded_proto: true,
        x_forwarded_host: true,
        x_forwarded_port: true,
        forwarded: true,
    };

    /// Adds the header `name` (any case) to the set; false if it is not one of [`NAMES`](Self::NAMES).
    pub fn add(&mut self, name: &str) -> bool {
        let flag = match name.to_ascii_lowercase().as_str() {
            "x-forwarded-for" => &mut self.x_forwarded_for,
            "x-forwarded-proto" => &mut self.x_forwarded_proto,
            "x-forwarded-host" => &mut self.x_forwarded_host,
            "x-forwarded-port" => &mut self.x_forwarded_port,
            "forwarded" => &mut self.forwarded,
            _ => return false,
        };
        *flag = true;
        true
    }
}

impl Default for ForwardedHeaders {
    fn default() -> Self {
        ForwardedHeaders {
            x_forwarded_for: true,
            x_forwarded_proto: true,
            ..ForwardedHeaders::NONE
        }
    }
}

/// Logging (`[log]`); the format is chosen on the command line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogConfig {
    /// One info line per request: method, path, status, backend, ms, client. Default false.
    pub requests: bool,
    /// Set by `gearlb run --log-requests`: request lines whatever the file says; not read
    /// from the file and kept across reloads.
    pub requests_forced: bool,
}

/// Active health checks (and passive ejection on real traffic).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthConfig {
    /// Check and eject at all. Default true.
    pub enabled: bool,
    /// Path requested. Default `/`. Env `OPENSHIFT_GEARLB_HTTPCHK_URI` (aliases
    /// `OPENSHIFT_HAPROXY_HTTPCHK_URI`, `HAPROXY_CARTRIDGE_HTTPCHK_URI`).
    pub uri: String,
    /// Regular expression a healthy status code matches (HAProxy `rstatus`).
    /// Default `2..|3..|401`. Env `OPENSHIFT_GEARLB_HTTPCHK_EXPECT_RSTATUS` (aliases as above).
    pub expect: String,
    /// Time between checks of one backend. Default 2s.
    pub interval: Duration,
    /// Time a check may take. Default 2s.
    pub timeout: Duration,
    /// Consecutive failures that mark a backend down. Default 2.
    pub fall: u32,
    /// Consecutive successful checks that bring it back. Default 3.
    pub rise: u32,
}

/// The sticky-session cookie.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StickyConfig {
    /// Insert and honour the cookie. Default true.
    pub enabled: bool,
    /// Cookie name. Default `GEAR`.
    pub cookie: String,
    /// Seal values (AEAD with expiry, key from `cluster.secret`) instead of the plain
    /// `<gearname>-<ns>`. Default false.
    pub seal: bool,
    /// Lifetime of a sealed value. Default 24h.
    pub max_age: Duration,
}

/// The balancers of one application.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Shared secret of the application's balancers. Env `OPENSHIFT_SECRET_TOKEN`.
    pub secret: Option<String>,
    /// A gossip port of its own (`tcp` or `udp` transport); gossip is on when set, or
    /// when `transport` is `http`.
    pub listen: Option<SocketAddr>,
    /// Address peers reach this balancer's gossip at: with `http`, its public HTTP
    /// address (the node's public IP and the port proxy's `OPENSHIFT_GEARLB_PROXY_PORT`
    /// in a gear, env `GEARLB_GOSSIP_ADVERTISE`). Default: the listen address.
    pub advertise: Option<SocketAddr>,
    /// This balancer's id. Env `OPENSHIFT_GEAR_UUID`.
    pub node_id: Option<String>,
    /// The application's id: balancers of other applications are told apart.
    /// Env `OPENSHIFT_APP_UUID`. Default `gearlb`.
    pub id: String,
    /// Gossip addresses of the other balancers (`gearlb ctl set-peers` replaces them).
    pub peers: Vec<Addr>,
    /// `http`: frames on upgraded connections of the proxy port, the one public port of
    /// a gear (the default in cartridge mode); `tcp` (default with `listen`) or `udp`.
    pub transport: crate::cluster::transport::Carrier,
    /// Time between gossip rounds. Default 200ms (a dead peer is noticed in about 2s).
    pub gossip_interval: Duration,
}

impl ClusterConfig {
    /// Gossip runs: on its own port (`listen`) or on the proxy port (`http`).
    pub fn gossip(&self) -> bool {
        self.listen.is_some() || self.transport == crate::cluster::transport::Carrier::Http
    }
}

impl fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("listen", &self.listen)
            .field("advertise", &self.advertise)
            .field("node_id", &self.node_id)
            .field("id", &self.id)
            .field("peers", &self.peers)
            .field("transport", &self.transport)
            .field("gossip_interval", &self.gossip_interval)
            .finish()
    }
}

/// The application's scaler (only the elected balancer acts).
#[derive(Clone, Debug, PartialEq)]
pub struct ScalerConfig {
    /// Make scale decisions at all. Default true (the marker
    /// `.openshift/markers/disable_auto_scaling` also turns them off).
    pub enabled: bool,
    /// Preferred scaler: gear uuid or gear name. Env `OPENSHIFT_GEARLB_SCALER_GEAR`.
    pub preferred: Option<String>,
    /// `https://host[:port]` of the broker. Env `OPENSHIFT_BROKER_HOST` (a host name).
    pub broker_url: Option<String>,
    /// PEM file of a CA to trust for a private broker certificate.
    pub broker_ca: Option<PathBuf>,
    /// Env `OPENSHIFT_MAX_SESSIONS_PER_GEAR`. Default 16.
    pub max_sessions_per_gear: f64,
    /// Scale up at this capacity, percent. Default 90.
    pub up_threshold: f64,
    /// Consecutive low checks before a scale-down. Default 20.
    pub down_checks: u32,
    /// Default 5s.
    pub check_interval: Duration,
    /// No scale-down within this of the last scale-up. Default 10m.
    pub flap_protection: Duration,
    /// No decision for this long after a failed broker call. Default 10m.
    pub error_backoff: Duration,
    /// After a scale-up, no other until a new gear arrives or this passes. Default 2m.
    pub up_cooldown: Duration,
    /// Window of the moving average of requests in flight. Default 50s (as the old
    /// autoscaler's 10 samples every 5 s).
    pub average_window: Duration,
    /// Broker request timeout. Default 600s.
    pub broker_timeout: Duration,
    /// Web gears per balancer from which `local-gear` takes no traffic (once a remote
    /// gear is up); -1 turns it off. Default 3 (values 0-2 count as 3, as before). Env
    /// `OPENSHIFT_GEARLB_GEAR_RATIO` (alias `OPENSHIFT_HAPROXY_GEAR_RATIO`).
    pub gear_ratio: i64,
}

/// Rotate-out and rotate-in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RotateConfig {
    /// Drain deadline of a rotate-out when the command names none. Default 2m.
    /// Env `OPENSHIFT_GEARLB_ROTATE_TIMEOUT` (`"90s"`, `"2m"`, or seconds).
    pub timeout: Duration,
}

/// Coverage-limited subsets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubsetConfig {
    /// Percent of the web gears each balancer talks to (1-100). Default 100.
    /// Env `OPENSHIFT_GEARLB_COVERAGE`.
    pub coverage: u32,
}

/// Who this balancer is, as the node platform tells it through the environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GearIdentity {
    /// `OPENSHIFT_APP_UUID`: also the head gear's uuid.
    pub app_uuid: Option<String>,
    pub app_name: Option<String>,
    pub app_dns: Option<String>,
    /// `OPENSHIFT_HOMEDIR`: the broker key is in `.auth/token` and `.auth/iv` below it.
    pub homedir: Option<PathBuf>,
    /// `OPENSHIFT_REPO_DIR`: `.openshift/markers/disable_auto_scaling` below it.
    pub repo_dir: Option<PathBuf>,
    pub uuid: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub dns: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            file: None,
            runtime: RuntimeConfig { threads: 0 },
            listen: ListenConfig {
                proxy: SocketAddr::from(([127, 0, 0, 1], 8080)),
                status: SocketAddr::from(([127, 0, 0, 1], 8081)),
                tls: None,
            },
            control: ControlConfig {
                socket: PathBuf::from("run/control.sock"),
                stats_socket: None,
            },
            state: StateConfig {
                dir: PathBuf::from("data"),
            },
            backends: Vec::new(),
            timeouts: Timeouts {
                connect: Duration::from_secs(10),
                client: Duration::from_secs(60),
                server: Duration::from_secs(60),
                tunnel: Duration::from_secs(3600),
                request_header: Duration::from_secs(10),
                upstream_idle: Duration::from_secs(4),
                shutdown_grace: Duration::from_secs(30),
            },
            limits: Limits {
                max_connections: 10_000,
                max_header_size: 32 * 1024,
                max_idle_per_backend: 256,
            },
            proxy: ProxyConfig {
                trust_forwarded: true,
                forwarded_headers: ForwardedHeaders::default(),
                h2c: true,
                retries: 3,
                connection_affinity: 16,
                h2_max_concurrent_streams: 100,
                dns_ttl: Duration::from_secs(10),
            },
            log: LogConfig::default(),
            health: HealthConfig {
                enabled: true,
                uri: "/".into(),
                expect: "2..|3..|401".into(),
                interval: Duration::from_secs(2),
                timeout: Duration::from_secs(2),
                fall: 2,
                rise: 3,
            },
            sticky: StickyConfig {
                enabled: true,
                cookie: "GEAR".into(),
                seal: false,
                max_age: Duration::from_secs(24 * 3600),
            },
            cluster: ClusterConfig {
                secret: None,
                listen: None,
                advertise: None,
                node_id: None,
                id: "gearlb".into(),
                peers: Vec::new(),
                transport: crate::cluster::transport::Carrier::Tcp,
                gossip_interval: Duration::from_millis(200),
            },
            subset: SubsetConfig { coverage: 100 },
            rotate: RotateConfig {
                timeout: Duration::from_secs(120),
            },
            scaler: ScalerConfig {
                enabled: true,
                preferred: None,
                broker_url: None,
                broker_ca: None,
                max_sessions_per_gear: 16.0,
                up_threshold: 90.0,
                down_checks: 20,
                check_interval: Duration::from_secs(5),
                flap_protection: Duration::from_secs(600),
                error_backoff: Duration::from_secs(600),
                up_cooldown: Duration::from_secs(120),
                average_window: Duration::from_secs(50),
                broker_timeout: Duration::from_secs(600),
                gear_ratio: 3,
            },
            local_gear: None,
            tls: TlsConfig::default(),
            gear: GearIdentity::default(),
        }
    }
}

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

/// Load and validate: defaults, then the file (if any), then the environment.
pub fn load(file: Option<&Path>, env: &dyn Env) -> Result<Config, ConfigErrors> {
    let text = match file {
        None => None,
        Some(p) => match std::fs::read_to_string(p) {
            Ok(t) => Some(t),
            Err(e) => {
                return Err(ConfigErrors(vec![Problem {
                    path: p.display().to_string(),
                    message: format!("cannot read: {e}"),
                }]))
            }
        },
    };
    let mut cfg = from_toml(text.as_deref().unwrap_or(""), env)?;
    cfg.file = file.map(Path::to_path_buf);
    Ok(cfg)
}

/// Build a config from TOML text and an environment.
pub fn from_toml(text: &str, env: &dyn Env) -> Result<Config, ConfigErrors> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let message = e.message().to_string();
        let path = match e.span() {
            Some(span) => {
                let line = text[..span.start.min(text.len())].lines().count().max(1);
                format!("line {line}")
            }
            None => "file".to_string(),
        };
        ConfigErrors(vec![Problem {
            path,
            message: format!("not valid TOML: {message}"),
        }])
    })?;
    let mut problems = Vec::new();
    let mut cfg = Config::default();
    read_file(&table, &mut cfg, &mut problems);
    apply_env(env, &mut cfg, &mut problems);
    validate(&cfg, &mut problems);
    if problems.is_empty() {
        Ok(cfg)
    } else {
        Err(ConfigErrors(problems))
    }
}

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
];

fn read_file(table: &toml::Table, cfg: &mut Config, problems: &mut Vec<Problem>) {
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
    cfg.proxy.trust_forwarded = r.bool("trust_forwarded", cfg.proxy.trust_forwarded);
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
    if let Some(t) = r.str_value("transport") {
        use crate::cluster::transport::Carrier;
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
                    if !is_backend_name(n) {
                        r.problem(
                            "name",
                            format!("{n:?}: use 1-128 letters, digits, '-', '_' or '.'"),
                        );
                    }
                }
                r.finish();
                if let (Some(name), Some(addr)) = (name, addr) {
                    cfg.backends.push(BackendConfig { name, addr });
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
}

/// Gear environment (cartridge mode). Each variable applies only when set.
fn apply_env(env: &dyn Env, cfg: &mut Config, problems: &mut Vec<Problem>) {
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
            cfg.cluster.transport = crate::cluster::transport::Carrier::Http;
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
    if let Some(app) = env.var("OPENSHIFT_APP_UUID") {
        cfg.cluster.id = app;
    }
    if let Some(t) = env.var("OPENSHIFT_GEARLB_ROTATE_TIMEOUT") {
        match parse_timeout(&t) {
            Some(d) => cfg.rotate.timeout = d,
            None => problems.push(Problem {
                path: "env OPENSHIFT_GEARLB_ROTATE_TIMEOUT".into(),
                message: format!("{t:?} is not a duration like \"2m\" or a number of seconds"),
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

fn validate(cfg: &Config, problems: &mut Vec<Problem>) {
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
    let mut names = HashSet::new();
    for (i, b) in cfg.backends.iter().enumerate() {
        if !names.insert(b.name.as_str()) {
            problems.push(Problem {
                path: format!("backends[{i}].name"),
                message: format!("duplicate backend name {:?}", b.name),
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
        if cfg.cluster.transport == crate::cluster::transport::Carrier::Http
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

/// Reads typed keys out of one TOML table, remembering which keys it was asked for so
/// that [`Reader::finish`] can report the rest as unknown.
struct Reader<'a> {
    table: &'a toml::Table,
    path: String,
    known: Vec<&'static str>,
    problems: &'a mut Vec<Problem>,
}

impl<'a> Reader<'a> {
    fn new(table: &'a toml::Table, path: &str, problems: &'a mut Vec<Problem>) -> Self {
        Reader {
            table,
            path: path.to_string(),
            known: Vec::new(),
            problems,
        }
    }

    fn problem(&mut self, key: &str, message: impl Into<String>) {
        self.problems.push(Problem {
            path: format!("{}.{key}", self.path),
            message: message.into(),
        });
    }

    fn get(&mut self, key: &'static str) -> Option<&'a toml::Value> {
        self.known.push(key);
        self.table.get(key)
    }

    fn str_value(&mut self, key: &'static str) -> Option<String> {
        match self.get(key)? {
            toml::Value::String(s) => Some(s.clone()),
            other => {
                let t = other.type_str();
                self.problem(key, format!("expected a string, found {t}"));
                None
            }
        }
    }

    fn required_string(&mut self, key: &'static str) -> Option<String> {
        let present = self.table.contains_key(key);
        let v = self.str_value(key);
        if !present {
            self.problem(key, "required");
        }
        v
    }

    fn string(&mut self, key: &'static str, default: &str) -> String {
        self.str_value(key).unwrap_or_else(|| default.to_string())
    }

    fn path(&mut self, key: &'static str, default: &Path) -> PathBuf {
        match self.str_value(key) {
            Some(s) if s.is_empty() => {
                self.problem(key, "must not be empty");
                default.to_path_buf()
            }
            Some(s) => PathBuf::from(s),
            None => default.to_path_buf(),
        }
    }

    fn socket_addr(&mut self, key: &'static str, default: SocketAddr) -> SocketAddr {
        match self.str_value(key) {
            None => default,
            Some(s) => match s.parse() {
                Ok(a) => a,
                Err(_) => {
                    self.problem(key, format!("{s:?} is not an ip:port address"));
                    default
                }
            },
        }
    }

    fn duration(&mut self, key: &'static str, default: Duration) -> Duration {
        match self.str_value(key) {
            None => default,
            Some(s) => match humantime::parse_duration(&s) {
                Ok(d) if d.is_zero() => {
                    self.problem(key, "must be greater than zero");
                    default
                }
                Ok(d) if d > Duration::from_secs(7 * 24 * 3600) => {
                    self.problem(key, format!("{s:?} is longer than 7 days"));
                    default
                }
                Ok(d) => d,
                Err(e) => {
                    self.problem(
                        key,
                        format!("{s:?} is not a duration like \"10s\" or \"2m\": {e}"),
                    );
                    default
                }
            },
        }
    }

    fn uint(&mut self, key: &'static str, default: u64, min: u64, max: u64) -> u64 {
        match self.get(key) {
            None => default,
            Some(toml::Value::Integer(i))
                if (min as i128..=max as i128).contains(&(*i as i128)) =>
            {
                *i as u64
            }
            Some(toml::Value::Integer(i)) => {
                let i = *i;
                self.problem(key, format!("{i} is out of range {min}..={max}"));
                default
            }
            Some(other) => {
                let t = other.type_str();
                self.problem(key, format!("expected an integer, found {t}"));
                default
            }
        }
    }

    /// A list of forwarding header names; any bad entry keeps the default, whole.
    fn forwarded_headers(
        &mut self,
        key: &'static str,
        default: ForwardedHeaders,
    ) -> ForwardedHeaders {
        let list = match self.get(key) {
            None => return default,
            Some(toml::Value::Array(list)) => list,
            Some(other) => {
                let t = other.type_str();
                self.problem(key, format!("expected a list of header names, found {t}"));
                return default;
            }
        };
        let mut set = ForwardedHeaders::NONE;
        let mut ok = true;
        for v in list {
            match v {
                toml::Value::String(name) if set.add(name) => {}
                other => {
                    let what = match other {
                        toml::Value::String(name) => format!("{name:?}"),
                        v => format!("{} value", v.type_str()),
                    };
                    let names = ForwardedHeaders::NAMES.join(", ");
                    self.problem(key, format!("{what} is not one of {names}"));
                    ok = false;
                }
            }
        }
        if ok {
            set
        } else {
            default
        }
    }

    fn bool(&mut self, key: &'static str, default: bool) -> bool {
        match self.get(key) {
            None => default,
            Some(toml::Value::Boolean(b)) => *b,
            Some(other) => {
                let t = other.type_str();
                self.problem(key, format!("expected true or false, found {t}"));
                default
            }
        }
    }

    fn finish(self) {
        let unknown: BTreeMap<&String, ()> = self
            .table
            .keys()
            .filter(|k| !self.known.contains(&k.as_str()))
            .map(|k| (k, ()))
            .collect();
        for k in unknown.keys() {
            self.problems.push(Problem {
                path: format!("{}.{k}", self.path),
                message: format!("unknown key (known: {})", self.known.join(", ")),
            });
        }
    }
}

/// A timeout as an operator writes it: `"2m"`, `"90s"`, or plain seconds (`"120"`).
/// Between 1 second and 1 day.
pub fn parse_timeout(s: &str) -> Option<Duration> {
    let d = match s.trim().parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => humantime::parse_duration(s.trim()).ok()?,
    };
    (Duration::from_secs(1)..=Duration::from_secs(86_400))
        .contains(&d)
        .then_some(d)
}

/// A stable fingerprint of the `[[backends]]` list, stored with the persisted state so a
/// restart can tell whether the operator edited the list since (then the file wins).
pub fn backends_fingerprint(backends: &[BackendConfig]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for b in backends {
        h.update(b.name.as_bytes());
        h.update([0]);
        h.update(b.addr.to_string().as_bytes());
        h.update([0]);
    }
    h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn empty_file_gives_defaults() {
        let c = from_toml("", &env(&[])).unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn full_file() {
        let c = from_toml(
            r#"
            [listen]
            proxy = "127.0.0.1:9080"
            status = "127.0.0.1:9081"
            [[backends]]
            name = "web1"
            addr = "127.0.0.1:9001"
            [[backends]]
            name = "web2"
            addr = "localhost:9002"
            [timeouts]
            connect = "2s"
            server = "1m 30s"
            [limits]
            max_connections = 50
            "#,
            &env(&[]),
        )
        .unwrap();
        assert_eq!(c.listen.proxy.port(), 9080);
        assert_eq!(c.backends.len(), 2);
        assert_eq!(c.backends[1].addr.to_string(), "localhost:9002");
        assert_eq!(c.timeouts.connect, Duration::from_secs(2));
        assert_eq!(c.timeouts.server, Duration::from_secs(90));
        assert_eq!(c.limits.max_connections, 50);
    }

    #[test]
    fn every_problem_is_listed_with_its_path() {
        let err = from_toml(
            r#"
            bogus = 1
            [listen]
            proxy = "nowhere"
            [timeouts]
            connect = "ten seconds"
            client = 5
            colour = "blue"
            [limits]
            max_header_size = 100
            [[backends]]
            name = "web 1"
            addr = "127.0.0.1:0"
            [[backends]]
            addr = "127.0.0.1:9002"
            "#,
            &env(&[]),
        )
        .unwrap_err();
        let paths: Vec<&str> = err.0.iter().map(|p| p.path.as_str()).collect();
        for want in [
            "bogus",
            "listen.proxy",
            "timeouts.connect",
            "timeouts.client",
            "timeouts.colour",
            "limits.max_header_size",
            "backends[0].name",
            "backends[0].addr",
            "backends[1].name",
        ] {
            assert!(paths.contains(&want), "missing {want} in {paths:?}");
        }
    }

    #[test]
    fn syntax_error_names_the_line() {
        let err = from_toml("[listen]\nproxy = \n", &env(&[])).unwrap_err();
        assert_eq!(err.0.len(), 1);
        assert!(err.0[0].path.starts_with("line "), "{:?}", err.0);
    }

    #[test]
    fn env_overrides_file() {
        let c = from_toml(
            "[listen]\nproxy = \"127.0.0.1:1000\"\n",
            &env(&[
                ("OPENSHIFT_GEARLB_IP", "127.1.2.3"),
                ("OPENSHIFT_GEARLB_PORT", "8080"),
                ("OPENSHIFT_DATA_DIR", "/home/gear/app-root/data/"),
                ("OPENSHIFT_NAMESPACE", "ns"),
            ]),
        )
        .unwrap();
        assert_eq!(c.listen.proxy, "127.1.2.3:8080".parse().unwrap());
        assert_eq!(
            c.state.dir,
            PathBuf::from("/home/gear/app-root/data/gearlb")
        );
        assert_eq!(c.gear.namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn stats_socket_next_to_the_control_socket_unless_set() {
        let c = from_toml("", &env(&[])).unwrap();
        assert_eq!(c.control.stats_socket_path(), PathBuf::from("run/stats"));
        let c = from_toml("[control]\nsocket = \"/tmp/x/c.sock\"\n", &env(&[])).unwrap();
        assert_eq!(c.control.stats_socket_path(), PathBuf::from("/tmp/x/stats"));
        let c = from_toml("[control]\nstats_socket = \"/tmp/s\"\n", &env(&[])).unwrap();
        assert_eq!(c.control.stats_socket_path(), PathBuf::from("/tmp/s"));
        // Cartridge mode: both sockets in $OPENSHIFT_GEARLB_DIR/run.
        let c = from_toml(
            "[control]\nstats_socket = \"/tmp/s\"\n",
            &env(&[("OPENSHIFT_GEARLB_DIR", "/home/g/gearlb")]),
        )
        .unwrap();
        assert_eq!(
            c.control.stats_socket_path(),
            PathBuf::from("/home/g/gearlb/run/stats")
        );
        for (bad, why) in [
            ("stats_socket = \"\"", "must not be empty"),
            ("stats_socket = 5", "expected a string"),
            ("stats_socket = \"run/control.sock\"", "must differ"),
        ] {
            let err = from_toml(&format!("[control]\n{bad}\n"), &env(&[])).unwrap_err();
            assert!(
                err.0
                    .iter()
                    .any(|p| p.path == "control.stats_socket" && p.message.contains(why)),
                "{bad}: {:?}",
                err.0
            );
        }
        let long = format!("[control]\nstats_socket = \"/{}\"\n", "x".repeat(120));
        assert!(from_toml(&long, &env(&[])).is_err());
    }

    #[test]
    fn health_env_names_and_aliases() {
        let c = from_toml(
            "",
            &env(&[
                ("OPENSHIFT_HAPROXY_HTTPCHK_URI", "/old"),
                ("HAPROXY_CARTRIDGE_HTTPCHK_EXPECT_RSTATUS", "200"),
            ]),
        )
        .unwrap();
        assert_eq!(
            (c.health.uri.as_str(), c.health.expect.as_str()),
            ("/old", "200")
        );
        let c = from_toml(
            "",
            &env(&[
                ("OPENSHIFT_GEARLB_HTTPCHK_URI", "/new"),
                ("OPENSHIFT_HAPROXY_HTTPCHK_URI", "/old"),
            ]),
        )
        .unwrap();
        assert_eq!(c.health.uri, "/new");
        let err = from_toml("[health]\nexpect = \"2..(\"\nuri = \"nope\"", &env(&[])).unwrap_err();
        let paths: Vec<&str> = err.0.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, vec!["health.uri", "health.expect"]);
    }

    #[test]
    fn sealed_cookies_need_a_secret() {
        let err = from_toml("[sticky]\nseal = true", &env(&[])).unwrap_err();
        assert_eq!(err.0[0].path, "sticky.seal");
        let c = from_toml(
            "[sticky]\nseal = true",
            &env(&[("OPENSHIFT_SECRET_TOKEN", "0123456789abcdef0123")]),
        )
        .unwrap();
        assert!(c.sticky.seal);
        assert!(
            !format!("{c:?}").contains("0123456789abcdef"),
            "secret must not be printed"
        );
    }

    #[test]
    fn bad_env_is_a_problem() {
        let err = from_toml(
            "",
            &env(&[
                ("OPENSHIFT_GEARLB_IP", "x"),
                ("OPENSHIFT_GEARLB_PORT", "8080"),
            ]),
        )
        .unwrap_err();
        assert_eq!(err.0[0].path, "env OPENSHIFT_GEARLB_IP");
        let err = from_toml("", &env(&[("OPENSHIFT_GEARLB_PORT", "8080")])).unwrap_err();
        assert!(err.0[0].message.contains("together"));
    }

    #[test]
    fn forwarded_headers_list() {
        let d = from_toml("", &env(&[])).unwrap().proxy.forwarded_headers;
        assert!(d.x_forwarded_for && d.x_forwarded_proto);
        assert!(!d.x_forwarded_host && !d.x_forwarded_port && !d.forwarded);

        let c = from_toml(
            "[proxy]\nforwarded_headers = [\"Forwarded\", \"x-forwarded-port\"]\n",
            &env(&[]),
        )
        .unwrap();
        let f = c.proxy.forwarded_headers;
        assert!(f.forwarded && f.x_forwarded_port);
        assert!(!f.x_forwarded_for && !f.x_forwarded_proto && !f.x_forwarded_host);

        let c = from_toml("[proxy]\nforwarded_headers = []\n", &env(&[])).unwrap();
        assert_eq!(c.proxy.forwarded_headers, ForwardedHeaders::NONE);

        let err = from_toml(
            "[proxy]\nforwarded_headers = [\"x-forwarded-for\", \"x-real-ip\", 3]\n",
            &env(&[]),
        )
        .unwrap_err();
        assert_eq!(err.0.len(), 2);
        assert_eq!(err.0[0].path, "proxy.forwarded_headers");
        assert!(err.0[0].message.contains("\"x-real-ip\" is not one of"));
        assert!(err.0[1].message.contains("integer value is not one of"));

        let err = from_toml("[proxy]\nforwarded_headers = \"forwarded\"\n", &env(&[])).unwrap_err();
        assert!(err.0[0].message.contains("expected a list of header names"));
    }

    #[test]
    fn dns_ttl_is_a_positive_duration() {
        let c = from_toml("", &env(&[])).unwrap();
        assert_eq!(
            c.proxy.dns_ttl,
            Duration::from_secs(10),
            "HAProxy's hold valid"
        );
        let c = from_toml("[proxy]\ndns_ttl = \"1m\"\n", &env(&[])).unwrap();
        assert_eq!(c.proxy.dns_ttl, Duration::from_secs(60));
        for bad in ["\"0s\"", "\"soon\"", "10"] {
            let err = from_toml(&format!("[proxy]\ndns_ttl = {bad}\n"), &env(&[])).unwrap_err();
            assert_eq!(err.0[0].path, "proxy.dns_ttl", "{bad}");
        }
    }

    #[test]
    fn h2_max_concurrent_streams_bounds() {
        let c = from_toml("", &env(&[])).unwrap();
        assert_eq!(c.proxy.h2_max_concurrent_streams, 100, "HAProxy's default");
        let c = from_toml("[proxy]\nh2_max_concurrent_streams = 8\n", &env(&[])).unwrap();
        assert_eq!(c.proxy.h2_max_concurrent_streams, 8);
        for bad in ["0", "10001", "-1", "\"many\""] {
            let err = from_toml(
                &format!("[proxy]\nh2_max_concurrent_streams = {bad}\n"),
                &env(&[]),
            )
            .unwrap_err();
            assert_eq!(err.0[0].path, "proxy.h2_max_concurrent_streams", "{bad}");
        }
    }

    #[test]
    fn connection_affinity_bounds() {
        assert_eq!(
            from_toml("", &env(&[])).unwrap().proxy.connection_affinity,
            16
        );
        let c = from_toml("[proxy]\nconnection_affinity = 0\n", &env(&[])).unwrap();
        assert_eq!(c.proxy.connection_affinity, 0);
        for bad in ["-1", "2000000", "\"lots\"", "1.5"] {
            let err = from_toml(
                &format!("[proxy]\nconnection_affinity = {bad}\n"),
                &env(&[]),
            )
            .unwrap_err();
            assert_eq!(err.0.len(), 1, "{bad}: {err:?}");
            assert_eq!(err.0[0].path, "proxy.connection_affinity", "{bad}");
        }
    }

    #[test]
    fn duplicate_backend_names() {
        let err = from_toml(
            "[[backends]]\nname=\"a\"\naddr=\"127.0.0.1:1\"\n[[backends]]\nname=\"a\"\naddr=\"127.0.0.1:2\"\n",
            &env(&[]),
        )
        .unwrap_err();
        assert_eq!(err.0[0].path, "backends[1].name");
    }

    #[test]
    fn fingerprint_tracks_the_list() {
        let a = vec![BackendConfig {
            name: "a".into(),
            addr: "127.0.0.1:1".parse().unwrap(),
        }];
        let mut b = a.clone();
        assert_eq!(backends_fingerprint(&a), backends_fingerprint(&b));
        b[0].addr = "127.0.0.1:2".parse().unwrap();
        assert_ne!(backends_fingerprint(&a), backends_fingerprint(&b));
    }
}
