//! gearlb: the HTTP load balancer that runs inside each web load-balancer gear of a
//! scalable application, replacing the HAProxy cartridge, and in front of any fleet of
//! services on its own. This crate is the application; it builds on two others.
//!
//! # Where things happen
//! - **A request is forwarded** in `gearlb_proxy`'s `request::forward`
//!   (`crates/proxy/src/request.rs`): sticky cookie, backend choice and retries; each
//!   attempt on one backend is `attempt::send_once`, the exchange with the backend
//!   [`proxy::upstream::send`], and whether to try again is the table in
//!   [`proxy::upstream::decide`]. A client connection's life is `downstream` (its state
//!   diagram: `crates/proxy/src/downstream/LIFECYCLE.md`).
//! - **A rotation completes** by [`rotation::complete::round`] (pure, table-tested, in
//!   `gearlb-core`), driven by `app::rotate` (`src/app/rotate.rs`); a gear drains in
//!   [`rotation::drain`].
//! - **The scaler decides** in [`scaler::policy::decide`] (pure, `gearlb-core`), called
//!   once a second by the acting scaler's loop in `scaler::driver`; who acts is
//!   [`scaler::election`]'s.
//!
//! # Crates
//! The crate graph is the architecture (`tests/crates.rs` and `tests/layers.rs` check
//! it; no module cycle and no subsystem cycle in any crate, no file over 600 lines):
//! - **`gearlb-core`**, the pure decisions, with no tokio, socket or TLS dependency:
//!   [`config`], [`gear`], the routing table and selection, subsets, sticky cookie and
//!   affinity ([`routing`]), the health state machine, the rotation register's merge
//!   and completion rule, the election and the scaling policy, wall-clock [`time`].
//! - **`gearlb-proxy`**, the data plane: client connections, forwarding, the upstream
//!   HTTP/1 client and its pools, the routing snapshot's publisher
//!   ([`routing::Router`], each backend's [`routing::Target`] keyed by its id), the
//!   counters ([`stats`]), health checks ([`health`]) and the TLS listener ([`tls`]).
//!   It never names the cluster, the scaler, the report or the cartridge.
//! - **`gearlb`** (this crate), the control plane and the application:
//!   - [`cluster`]: the application's balancers: gossip membership (chitchat over an
//!     authenticated transport), the cluster view, subsets and shared health;
//!   - [`rotation`]: this balancer's copy of the register, the drain, acknowledgments;
//!   - [`scaler`]: the acting scaler's loop and the broker client;
//!   - [`control`]: the unix-socket control API used by `gearlb ctl`;
//!   - [`state`]: the persisted backend set, written atomically;
//!   - observability, in three steps from the data plane's counters ([`stats`]):
//!     [`report`] assembles them into one status report (and samples rates once a
//!     second), [`status`] serves that report (HTML page, HAProxy CSV, JSON, the stats
//!     socket), and [`metrics`] collects Prometheus metrics at scrape time;
//!   - [`app`]: a running balancer: its start-up steps, the [`app::Server`], the
//!     control-plane operations, the rotate driver, state saves;
//!   - [`cartridge`]: what the node platform runs in a gear (`bin/control`, setup,
//!     hooks), the daemon's life there, and the node's gear registry;
//!   - [`idler`]: the head gear kept seen by the node's idler while the application
//!     serves (requests to the peers' gears through their nodes' frontends);
//!   - [`stomp`]: a STOMP consumer of the broker's routing events on ActiveMQ;
//!   - [`demo`]: `gearlb demo`, the whole system in one process; [`cli`]: the command
//!     line; [`memory`]: freed heap pages back to the system when a worker goes idle.
//! - **`gearlb-sim`**: the cluster simulator (many balancers' real cluster, rotation and
//!   scaler code in one process over an in-memory network).
//!
//! The layers below are re-exported here under the names the application has always
//! used ([`routing`], [`proxy`], [`stats`], [`health`], [`tls`], [`config`], [`gear`],
//! [`time`]). The request path reads an immutable routing snapshot and atomic counters
//! only: it never takes a lock and never waits on the control plane.

#![forbid(unsafe_code)]

pub mod app;
pub mod cartridge;
pub mod cli;
pub mod cluster;
pub mod control;
pub mod demo;
pub mod idler;
pub mod memory;
pub mod metrics;
pub mod report;
pub mod rotation;
pub mod scaler;
pub mod services;
pub mod spi;
pub mod state;
pub mod status;
pub mod stomp;
pub mod systemd;

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
