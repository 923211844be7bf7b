//! A router fed by the broker's routing SPI (`[routing_spi]`): the [`Spi`] keeps the
//! table of applications (`gearlb_core::spi`), consumes the routing events from the
//! brokers ([`crate::stomp`]), persists the table before an event is acknowledged
//! ([`store`]), and serves what it routes: each application with a load-balancer
//! endpoint is a service of the [`crate::services::ServiceSet`] (origin `routing SPI
//! <destination>`), each alias's certificate is served by SNI
//! ([`crate::tls::AliasCerts`]).
//!
//! Parts: `parts` (the [`Spi`] and what it publishes), `apply` (one event: parse,
//! check, apply, journal, publish), [`store`] (the
//! table on disk), `report` (what `gearlb ctl spi` and the status JSON show),
//! `peers` (routers of one cluster compare their tables by gossip, and a router that
//! starts with none takes a peer's), `rest` (reconciliation with the broker's REST
//! API), `keep_seen` (each served application's head gear kept seen by its node's
//! idler), `run` (the tasks, in order).

mod apply;
mod keep_seen;
mod parts;
mod peers;
mod report;
mod rest;
mod run;
pub mod store;

pub use gearlb_core::spi::{derive, event, parse, reconcile, table, Action, Event, Table};
pub use parts::Spi;
pub use peers::{serve_table, TABLE_PATH};
pub use run::{client_id, start, Running};
