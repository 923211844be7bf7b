//! The registry: [`Metrics`], the collectors of one balancer encoded on each scrape,
//! with the core collector registered and features' collectors added at assembly.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::registry::Registry;

use super::proxy::{CoreCollector, ServiceRouters};
use crate::routing::Router;
use crate::stats::FrontendStats;

/// The metrics of one balancer.
pub struct Metrics {
    registry: Registry,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Metrics of the proxy: frontend and backends.
    pub fn new(
        router: Arc<Router>,
        services: ServiceRouters,
        frontend: Arc<FrontendStats>,
        start_unix: u64,
    ) -> Self {
        let mut m = Metrics {
            registry: Registry::default(),
        };
        m.register(CoreCollector {
            router,
            services,
            frontend,
            start_unix,
        });
        m
    }

    /// Add a feature's collector (see the module documentation).
    pub fn register(&mut self, collector: impl Collector) {
        self.registry.register_collector(Box::new(collector));
    }

    /// The exposition text, ending with `# EOF`.
    pub fn encode(&self) -> Result<String, fmt::Error> {
        let mut out = String::with_capacity(16 * 1024);
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}
