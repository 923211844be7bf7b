//! A router's report of its routing SPI, filled from its counters and last
//! publication (lock-free): [`Spi::report`]; the shape is the status report's
//! (`crate::report::spi`).

use std::sync::atomic::Ordering;

use super::parts::Spi;
use crate::report::spi::{BrokerReport, Events, SpiReport};

impl Spi {
    /// The report, now (lock-free).
    pub fn report(&self) -> SpiReport {
        let b = self.broker.snapshot();
        let c = &self.counters;
        let r = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let mut table = self.summary.load().as_ref().clone();
        table.source = self.source.load().to_string();
        table.events = self.applied.load(Ordering::Relaxed);
        let current = self.current_ms.load(Ordering::Relaxed);
        table.age_s = (current > 0).then(|| crate::time::unix_ms().saturating_sub(current) / 1000);
        let refused = self
            .services
            .refused()
            .iter()
            .filter(|f| matches!(f.origin, crate::services::sources::Origin::Spi(_)))
            .map(|f| format!("{}: {}", f.service, f.why))
            .collect();
        SpiReport {
            destination: self.cfg.destination.clone(),
            client_id: self.client_id.clone(),
            brokers: self.cfg.brokers.clone(),
            healthy: self.healthy(),
            broker: BrokerReport {
                connected: b.broker.clone(),
                connected_since_ms: b.connected_since_ms,
                connections: b.connections,
                last_error: b.last_error.clone(),
                last_error_ms: b.last_error_at_ms,
            },
            events: Events {
                received: r(&c.received),
                applied: r(&c.applied),
                duplicates: r(&c.duplicates),
                failed: r(&c.failed),
                ignored: r(&c.ignored),
            },
            failures: self
                .failures
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned()
                .collect(),
            table,
            reconcile: self.cfg.rest_url.as_ref().map(|_| {
                self.reconcile
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone()
            }),
            peers: self.peers.load().as_ref().clone(),
            refused,
            keep_seen: self.keep_seen.read(),
        }
    }
}
