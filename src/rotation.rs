//! Rotate-out and rotate-in of web gears, agreed by every balancer.
//!
//! Owns the rotation register, the local drain, and acknowledgments.
//!
//! - **Register.** Per gear, the latest operation wins: an [`RotationOp`] (`out` with a
//!   drain deadline, or `in`) stamped with a hybrid logical clock and the node id, ties
//!   broken by node id ([`merge`], pure). Every balancer publishes the ops it knows
//!   under `rot:<gear>` in its own gossip keys, so an op outlives the balancer that
//!   issued it, and a balancer joining later learns it from gossip and from its state
//!   file. Ops are persistent: nothing but a later op changes a gear's rotation.
//! - **Drain.** For an `out` op, a balancer stops choosing the gear (sticky requests are
//!   redispatched and re-pinned), closes its idle pooled connections, and lets requests
//!   and tunnels in flight finish. When none is left and every connection to the gear is
//!   closed it is drained. At the deadline whatever is left is cut, and counted as forced.
//! - **Acks.** Each balancer publishes `ack:<gear>` = `{epoch, state, inflight, forced}`
//!   for the op in force; the balancer that took the command completes when every live
//!   known peer acked that epoch (see `server`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::cluster::{keys, Cluster};
use crate::routing::{Admin, Router};

/// The two operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Out,
    In,
}

/// One rotation command, as every balancer stores and gossips it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RotationOp {
    /// The gear's sticky label, `<gearname>-<ns>`.
    pub gear: String,
    pub op: Op,
    /// Hybrid logical timestamp (microseconds).
    pub ts: u64,
    /// Node id of the balancer that took the command.
    pub by: String,
    /// `out`: when remaining requests and tunnels are cut (Unix milliseconds).
    #[serde(default)]
    pub deadline_ms: u64,
}

impl RotationOp {
    /// Identifies this op in acknowledgments.
    pub fn epoch(&self) -> String {
        format!("{}.{}", self.ts, self.by)
    }

    fn order(&self) -> (u64, &str) {
        (self.ts, &self.by)
    }
}

/// Per gear, the op in force: the latest by (timestamp, node id).
pub fn merge<'a>(ops: impl IntoIterator<Item = &'a RotationOp>) -> BTreeMap<String, RotationOp> {
    let mut out: BTreeMap<String, RotationOp> = BTreeMap::new();
    for op in ops {
        match out.get(&op.gear) {
            Some(cur) if cur.order() >= op.order() => {}
            _ => {
                out.insert(op.gear.clone(), op.clone());
            }
        }
    }
    out
}

/// Merge one op into a register of ops in force; true when it changed the register.
pub fn merge_into(register: &mut BTreeMap<String, RotationOp>, op: RotationOp) -> bool {
    match register.get(&op.gear) {
        Some(cur) if cur.order() >= op.order() => false,
        _ => {
            register.insert(op.gear.clone(), op);
            true
        }
    }
}

/// Where a balancer is with the op in force for a gear.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AckState {
    Draining,
    Drained,
    Active,
}

/// A balancer's acknowledgment of a gear's op.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    pub epoch: String,
    pub state: AckState,
    /// Requests and tunnels to the gear still open on this balancer.
    pub inflight: u64,
    /// Requests and tunnels cut at the deadline.
    pub forced: u64,
}

/// Where one rotation stands, as the balancer waiting for it sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Balancers that acknowledged the epoch in its final state (drained, or active
    /// again for a rotate-in), sorted.
    pub acked: Vec<String>,
    /// Live balancers that did not yet, sorted.
    pub pending: Vec<String>,
    /// Requests and tunnels still open to the gear, summed over the balancers
    /// acknowledging this epoch.
    pub inflight: u64,
    /// Requests and tunnels cut at the deadline, by balancer.
    pub forced: BTreeMap<String, u64>,
}

/// The progress of the op `epoch` (whose final state is `done`) from this balancer's
/// own acknowledgment and those of the live peers (pure). Acknowledgments of another
/// epoch count as none.
pub fn progress<'a>(
    self_id: &'a str,
    own: Option<&'a Ack>,
    live_peers: impl IntoIterator<Item = (&'a str, Option<&'a Ack>)>,
    epoch: &str,
    done: AckState,
) -> Progress {
    let mut p = Progress::default();
    let all = std::iter::once((self_id, own)).chain(live_peers);
    let mut seen: BTreeMap<&str, Option<&Ack>> = BTreeMap::new();
    for (id, ack) in all {
        seen.entry(id).or_insert(ack);
    }
    for (id, ack) in seen {
        let current = ack.filter(|a| a.epoch == epoch);
        if let Some(a) = current {
            p.inflight += a.inflight;
            p.forced.insert(id.to_string(), a.forced);
        }
        if current.is_some_and(|a| a.state == done) {
            p.acked.push(id.to_string());
        } else {
            p.pending.push(id.to_string());
        }
    }
    p
}

/// Hybrid logical clock: wall-clock microseconds, never going backwards and always
/// past every timestamp seen.
#[derive(Debug, Default)]
pub struct Hlc {
    last: AtomicU64,
}

pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Hlc {
    pub fn now(&self) -> u64 {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let next = wall.max(last.saturating_add(1));
            match self
                .last
                .compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }

    pub fn observe(&self, ts: u64) {
        self.last.fetch_max(ts, Ordering::Relaxed);
    }
}

/// This balancer's rotation register and drain state.
pub struct Rotations {
    ops: Mutex<BTreeMap<String, RotationOp>>,
    acks: Mutex<BTreeMap<String, Ack>>,
    /// Forced counts by epoch.
    forced: Mutex<HashMap<String, u64>>,
    pub hlc: Hlc,
    changed: watch::Sender<u64>,
    acks_changed: watch::Sender<u64>,
    /// Epochs of ops to gossip to every live peer once published.
    fan_out: Mutex<HashSet<String>>,
}

impl Rotations {
    /// Start from the persisted ops.
    pub fn new(saved: Vec<RotationOp>) -> Self {
        let hlc = Hlc::default();
        for op in &saved {
            hlc.observe(op.ts);
        }
        Rotations {
            ops: Mutex::new(merge(&saved)),
            acks: Mutex::new(BTreeMap::new()),
            forced: Mutex::new(HashMap::new()),
            hlc,
            changed: watch::Sender::new(0),
            acks_changed: watch::Sender::new(0),
            fan_out: Mutex::new(HashSet::new()),
        }
    }

    /// The ops in force, by gear.
    pub fn ops(&self) -> BTreeMap<String, RotationOp> {
        self.ops.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// This balancer's own acknowledgments, by gear.
    pub fn acks(&self) -> BTreeMap<String, Ack> {
        self.acks.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// Take a new op (from a command). Returns it stamped.
    pub fn submit(&self, gear: &str, op: Op, by: &str, timeout: Duration) -> RotationOp {
        let op = RotationOp {
            gear: gear.to_string(),
            op,
            ts: self.hlc.now(),
            by: by.to_string(),
            deadline_ms: match op {
                // Saturating: a control request may name any timeout (`timeout_ms`).
                Op::Out => {
                    unix_ms().saturating_add(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX))
                }
                Op::In => 0,
            },
        };
        if let Ok(mut ops) = self.ops.lock() {
            ops.insert(op.gear.clone(), op.clone());
        }
        self.changed.send_modify(|g| *g += 1);
        op
    }

    /// Notified when an op is submitted or learnt.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Merge ops learnt from peers; true when the ops in force changed.
    fn learn<'a>(&self, remote: impl IntoIterator<Item = &'a RotationOp>) -> bool {
        let Ok(mut ops) = self.ops.lock() else {
            return false;
        };
        let mut changed = false;
        for op in remote {
            self.hlc.observe(op.ts);
            changed |= merge_into(&mut ops, op.clone());
        }
        changed
    }

    /// Notified when this balancer's acknowledgments change.
    pub fn subscribe_acks(&self) -> watch::Receiver<u64> {
        self.acks_changed.subscribe()
    }

    /// Ask [`run`] to gossip the op of `epoch` to every live peer as soon as it is
    /// published (the balancer that took a command, once: peers then have it after one
    /// round trip instead of a few gossip rounds).
    pub fn fan_out(&self, epoch: String) {
        if let Ok(mut f) = self.fan_out.lock() {
            f.insert(epoch);
        }
        self.changed.send_modify(|g| *g += 1);
    }
}

/// Keep the local drain state in step with the ops in force until `stop`. `persist`
/// is called with the ops whenever they change.
///
/// Ops and acknowledgments travel by ordinary gossip rounds, with two shortcuts that
/// cost O(M) messages per rotation, not O(M²): the balancer that took a command
/// gossips its op to every live peer once ([`Rotations::fan_out`]), and a balancer
/// whose acknowledgment of an op changes gossips once with the op's origin, the one
/// waiting for it.
pub async fn run(
    rotations: Arc<Rotations>,
    router: Arc<Router>,
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
        router.set_rotated_out(
            ops.values()
                .filter(|o| o.op == Op::Out)
                .map(|o| o.gear.clone())
                .collect::<HashSet<_>>(),
        );

        let now = unix_ms();
        let table = router.snapshot();
        let mut acks = BTreeMap::new();
        for (gear, op) in &ops {
            let ack = apply(&rotations, &router, &table, gear, op, now);
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
            let mut origins = BTreeSet::new();
            for (gear, ack) in &acks {
                if published_acks.get(gear) != Some(ack) {
                    if let Ok(v) = serde_json::to_string(ack) {
                        c.publish(&format!("{}{gear}", keys::ACK_PREFIX), v).await;
                    }
                    if let Some(op) = ops.get(gear).filter(|o| Some(&o.by) != self_id.as_ref()) {
                        origins.insert(op.by.clone());
                    }
                }
            }
            if push_all {
                c.push_now();
            } else {
                for origin in &origins {
                    c.push_to(origin);
                }
            }
        }
        published_ops = ops;
        published_acks = acks;
    }
}

/// Bring one gear in line with its op; returns this balancer's acknowledgment.
fn apply(
    rotations: &Rotations,
    router: &Router,
    table: &crate::routing::RoutingTable,
    gear: &str,
    op: &RotationOp,
    now_ms: u64,
) -> Ack {
    let epoch = op.epoch();
    let entry = table.by_label(gear);
    let forced_before = rotations
        .forced
        .lock()
        .ok()
        .and_then(|f| f.get(&epoch).copied());
    match op.op {
        Op::In => {
            if let Some(e) = entry {
                if e.admin != Admin::Active {
                    e.backend.pool.reopen();
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
            let Some(e) = entry else {
                // Not one of our backends: nothing can be in flight to it from here.
                return Ack {
                    epoch,
                    state: AckState::Drained,
                    inflight: 0,
                    forced: forced_before.unwrap_or(0),
                };
            };
            let b = &e.backend;
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

    fn op(gear: &str, op: Op, ts: u64, by: &str) -> RotationOp {
        RotationOp {
            gear: gear.into(),
            op,
            ts,
            by: by.into(),
            deadline_ms: 0,
        }
    }

    #[test]
    fn latest_op_wins_ties_by_node_id() {
        let a = op("g1", Op::Out, 10, "lb1");
        let b = op("g1", Op::In, 11, "lb2");
        let c = op("g2", Op::Out, 5, "lb1");
        let d = op("g2", Op::In, 5, "lb2");
        // Any order, same result: a commutative, idempotent merge.
        for ops in [
            vec![&a, &b, &c, &d],
            vec![&d, &c, &b, &a],
            vec![&b, &a, &a, &d, &c],
        ] {
            let m = merge(ops);
            assert_eq!(m["g1"], b);
            assert_eq!(m["g2"], d, "same timestamp: the higher node id wins");
        }
    }

    #[test]
    fn hlc_is_monotonic_and_passes_observed_times() {
        let h = Hlc::default();
        let a = h.now();
        let b = h.now();
        assert!(b > a);
        h.observe(b + 10_000_000_000);
        assert!(h.now() > b + 10_000_000_000);
    }

    #[test]
    fn learning_keeps_the_latest() {
        let r = Rotations::new(vec![op("g1", Op::Out, 10, "lb1")]);
        assert!(!r.learn(&[op("g1", Op::In, 9, "lb2")]), "older op ignored");
        assert!(r.learn(&[op("g1", Op::In, 12, "lb2")]));
        assert_eq!(r.ops()["g1"].op, Op::In);
        assert!(r.hlc.now() > 12);
    }

    fn router_with(gear: &str) -> Arc<Router> {
        let r = Arc::new(Router::new(2));
        r.replace_backends(vec![BackendSpec {
            name: format!("gear-{gear}"),
            addr: "127.0.0.1:1".parse().unwrap(),
            gear_dns: Some(format!("{gear}.example.com")),
            cookie: None,
        }]);
        r
    }

    #[test]
    fn drain_waits_for_in_flight_then_acks_drained() {
        let router = router_with("web1-ns");
        let rot = Rotations::new(vec![]);
        let o = rot.submit("web1-ns", Op::Out, "lb1", Duration::from_secs(60));
        let backend = router.load().entries()[0].backend.clone();
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
        let backend = router.load().entries()[0].backend.clone();
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
        }]);
        assert_eq!(router.load().entries()[0].state(), BackendState::Drained);
        let i = rot.submit("web1-ns", Op::In, "lb2", Duration::ZERO);
        let ack = apply(&rot, &router, &router.snapshot(), "web1-ns", &i, unix_ms());
        assert_eq!(ack.state, AckState::Active);
        assert_eq!(router.load().entries()[0].state(), BackendState::Up);
        assert!(!router.load().entries()[0].backend.pool.is_closed());
    }
}
