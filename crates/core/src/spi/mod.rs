//! The routing SPI's pure part: a router's table of applications, fed by the broker's
//! routing events (origin-server's ActiveMQ routing plugin) and repaired from its REST
//! API. No I/O: the application crate (`gearlb::spi`) consumes the events, checks
//! certificates, persists the table and serves what it derives.
//!
//! - [`event`]: one event's YAML body, parsed and checked;
//! - [`table`]: the [`Table`] of applications and how an event changes it (idempotent,
//!   order-tolerant where order can be recovered);
//! - [`derive`]: the services a table routes (`<app>-<namespace>`: the HA name and
//!   aliases to the load-balancer endpoints) and the digest routers compare;
//! - [`reconcile`]: the differences between the table and the broker's REST API, as
//!   repairs.

pub mod derive;
pub mod event;
pub mod reconcile;
pub mod table;

pub use event::{parse, Action, Endpoint, Event, Ssl};
pub use table::{Applied, Table};
