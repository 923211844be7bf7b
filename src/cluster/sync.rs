//! Keeps this balancer's routing table and its gossip keys in step with the cluster.
//!
//! Owns the loop that, whenever the cluster view or the backend set changes, recomputes
//! this balancer's subset (`routing::subset::assign` over the live balancers), marks
//! out-of-subset gears up or down from the health their covering balancers report, and
//! publishes this balancer's own `health` (for the gears it covers) and, once a second,
//! its `load`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::info;

use super::{Cluster, Load};
use crate::routing::{subset, Router};
use crate::stats::FrontendStats;

/// Run until `stop`.
pub async fn run(
    cluster: Arc<Cluster>,
    router: Arc<Router>,
    frontend: Arc<FrontendStats>,
    coverage: Arc<AtomicU32>,
    stop: CancellationToken,
) {
    let mut views = cluster.subscribe();
    let mut tables = router.subscribe();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_health = String::new();
    let mut last_requests = frontend.requests_total.load(Ordering::Relaxed);
    let mut last_subset: Option<(usize, usize)> = None;
    loop {
        let mut publish_load = false;
        tokio::select! {
            _ = stop.cancelled() => return,
            r = views.changed() => if r.is_err() { return },
            r = tables.changed() => if r.is_err() { return },
            _ = tick.tick() => publish_load = true,
        }
        let view = cluster.view();
        let table = router.snapshot();
        let labels: Vec<&str> = table
            .entries()
            .iter()
            .map(|e| e.backend.sticky.as_str())
            .collect();
        let live: Vec<&str> = view.live.iter().map(String::as_str).collect();
        let mine = subset::assign(
            cluster.self_id(),
            &live,
            &labels,
            coverage.load(Ordering::Relaxed),
        );
        router.apply_cluster(
            |label| mine.contains(label),
            |label| view.remote_health(label),
        );
        if last_subset != Some((mine.len(), live.len())) {
            info!(
                gears = mine.len(),
                of = labels.len(),
                balancers = live.len(),
                "subset computed"
            );
            last_subset = Some((mine.len(), live.len()));
        }

        let now = router.snapshot();
        let health: BTreeMap<&str, bool> = now
            .entries()
            .iter()
            .filter(|e| e.in_subset)
            .map(|e| (e.backend.sticky.as_str(), e.up))
            .collect();
        let health = serde_json::to_string(&health).unwrap_or_default();
        if health != last_health {
            cluster.publish("health", health.clone()).await;
            last_health = health;
        }

        if publish_load {
            let sessions = frontend.connections_current.load(Ordering::Relaxed);
            let requests = frontend.requests_total.load(Ordering::Relaxed);
            let load = Load {
                sessions,
                sessions_avg: (frontend.inflight_average() * 100.0).round() / 100.0,
                rps: requests.saturating_sub(last_requests) as f64,
                in_flight: frontend.requests_current.load(Ordering::Relaxed),
            };
            last_requests = requests;
            if let Ok(v) = serde_json::to_string(&load) {
                cluster.publish("load", v).await;
            }
        }
    }
}
