//! gearlb: the HTTP load balancer that runs inside each web load-balancer gear of a
//! scalable application, replacing the HAProxy cartridge.
//!
//! # Layout
//! - [`config`]: TOML file + gear environment → one validated `Config` (every problem listed).
//! - [`gear`]: gear names, addresses and the platform's `update-cluster` entry format.
//! - [`routing`]: the routing table snapshot (arc-swap), backend selection, connection
//!   affinity ([`routing::affinity`]) and the sticky cookie ([`routing::sticky`]).
//! - [`health`]: active health checks (on kept connections) and passive ejection.
//! - [`cluster`]: the application's balancers: gossip membership (chitchat over an
//!   authenticated TCP transport), the cluster view, subsets and shared health.
//! - [`proxy`]: the data plane (accept, limits, forward, stream, graceful stop);
//!   [`proxy::upstream`] holds one connection pool per backend,
//!   [`proxy::forward`] the header rewriting, [`proxy::tunnel`] WebSocket tunnels.
//! - [`rotation`]: rotate-out/in: the last-writer-wins register of ops, local drain
//!   and acknowledgments.
//! - [`scaler`]: the one scaler of the application: election, policy, broker client.
//! - [`control`]: the unix-socket control API used by `gearlb ctl`.
//! - [`state`]: the persisted backend set, written atomically.
//! - [`stats`]: the request path's counters ([`stats::latency`] response times,
//!   [`stats::rate`] rates); [`report`]: the status report assembled from them (and
//!   [`report::sampler`], the once-a-second rate task); [`status`]: the status listener (HTML page, HAProxy
//!   CSV, JSON); [`metrics`]: Prometheus metrics collected at scrape time.
//! - [`app`]: assembly of a running balancer: start-up and stop ([`app::Server`]), the
//!   control-plane operations, the rotate driver, the status report, state saves.
//! - [`demo`]: `gearlb demo`, the whole system in one process.
//! - [`sim`]: the cluster simulator: many balancers' real cluster, rotation and scaler
//!   code in one process over an in-memory network (latency, loss, partitions).
//! - [`tls`]: the optional HTTPS listener's certificates (SNI, hot reload).
//! - [`memory`]: returning freed heap pages to the system when a worker goes idle.
//! - [`cartridge`]: what the node platform runs in a gear (`bin/control`, setup,
//!   hooks), the daemon's life there, and the node's gear registry.
//! - [`cli`]: the command line.
//!
//! The request path reads an immutable routing snapshot and atomic counters only: it
//! never takes a lock and never waits on the control plane.

#![forbid(unsafe_code)]

pub mod app;
pub mod cartridge;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod control;
pub mod demo;
pub mod gear;
pub mod health;
pub mod memory;
pub mod metrics;
pub mod proxy;
pub mod report;
pub mod rotation;
pub mod routing;
pub mod scaler;
pub mod sim;
pub mod state;
pub mod stats;
pub mod status;
pub mod time;
pub mod tls;
