//! The status page for people (`/gearlb-status`, and `/haproxy-status` for old links).
//!
//! Owns the rendering of one balancer's [`StatusReport`] into one self-contained HTML
//! document: inline CSS, inline SVG sparklines, no script, no external resource (the
//! status listener sends a Content-Security-Policy that forbids them anyway). Every value
//! taken from the report goes through [`esc`]. Optional auto-refresh is a
//! `<meta http-equiv="refresh">`.
//!
//! [`StatusReport`]: crate::report::StatusReport

mod chart;
mod format;
mod page;
mod sections;

pub use format::esc;
pub use page::{render, PageOptions};
