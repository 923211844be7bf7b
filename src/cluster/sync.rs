//! Keeps this balancer's routing table and its gossip keys in step with the cluster.
//!
//! Owns the loop that, whenever the live balancers, the backend set, the coverage or a
//! peer's health report changes, recomputes every live balancer's subset
//! (`routing::subset`), marks this balancer's gears in or out of its subset, sets the
//! health of the others from the peers' reports ([`super::ClusterView::remote_health_all`]),
//! and publishes this balancer's own health report: its subset epoch (`hs`) and the
//! gears of its subset found down, in bounded buckets (`hd:`, see [`super::keys`]).
//! It also publishes this balancer's `load` once a second.
//!
//! Recomputing every subset costs O(M × N) (about 1.3 ms at M = 100, N = 1 000), so it is
//! done only when what the subsets are computed from changed (the live balancers and
//! when they started, the gears, the coverage: their epoch), not for a peer's health
//! report or a health or rotation change in the table; and at most once per
//! [`SETTLE`]: a burst of membership changes (a cold start, a flapping peer, a
//! partition's heal) costs one recompute per settle period, not one per change. The
//! inputs that came meanwhile are all taken in by the next one.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::info;

use super::{keys, Cluster, Load};
use crate::routing::{subset, Backend, Router};
use crate::stats::FrontendStats;

/// The shortest time between two recomputations of the subsets.
pub const SETTLE: Duration = Duration::from_millis(250);

/// The longest it grows to while the subsets' inputs keep changing.
pub const MAX_SETTLE: Duration = Duration::from_secs(2);

/// The settle period after the subsets were computed anew `since` after the time
/// before: doubled (up to [`MAX_SETTLE`]) while the live set keeps changing (a flapping
/// cluster, whose recomputations would otherwise starve the very balancers whose
/// heartbeats make it flap), back to [`SETTLE`] after a quiet spell of four periods.
pub fn next_settle(current: Duration, since: Duration) -> Duration {
    if since <= current * 2 {
        (current * 2).min(MAX_SETTLE)
    } else if since >= current * 4 {
        SETTLE
    } else {
        current
    }
}

/// What subsets and remote health are computed from: (the versions of) the live
/// balancers and when they started, the routing table's generation, the coverage and
/// (the version of) the peers' health reports.
type Inputs = (u64, u64, u32, u64);

/// The members (`id@started`), coverage and backends an epoch was computed from, and
/// the epoch.
type EpochInputs = (Vec<String>, u32, Vec<Arc<Backend>>, String);

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
    let mut last_requests = frontend.requests_total.load(Ordering::Relaxed);
    let mut last_subset: Option<(usize, usize)> = None;
    // What the routing table was last brought in line with.
    let mut applied: Option<Inputs> = None;
    let mut published_epoch = String::new();
    let mut published_down: BTreeMap<String, String> = BTreeMap::new();
    // When the subsets were last recomputed, and a recomputation put off until then.
    let mut recomputed: Option<tokio::time::Instant> = None;
    let mut due: Option<tokio::time::Instant> = None;
    // The subsets last computed, by their epoch (a hash of exactly what they are
    // computed from): a change of the peers' reports or of the table's health and
    // rotation states reuses them.
    let mut assigned: Option<(String, Arc<subset::Assignment>)> = None;
    // The epoch last computed, with what it was computed from (see below).
    let mut epoch_of: Option<EpochInputs> = None;
    let mut settle = SETTLE;
    let mut assigned_at: Option<tokio::time::Instant> = None;
    loop {
        let mut publish_load = false;
        tokio::select! {
            _ = stop.cancelled() => return,
            r = views.changed() => if r.is_err() { return },
            r = tables.changed() => if r.is_err() { return },
            _ = tick.tick() => publish_load = true,
            _ = async { tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)).await }, if due.is_some() => due = None,
        }
        let view = cluster.view();
        let generation = *tables.borrow_and_update();
        let cov = coverage.load(Ordering::Relaxed);
        let unchanged = applied.as_ref().is_some_and(|(members, g, c, reports)| {
            *members == view.versions.members
                && *g == generation
                && *c == cov
                && *reports == view.versions.reports
        });
        let turn = tokio::time::Instant::now();
        let settled = recomputed.is_none_or(|at| turn >= at + settle);
        if !unchanged && !settled {
            // Put off: the changes that come meanwhile are taken in with this one.
            due = recomputed.map(|at| at + settle);
        }
        if !unchanged && settled {
            recomputed = Some(turn);
            due = None;
            let table = router.snapshot();
            // The gears' names, gathered only for a new epoch or subsets.
            let labels = || -> Vec<&str> {
                table
                    .entries()
                    .iter()
                    .map(|e| e.backend.sticky.as_str())
                    .collect()
            };
            let live: Vec<&str> = view.live.iter().map(String::as_str).collect();
            // Subsets depend on when each balancer started: so does the epoch.
            let members: Vec<(&str, u64)> = live
                .iter()
                .map(|id| (*id, view.started.get(*id).copied().unwrap_or(0)))
                .collect();
            let named: Vec<String> = members.iter().map(|(id, g)| format!("{id}@{g}")).collect();
            // The epoch hashes every gear, sorted: most turns (a peer's report, a
            // health change) keep the same balancers, coverage and backends (the same
            // `Arc`s, held here so none is reused), and reuse it.
            let same = epoch_of.as_ref().is_some_and(|(n, c, b, _)| {
                *n == named
                    && *c == cov
                    && b.len() == table.entries().len()
                    && b.iter()
                        .zip(table.entries())
                        .all(|(x, e)| Arc::ptr_eq(x, &e.backend))
            });
            if !same {
                epoch_of = None;
            }
            let (.., epoch) = epoch_of.get_or_insert_with(|| {
                let names: Vec<&str> = named.iter().map(String::as_str).collect();
                let epoch = keys::subset_epoch(&names, &labels(), cov);
                let backends = table.entries().iter().map(|e| e.backend.clone()).collect();
                (named, cov, backends, epoch)
            });
            let epoch = epoch.clone();
            let all = match &assigned {
                Some((e, a)) if *e == epoch => a.clone(),
                _ => {
                    if let Some(at) = assigned_at {
                        settle = next_settle(settle, turn - at);
                    }
                    assigned_at = Some(turn);
                    let a = Arc::new(subset::Assignment::new(&members, &labels(), cov));
                    assigned = Some((epoch.clone(), a.clone()));
                    a
                }
            };
            // This balancer's k gears and the peers' coverage, each gathered once from
            // the subsets: no walk of every gear per balancer.
            let mine: HashSet<&str> = all.subset_of(cluster.self_id()).collect();
            let remote = view.remote_health_all(&epoch, &all);
            router.apply_cluster(|label| mine.contains(label), |label| remote.get(label));
            if last_subset != Some((mine.len(), live.len())) {
                info!(
                    gears = mine.len(),
                    of = table.entries().len(),
                    balancers = live.len(),
                    "subset computed"
                );
                last_subset = Some((mine.len(), live.len()));
            }

            let now = router.snapshot();
            let down = keys::down_buckets(
                now.entries()
                    .iter()
                    .filter(|e| e.in_subset && !e.up)
                    .map(|e| e.backend.sticky.as_str()),
            );
            let mut writes: Vec<(String, String)> = Vec::new();
            for (k, v) in &down {
                if published_down.get(k) != Some(v) {
                    writes.push((k.clone(), v.clone()));
                }
            }
            for (k, v) in &published_down {
                if !down.contains_key(k) && v != "[]" {
                    writes.push((k.clone(), "[]".into()));
                }
            }
            if epoch != published_epoch {
                writes.push((keys::SUBSET_EPOCH.into(), epoch.clone()));
                published_epoch = epoch;
            }
            for (k, v) in writes {
                published_down.insert(k.clone(), v.clone());
                cluster.publish(&k, v).await;
            }
            published_down.retain(|k, _| k.starts_with(keys::DOWN_PREFIX));
            // Our own edits published a new table: that one is in line already.
            applied = Some((
                view.versions.members,
                *tables.borrow_and_update(),
                cov,
                view.versions.reports,
            ));
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
                cluster.publish(keys::LOAD, v).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settle_period_backs_off_while_the_inputs_keep_changing() {
        let ms = Duration::from_millis;
        let mut s = SETTLE;
        for (since, want) in [(250, 500), (500, 1000), (1000, 2000), (2000, 2000)] {
            s = next_settle(s, ms(since));
            assert_eq!(s, ms(want), "after {since} ms");
        }
        assert_eq!(
            next_settle(s, ms(5000)),
            MAX_SETTLE,
            "between two and four periods"
        );
        assert_eq!(next_settle(s, ms(8000)), SETTLE, "quiet for four periods");
    }
}
