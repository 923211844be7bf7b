//! A router's routing SPI metrics, read at scrape time from its report: whether it is
//! connected to a broker and healthy, the events by outcome, the table's age and
//! applications, and the differences reconciliation repaired. Nothing before the
//! routing SPI starts (or on a balancer that is not a router).

use std::fmt;
use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::family::{counter, family, gauge, labels};

/// The routing SPI's metrics.
pub struct SpiCollector {
    pub spi: Arc<OnceLock<Arc<crate::spi::Spi>>>,
}

impl fmt::Debug for SpiCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpiCollector").finish_non_exhaustive()
    }
}

impl Collector for SpiCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(spi) = self.spi.get() else {
            return Ok(());
        };
        let r = spi.report();
        let e = &mut enc;
        gauge(
            e,
            "gearlb_routing_spi_connected",
            "1 while the router is subscribed at a broker.",
            i64::from(r.broker.connected.is_some()),
        )?;
        gauge(
            e,
            "gearlb_routing_spi_healthy",
            "1 while /health answers 200 (a broker connected, or the table young enough).",
            i64::from(r.healthy),
        )?;
        let ev = &r.events;
        family(
            e,
            "gearlb_routing_spi_events",
            "Routing events by what became of them: applied, delivered again (recognised, not applied twice), refused (acknowledged, nothing changed), not routing changes.",
            MetricType::Counter,
            &[
                (labels(&[("outcome", "applied")]), ev.applied),
                (labels(&[("outcome", "duplicate")]), ev.duplicates),
                (labels(&[("outcome", "refused")]), ev.failed),
                (labels(&[("outcome", "ignored")]), ev.ignored),
            ],
        )?;
        let t = &r.table;
        family(
            e,
            "gearlb_routing_spi_applications",
            "Applications of the router's table: routed (a load-balancer endpoint), pending.",
            MetricType::Gauge,
            &[
                (labels(&[("state", "routed")]), t.routed as u64),
                (
                    labels(&[("state", "pending")]),
                    t.applications.saturating_sub(t.routed) as u64,
                ),
            ],
        )?;
        gauge(
            e,
            "gearlb_routing_spi_certificates",
            "Aliases served with a certificate of their own.",
            t.certificates as i64,
        )?;
        if let Some(age) = t.age_s {
            gauge(
                e,
                "gearlb_routing_spi_table_age_seconds",
                "Seconds since the table was last known current.",
                age as i64,
            )?;
        }
        if let Some(rc) = &r.reconcile {
            counter(
                e,
                "gearlb_routing_spi_repaired",
                "Differences with the broker's REST API that reconciliation repaired.",
                rc.repaired_total,
            )?;
        }
        let differ = r.peers.iter().filter(|p| !p.agrees).count();
        gauge(
            e,
            "gearlb_routing_spi_peers_differing",
            "Peer routers whose table routes differently from this one's.",
            differ as i64,
        )?;
        Ok(())
    }
}
