//! gearlb: the HTTP load balancer that runs inside each web load-balancer gear of a
//! scalable application, replacing the HAProxy cartridge.
//!
//! # Where things happen
//! - **A request is forwarded** in `proxy::request::forward` (`src/proxy/request.rs`):
//!   sticky cookie, backend choice and retries; each attempt on one backend is
//!   `proxy::attempt::send_once`, the exchange with the backend [`proxy::upstream::send`].
//!   A client connection's life is `proxy::downstream` (its state diagram:
//!   `src/proxy/downstream/LIFECYCLE.md`).
//! - **A rotation completes** by [`rotation::complete::round`] (pure, table-tested),
//!   driven by `app::rotate` (`src/app/rotate.rs`); a gear drains in [`rotation::drain`].
//! - **The scaler decides** in [`scaler::policy::decide`] (pure), called once a second
//!   by the acting scaler's loop in `scaler::driver`; who acts is [`scaler::election`]'s.
//!
//! # Layers
//! The module graph has no cycle, and no source file is over 600 lines: `tests/layers.rs`
//! checks both on every test run. From the bottom up:
//! - **leaves** that name nothing above them: [`time`], [`gear`], [`config`], [`stats`]
//!   (the request path's counters), [`proxy::upgrade`];
//! - **pure decisions** (no I/O, no clock reads): [`routing::select`],
//!   [`routing::subset`], [`routing::sticky`], [`routing::affinity`], [`health`]'s state
//!   machine, [`rotation::register`] (merge) and [`rotation::complete`], the election
//!   and [`scaler::policy`], [`cluster::model`] (the view, built one change at a time);
//! - **the data plane**: [`routing`] (the snapshot), [`proxy`], [`health`] checks,
//!   [`tls`] — it names neither the cluster nor the scaler;
//! - **the control plane and the application**: [`cluster`], [`rotation`], [`scaler`],
//!   [`report`], [`status`], [`metrics`], [`control`], [`state`], [`app`], [`cartridge`],
//!   [`demo`], [`sim`], [`cli`].
//!
//! # Modules
//! - [`config`]: TOML file + gear environment → one validated `Config` (every problem
//!   listed; one duration rule for every source).
//! - [`gear`]: gear names, addresses and the platform's `update-cluster` entry format.
//! - [`routing`]: the routing table snapshot (arc-swap), backend selection, connection
//!   affinity ([`routing::affinity`]) and the sticky cookie ([`routing::sticky`]).
//! - [`health`]: active health checks (on kept connections) and passive ejection.
//! - [`cluster`]: the application's balancers: gossip membership (chitchat over an
//!   authenticated transport), the cluster view, subsets and shared health.
//! - [`proxy`]: the data plane (accept, limits, forward, stream, graceful stop);
//!   [`proxy::upstream`] the backend HTTP/1 exchange (its decision table) and one
//!   connection pool per backend, [`proxy::forward`] the header rewriting,
//!   [`proxy::tunnel`] WebSocket tunnels.
//! - [`rotation`]: rotate-out/in: the last-writer-wins register of ops, local drain,
//!   acknowledgments and the completion rule.
//! - [`scaler`]: the one scaler of the application: election, policy, broker client.
//! - [`control`]: the unix-socket control API used by `gearlb ctl`.
//! - [`state`]: the persisted backend set, written atomically.
//! - [`stats`]: the request path's counters ([`stats::latency`] response times,
//!   [`stats::rate`] rates); [`report`]: the status report assembled from them (and
//!   [`report::sampler`], the once-a-second rate task); [`status`]: the status listener
//!   (HTML page, HAProxy CSV, JSON, stats socket); [`metrics`]: Prometheus metrics
//!   collected at scrape time.
//! - [`app`]: assembly of a running balancer: start-up and stop ([`app::Server`]), the
//!   control-plane operations, the rotate driver, the status report, state saves.
//! - [`time`]: the clocks (wall-clock Unix time, the coarse monotonic clock).
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
pub mod control;
pub mod demo;
pub mod memory;
pub mod metrics;
pub mod report;
pub mod rotation;
pub mod scaler;
pub mod state;
pub mod status;

// The layers below, under the names the application (and its tests, examples and fuzz
// targets) have always used.
pub use gearlb_core::{config, gear, time};
pub use gearlb_proxy as proxy;
pub use gearlb_proxy::{health, stats, tls};

/// The routing table and selection (`gearlb_core::routing`, pure) with the snapshot's
/// publisher and each backend's data-plane state (`gearlb_proxy::router`).
pub mod routing {
    pub use gearlb_core::routing::*;
    pub use gearlb_proxy::router::{Change, Router, Snapshot, Target};
}
