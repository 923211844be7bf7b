//! The cluster's collection: gossip, rotation and scaler metrics read at scrape time,
//! and the rotate-command counters this balancer keeps for them.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::family::{counter, counter_f64, family, gauge, labels};

/// Counters of rotate commands taken by this balancer.
#[derive(Debug, Default)]
pub struct RotationCounters {
    pub out_ok: AtomicU64,
    pub out_failed: AtomicU64,
    pub in_ok: AtomicU64,
    pub in_failed: AtomicU64,
    /// Requests and tunnels cut at drain deadlines, over all balancers' acks.
    pub forced: AtomicU64,
    /// Sum of the durations of finished rotate commands, milliseconds.
    pub duration_ms: AtomicU64,
}

/// Gossip, rotation and scaler metrics, read at scrape time.
pub struct ClusterCollector {
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
    pub scaler: Arc<crate::scaler::Scaler>,
    pub rotations: Arc<RotationCounters>,
}

impl fmt::Debug for ClusterCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterCollector").finish_non_exhaustive()
    }
}

impl Collector for ClusterCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        let e = &mut enc;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        if let Some(c) = &self.cluster {
            let v = c.view();
            let g = c.gossip_counters();
            let live = v.peers.iter().filter(|p| p.live).count() as u64;
            let dead = v.peers.iter().filter(|p| !p.live).count() as u64;
            family(
                e,
                "gearlb_gossip_peers",
                "Peer balancers by liveness as this balancer sees them (itself excluded).",
                MetricType::Gauge,
                &[
                    (labels(&[("state", "live")]), live),
                    (labels(&[("state", "dead")]), dead),
                ],
            )?;
            counter(
                e,
                "gearlb_gossip_frames_sent",
                "Gossip frames sent.",
                g.frames_sent,
            )?;
            counter(
                e,
                "gearlb_gossip_frames_received",
                "Authenticated gossip frames received.",
                g.frames_received,
            )?;
            counter(
                e,
                "gearlb_gossip_bytes_sent",
                "Bytes of the gossip frames sent (after delta coding and sealing).",
                g.bytes_sent,
            )?;
            counter(
                e,
                "gearlb_gossip_bytes_received",
                "Bytes of the authenticated gossip frames received.",
                g.bytes_received,
            )?;
            family(
                e,
                "gearlb_gossip_frames_rejected",
                "Gossip frames dropped, by reason.",
                MetricType::Counter,
                &[
                    (labels(&[("reason", "bad_tag")]), g.rejected_bad_tag),
                    (
                        labels(&[("reason", "other_cluster")]),
                        g.rejected_other_cluster,
                    ),
                    (labels(&[("reason", "malformed")]), g.rejected_malformed),
                    (labels(&[("reason", "oversized")]), g.rejected_oversized),
                ],
            )?;
            counter(
                e,
                "gearlb_gossip_handshakes_rejected",
                "Gossip upgrade requests on the proxy port refused (no valid proof of the cluster secret).",
                g.rejected_handshake,
            )?;
            counter(
                e,
                "gearlb_gossip_send_failures",
                "Gossip frames that could not be sent.",
                g.send_failures,
            )?;
        }
        let rc = &*self.rotations;
        family(
            e,
            "gearlb_rotations",
            "Rotate commands taken by this balancer, by operation and result.",
            MetricType::Counter,
            &[
                (
                    labels(&[("op", "out"), ("result", "success")]),
                    r(&rc.out_ok),
                ),
                (
                    labels(&[("op", "out"), ("result", "failure")]),
                    r(&rc.out_failed),
                ),
                (labels(&[("op", "in"), ("result", "success")]), r(&rc.in_ok)),
                (
                    labels(&[("op", "in"), ("result", "failure")]),
                    r(&rc.in_failed),
                ),
            ],
        )?;
        counter(
            e,
            "gearlb_rotation_forced",
            "Requests and tunnels cut at drain deadlines (rotations taken here).",
            r(&rc.forced),
        )?;
        counter_f64(
            e,
            "gearlb_rotation_duration_seconds",
            "Total time of rotate commands taken here, seconds.",
            r(&rc.duration_ms) as f64 / 1000.0,
        )?;
        let rep = self.scaler.report();
        let c = self.scaler.counters();
        gauge(
            e,
            "gearlb_scaler_acting",
            "1 while this balancer acts as the application's scaler.",
            i64::from(rep.acting),
        )?;
        gauge(
            e,
            "gearlb_scaler_quorum",
            "1 while this balancer sees a quorum of the known balancers.",
            i64::from(rep.quorum),
        )?;
        gauge(
            e,
            "gearlb_scaler_capacity_percent",
            "Capacity at the scaler's last check, percent.",
            rep.capacity.round() as i64,
        )?;
        family(
            e,
            "gearlb_scaler_decisions",
            "Scale decisions made here, by event.",
            MetricType::Counter,
            &[
                (labels(&[("event", "scale-up")]), c.0),
                (labels(&[("event", "scale-down")]), c.1),
            ],
        )?;
        family(
            e,
            "gearlb_broker_calls",
            "Broker calls made here, by outcome.",
            MetricType::Counter,
            &[
                (labels(&[("outcome", "done")]), c.2),
                (labels(&[("outcome", "at_limit")]), c.3),
                (labels(&[("outcome", "failed")]), c.4),
            ],
        )?;
        Ok(())
    }
}
