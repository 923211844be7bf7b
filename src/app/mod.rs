//! Assembly of a running balancer: listeners, routing, state, control, and their life.
//!
//! Declarations and re-exports only; each concept is one file:
//! - `parts`: the [`App`] every listener and the control plane share, its parts by concern,
//!   comes from the configuration;
//! - `wiring`: the [`Server`]: start-up order (configuration → restore the persisted
//!   backend set → bind every listener → accept) and the graceful stop;
//! - `ops`: the control-plane operations (`update-cluster`, `set-peers`, `scale`,
//!   reload, `disable server`/`enable server`) and the dispatch of control requests;
//! - `rotate`: the rotate command's driver (its completion rule is
//!   [`crate::rotation::complete`], pure);
//! - `report`: the status report and the cluster view;
//! - `persist`: the state file's saves and the state directory's lock;
//! - `staples`: the HTTPS listener's OCSP files followed.
//!
//! Control-plane operations are serialised by one async mutex; the request path never
//! sees it.

mod ops;
mod parts;
mod persist;
mod report;
mod rotate;
mod staples;
mod start;
mod wiring;

pub use ops::{RotateServerError, EXIT_BAD_ENTRIES};
pub use parts::App;
pub use wiring::Server;
