//! Services shared by the cluster: each balancer publishes its file services
//! (`sf:<name>`) and the instances registered with it (`sr:<service>/<backend>`) as
//! gossip keys, and reads its live peers' (see `cluster::keys`). Every balancer merges
//! the same inputs in the same order (`sources::order_files`), so a registered or
//! watched service is routed the same way everywhere within a gossip round or two.
//! A peer's keys count while it is live: when it dies, the instances registered with it
//! drain here too (they renew their leases with another balancer).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::sources::Registration;
use super::{Remote, ServiceSet};
use crate::cluster::keys::{
    REGISTRATION_PREFIX, SERVICE_FILE_PREFIX, VERSIONS_PREFIX, VERSION_ACK_PREFIX,
};
use crate::cluster::Cluster;
use crate::config::ServiceConfig;

/// How often the keys are compared (a gossip round is 100 ms to 1 s).
const EVERY: Duration = Duration::from_millis(200);

/// Publish this balancer's keys and apply its peers' until `stop`.
pub async fn share(services: Arc<ServiceSet>, cluster: Arc<Cluster>, stop: CancellationToken) {
    let mut published: BTreeMap<String, String> = BTreeMap::new();
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let local = services.local_keys().await;
        let mut pushed = false;
        for (k, v) in &local {
            if published.get(k) != Some(v) {
                cluster.publish(k, v.clone()).await;
                pushed = true;
            }
        }
        for k in published.keys().filter(|k| !local.contains_key(*k)) {
            cluster.unpublish(k).await;
            pushed = true;
        }
        if pushed {
            // A registration reaches the others now, not at the next random round.
            cluster.push_now();
        }
        published = local;
        let files = cluster.peer_keys(SERVICE_FILE_PREFIX).await;
        let regs = cluster.peer_keys(REGISTRATION_PREFIX).await;
        let ops = cluster.peer_keys(VERSIONS_PREFIX).await;
        let mut remote = decode(files, regs);
        for (node, key, value) in ops {
            let Some(service) = key.strip_prefix(VERSIONS_PREFIX) else {
                continue;
            };
            match serde_json::from_str::<super::state::VersionOps>(&value) {
                Ok(o) => remote.version_ops.push((node, service.to_string(), o)),
                Err(e) => debug!(%node, %key, error = %e, "peer's version key skipped"),
            }
        }
        remote
            .version_ops
            .sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        for (node, key, value) in cluster.peer_keys(VERSION_ACK_PREFIX).await {
            if let (Some(service), Ok(at)) = (key.strip_prefix(VERSION_ACK_PREFIX), value.parse()) {
                remote.version_acks.push((node, service.to_string(), at));
            }
        }
        remote.version_acks.sort();
        let view = cluster.view();
        remote.live = view
            .live
            .iter()
            .filter(|id| **id != view.self_id)
            .cloned()
            .collect();
        services.set_remote(remote).await;
    }
}

#[derive(serde::Deserialize)]
struct SharedFile {
    path: PathBuf,
    service: ServiceConfig,
}

/// Peers' keys as sources; a value that does not decode is skipped.
fn decode(files: Vec<(String, String, String)>, regs: Vec<(String, String, String)>) -> Remote {
    let mut remote = Remote::default();
    for (node, key, value) in files {
        match serde_json::from_str::<SharedFile>(&value) {
            Ok(f) => remote.files.push((node, f.path, f.service)),
            Err(e) => debug!(%node, %key, error = %e, "peer's service key skipped"),
        }
    }
    for (node, key, value) in regs {
        match serde_json::from_str::<Registration>(&value) {
            Ok(r) => remote.regs.push((node, r)),
            Err(e) => debug!(%node, %key, error = %e, "peer's registration key skipped"),
        }
    }
    remote.files.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    remote.regs.sort_by(|a, b| {
        (&a.0, &a.1.service, &a.1.backend).cmp(&(&b.0, &b.1.service, &b.1.backend))
    });
    remote
}
