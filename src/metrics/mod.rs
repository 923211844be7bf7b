//! Prometheus metrics for `/metrics` on the status listener, encoded by the
//! `prometheus-client` crate in OpenMetrics text and served in the format the scraper
//! asks for ([`negotiate`]): OpenMetrics when its `Accept` prefers it (Prometheus's
//! own scrapes do), else the classic text format 0.0.4 ([`to_text_004`]), which is what
//! `curl`, `promtool check metrics` and older scrapers read.
//!
//! Owns [`Metrics`], the registry encoded on each scrape, and [`CoreCollector`], which
//! reads what the request path already counts (relaxed atomics in [`crate::stats`], the
//! routing snapshot) at scrape time: the request path holds no metric handle and takes no
//! lock for metrics. Only metrics with real data are exported.
//!
//! Extension point: a later feature (cluster, rotations, scaler) implements
//! [`prometheus_client::collector::Collector`] over its own state and adds it with
//! [`Metrics::register`] while the balancer is assembled (`app`). Its metric names
//! start with `gearlb_<feature>_`.

mod cluster;
mod family;
mod format;
mod proxy;
mod registry;
mod spi;

pub use cluster::{ClusterCollector, RotationCounters};
pub use format::{negotiate, to_text_004, Format, CONTENT_TYPE, TEXT_CONTENT_TYPE};
pub use proxy::{CoreCollector, ServiceRouters};
pub use registry::Metrics;
pub use spi::SpiCollector;
