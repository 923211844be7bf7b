//! The status listener: a small HTTP server, separate from the proxy listener, that
//! reports on the balancer and never forwards application traffic.
//!
//! Owns the routes (only GET and HEAD; it exposes no control operation):
//! - `/health`: 200 while at least one backend is selectable, else 503 (for the router
//!   in front);
//! - `/gearlb-status.json`: the [`StatusReport`](crate::report::StatusReport);
//! - `/gearlb-status`, `/haproxy-status`, `/haproxy-status/` and `/` (what the old
//!   cartridge's stats URI was): the HTML page ([`html`]), `?refresh=N` to reload every N
//!   seconds;
//! - the same paths with `;csv` (HAProxy's suffix, e.g. `/haproxy-status/;csv`, also
//!   with `;norefresh`, `;up`, `;no-maint`, or in the query as `?stats;csv`): the
//!   HAProxy CSV ([`csv`]);
//! - `/metrics`: Prometheus metrics ([`crate::metrics`]).
//!
//! Everything else is 404. It also counts its own connections, requests and bytes
//! ([`ListenerStats`]: the CSV's `stats` proxy, as the old cartridge's `listen stats`).
//!
//! [`socket`] is the other way to the same CSV: HAProxy's stats socket.

pub mod csv;
pub mod html;
pub mod socket;

mod listener;
mod source;

pub use listener::serve;
pub use source::{ListenerStats, StatusSource};
