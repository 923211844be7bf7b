//! The HAProxy-compatible CSV (`/gearlb-status;csv`, `/haproxy-status/;csv`, and `show
//! stat` on the stats socket).
//!
//! Owns the column list (HAProxy management guide, "9.1. CSV format", fields 0 to 76 in
//! their documented order: everything HAProxy 1.4/1.5-era parsers read by position, and
//! the later columns up to `algo`), the row filter of `show stat` and the mapping of a
//! [`StatusReport`] onto rows, as the old cartridge's two proxies: `stats` (its `listen
//! stats`, here the status listener's own traffic: a `FRONTEND` and a `BACKEND` row) and
//! `express` (its `listen express`: a `FRONTEND` row, one row per server, and a `BACKEND`
//! row), in that order and with those proxy ids (1 and 2) as HAProxy numbers them. As
//! HAProxy does, a field that has no value for a row type (or that gearlb does not
//! measure) is left empty, the header line starts with `# `, and every line ends with a
//! comma.
//!
//! [`StatusReport`]: crate::report::StatusReport

mod fields;
mod filter;
mod render;
mod row;
#[cfg(test)]
mod tests;

pub use fields::{
    check_status, proxy_id, server_status, COLUMNS, PROXY, PROXY_ID, STATS_PROXY, STATS_PROXY_ID,
    TYPE_BACKEND, TYPE_FRONTEND, TYPE_SERVER,
};
pub use filter::Filter;
pub use render::{render, render_filtered};
