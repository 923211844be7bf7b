//! The configuration's schema: every [`Config`] struct, each key documented with its
//! default, and [`Config::default`]. Plain data: no parsing and no validation here.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::gear::Addr;

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
    /// `[[services]]`: named services routed by host and path (see
    /// [`super::service`]).
    pub services: Vec<super::service::types::ServiceConfig>,
    /// Where services come from besides this file.
    pub discovery: DiscoveryConfig,
    /// Balancers above this one in a tree (`[upstream]`).
    pub upstream: UpstreamConfig,
    /// `[tcp]`: the TCP listeners' settings.
    pub tcp: TcpConfig,
    /// `[idler]`: the head gear kept seen by the node's idler while serving.
    pub idler: IdlerConfig,
    /// `[routing_spi]`: this balancer is a router fed by the broker's routing SPI.
    pub routing_spi: Option<RoutingSpiConfig>,
}

impl Config {
    /// Whether the top-level backend set (`[[backends]]`, the gears of a cartridge, the
    /// local gear) is served: then it is the service [`DEFAULT_SERVICE`], taking every
    /// host no other service claims. It is not when the file names services and no
    /// top-level backend.
    pub fn default_service(&self) -> bool {
        let services = !self.services.is_empty()
            || self.routing_spi.is_some()
            || self.discovery.dir.is_some()
            || !self.discovery.etcd.is_empty();
        !services
            || !self.backends.is_empty()
            || self.local_gear.is_some()
            || self.gear.homedir.is_some()
    }
}

pub use super::discovery::{DiscoveryConfig, UpstreamConfig};
pub use super::idler::IdlerConfig;
pub use super::routing_spi::RoutingSpiConfig;
pub use super::service::types::DEFAULT_SERVICE;
use super::tcp::{Mode, TcpConfig};
pub use super::trust::FrontTrust;
pub use super::wire::{Carrier, GossipWire};
use crate::routing::SendProxy;

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
    /// What `proxy` speaks: `http`, or `tcp` (connections forwarded as bytes, TLS
    /// routed by its server name; cartridge: `SSL_TO_GEAR=1`). Default `http`.
    pub mode: Mode,
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
    /// TCP mode: the PROXY protocol header it is sent (`send_proxy = "v1" | "v2"`).
    pub send_proxy: Option<SendProxy>,
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
    /// Time for a client to send a complete request head (and, counted again from the
    /// head's end, a `Content-Length` body of at most 16 KiB, which plain HTTP/1.1 and
    /// HTTP/1.1 over TLS read whole before forwarding). Default 10s.
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

impl ProxyConfig {
    /// Whose forwarding headers are kept, `in_gear` or not (see [`FrontTrust::resolve`]).
    pub fn front_trust(&self, in_gear: bool) -> FrontTrust {
        FrontTrust::resolve(self.trust_forwarded.as_ref(), in_gear, &self.gear_fronts)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyConfig {
    /// Whose `X-Forwarded-For/-Proto/-Host/-Port` and `Forwarded` are kept (see
    /// [`super::trust`]): `None` (the default) is nobody's, and in a gear its node's and
    /// the routers' of `OPENSHIFT_GEARLB_TRUSTED_FRONTS`.
    pub trust_forwarded: Option<FrontTrust>,
    /// `OPENSHIFT_GEARLB_TRUSTED_FRONTS`: the routers in front of a gear.
    pub gear_fronts: Vec<super::tcp::Cidr>,
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
    pub transport: Carrier,
    /// Time between gossip rounds. Default 200ms (a dead peer is noticed in about 2s).
    pub gossip_interval: Duration,
    /// Gossip wire formats spoken (`gossip_wire`, env `GEARLB_GOSSIP_WIRE`).
    pub gossip_wire: GossipWire,
}

impl ClusterConfig {
    /// Gossip runs: on its own port (`listen`) or on the proxy port (`http`).
    pub fn gossip(&self) -> bool {
        self.listen.is_some() || self.transport == Carrier::Http
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
            .field("gossip_wire", &self.gossip_wire)
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

impl GearIdentity {
    /// The label of this balancer's own gear (`local-gear`'s sticky value,
    /// `<gearname>-<ns>`), from its DNS name, else its name and namespace.
    pub fn own_label(&self) -> Option<String> {
        match (&self.dns, &self.name, &self.namespace) {
            (Some(dns), _, _) => dns.split('.').next().map(str::to_ascii_lowercase),
            (None, Some(name), Some(ns)) => Some(format!("{name}-{ns}").to_ascii_lowercase()),
            _ => None,
        }
    }
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
                mode: Mode::Http,
            },
            control: ControlConfig {
                socket: PathBuf::from("run/control.sock"),
                stats_socket: None,
            },
            state: StateConfig {
                dir: PathBuf::from("data"),
            },
            backends: Vec::new(),
            services: Vec::new(),
            discovery: DiscoveryConfig {
                dir: None,
                ttl: Duration::from_secs(30),
                token: None,
                etcd: Vec::new(),
                etcd_prefix: "/gearlb/".into(),
            },
            upstream: UpstreamConfig {
                ttl: Duration::from_secs(10),
                ..UpstreamConfig::default()
            },
            tcp: TcpConfig::default(),
            idler: IdlerConfig::default(),
            routing_spi: None,
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
                trust_forwarded: None,
                gear_fronts: Vec::new(),
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
                transport: Carrier::Tcp,
                gossip_interval: Duration::from_millis(200),
                gossip_wire: Default::default(),
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
