//! The cluster view and the model that keeps it up to date, one change at a time (pure).
//!
//! Owns [`ClusterView`], the snapshot every other part of gearlb reads (who is live,
//! their load, health reports, rotation ops and acknowledgments, scaler claims), and
//! [`Model`], which builds it incrementally from what chitchat reports: one
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
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::keys::{self, HealthReport};
use super::liveness::Liveness;
use super::transport::GossipCounters;
use crate::gear::PeerSpec;
use crate::rotation::{self, Ack, RotationOp};
use crate::scaler::ScaleEvent;

/// Load a balancer publishes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Load {
    /// Client connections now.
    #[serde(rename = "s")]
    pub sessions: u64,
    /// Moving average of requests in flight (`scaler.average_window`): what the scaler
    /// adds up across balancers.
    #[serde(rename = "a")]
    pub sessions_avg: f64,
    /// Requests per second over the last second.
    #[serde(rename = "r")]
    pub rps: f64,
    /// Requests in flight now.
    #[serde(rename = "f")]
    pub in_flight: u64,
}

/// One peer balancer as this balancer sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerView {
    /// Gear uuid / node id (unknown until first contact for address-only peers).
    pub id: Option<String>,
    pub addr: String,
    pub live: bool,
    /// Known to the broker (listed by `set-peers` or `cluster.peers`).
    pub known: bool,
    pub name: Option<String>,
    /// Filled in for reports (`ClusterView::with_loads`); the live view keeps loads
    /// apart ([`ClusterView::loads`]) so that a load change does not rebuild this list.
    pub load: Option<Load>,
}

/// What a peer says about the scaler.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScalerClaim {
    /// Who it believes the scaler is.
    pub belief: Option<String>,
    /// It acts as the scaler now.
    pub acting: bool,
}

/// Version of each part of the view: a reader compares the part it uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Versions {
    pub members: u64,
    pub loads: u64,
    pub reports: u64,
    pub rotations: u64,
    pub acks: u64,
    pub scaler: u64,
}

/// The cluster as this balancer sees it; replaced, never mutated.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterView {
    pub enabled: bool,
    pub self_id: String,
    pub advertise: String,
    /// Ids of the live members, this balancer included, sorted.
    pub live: Vec<String>,
    /// Every other balancer: known ones (live or not) and live unknown ones.
    pub peers: Vec<PeerView>,
    /// Balancers the broker lists (this one included): the quorum base.
    pub known_count: usize,
    pub gossip: GossipCounters,
    /// When each live member (this one included) started: chitchat's generation,
    /// Unix milliseconds. Subsets depend on it.
    #[serde(skip)]
    pub started: Arc<BTreeMap<String, u64>>,
    /// Live members heard from within half the failure timeout (this one included):
    /// the scaler's quorum counts these only.
    #[serde(skip)]
    pub fresh: Vec<String>,
    /// Gossip address of each live peer.
    #[serde(skip)]
    pub addrs: Arc<HashMap<String, SocketAddr>>,
    /// Load of each live peer.
    #[serde(skip)]
    pub loads: Arc<HashMap<String, Load>>,
    /// Gear health reported by each live peer (peer id → its report): the gears it
    /// found down among those it covers, and the subset epoch that says which.
    #[serde(skip)]
    pub reports: Arc<HashMap<String, Arc<HealthReport>>>,
    /// The rotation op in force per gear among every op the counted peers published
    /// (a last-writer-wins register: it only moves forward).
    #[serde(skip)]
    pub rotations: Arc<BTreeMap<String, RotationOp>>,
    /// Rotation acks of each live peer: peer id → gear label → ack (`ack:` keys).
    #[serde(skip)]
    pub acks: Arc<HashMap<String, Arc<BTreeMap<String, Ack>>>>,
    /// Each live peer's claim about the scaler (`scaler`, `acts` keys).
    #[serde(skip)]
    pub scaler: Arc<HashMap<String, ScalerClaim>>,
    /// The last scale event each live peer made (`scale` keys).
    #[serde(skip)]
    pub scale_events: Arc<Vec<ScaleEvent>>,
    #[serde(skip)]
    pub versions: Versions,
}

impl ClusterView {
    /// A balancer on its own (gossip off).
    pub fn single(self_id: &str) -> Self {
        ClusterView {
            enabled: false,
            self_id: self_id.to_string(),
            live: vec![self_id.to_string()],
            fresh: vec![self_id.to_string()],
            known_count: 1,
            ..Default::default()
        }
    }

    /// This view with each live peer's load in its [`PeerView`] (for reports).
    pub fn with_loads(mut self) -> Self {
        for p in &mut self.peers {
            p.load = p.id.as_ref().and_then(|id| self.loads.get(id)).cloned();
        }
        self
    }

    /// Merged health of a gear outside this balancer's subset, from the peers'
    /// reports: up if a peer covering it (one whose subset epoch is `epoch`, this
    /// balancer's own, so that `covers` says what it covers) does not report it down;
    /// else down if some peer reports it down; else unknown. A peer whose epoch differs
    /// computed other subsets: its silence says nothing, only its reports of gears
    /// down do.
    pub fn remote_health(
        &self,
        label: &str,
        epoch: &str,
        covers: impl Fn(&str, &str) -> bool,
    ) -> Option<bool> {
        let mut seen = None;
        for (peer, report) in self.reports.iter() {
            if peer == &self.self_id {
                continue;
            }
            if report.down.contains(label) {
                seen = Some(false);
            } else if report.epoch.as_deref() == Some(epoch) && covers(peer, label) {
                return Some(true);
            }
        }
        seen
    }

    /// Text for `gearlb ctl peers`.
    pub fn to_text(&self) -> String {
        if !self.enabled {
            return "gossip off: this balancer works alone\n".into();
        }
        let mut out = format!(
            "self {} ({}), {} live of {} known; gossip frames sent {} received {} rejected {}\n",
            self.self_id,
            self.advertise,
            self.live.len(),
            self.known_count,
            self.gossip.frames_sent,
            self.gossip.frames_received,
            self.gossip.rejected_bad_tag
                + self.gossip.rejected_other_cluster
                + self.gossip.rejected_malformed
                + self.gossip.rejected_oversized,
        );
        for p in &self.peers {
            let load = p
                .load
                .as_ref()
                .map(|l| {
                    format!(
                        "sessions {} (avg {:.1}), {:.0} req/s",
                        l.sessions, l.sessions_avg, l.rps
                    )
                })
                .unwrap_or_default();
            out.push_str(&format!(
                "  {:<38} {:<22} {:<11} {}\n",
                p.id.as_deref().unwrap_or("(not yet seen)"),
                p.addr,
                if p.live {
                    "live"
                } else if p.known {
                    "unreachable"
                } else {
                    "dead"
                },
                load
            ));
        }
        out
    }
}

/// One key written on one node, as chitchat reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyEvent {
    pub node: ChitchatId,
    pub key: String,
    pub value: String,
}

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
    liveness: Liveness<ChitchatId>,
    nodes: HashMap<ChitchatId, NodeKeys>,
    /// The rotation register learnt from counted nodes.
    rotations: BTreeMap<String, RotationOp>,
    chosen: Chosen,
    fresh: Vec<String>,
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
            known,
            liveness: Liveness::new(timeout, period),
            nodes: HashMap::new(),
            rotations: BTreeMap::new(),
            chosen: Chosen::new(),
            fresh: vec![self_id.to_string()],
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
            self.known = known;
            self.dirty = Dirty::all();
        }
    }

    /// Time this balancer's own checks ran late, in total.
    pub fn stalled(&self) -> Duration {
        self.liveness.stalled
    }

    /// The known membership names ids (`set-peers`); ids learnt from addresses do not
    /// change the address-only rules.
    fn ids_known(&self) -> bool {
        self.known.iter().any(|p| p.id.is_some() && !p.learned)
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
        id == self.self_id
            || !self.ids_known()
            || self.known.iter().any(|p| p.id.as_deref() == Some(id))
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
    /// Nodes not listed are gone from gossip and forgotten.
    pub fn heartbeats(&mut self, now: Instant, beats: impl IntoIterator<Item = (ChitchatId, u64)>) {
        self.liveness.tick(now);
        let mut present = HashSet::new();
        for (id, hb) in beats {
            if *id.node_id == *self.self_id {
                continue;
            }
            self.liveness.observe(&id, hb, now);
            present.insert(id);
        }
        self.liveness.retain(|id| present.contains(id));
        self.nodes.retain(|id, _| present.contains(id));
        let chosen = self.choose(now);
        if chosen != self.chosen {
            self.chosen = chosen;
            self.dirty = Dirty::all();
        }
        let mut fresh: Vec<String> = self
            .chosen
            .values()
            .filter(|id| self.liveness.is_fresh(id, now))
            .map(|id| id.node_id.to_string())
            .collect();
        fresh.push(self.self_id.clone());
        fresh.sort();
        if fresh != self.fresh {
            self.fresh = fresh;
            self.dirty.scaler = true;
        }
    }

    /// The live, ready, counted members: the newest live incarnation per id.
    fn choose(&self, now: Instant) -> Chosen {
        let mut chosen = Chosen::new();
        for (id, n) in &self.nodes {
            if !n.ready || !self.liveness.is_live(id, now) || !self.counts(&id.node_id) {
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
            let known_count = self
                .known
                .iter()
                .filter(|p| p.id.as_deref() != Some(self.self_id.as_str()))
                .count()
                + 1;
            if peers != v.peers || live != v.live || known_count != v.known_count {
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
            v.peers = peers;
            v.live = live;
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
            if claims != *v.scaler || events != *v.scale_events || self.fresh != v.fresh {
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

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(2);
    const ROUND: Duration = Duration::from_millis(200);

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn node(id: &str, generation: u64, port: u16) -> ChitchatId {
        ChitchatId::new(id.to_string(), generation, addr(port))
    }

    fn peer(id: Option<&str>, port: u16) -> PeerSpec {
        PeerSpec {
            id: id.map(str::to_string),
            addr: addr(port).into(),
            learned: false,
        }
    }

    fn set(m: &mut Model, n: &ChitchatId, key: &str, value: &str) {
        m.apply(KeyEvent {
            node: n.clone(),
            key: key.into(),
            value: value.into(),
        });
    }

    /// Two rounds of heartbeats (the first sight is no proof of life) for `nodes`.
    async fn beat(m: &mut Model, nodes: &[&ChitchatId], hb: &mut u64) {
        for _ in 0..2 {
            *hb += 1;
            let now = Instant::now();
            m.heartbeats(now, nodes.iter().map(|n| ((*n).clone(), *hb)));
            tokio::time::advance(ROUND).await;
        }
    }

    fn model(known: Vec<PeerSpec>) -> Model {
        Model::new("a", 1, addr(1), known, TIMEOUT, ROUND)
    }

    #[tokio::test(start_paused = true)]
    async fn known_ids_limit_membership() {
        let mut m = model(vec![
            peer(Some("a"), 1),
            peer(Some("b"), 2),
            peer(Some("c"), 3),
        ]);
        let (b, intruder) = (node("b", 1, 2), node("intruder", 1, 9));
        for n in [&b, &intruder] {
            set(&mut m, n, "ready", "1");
        }
        set(&mut m, &b, "load", r#"{"s":3,"a":2.5,"r":10,"f":1}"#);
        set(
            &mut m,
            &intruder,
            "rot:g1",
            r#"{"gear":"g1","op":"out","ts":9,"by":"intruder"}"#,
        );
        let mut hb = 0;
        beat(&mut m, &[&b, &intruder], &mut hb).await;
        let v = m.build().unwrap();
        assert_eq!(v.live, vec!["a", "b"]);
        assert_eq!(v.known_count, 3);
        assert_eq!(v.peers.len(), 2, "{:?}", v.peers);
        let c = v
            .peers
            .iter()
            .find(|p| p.id.as_deref() == Some("c"))
            .unwrap();
        assert!(!c.live && c.known);
        assert_eq!(v.loads["b"].sessions, 3);
        assert!(
            v.rotations.is_empty(),
            "an op from a node the broker does not list"
        );
        assert_eq!(v.addrs.get("b"), Some(&addr(2)));
        assert!(!v.addrs.contains_key("intruder"));
    }

    #[tokio::test(start_paused = true)]
    async fn address_only_peers_learn_ids() {
        let mut m = model(vec![peer(None, 2)]);
        let (b, c) = (node("b", 1, 2), node("c", 1, 3));
        for n in [&b, &c] {
            set(&mut m, n, "ready", "1");
        }
        let mut hb = 0;
        beat(&mut m, &[&b, &c], &mut hb).await;
        let v = m.build().unwrap();
        assert_eq!(v.live, vec!["a", "b", "c"]);
        assert_eq!(v.peers[0].id.as_deref(), Some("b"));
        assert!(v.peers[0].known);
        assert!(!v.peers[1].known);
    }

    #[tokio::test(start_paused = true)]
    async fn address_only_peers_keep_the_identity_learnt_when_they_die() {
        let mut m = model(vec![peer(None, 2), peer(None, 3)]);
        let (b, c, d) = (node("b", 1, 2), node("c", 1, 3), node("d", 1, 4));
        for n in [&b, &c, &d] {
            set(&mut m, n, "ready", "1");
        }
        let mut hb = 0;
        beat(&mut m, &[&b, &c, &d], &mut hb).await;
        m.build();
        let learnt = m.learned_known().expect("ids learnt");
        assert_eq!(learnt[0].id.as_deref(), Some("b"));
        assert!(learnt[0].learned && learnt[1].learned);
        m.set_known(learnt);
        assert!(m.learned_known().is_none(), "nothing more to learn");
        let v = m.build().unwrap();
        assert_eq!(
            v.live,
            vec!["a", "b", "c", "d"],
            "address-only: d counts too"
        );
        // b and c die: they stay known, by id, and the quorum base stays 3.
        for _ in 0..12 {
            tokio::time::advance(ROUND).await;
            hb += 1;
            m.heartbeats(
                Instant::now(),
                [(b.clone(), 1), (c.clone(), 1), (d.clone(), hb)],
            );
        }
        let v = m.build().unwrap();
        assert_eq!(v.live, vec!["a", "d"]);
        assert_eq!(v.known_count, 3);
        let ids: Vec<_> = v
            .peers
            .iter()
            .filter(|p| p.known)
            .map(|p| (p.id.clone(), p.live))
            .collect();
        assert_eq!(
            ids,
            vec![(Some("b".into()), false), (Some("c".into()), false)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn dead_after_the_timeout_and_gone_at_once_when_not_ready() {
        let mut m = model(vec![]);
        let (b, c) = (node("b", 1, 2), node("c", 1, 3));
        for n in [&b, &c] {
            set(&mut m, n, "ready", "1");
        }
        let mut hb = 0;
        beat(&mut m, &[&b, &c], &mut hb).await;
        assert_eq!(m.build().unwrap().live, vec!["a", "b", "c"]);
        // c says it is stopping: gone at the next build, no timeout.
        set(&mut m, &c, "ready", "0");
        m.heartbeats(Instant::now(), [(b.clone(), hb), (c.clone(), hb)]);
        assert_eq!(m.build().unwrap().live, vec!["a", "b"]);
        // b goes silent: still live for the timeout, then dead.
        let silent_since = Instant::now();
        let mut died = None;
        for _ in 0..20 {
            tokio::time::advance(ROUND).await;
            m.heartbeats(Instant::now(), [(b.clone(), hb), (c.clone(), hb)]);
            if let Some(v) = m.build() {
                if !v.live.contains(&"b".to_string()) {
                    died = Some(silent_since.elapsed());
                    break;
                }
            }
        }
        let died = died.expect("b declared dead");
        assert!(
            died > TIMEOUT - ROUND && died <= TIMEOUT + 2 * ROUND,
            "{died:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_change_rebuilds_only_its_part() {
        let mut m = model(vec![]);
        let b = node("b", 1, 2);
        set(&mut m, &b, "ready", "1");
        let mut hb = 0;
        beat(&mut m, &[&b], &mut hb).await;
        let v0 = m.build().unwrap();
        set(&mut m, &b, "load", r#"{"s":1,"a":0,"r":0,"f":0}"#);
        let v1 = m.build().unwrap();
        assert_eq!(v1.versions.loads, v0.versions.loads + 1);
        let same = |a: &Versions, b: &Versions| {
            (a.members, a.reports, a.rotations, a.acks, a.scaler)
                == (b.members, b.reports, b.rotations, b.acks, b.scaler)
        };
        assert!(same(&v0.versions, &v1.versions));
        assert!(Arc::ptr_eq(&v0.reports, &v1.reports) && Arc::ptr_eq(&v0.acks, &v1.acks));
        set(
            &mut m,
            &b,
            "ack:g1",
            r#"{"epoch":"1.b","state":"drained","inflight":0,"forced":0}"#,
        );
        let v2 = m.build().unwrap();
        assert_eq!(v2.versions.acks, v1.versions.acks + 1);
        assert_eq!(v2.versions.loads, v1.versions.loads);
        assert_eq!(v2.acks["b"]["g1"].epoch, "1.b");
        // Heartbeats that change nothing build nothing.
        hb += 1;
        m.heartbeats(Instant::now(), [(b.clone(), hb)]);
        assert!(m.build().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn newest_incarnation_wins_and_health_merges() {
        let mut m = model(vec![]);
        let (old, new, c) = (node("b", 1, 2), node("b", 2, 2), node("c", 1, 3));
        for n in [&old, &new, &c] {
            set(&mut m, n, "ready", "1");
        }
        set(&mut m, &old, "hs", "e1");
        set(&mut m, &old, "hd:00", r#"["g1"]"#);
        set(&mut m, &new, "hs", "e1");
        set(&mut m, &new, "hd:00", r#"["g2"]"#);
        set(&mut m, &c, "hs", "e0");
        set(&mut m, &c, "hd:00", r#"["g2","g3"]"#);
        let mut hb = 0;
        beat(&mut m, &[&old, &new, &c], &mut hb).await;
        let v = m.build().unwrap();
        assert_eq!(v.live, vec!["a", "b", "c"]);
        // b (in epoch e1, as this balancer) covers g1..g3; c's epoch is another.
        let covers = |peer: &str, g: &str| peer == "b" && ["g1", "g2", "g3"].contains(&g);
        assert_eq!(
            v.remote_health("g1", "e1", covers),
            Some(true),
            "b's old report is gone"
        );
        assert_eq!(
            v.remote_health("g2", "e1", covers),
            Some(false),
            "down for all"
        );
        assert_eq!(
            v.remote_health("g3", "e1", covers),
            Some(true),
            "b covers it and says nothing"
        );
        assert_eq!(
            v.remote_health("g4", "e1", covers),
            None,
            "nobody covers it"
        );
        // In another epoch b's silence is no evidence; explicit reports still are.
        assert_eq!(v.remote_health("g1", "e9", covers), None);
        assert_eq!(v.remote_health("g3", "e9", covers), Some(false));
        // A bucket emptied: the gear is no longer reported down.
        set(&mut m, &c, "hd:00", "[]");
        let v = m.build().unwrap();
        assert_eq!(v.remote_health("g3", "e9", covers), None);
    }

    #[tokio::test(start_paused = true)]
    async fn rotation_ops_merge_as_they_arrive() {
        let mut m = model(vec![]);
        let b = node("b", 1, 2);
        set(
            &mut m,
            &b,
            "rot:g1",
            r#"{"gear":"g1","op":"out","ts":10,"by":"b"}"#,
        );
        set(
            &mut m,
            &b,
            "rot:g1",
            r#"{"gear":"g1","op":"in","ts":9,"by":"c"}"#,
        );
        set(
            &mut m,
            &b,
            "rot:g2",
            r#"{"gear":"wrong","op":"in","ts":9,"by":"c"}"#,
        );
        let v = m.build().unwrap();
        assert_eq!(v.rotations.len(), 1, "a key naming another gear is refused");
        assert_eq!(v.rotations["g1"].ts, 10, "an older op does not win");
    }
}
