//! The status report: the one shape in which a balancer's status leaves the process
//! (`/gearlb-status.json` on the status listener and `gearlb ctl status`, and the source
//! of the HTML page, the HAProxy CSV and the stats socket). Field names in the report
//! are a public interface: add (with `#[serde(default)]`), don't rename.
//!
//! [`types`] holds the report's shape; [`build`] reads it from the counters
//! ([`crate::stats`]) and the routing snapshot; [`text`] prints it for `gearlb ctl
//! status`; [`spi`] is a router's part of it; [`sampler`] is the once-a-second task that derives rates and response-time
//! points from the counters. The report sits above the data plane: nothing on the
//! request path names it.

pub mod build;
pub mod sampler;
pub mod spi;
pub mod text;
pub mod types;

pub use build::backend_reports;
pub use types::{
    BackendReport, ByClass, FrontendReport, HealthReport, ListenReport, PeerReport,
    ResponseTimeReport, RotationReport, ServiceStatus, StatusReport, VersionGroups,
};
