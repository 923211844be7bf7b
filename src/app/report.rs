//! What this balancer reports of itself: the status report (backends, peers,
//! rotations and how far each got, the scaler), the cluster view, and the
//! [`StatusSource`] the status listener reads.

use crate::cluster::ClusterView;
use crate::report::{self, FrontendReport, HealthReport, StatusReport};
use crate::rotation::{self, Op};
use crate::status::StatusSource;

use super::parts::App;

impl App {
    /// The status report.
    pub fn status(&self) -> StatusReport {
        StatusReport {
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            uptime_secs: self.seen.started.elapsed().as_secs(),
            gear_uuid: self.id.names.own_uuid.clone(),
            listen: self.seen.listen.clone(),
            frontend: FrontendReport::read(&self.frontend),
            backends: report::backend_reports(&self.router.snapshot()),
            gear_dns: self.id.dns.clone(),
            health: Some(HealthReport::from_settings(&self.health.load())),
            peers: self.peer_reports(),
            rotations: self.rotation_reports(),
            scaler: Some(self.scaler.report()),
            availability: Some(self.router.availability()),
            status_listener: Some(FrontendReport::read(&self.seen.status_counters)),
            services: self
                .services
                .views()
                .into_iter()
                .map(|v| report::ServiceStatus {
                    name: v.name.to_string(),
                    origin: v.origin.to_string(),
                    hosts: v.hosts,
                    paths: v.paths,
                    listen: v.listen.map(|l| l.to_string()),
                    mode: v.mode,
                    frontend: v.frontend.as_deref().map(FrontendReport::read),
                    availability: Some(v.router.availability()),
                    backends: report::backend_reports(&v.router.snapshot()),
                    versions: crate::services::versions_report(&v.router, &v.router.snapshot()),
                })
                .collect(),
            routing_spi: self.spi.get().map(|s| s.report()),
        }
    }

    fn peer_reports(&self) -> Vec<report::PeerReport> {
        self.cluster_view()
            .peers
            .iter()
            .map(|p| report::PeerReport {
                name: p
                    .name
                    .clone()
                    .or_else(|| p.id.clone())
                    .unwrap_or_else(|| p.addr.clone()),
                addr: p.addr.clone(),
                state: if p.live {
                    "alive"
                } else if p.known {
                    "dead"
                } else {
                    "unknown"
                }
                .into(),
                last_seen_secs: None,
                sessions: p.load.as_ref().map(|l| l.sessions),
            })
            .collect()
    }

    /// Rotate-outs in force, and rotate-ins of the last five minutes.
    fn rotation_reports(&self) -> Vec<report::RotationReport> {
        let view = self.cluster_view();
        let own = self.rotations.acks();
        let now_us = rotation::unix_ms() * 1000;
        self.rotations
            .ops()
            .values()
            .filter(|o| o.op == Op::Out || now_us.saturating_sub(o.ts) < 300_000_000)
            .map(|o| {
                let epoch = o.epoch();
                let done = rotation::complete::done_state(o.op);
                let mut total = 1;
                let mut finished = u32::from(
                    own.get(&o.gear)
                        .is_some_and(|a| a.epoch == epoch && a.state == done),
                );
                for p in view.peers.iter().filter(|p| p.live) {
                    total += 1;
                    let acked =
                        p.id.as_ref()
                            .and_then(|id| view.acks.get(id))
                            .and_then(|m| m.get(&o.gear))
                            .is_some_and(|a| a.epoch == epoch && a.state == done);
                    finished += u32::from(acked);
                }
                let state = match (o.op, finished == total) {
                    (Op::Out, true) => "drained",
                    (Op::Out, false) => "draining",
                    (Op::In, true) => "active",
                    (Op::In, false) => "waiting for peers",
                };
                report::RotationReport {
                    backend: format!("gear-{}", o.gear),
                    action: match o.op {
                        Op::Out => "out".into(),
                        Op::In => "in".into(),
                    },
                    state: state.into(),
                    age_secs: now_us.saturating_sub(o.ts) / 1_000_000,
                    balancers_done: finished,
                    balancers_total: total,
                }
            })
            .collect()
    }

    /// The cluster as this balancer sees it.
    pub fn cluster_view(&self) -> ClusterView {
        match &self.cluster {
            Some(c) => {
                let mut view = (*c.view()).clone().with_loads();
                view.gossip = c.gossip_counters();
                view
            }
            None => ClusterView::single(self.id.names.own_uuid.as_deref().unwrap_or("self")),
        }
    }
}

impl App {
    /// `gearlb ctl spi [reconcile]`: a router's routing SPI report (after reconciling
    /// with the broker's REST API, when asked).
    pub(super) async fn spi_reply(&self, reconcile: bool) -> crate::control::Reply {
        use crate::control::Reply;
        let Some(spi) = self.spi.get() else {
            return Reply::error(1, "not a router: this balancer has no [routing_spi]");
        };
        if reconcile {
            if let Err(e) = spi.reconcile_now().await {
                return Reply::error(1, e);
            }
        }
        Reply::ok("", serde_json::to_value(spi.report()).unwrap_or_default())
    }
}

impl StatusSource for App {
    fn report(&self) -> StatusReport {
        self.status()
    }

    fn healthy(&self) -> bool {
        // A router is healthy while its table is ready and current (it follows its
        // broker, or the table is young). Whether its gears answer is not asked: a
        // router whose applications' gears are down still answers them (503), and
        // keepalived's preempt delay covers a router back from a lost link whose checks
        // have not found its gears up again (examples/router/README.md).
        if let Some(spi) = self.spi.get() {
            return spi.healthy();
        }
        // A balancer of services alone is healthy while one of them can serve.
        self.router.load().can_serve()
            || self
                .services
                .views()
                .iter()
                .any(|v| v.router.load().can_serve())
    }

    fn service_healthy(&self, name: &str) -> Option<bool> {
        self.services.healthy(name)
    }

    fn services(&self) -> Option<std::sync::Arc<crate::services::ServiceSet>> {
        Some(self.services.clone())
    }

    fn metrics(&self) -> Result<String, std::fmt::Error> {
        self.seen.metrics.encode()
    }

    fn spi(&self) -> Option<(std::sync::Arc<crate::spi::Spi>, Option<String>)> {
        let spi = self.spi.get()?.clone();
        Some((spi, self.cluster_secret.clone()))
    }
}
