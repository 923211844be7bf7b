//! What the status listener and the stats socket read: the application's
//! [`StatusSource`], and the listener's own counters ([`ListenerStats`]).

use crate::report::StatusReport;
use crate::stats::FrontendStats;

/// The status listener's own counters (`status_listener` in the report): the proxy's
/// frontend counters, without a connection limit.
pub type ListenerStats = FrontendStats;

/// What the status listener needs from the application.
pub trait StatusSource: Send + Sync + 'static {
    fn report(&self) -> StatusReport;
    /// True while at least one backend can take a request.
    fn healthy(&self) -> bool;
    /// Whether the named service may take a request; `None`: no such service.
    fn service_healthy(&self, _name: &str) -> Option<bool> {
        None
    }
    /// The services, for registration over HTTP; `None`: none here.
    fn services(&self) -> Option<std::sync::Arc<crate::services::ServiceSet>> {
        None
    }
    /// A router's routing SPI, and the cluster's secret its table is given under.
    fn spi(&self) -> Option<(std::sync::Arc<crate::spi::Spi>, Option<String>)> {
        None
    }
    /// The Prometheus exposition ([`crate::metrics::Metrics::encode`]).
    fn metrics(&self) -> Result<String, std::fmt::Error>;
}
