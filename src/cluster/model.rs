//! The model that keeps the cluster view up to date, one change at a time (pure).
//!
//! Owns [`Model`], which builds the [`ClusterView`] incrementally from what chitchat reports: one
//! [`KeyEvent`] per key written (by this node or learnt from a peer) and, once per
//! gossip round, every node's heartbeat ([`super::liveness`] decides who is live).
//! A key change rebuilds only the part of the view it belongs to (a `load` only the
//! loads, an `ack:` only the acknowledgments); a change of the live set rebuilds the
//! membership and every per-peer part. Each part has a version ([`Versions`]) so that
//! readers skip work when theirs did not change.
//!
//! Membership rules: when the known membership names ids (`set-peers`, or identities
//! learnt from addresses), only those balancers count: a node the broker does not list
//! is ignored even if it holds the secret. With address-only peers (`cluster.peers`)
//! every authenticated live node counts. One member per id: its newest incarnation.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use chitchat::ChitchatId;
use tokio::time::Instant;

use super::keys::{self, HealthReport};
use super::liveness::Liveness;
use super::view::*;
use crate::gear::PeerSpec;
use gearlb_core::rotation::register::{self as rotation, Ack, RotationOp};
use gearlb_core::scaler::event::ScaleEvent;

/// What one node's keys say, parsed once when they change.
#[derive(Clone, Debug, Default)]
struct NodeKeys {
    ready: bool,
    name: Option<String>,
    load: Option<Load>,
    epoch: Option<String>,
    down: BTreeMap<String, Vec<String>>,
    health: Option<Arc<HealthReport>>,
    acks: Arc<BTreeMap<String, Ack>>,
    claim: ScalerClaim,
    scale: Option<ScaleEvent>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Dirty {
    members: bool,
    loads: bool,
    reports: bool,
    rotations: bool,
    acks: bool,
    scaler: bool,
}

impl Dirty {
    fn all() -> Dirty {
        Dirty {
            members: true,
            loads: true,
            reports: true,
            rotations: true,
            acks: true,
            scaler: true,
        }
    }

    fn any(&self) -> bool {
        self.members || self.loads || self.reports || self.rotations || self.acks || self.scaler
    }
}

/// The live members chosen last time: id → its incarnation.
type Chosen = BTreeMap<String, ChitchatId>;

/// Builds the [`ClusterView`] from chitchat's key events and heartbeats.
pub struct Model {
    self_id: String,
    generation: u64,
    advertise: SocketAddr,
    known: Vec<PeerSpec>,
    /// [`Model::counted_ids`] of `known`.
    counted: Option<HashSet<String>>,
    liveness: Liveness<ChitchatId>,
    nodes: HashMap<ChitchatId, NodeKeys>,
    /// The members must be chosen again at the next round (a `ready` key or the known
    /// membership changed).
    rechoose: bool,
    /// The rotation register learnt from counted nodes.
    rotations: BTreeMap<String, RotationOp>,
    chosen: Chosen,
    fresh: Arc<Vec<String>>,
    dirty: Dirty,
    view: Arc<ClusterView>,
}

impl Model {
    /// A model of this balancer (`self_id`, gossip at `advertise`) in a cluster whose
    /// known membership is `known`; peers are dead after `timeout` without a heartbeat,
    /// and [`Model::heartbeats`] is called every `period`.
    pub fn new(
        self_id: &str,
        generation: u64,
        advertise: SocketAddr,
        known: Vec<PeerSpec>,
        timeout: Duration,
        period: Duration,
    ) -> Model {
        let mut m = Model {
            self_id: self_id.to_string(),
            generation,
            advertise,
            counted: Self::counted_ids(&known),
            known,
            liveness: Liveness::new(timeout, period),
            nodes: HashMap::new(),
            rechoose: true,
            rotations: BTreeMap::new(),
            chosen: Chosen::new(),
            fresh: Arc::new(vec![self_id.to_string()]),
            dirty: Dirty::all(),
            view: Arc::new(ClusterView::default()),
        };
        m.build();
        m
    }

    /// The view as of the last [`Model::build`].
    pub fn view(&self) -> Arc<ClusterView> {
        self.view.clone()
    }

    pub fn known(&self) -> &[PeerSpec] {
        &self.known
    }

    /// Replace the known membership. Nodes that count now and did not before had
    /// their `rot:` keys ignored: the caller replays them ([`Model::apply`]).
    pub fn set_known(&mut self, known: Vec<PeerSpec>) {
        if known != self.known {
            self.counted = Self::counted_ids(&known);
            self.known = known;
            self.dirty = Dirty::all();
            self.rechoose = true;
        }
    }

    /// Each counted member (live or not) by id, with when its heartbeat was last seen
    /// advancing (not credited with this balancer's own stalls): what the scaler's
    /// fence asks (see `gearlb_core::scaler::fence`).
    pub fn heard(&self) -> Vec<(Arc<str>, Instant)> {
        self.chosen
            .values()
            .filter_map(|id| Some((id.node_id.clone(), self.liveness.heard(id)?)))
            .collect()
    }

    /// Time this balancer's own checks ran late, in total.
    pub fn stalled(&self) -> Duration {
        self.liveness.stalled
    }

    /// The known membership with the ids of address-only peers seen live filled in
    /// (learnt), when that differs from the known membership: the caller keeps it, so
    /// that such a peer keeps its identity, and its place in the election, once dead.
    pub fn learned_known(&self) -> Option<Vec<PeerSpec>> {
        let mut out = self.known.clone();
        let mut changed = false;
        for p in out.iter_mut() {
            if p.id.is_some() && !p.learned {
                continue;
            }
            let at_addr = self
                .chosen
                .iter()
                .find(|(_, c)| p.addr.socket_addr() == Some(c.gossip_advertise_addr));
            if let Some((id, _)) = at_addr {
                if p.id.as_ref() != Some(id) && *id != self.self_id {
                    p.id = Some(id.clone());
                    p.learned = true;
                    changed = true;
                }
            }
        }
        changed.then_some(out)
    }

    /// Whether node `id` counts as a member (see the module doc).
    fn counts(&self, id: &str) -> bool {
        id == self.self_id || self.counted.as_ref().is_none_or(|ids| ids.contains(id))
    }

    /// The ids that count when the known membership names ids, else `None` (every
    /// authenticated node counts); computed once per change of the known membership.
    fn counted_ids(known: &[PeerSpec]) -> Option<HashSet<String>> {
        known
            .iter()
            .any(|p| p.id.is_some() && !p.learned)
            .then(|| known.iter().filter_map(|p| p.id.clone()).collect())
    }

    /// One key written on a node.
    pub fn apply(&mut self, ev: KeyEvent) {
        if *ev.node.node_id == *self.self_id {
            return;
        }
        let counted = self.counts(&ev.node.node_id);
        let live_member = self.chosen.get(&*ev.node.node_id) == Some(&ev.node);
        let n = self.nodes.entry(ev.node.clone()).or_default();
        let key = ev.key.as_str();
        let mut dirty = Dirty::default();
        if key == keys::READY {
            n.ready = ev.value == "1";
            dirty.members = true;
            self.rechoose = true;
        } else if key == keys::NAME {
            n.name = Some(ev.value);
            dirty.members = true;
        } else if key == keys::LOAD {
            n.load = serde_json::from_str(&ev.value).ok();
            dirty.loads = true;
        } else if key == keys::SUBSET_EPOCH {
            n.epoch = Some(ev.value);
            n.health = None;
            dirty.reports = true;
        } else if key.starts_with(keys::DOWN_PREFIX) {
            n.down.insert(ev.key, keys::parse_down(&ev.value));
            n.health = None;
            dirty.reports = true;
        } else if let Some(gear) = key.strip_prefix(keys::ROTATION_PREFIX) {
            if let Ok(op) = serde_json::from_str::<RotationOp>(&ev.value) {
                if op.gear == gear && counted {
                    dirty.rotations |= rotation::merge_into(&mut self.rotations, op);
                }
            }
        } else if let Some(gear) = key.strip_prefix(keys::ACK_PREFIX) {
            if let Ok(ack) = serde_json::from_str::<Ack>(&ev.value) {
                Arc::make_mut(&mut n.acks).insert(gear.to_string(), ack);
                dirty.acks = true;
            }
        } else if key == keys::SCALER {
            n.claim.belief = Some(ev.value).filter(|v| !v.is_empty());
            dirty.scaler = true;
        } else if key == keys::ACTS {
            n.claim.acting = ev.value == "1";
            dirty.scaler = true;
        } else if key == keys::SCALE {
            n.scale = serde_json::from_str(&ev.value).ok();
            dirty.scaler = true;
        }
        // Keys of nodes that are not live members show in the view only when they
        // become members (which rebuilds every part); `ready` can make them one.
        if live_member || (dirty.members && counted) {
            self.dirty.members |= dirty.members;
            self.dirty.loads |= dirty.loads;
            self.dirty.reports |= dirty.reports;
            self.dirty.acks |= dirty.acks;
            self.dirty.scaler |= dirty.scaler;
        }
        self.dirty.rotations |= dirty.rotations;
    }

    /// Every node's heartbeat as gossip has it at `now` (called once per gossip round).
    /// Nodes not listed are gone from gossip and forgotten. The members and the fresh
    /// set are chosen again only when a verdict, a freshness, a `ready` key or the
    /// known membership changed: an idle round costs a pass over the heartbeats.
    pub fn heartbeats(&mut self, now: Instant, beats: impl IntoIterator<Item = (ChitchatId, u64)>) {
        self.liveness.tick(now);
        for (id, hb) in beats {
            if *id.node_id == *self.self_id {
                continue;
            }
            self.liveness.observe(&id, hb, now);
        }
        // Members (the incarnations chosen last round) are held to the verdict budget;
        // an old incarnation or a node that left is let go at once.
        let chosen = &self.chosen;
        let changed = self
            .liveness
            .sweep(now, |id| chosen.get(&*id.node_id) == Some(id));
        if !changed && !self.rechoose {
            return;
        }
        self.rechoose = false;
        let liveness = &self.liveness;
        self.nodes.retain(|id, _| liveness.knows(id));
        let chosen = self.choose();
        if chosen != self.chosen {
            self.chosen = chosen;
            self.dirty = Dirty::all();
        }
        let mut fresh: Vec<String> = self
            .chosen
            .values()
            .filter(|id| self.liveness.is_fresh(id))
            .map(|id| id.node_id.to_string())
            .collect();
        fresh.push(self.self_id.clone());
        fresh.sort();
        if fresh != *self.fresh {
            self.fresh = Arc::new(fresh);
            self.dirty.scaler = true;
        }
    }

    /// The live, ready, counted members: the newest live incarnation per id.
    fn choose(&self) -> Chosen {
        let mut chosen = Chosen::new();
        for (id, n) in &self.nodes {
            if !n.ready || !self.liveness.is_live(id) || !self.counts(&id.node_id) {
                continue;
            }
            match chosen.get(&*id.node_id) {
                Some(old) if old.generation_id >= id.generation_id => {}
                _ => {
                    chosen.insert(id.node_id.to_string(), id.clone());
                }
            }
        }
        chosen
    }

    /// The view with every change applied since the last call; `None` when nothing
    /// changed.
    pub fn build(&mut self) -> Option<Arc<ClusterView>> {
        if !self.dirty.any() {
            return None;
        }
        let d = std::mem::take(&mut self.dirty);
        let old = self.view.clone();
        let mut v = (*old).clone();
        v.enabled = true;
        v.self_id = self.self_id.clone();
        v.advertise = self.advertise.to_string();
        if d.members {
            let (peers, live, addrs) = self.membership();
            let known_count = known_count(&self.known, &self.self_id);
            if peers != *v.peers || live != *v.live || known_count != v.known_count {
                v.versions.members += 1;
            }
            let mut started: BTreeMap<String, u64> = self
                .chosen
                .iter()
                .map(|(id, c)| (id.clone(), c.generation_id))
                .collect();
            started.insert(self.self_id.clone(), self.generation);
            if started != *v.started {
                v.versions.members += 1;
                v.started = Arc::new(started);
            }
            v.peers = Arc::new(peers);
            v.live = Arc::new(live);
            v.known_count = known_count;
            v.addrs = Arc::new(addrs);
        }
        if d.loads {
            let loads: HashMap<String, Load> = self
                .chosen
                .iter()
                .filter_map(|(id, cid)| Some((id.clone(), self.nodes.get(cid)?.load.clone()?)))
                .collect();
            if loads != *v.loads {
                v.versions.loads += 1;
                v.loads = Arc::new(loads);
            }
        }
        if d.reports {
            let mut reports = HashMap::new();
            for (id, cid) in &self.chosen {
                if let Some(n) = self.nodes.get_mut(cid) {
                    if n.health.is_none() && (n.epoch.is_some() || !n.down.is_empty()) {
                        n.health = Some(Arc::new(HealthReport {
                            epoch: n.epoch.clone(),
                            down: n.down.values().flatten().cloned().collect(),
                        }));
                    }
                    if let Some(h) = &n.health {
                        reports.insert(id.clone(), h.clone());
                    }
                }
            }
            if reports.len() != v.reports.len()
                || reports
                    .iter()
                    .any(|(k, r)| v.reports.get(k).is_none_or(|o| !Arc::ptr_eq(o, r)))
            {
                v.versions.reports += 1;
                v.reports = Arc::new(reports);
            }
        }
        let members: Vec<(&String, &NodeKeys)> = self
            .chosen
            .iter()
            .filter_map(|(id, cid)| Some((id, self.nodes.get(cid)?)))
            .collect();
        if d.acks {
            let acks: HashMap<String, Arc<BTreeMap<String, Ack>>> = members
                .iter()
                .filter(|(_, n)| !n.acks.is_empty())
                .map(|(id, n)| ((*id).clone(), n.acks.clone()))
                .collect();
            v.versions.acks += 1;
            v.acks = Arc::new(acks);
        }
        if d.scaler {
            let claims: HashMap<String, ScalerClaim> = members
                .iter()
                .map(|(id, n)| ((*id).clone(), n.claim.clone()))
                .collect();
            let events: Vec<ScaleEvent> = members
                .iter()
                .filter_map(|(_, n)| n.scale.clone())
                .collect();
            if claims != *v.scaler || events != *v.scale_events || *self.fresh != *v.fresh {
                v.versions.scaler += 1;
                v.scaler = Arc::new(claims);
                v.scale_events = Arc::new(events);
                v.fresh = self.fresh.clone();
            }
        }
        if d.rotations && *v.rotations != self.rotations {
            v.versions.rotations += 1;
            v.rotations = Arc::new(self.rotations.clone());
        }
        if v.versions == old.versions && old.enabled {
            return None;
        }
        let v = Arc::new(v);
        self.view = v.clone();
        Some(v)
    }

    /// Peers, live ids and the gossip addresses of the live peers.
    fn membership(&self) -> (Vec<PeerView>, Vec<String>, HashMap<String, SocketAddr>) {
        let mut peers = Vec::new();
        let mut seen = HashSet::new();
        for p in &self.known {
            let at_addr = || {
                self.chosen
                    .values()
                    .find(|c| p.addr.socket_addr() == Some(c.gossip_advertise_addr))
            };
            let member = match &p.id {
                Some(id) if p.learned => self.chosen.get(id).or_else(at_addr),
                Some(id) => self.chosen.get(id),
                None => at_addr(),
            };
            if p.id.as_deref() == Some(self.self_id.as_str()) {
                continue;
            }
            if let Some(m) = member {
                seen.insert(m.node_id.to_string());
            }
            peers.push(PeerView {
                id: p
                    .id
                    .clone()
                    .or_else(|| member.map(|m| m.node_id.to_string())),
                addr: p.addr.to_string(),
                live: member.is_some(),
                known: true,
                name: member.and_then(|m| self.nodes.get(m)?.name.clone()),
                load: None,
            });
        }
        for (id, cid) in &self.chosen {
            if !seen.contains(id) {
                peers.push(PeerView {
                    id: Some(id.clone()),
                    addr: cid.gossip_advertise_addr.to_string(),
                    live: true,
                    known: false,
                    name: self.nodes.get(cid).and_then(|n| n.name.clone()),
                    load: None,
                });
            }
        }
        peers.sort_by(|a, b| a.id.cmp(&b.id).then(a.addr.cmp(&b.addr)));
        let mut live: Vec<String> = self.chosen.keys().cloned().collect();
        live.push(self.self_id.clone());
        live.sort();
        live.dedup();
        let addrs = self
            .chosen
            .iter()
            .map(|(id, cid)| (id.clone(), cid.gossip_advertise_addr))
            .collect();
        (peers, live, addrs)
    }
}

/// How many balancers a known membership counts, `self_id` included (once, whether or
/// not the list names it): what a majority is of.
pub(super) fn known_count(known: &[PeerSpec], self_id: &str) -> usize {
    known
        .iter()
        .filter(|p| p.id.as_deref() != Some(self_id))
        .count()
        + 1
}

#[cfg(test)]
mod tests;
