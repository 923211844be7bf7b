//! The local drain, and this balancer's acknowledgments: the loop that keeps the
//! routing table in step with the ops in force, drains rotated-out gears (stop
//! choosing them, close idle connections, let what is in flight finish, cut what is
//! left at the deadline), and publishes ops and acks in gossip.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::store::Rotations;
use crate::cluster::{keys, Cluster};
use crate::routing::{Admin, Router};
use gearlb_core::rotation::register::{unix_ms, Ack, AckState, Op, RotationOp};

/// Keep the local drain state in step with the ops in force until `stop`. `persist`
/// is called with the ops whenever they change.
///
/// Ops and acknowledgments travel by ordinary gossip rounds, with two shortcuts that
/// cost O(M) messages per rotation, not O(M²): the balancer that took a command
/// gossips its op to every live peer once ([`Rotations::fan_out`]), and a balancer
/// whose acknowledgment of an op changes sends it straight to the op's origin, the one
/// waiting for it, as a note ([`Cluster::send_ack`]).
pub async fn run(
    rotations: Arc<Rotations>,
    router: Arc<Router>,
    services: impl Fn(&str) -> Option<Arc<Router>> + Send + 'static,
    cluster: Option<Arc<Cluster>>,
    persist: impl Fn(Vec<RotationOp>) + Send + 'static,
    stop: CancellationToken,
) {
    let mut local = rotations.subscribe();
    let mut views = cluster.as_ref().map(|c| c.subscribe());
    let mut tables = router.subscribe();
    let mut published_ops: BTreeMap<String, RotationOp> = BTreeMap::new();
    let mut published_acks: BTreeMap<String, Ack> = BTreeMap::new();
    let mut last_persisted: Option<BTreeMap<String, RotationOp>> = None;
    let mut learnt_version = None;
    let mut last_table = None;
    let self_id = cluster.as_ref().map(|c| c.self_id().to_string());
    let mut first = true;
    loop {
        // While a gear drains, look at it every 100 ms (requests finish, the deadline
        // comes); otherwise only changes wake this loop (and the start).
        let draining = published_acks
            .values()
            .any(|a| a.state == AckState::Draining);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = std::future::ready(()), if first => first = false,
            _ = tokio::time::sleep(Duration::from_millis(100)), if draining => {}
            _ = local.changed() => {}
            _ = tables.changed() => {}
            _ = async {
                match views.as_mut() {
                    Some(v) => { let _ = v.changed().await; }
                    None => std::future::pending::<()>().await,
                }
            } => {}
        }
        if let Some(c) = &cluster {
            let view = c.view();
            if learnt_version != Some(view.versions.rotations) {
                rotations.learn(view.rotations.values());
                learnt_version = Some(view.versions.rotations);
            }
        }
        let ops = rotations.ops();
        let table = *tables.borrow_and_update();
        // Nothing new and nothing draining: every ack is what it was.
        if last_persisted.as_ref() == Some(&ops) && last_table == Some(table) && !draining {
            continue;
        }
        last_table = Some(table);
        if last_persisted.as_ref() != Some(&ops) {
            persist(ops.values().cloned().collect());
            last_persisted = Some(ops.clone());
        }
        // A service's backend is rotated as `<service>/<backend>`, in its own router.
        let mut out: BTreeMap<&str, HashSet<String>> = BTreeMap::new();
        for o in ops.values() {
            let (service, label) = o.gear.split_once('/').unwrap_or(("", &o.gear));
            let set = out.entry(service).or_default();
            if o.op == Op::Out {
                set.insert(label.to_string());
            }
        }
        let mut routers: BTreeMap<&str, Arc<Router>> = BTreeMap::new();
        for (service, labels) in out {
            let r = if service.is_empty() {
                Some(router.clone())
            } else {
                services(service)
            };
            if let Some(r) = r {
                r.set_rotated_out(labels);
                routers.insert(service, r);
            }
        }

        let now = unix_ms();
        let mut tables = BTreeMap::new();
        let mut acks = BTreeMap::new();
        for (gear, op) in &ops {
            let (service, label) = gear.split_once('/').unwrap_or(("", gear));
            let ack = match routers.get(service) {
                Some(r) => {
                    let table = tables.entry(service).or_insert_with(|| r.snapshot());
                    apply(&rotations, r, table, label, op, now)
                }
                // A service this balancer does not have: nothing in flight from here.
                None => not_here(&rotations, op),
            };
            acks.insert(gear.clone(), ack);
        }
        if acks != published_acks {
            if let Ok(mut a) = rotations.acks.lock() {
                *a = acks.clone();
            }
            rotations.acks_changed.send_modify(|g| *g += 1);
        }

        if let Some(c) = &cluster {
            let fan_out: HashSet<String> = rotations
                .fan_out
                .lock()
                .map(|mut f| std::mem::take(&mut *f))
                .unwrap_or_default();
            let mut push_all = false;
            for (gear, op) in &ops {
                if published_ops.get(gear) != Some(op) {
                    if let Ok(v) = serde_json::to_string(op) {
                        c.publish(&format!("{}{gear}", keys::ROTATION_PREFIX), v)
                            .await;
                    }
                    push_all |= fan_out.contains(&op.epoch());
                }
            }
            let mut to_origins = Vec::new();
            for (gear, ack) in &acks {
                if published_acks.get(gear) != Some(ack) {
                    if let Ok(v) = serde_json::to_string(ack) {
                        c.publish(&format!("{}{gear}", keys::ACK_PREFIX), v).await;
                    }
                    if let Some(op) = ops.get(gear).filter(|o| Some(&o.by) != self_id.as_ref()) {
                        to_origins.push((op.by.as_str(), gear, ack));
                    }
                }
            }
            if push_all {
                c.push_now();
            }
            for (origin, gear, ack) in to_origins {
                c.send_ack(origin, gear, ack).await;
            }
        }
        published_ops = ops;
        published_acks = acks;
    }
}

/// The acknowledgment of an op on a backend of a service this balancer does not have.
fn not_here(rotations: &Rotations, op: &RotationOp) -> Ack {
    let epoch = op.epoch();
    let forced = rotations
        .forced
        .lock()
        .ok()
        .and_then(|f| f.get(&epoch).copied())
        .unwrap_or(0);
    Ack {
        epoch,
        state: match op.op {
            Op::Out => AckState::Drained,
            Op::In => AckState::Active,
        },
        inflight: 0,
        forced,
    }
}

/// Bring one gear in line with its op; returns this balancer's acknowledgment.
fn apply(
    rotations: &Rotations,
    router: &Router,
    table: &crate::routing::Snapshot,
    gear: &str,
    op: &RotationOp,
    now_ms: u64,
) -> Ack {
    let epoch = op.epoch();
    let entry = table
        .label_position(gear)
        .map(|i| (&table.entries()[i], &table.targets()[i]));
    let forced_before = rotations
        .forced
        .lock()
        .ok()
        .and_then(|f| f.get(&epoch).copied());
    match op.op {
        Op::In => {
            if let Some((e, t)) = entry {
                if e.admin != Admin::Active {
                    t.pool.reopen();
                    router.set_admin_of(gear, Admin::Active);
                    info!(gear, by = %op.by, "gear rotated in");
                }
            }
            Ack {
                epoch,
                state: AckState::Active,
                inflight: 0,
                forced: 0,
            }
        }
        Op::Out => {
            let Some((e, b)) = entry else {
                // Not one of our backends: nothing can be in flight to it from here.
                return Ack {
                    epoch,
                    state: AckState::Drained,
                    inflight: 0,
                    forced: forced_before.unwrap_or(0),
                };
            };
            if e.admin == Admin::Active {
                router.set_admin_of(gear, Admin::Draining);
                b.pool.close();
                info!(gear, by = %op.by, "gear draining (rotate-out)");
            }
            // Requests in flight and open tunnels (a tunnel keeps its request's count).
            let inflight = b.outstanding();
            let open = b.pool.open_connections();
            let mut forced = forced_before.unwrap_or(0);
            if (inflight > 0 || open > 0) && now_ms >= op.deadline_ms && forced_before.is_none() {
                // Cut once per op; remembered even when only idle connections were left.
                forced = inflight;
                warn!(gear, cut = inflight, "drain deadline: closing what is left");
                b.pool.force_close();
                if let Ok(mut f) = rotations.forced.lock() {
                    f.insert(epoch.clone(), forced);
                }
            }
            let drained = inflight == 0 && open == 0;
            if drained && e.admin != Admin::Drained {
                router.set_admin_of(gear, Admin::Drained);
                info!(gear, "gear drained");
            }
            Ack {
                epoch,
                state: if drained {
                    AckState::Drained
                } else {
                    AckState::Draining
                },
                inflight,
                forced,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::{BackendSpec, BackendState};
    use std::sync::atomic::Ordering;

    fn router_with(gear: &str) -> Arc<Router> {
        let r = Arc::new(Router::new(2));
        r.replace_backends(vec![BackendSpec {
            name: format!("gear-{gear}"),
            addr: "127.0.0.1:1".parse().unwrap(),
            gear_dns: Some(format!("{gear}.example.com")),
            cookie: None,
            backup: false,
            max_connections: None,
            version: None,
            compatible: Vec::new(),
            send_proxy: None,
        }]);
        r
    }

    #[test]
    fn drain_waits_for_in_flight_then_acks_drained() {
        let router = router_with("web1-ns");
        let rot = Rotations::new(vec![]);
        let o = rot.submit("web1-ns", Op::Out, "lb1", Duration::from_secs(60));
        let backend = router.load().targets()[0].clone();
        backend.stats.request_started();
        let ack = apply(&rot, &router, &router.snapshot(), "web1-ns", &o, unix_ms());
        assert_eq!(ack.state, AckState::Draining);
        assert_eq!(ack.inflight, 1);
        assert_eq!(router.load().entries()[0].state(), BackendState::Draining);
        assert!(router.load().select().is_none(), "no new requests");
        backend.stats.request_finished();
        let ack = apply(&rot, &router, &router.snapshot(), "web1-ns", &o, unix_ms());
        assert_eq!(ack.state, AckState::Drained);
        assert_eq!(ack.epoch, o.epoch());
        assert_eq!(router.load().entries()[0].state(), BackendState::Drained);
    }

    #[test]
    fn deadline_cuts_and_counts() {
        let router = router_with("web1-ns");
        let rot = Rotations::new(vec![]);
        let o = rot.submit("web1-ns", Op::Out, "lb1", Duration::from_secs(1));
        let backend = router.load().targets()[0].clone();
        // An open tunnel: its upgrade request's session, counted once.
        backend.stats.request_started();
        backend.tunnels.fetch_add(1, Ordering::Relaxed);
        let ack = apply(
            &rot,
            &router,
            &router.snapshot(),
            "web1-ns",
            &o,
            o.deadline_ms + 1,
        );
        assert_eq!(ack.forced, 1);
        assert!(backend.pool.kill_token().is_cancelled());
        backend.tunnels.fetch_sub(1, Ordering::Relaxed);
        backend.stats.request_finished();
        let ack = apply(
            &rot,
            &router,
            &router.snapshot(),
            "web1-ns",
            &o,
            o.deadline_ms + 2,
        );
        assert_eq!((ack.state, ack.forced), (AckState::Drained, 1));
    }

    #[test]
    fn rotate_in_restores_and_rotated_gears_stay_out_on_update_cluster() {
        let router = router_with("web1-ns");
        let rot = Rotations::new(vec![]);
        let o = rot.submit("web1-ns", Op::Out, "lb1", Duration::from_secs(60));
        apply(&rot, &router, &router.snapshot(), "web1-ns", &o, unix_ms());
        router.set_rotated_out(["web1-ns".to_string()].into_iter().collect());
        // update-cluster re-creating the gear (new address) keeps it out.
        router.replace_backends(vec![BackendSpec {
            name: "gear-web1-ns".into(),
            addr: "127.0.0.1:2".parse().unwrap(),
            gear_dns: Some("web1-ns.example.com".into()),
            cookie: None,
            backup: false,
            max_connections: None,
            version: None,
            compatible: Vec::new(),
            send_proxy: None,
        }]);
        assert_eq!(router.load().entries()[0].state(), BackendState::Drained);
        let i = rot.submit("web1-ns", Op::In, "lb2", Duration::ZERO);
        let ack = apply(&rot, &router, &router.snapshot(), "web1-ns", &i, unix_ms());
        assert_eq!(ack.state, AckState::Active);
        assert_eq!(router.load().entries()[0].state(), BackendState::Up);
        assert!(!router.load().targets()[0].pool.is_closed());
    }
}
