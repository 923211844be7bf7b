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
//!
//! This file only declares the parts and re-exports their public items; each part is a
//! leaf or depends only on the leaves below it:
//!
//! - `problem`: [`Problem`], [`ConfigErrors`], [`EXIT_CONFIG`];
//! - `schema`: the [`Config`] structs, their defaults;
//! - `duration`: the one duration rule of every source;
//! - `reader` and `file`: the TOML file, key by key;
//! - `env`: the gear environment ([`Env`]) laid over the file;
//! - `service`: a service's keys, from `[[services]]` or a watched file;
//! - `idler`: `[idler]`, the head gear kept seen by the node's idler;
//! - `routing_spi` and `spi_keys`: `[routing_spi]`, a router fed by the broker's
//!   routing SPI, and its keys;
//! - `tcp` and `tcp_keys`: TCP mode's settings and their keys (`listen.mode`, `[tcp]`,
//!   `send_proxy`);
//! - `trust`: whose forwarding headers are kept (`proxy.trust_forwarded`);
//! - `wire`: how gossip travels ([`Carrier`], [`GossipWire`]);
//! - `validate`: the checks across keys;
//! - `restart`: the settings only a restart changes ([`keep_restart_only`]);
//! - `load`: [`load`] and [`from_toml`], which run the above in order.

mod discovery;
mod duration;
mod env;
mod file;
mod idler;
mod load;
mod problem;
mod reader;
mod restart;
mod routing_spi;
mod schema;
mod service;
mod spi_keys;
mod tcp;
mod tcp_keys;
mod trust;
mod validate;
mod wire;

#[cfg(test)]
mod tests;

pub use duration::{parse_duration, DURATION_RULE};
pub use env::{config_path, Env, ProcessEnv, CONFIG_ENV};
pub use load::{from_toml, load};
pub use problem::{ConfigErrors, Problem, EXIT_CONFIG};
pub use restart::{keep_restart_only, RestartOnly, RESTART_ONLY};
pub use routing_spi::{
    RoutingSpiConfig, PASSWORD_ENV as ROUTING_SPI_PASSWORD_ENV,
    REST_PASSWORD_ENV as ROUTING_SPI_REST_PASSWORD_ENV,
};
pub use schema::{
    backends_fingerprint, BackendConfig, Carrier, ClusterConfig, Config, ControlConfig,
    DiscoveryConfig, ForwardedHeaders, GearIdentity, HealthConfig, IdlerConfig, Limits,
    ListenConfig, LogConfig, ProxyConfig, RotateConfig, RuntimeConfig, ScalerConfig, StateConfig,
    StickyConfig, SubsetConfig, Timeouts, TlsConfig, UpstreamConfig, DEFAULT_SERVICE,
};
pub use service::{
    default_route, is_service_name, parse_service_file, parse_share, service_file_format,
    FileFormat, ServiceBackend, ServiceConfig, ServiceHealth, ServiceTimeouts, VersionsConfig,
};
pub use tcp::{Balance, Cidr, Mode, TcpCheck, TcpConfig, UnknownSni};
pub use trust::{parse_fronts, FrontTrust, TRUSTED_FRONTS_ENV};
pub use wire::GossipWire;
