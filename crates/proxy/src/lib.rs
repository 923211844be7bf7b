//! gearlb-proxy, the data plane: accept client connections, forward each request to a
//! backend, stream the answer back. It never names the cluster, the scaler, the report
//! or the cartridge (the application, `gearlb`, wires them to it); its decisions that
//! need no I/O are `gearlb-core`'s.
//!
//! Besides the request path it owns the routing snapshot's publisher ([`router`]: the
//! core's table plus each backend's pool and counters, keyed by the backend's id), the
//! counters ([`stats`]), active health checks and passive ejection ([`health`]), the
//! HTTPS listener's certificates ([`tls`]; alias certificates uploaded at runtime are
//! checked by [`certs`]) and the request path's clock ([`clock`]).
//!
//! Owns the accept loop and its connection limit (`listener`), the client connection
//! with its timeouts, parking and graceful stop (`downstream`; its HTTP/1.1 byte path,
//! `downstream::lane`, serves plain requests without hyper), request handling (sticky
//! cookie, selection, retries: `request` for hyper's servers, `direct` for the byte
//! path, both through `dispatch`, each attempt in `attempt`, the response in `respond`
//! or `h1::reply`, failures in `error`), and what they all share (`shared`).
//! Per request: load the routing snapshot (lock-free), pick the backend the sticky cookie
//! names, else the connection's previous one while it is no busier (core's `affinity`),
//! else the least loaded one, take a pooled connection or open one, send, and stream the
//! response body back without buffering it; the backend's in-flight count covers the
//! whole exchange.
//!
//! Retries: a backend that cannot be reached is replaced by another (any request: its
//! body was not sent), up to `proxy.retries`; an idempotent request without a body is
//! also replayed elsewhere when the backend fails before answering. Everything else gets
//! 502, so it only goes into a pooled connection the kernel says is still open. A pooled
//! connection the backend closes just as a request goes out (nothing answered) is not
//! the backend's failure: a request that can be replayed is sent again, once, on a new
//! connection to the same backend. Failures on real traffic are counted per backend and
//! eject it after `health.fall` in a row (see `health`).
//!
//! Timeouts, as HAProxy's (README, "Timeouts"): `request_header` (the request head
//! must arrive within it; this also bounds how long a connection with no request in
//! flight waits for one); `client` and `server`, inactivity while the exchange waits on
//! the client or on the backend ([`wait`]: HTTP/1 connections keep both with their one
//! watchdog, HTTP/2 streams have a timer each); `connect`; `tunnel` (idle upgraded
//! connection). What the exchange does with what a backend sends is the decision table
//! in [`upstream`].
//!
//! Cost per request matters here (a balancer's work is mostly this path): nothing is
//! logged or formatted unless a log line is wanted, no timer is set per HTTP/1 request,
//! a plain HTTP/1.1 request's heads stay bytes both ways (no `HeaderMap`: see
//! [`forward::head`] and [`h1::write_reply`]), and header values are shared rather than
//! copied elsewhere (see [`forward`]). A loop turn reads every ready socket before it
//! writes to any (see [`turn`]).
//!
//! Layers: this file only declares the modules and re-exports what the rest of the
//! crate uses. No module of the crate imports from it; each imports the leaf files it
//! needs (`shared`, `upgrade`, `io`, ...), so the modules inside the proxy form no cycle:
//! `listener` → `downstream` → `request`/`direct` → `dispatch` → `attempt`/`respond` →
//! `upstream`/`tunnel`/`body` → `session` → `shared` → `io`/`upgrade`.

#![forbid(unsafe_code)]

mod attempt;
pub mod body;
pub mod certs;
pub mod clock;
mod direct;
mod dispatch;
mod downstream;
mod error;
pub mod forward;
pub mod h1;
pub mod health;
pub mod io;
mod listener;
pub mod ocsp;
mod request;
mod respond;
pub mod router;
pub mod services;
mod session;
mod settings;
mod shared;
pub mod stats;
mod tcp;
pub mod tickets;
pub mod tls;
pub mod trust;
pub mod tunnel;
pub mod turn;
pub mod upgrade;
pub mod upstream;
pub mod wait;

pub use body::ProxyBody;
pub use listener::{serve, serve_tls};
pub use shared::{InFlight, ProxyCtx, Settings};
pub use upgrade::{Admission, UpgradeEndpoint};
