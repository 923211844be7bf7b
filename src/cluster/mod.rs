//! The application's balancers as one cluster: membership, liveness and shared state
//! by gossip (chitchat), over the authenticated transport in [`transport`].
//!
//! Owns the chitchat node (its handle lives as long as the [`Cluster`]), the known
//! membership (the broker's truth, from `cluster.peers` or `gearlb ctl set-peers`), and
//! the [`ClusterView`] snapshot (arc-swap) built from chitchat's live-node watcher: who is
//! live, their load, and the gear health each reports. The request path never touches
//! chitchat; it reads the routing table, which [`sync`] keeps in step with the view.
//!
//! Each node writes only its own keys; [`keys`] is the schema. No value grows with the
//! number of gears (chitchat cannot send a value larger than one message, and such a
//! value would stop every later key of its node): gear health is published by
//! exception, in buckets, relative to a subset epoch; rotations and acknowledgments
//! have one key per gear. `load` is published once a second, health when it changes.
//! Liveness is chitchat's failure detector, tuned so a dead peer is noticed in about
//! ten gossip intervals (`initial_interval` = gossip interval, as the anchors note
//! recommends), plus `ready`.

pub mod keys;
pub mod sync;
pub mod transport;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use chitchat::{
    spawn_chitchat, ChitchatConfig, ChitchatHandle, ChitchatId, FailureDetectorConfig,
    ProtocolVersion,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::ClusterConfig;
use crate::gear::PeerSpec;
use transport::{Auth, GossipCounters, GossipStats, GossipTransport};

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

/// A live member as read from chitchat (the input of [`build_view`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    pub id: String,
    pub generation: u64,
    pub addr: SocketAddr,
    pub keys: BTreeMap<String, String>,
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
    pub load: Option<Load>,
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
    /// Gear health reported by each live peer (peer id → its report): the gears it
    /// found down among those it covers, and the subset epoch that says which.
    #[serde(skip)]
    pub reports: HashMap<String, keys::HealthReport>,
    /// Rotation ops the live peers publish (`rot:` keys).
    #[serde(skip)]
    pub rotations: Vec<crate::rotation::RotationOp>,
    /// Rotation acks of each live peer: peer id → gear label → ack (`ack:` keys).
    #[serde(skip)]
    pub acks: HashMap<String, HashMap<String, crate::rotation::Ack>>,
    /// Gossip addresses of the live peers.
    #[serde(skip)]
    pub live_addrs: Vec<SocketAddr>,
    /// The last scale event each live peer made (`scale` keys).
    #[serde(skip)]
    pub scale_events: Vec<crate::scaler::ScaleEvent>,
}

impl ClusterView {
    /// A balancer on its own (gossip off).
    pub fn single(self_id: &str) -> Self {
        ClusterView {
            enabled: false,
            self_id: self_id.to_string(),
            live: vec![self_id.to_string()],
            known_count: 1,
            ..Default::default()
        }
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
        for (peer, report) in &self.reports {
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

/// Build the view from the live members and the known membership (pure).
///
/// When the known membership names ids (`set-peers`), only those balancers count: a
/// node the broker does not list is ignored even if it holds the secret. With
/// address-only peers (`cluster.peers`), every authenticated live node counts.
pub fn build_view(
    self_id: &str,
    advertise: SocketAddr,
    known: &[PeerSpec],
    members: &[Member],
    gossip: GossipCounters,
) -> ClusterView {
    let ids_known = known.iter().any(|p| p.id.is_some());
    // One member per id: the newest incarnation.
    let mut by_id: BTreeMap<&str, &Member> = BTreeMap::new();
    for m in members {
        if by_id
            .get(m.id.as_str())
            .is_none_or(|old| old.generation < m.generation)
        {
            by_id.insert(&m.id, m);
        }
    }
    let counts = |m: &Member| -> bool {
        m.id == self_id
            || !ids_known
            || known.iter().any(|p| p.id.as_deref() == Some(m.id.as_str()))
    };
    let load_of = |m: &Member| {
        m.keys
            .get("load")
            .and_then(|v| serde_json::from_str::<Load>(v).ok())
    };
    let mut peers = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for p in known {
        let member = match &p.id {
            Some(id) => by_id.get(id.as_str()).copied(),
            None => by_id
                .values()
                .copied()
                .find(|m| p.addr.socket_addr() == Some(m.addr)),
        };
        if p.id.as_deref() == Some(self_id) || member.is_some_and(|m| m.id == self_id) {
            continue;
        }
        if let Some(m) = member {
            seen.insert(m.id.clone());
        }
        peers.push(PeerView {
            id: p.id.clone().or_else(|| member.map(|m| m.id.clone())),
            addr: p.addr.to_string(),
            live: member.is_some(),
            known: true,
            name: member.and_then(|m| m.keys.get("name").cloned()),
            load: member.and_then(load_of),
        });
    }
    for m in by_id.values() {
        if m.id != self_id && !seen.contains(&m.id) && counts(m) {
            peers.push(PeerView {
                id: Some(m.id.clone()),
                addr: m.addr.to_string(),
                live: true,
                known: false,
                name: m.keys.get("name").cloned(),
                load: load_of(m),
            });
        }
    }
    peers.sort_by(|a, b| a.id.cmp(&b.id).then(a.addr.cmp(&b.addr)));
    let mut live: Vec<String> = peers
        .iter()
        .filter(|p| p.live)
        .filter_map(|p| p.id.clone())
        .collect();
    live.push(self_id.to_string());
    live.sort();
    live.dedup();
    let reports = by_id
        .values()
        .filter(|m| counts(m) && m.id != self_id)
        .filter_map(|m| {
            let r = keys::HealthReport::from_keys(
                m.keys.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            )?;
            Some((m.id.clone(), r))
        })
        .collect();
    let counted: Vec<&&Member> = by_id
        .values()
        .filter(|m| counts(m) && m.id != self_id)
        .collect();
    let rotations = counted
        .iter()
        .flat_map(|m| {
            m.keys
                .iter()
                .filter(|(k, _)| k.starts_with("rot:"))
                .filter_map(|(_, v)| serde_json::from_str(v).ok())
        })
        .collect();
    let acks = counted
        .iter()
        .map(|m| {
            let a = m
                .keys
                .iter()
                .filter_map(|(k, v)| {
                    Some((
                        k.strip_prefix("ack:")?.to_string(),
                        serde_json::from_str(v).ok()?,
                    ))
                })
                .collect();
            (m.id.clone(), a)
        })
        .collect();
    let live_addrs = counted.iter().map(|m| m.addr).collect();
    let scale_events = counted
        .iter()
        .filter_map(|m| serde_json::from_str(m.keys.get("scale")?).ok())
        .collect();
    let known_others = known
        .iter()
        .filter(|p| p.id.as_deref() != Some(self_id))
        .count();
    ClusterView {
        enabled: true,
        self_id: self_id.to_string(),
        advertise: advertise.to_string(),
        live,
        peers,
        known_count: known_others + 1,
        gossip,
        reports,
        rotations,
        acks,
        live_addrs,
        scale_events,
    }
}

/// chitchat's configuration for one balancer. The failure detector's prior interval is
/// the gossip interval (chitchat's 5 s default would take tens of seconds to declare a
/// peer dead); a node counts as live only while it says `ready`.
pub fn chitchat_config(
    id: ChitchatId,
    cluster_id: &str,
    interval: Duration,
    listen: SocketAddr,
    seeds: Vec<String>,
) -> ChitchatConfig {
    ChitchatConfig {
        chitchat_id: id,
        cluster_id: cluster_id.to_string(),
        gossip_interval: interval,
        listen_addr: listen,
        seed_nodes: seeds,
        failure_detector_config: FailureDetectorConfig {
            initial_interval: interval,
            dead_node_grace_period: Duration::from_secs(3600),
            ..Default::default()
        },
        marked_for_deletion_grace_period: Duration::from_secs(3600),
        catchup_callback: None,
        extra_liveness_predicate: Some(Box::new(|ns| ns.get("ready") == Some("1"))),
        protocol_version: ProtocolVersion::V0,
    }
}

/// A running gossip node.
pub struct Cluster {
    handle: ChitchatHandle,
    /// Gossip's side of the proxy port (`http` transport).
    upgrade: Option<Arc<dyn crate::proxy::UpgradeEndpoint>>,
    self_id: String,
    advertise: SocketAddr,
    known: Mutex<Vec<PeerSpec>>,
    known_changed: watch::Sender<u64>,
    view: ArcSwap<ClusterView>,
    view_changed: watch::Sender<u64>,
    stats: Arc<GossipStats>,
}

/// What a cluster node needs besides its transport (see [`Cluster::start_on`]).
#[derive(Clone, Debug)]
pub struct NodeSettings {
    /// This balancer's id (`cluster.node_id`).
    pub self_id: String,
    /// The application (`cluster.id`): nodes of other clusters are refused.
    pub cluster_id: String,
    /// Time between gossip rounds.
    pub gossip_interval: std::time::Duration,
    /// Where peers reach this node.
    pub advertise: SocketAddr,
    /// The address the transport listens on (chitchat's `listen_addr`).
    pub listen: SocketAddr,
    /// Incarnation: grows with every start.
    pub generation: u64,
    /// The gear name, for people.
    pub name: Option<String>,
}

impl Cluster {
    /// Bind the gossip listener and start chitchat. `listen` is `cluster.listen`, or
    /// the proxy listener's address with the `http` transport. `known` is the persisted
    /// or configured membership.
    pub async fn start(
        cfg: &ClusterConfig,
        listen: SocketAddr,
        known: Vec<PeerSpec>,
        name: Option<String>,
    ) -> anyhow::Result<Arc<Cluster>> {
        let self_id = cfg
            .node_id
            .clone()
            .ok_or_else(|| anyhow::anyhow!("cluster.node_id is required"))?;
        let secret = cfg
            .secret
            .clone()
            .ok_or_else(|| anyhow::anyhow!("cluster.secret is required"))?;
        let stats = Arc::new(GossipStats::default());
        let transport = GossipTransport::bind(
            cfg.transport,
            listen,
            cfg.advertise,
            Auth::new(&cfg.id, secret.as_bytes()),
            stats.clone(),
        )
        .await
        .map_err(|e| {
            anyhow::anyhow!("cannot listen for gossip on {listen} (cluster.listen): {e}")
        })?;
        let upgrade = transport
            .upgrade_endpoint()
            .map(|u| u as Arc<dyn crate::proxy::UpgradeEndpoint>);
        let generation = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let settings = NodeSettings {
            self_id,
            cluster_id: cfg.id.clone(),
            gossip_interval: cfg.gossip_interval,
            advertise: transport.advertise_addr(),
            listen: transport.local_addr(),
            generation,
            name,
        };
        let cluster = Self::start_on(&transport, settings, known, stats, upgrade).await?;
        info!(node = %cluster.self_id, gossip = %cluster.advertise, transport = cfg.transport.as_str(), peers = cluster.known().len(), "gossip started");
        Ok(cluster)
    }

    /// Start chitchat on any transport (the authenticated one in [`Cluster::start`];
    /// an in-memory one in the simulator, [`crate::sim`]).
    pub async fn start_on(
        transport: &dyn chitchat::transport::Transport,
        settings: NodeSettings,
        known: Vec<PeerSpec>,
        stats: Arc<GossipStats>,
        upgrade: Option<Arc<dyn crate::proxy::UpgradeEndpoint>>,
    ) -> anyhow::Result<Arc<Cluster>> {
        let NodeSettings {
            self_id,
            cluster_id,
            gossip_interval,
            advertise,
            listen,
            generation,
            name,
        } = settings;
        let config = chitchat_config(
            ChitchatId::new(self_id.clone(), generation, advertise),
            &cluster_id,
            gossip_interval,
            listen,
            known.iter().map(|p| p.addr.to_string()).collect(),
        );
        let mut initial = vec![("ready".to_string(), "1".to_string())];
        if let Some(n) = name {
            initial.push(("name".to_string(), n));
        }
        let handle = spawn_chitchat(config, initial, transport).await?;
        let view = build_view(&self_id, advertise, &known, &[], stats.read());
        Ok(Arc::new(Cluster {
            handle,
            upgrade,
            self_id,
            advertise,
            known: Mutex::new(known),
            known_changed: watch::Sender::new(0),
            view: ArcSwap::from_pointee(view),
            view_changed: watch::Sender::new(0),
            stats,
        }))
    }

    pub fn self_id(&self) -> &str {
        &self.self_id
    }

    pub fn advertise(&self) -> SocketAddr {
        self.advertise
    }

    /// The transport's counters now (the view's copy is as of its last rebuild).
    pub fn gossip_counters(&self) -> GossipCounters {
        self.stats.read()
    }

    /// What the proxy listener serves for gossip (`http` transport), if anything.
    pub fn upgrade_endpoint(&self) -> Option<Arc<dyn crate::proxy::UpgradeEndpoint>> {
        self.upgrade.clone()
    }

    /// The current view (lock-free).
    pub fn view(&self) -> Arc<ClusterView> {
        self.view.load_full()
    }

    /// Notified whenever the view changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.view_changed.subscribe()
    }

    pub fn known(&self) -> Vec<PeerSpec> {
        self.known.lock().map(|k| k.clone()).unwrap_or_default()
    }

    /// Replace the known membership (the subscriber hook's full list).
    pub fn set_known(&self, peers: Vec<PeerSpec>) {
        if let Ok(mut k) = self.known.lock() {
            *k = peers;
        }
        self.known_changed.send_modify(|g| *g += 1);
    }

    /// Write one of this node's keys.
    pub async fn publish(&self, key: &str, value: String) {
        self.handle
            .with_chitchat(|c| c.self_node_state().set(key, value.clone()))
            .await;
    }

    /// Gossip with every live peer now rather than at the next random round: used when
    /// a rotation op or ack changed, so agreement takes one round trip.
    pub fn push_now(&self) {
        for addr in &self.view().live_addrs {
            let _ = self.handle.gossip(*addr);
        }
    }

    /// Send a gossip round to every known peer not seen live.
    async fn introduce(&self) {
        let live = self.view().live.clone();
        for p in self.known() {
            if p.id
                .as_ref()
                .is_some_and(|id| live.contains(id) || id == &self.self_id)
            {
                continue;
            }
            let addr = match p.addr.socket_addr() {
                Some(a) => Some(a),
                None => tokio::net::lookup_host((p.addr.host(), p.addr.port()))
                    .await
                    .ok()
                    .and_then(|mut a| a.next()),
            };
            if let Some(a) = addr.filter(|a| *a != self.advertise) {
                let _ = self.handle.gossip(a);
            }
        }
    }

    /// Keep the view in step with chitchat until `stop`; then announce leaving.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let chitchat = self.handle.chitchat();
        let mut live = chitchat.lock().await.live_nodes_watcher();
        let mut known_rx = self.known_changed.subscribe();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut ticks = 0u32;
        loop {
            // Introduce ourselves to known peers that are not live: at once when the
            // known list changes (set-peers), then every two seconds (a peer back after
            // a partition or a restart on a new port).
            let mut introduce = false;
            tokio::select! {
                _ = stop.cancelled() => break,
                r = live.changed() => if r.is_err() { break },
                _ = known_rx.changed() => introduce = true,
                _ = tick.tick() => {
                    ticks = ticks.wrapping_add(1);
                    introduce = ticks.is_multiple_of(2);
                }
            }
            if introduce {
                self.introduce().await;
            }
            let members: Vec<Member> = live
                .borrow_and_update()
                .iter()
                .map(|(id, ns)| Member {
                    id: id.node_id.to_string(),
                    generation: id.generation_id,
                    addr: id.gossip_advertise_addr,
                    keys: ns
                        .key_values()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                })
                .collect();
            let known = self.known();
            let next = build_view(
                &self.self_id,
                self.advertise,
                &known,
                &members,
                self.stats.read(),
            );
            let old = self.view.load();
            if old.live != next.live {
                let gone: Vec<&String> = old
                    .live
                    .iter()
                    .filter(|id| !next.live.contains(id))
                    .collect();
                let came: Vec<&String> = next
                    .live
                    .iter()
                    .filter(|id| !old.live.contains(id))
                    .collect();
                for id in &came {
                    info!(peer = %id, "peer balancer live");
                }
                for id in &gone {
                    warn!(peer = %id, "peer balancer dead or left");
                }
            }
            let changed =
                old.live != next.live || old.peers != next.peers || old.reports != next.reports;
            self.view.store(Arc::new(next));
            if changed {
                self.view_changed.send_modify(|g| *g += 1);
            }
        }
        self.publish("ready", "0".into()).await;
        // One gossip round so peers learn we are leaving, then stop.
        tokio::time::sleep(Duration::from_millis(250)).await;
        if let Err(e) = self.handle.initiate_shutdown() {
            warn!(error = %e, "gossip shutdown");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, port: u16, keys: &[(&str, &str)]) -> Member {
        Member {
            id: id.into(),
            generation: 1,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            keys: keys
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn peer(id: Option<&str>, port: u16) -> PeerSpec {
        PeerSpec {
            id: id.map(str::to_string),
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
        }
    }

    fn me() -> SocketAddr {
        "127.0.0.1:1".parse().unwrap()
    }

    #[test]
    fn known_ids_limit_membership() {
        let known = [peer(Some("a"), 1), peer(Some("b"), 2), peer(Some("c"), 3)];
        let members = [
            member("a", 1, &[]),
            member("b", 2, &[("load", r#"{"s":3,"a":2.5,"r":10,"f":1}"#)]),
            member("intruder", 9, &[]),
        ];
        let v = build_view("a", me(), &known, &members, Default::default());
        assert_eq!(v.live, vec!["a", "b"]);
        assert_eq!(v.known_count, 3);
        assert_eq!(v.peers.len(), 2, "{:?}", v.peers);
        let c = v
            .peers
            .iter()
            .find(|p| p.id.as_deref() == Some("c"))
            .unwrap();
        assert!(!c.live && c.known);
        let b = v
            .peers
            .iter()
            .find(|p| p.id.as_deref() == Some("b"))
            .unwrap();
        assert_eq!(b.load.as_ref().unwrap().sessions, 3);
    }

    #[test]
    fn address_only_peers_learn_ids() {
        let known = [peer(None, 2)];
        let members = [
            member("a", 1, &[]),
            member("b", 2, &[]),
            member("c", 3, &[]),
        ];
        let v = build_view("a", me(), &known, &members, Default::default());
        assert_eq!(v.live, vec!["a", "b", "c"]);
        assert_eq!(v.peers[0].id.as_deref(), Some("b"));
        assert!(v.peers[0].known);
        assert!(!v.peers[1].known);
    }

    /// Three chitchat nodes on `transport` at `addrs`, configured as gearlb does.
    async fn start_three(
        transports: [&dyn chitchat::transport::Transport; 3],
        addrs: [SocketAddr; 3],
        interval: Duration,
    ) -> Vec<ChitchatHandle> {
        let mut handles = Vec::new();
        for (i, t) in transports.into_iter().enumerate() {
            let id = ChitchatId::new(format!("lb{i}"), 1, addrs[i]);
            let seeds = addrs
                .iter()
                .filter(|a| **a != addrs[i])
                .map(|a| a.to_string())
                .collect();
            let cfg = chitchat_config(id, "app", interval, addrs[i], seeds);
            handles.push(
                spawn_chitchat(cfg, vec![("ready".into(), "1".into())], t)
                    .await
                    .unwrap(),
            );
        }
        handles
    }

    async fn live_count(h: &ChitchatHandle) -> usize {
        h.chitchat()
            .lock()
            .await
            .live_nodes_watcher()
            .borrow()
            .len()
    }

    /// The failure-detector tuning: all live within 3 s, a dead one noticed within 3 s
    /// at the default 200 ms interval.
    async fn membership_contract(handles: Vec<ChitchatHandle>) {
        let t = tokio::time::Instant::now();
        while t.elapsed() < Duration::from_secs(3) {
            let mut all = true;
            for h in &handles {
                all &= live_count(h).await == 3;
            }
            if all {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for h in &handles {
            assert_eq!(live_count(h).await, 3, "not all live within 3 s");
        }
        let mut handles = handles;
        let dead = handles.pop().unwrap();
        dead.shutdown().await.unwrap();
        let t = tokio::time::Instant::now();
        while t.elapsed() < Duration::from_secs(4) {
            if live_count(&handles[0]).await == 2 && live_count(&handles[1]).await == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "dead peer noticed after {:?}",
            t.elapsed()
        );
    }

    #[tokio::test]
    async fn membership_over_chitchats_channel_transport() {
        let transport = chitchat::transport::ChannelTransport::with_mtu(65_507);
        let addrs: [SocketAddr; 3] = [
            "127.0.0.1:17001".parse().unwrap(),
            "127.0.0.1:17002".parse().unwrap(),
            "127.0.0.1:17003".parse().unwrap(),
        ];
        let handles = start_three(
            [&transport, &transport, &transport],
            addrs,
            Duration::from_millis(200),
        )
        .await;
        membership_contract(handles).await;
    }

    async fn authenticated(carrier: transport::Carrier) -> Vec<GossipTransport> {
        let mut ts = Vec::new();
        for _ in 0..3 {
            let t = GossipTransport::bind(
                carrier,
                "127.0.0.1:0".parse().unwrap(),
                None,
                Auth::new("app", b"secret-0123456789abcdef"),
                Arc::new(GossipStats::default()),
            )
            .await
            .unwrap();
            ts.push(t);
        }
        ts
    }

    #[tokio::test]
    async fn membership_over_the_authenticated_tcp_transport() {
        let ts = authenticated(transport::Carrier::Tcp).await;
        let addrs = [ts[0].local_addr(), ts[1].local_addr(), ts[2].local_addr()];
        let handles =
            start_three([&ts[0], &ts[1], &ts[2]], addrs, Duration::from_millis(200)).await;
        membership_contract(handles).await;
    }

    #[tokio::test]
    async fn membership_over_authenticated_udp() {
        let ts = authenticated(transport::Carrier::Udp).await;
        let addrs = [ts[0].local_addr(), ts[1].local_addr(), ts[2].local_addr()];
        let handles =
            start_three([&ts[0], &ts[1], &ts[2]], addrs, Duration::from_millis(200)).await;
        membership_contract(handles).await;
    }

    #[test]
    fn newest_incarnation_wins_and_health_merges() {
        let mut old = member("b", 2, &[("hs", "e1"), ("hd:00", r#"["g1"]"#)]);
        old.generation = 1;
        let mut new = member("b", 2, &[("hs", "e1"), ("hd:00", r#"["g2"]"#)]);
        new.generation = 2;
        let c = member("c", 3, &[("hs", "e0"), ("hd:00", r#"["g2","g3"]"#)]);
        let v = build_view("a", me(), &[], &[old, new, c], Default::default());
        // b and a share epoch e1; b covers g1..g3, c covers g3 and g4 (in its own epoch).
        let covers = |peer: &str, g: &str| match peer {
            "b" => ["g1", "g2", "g3"].contains(&g),
            _ => false,
        };
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
    }

    /// The payload cliff: ten thousand gears down, with the platform's real name
    /// lengths, are published in bounded values, and keys written after them still
    /// reach a peer over chitchat's own transport with its 65 507-byte message limit.
    #[tokio::test]
    async fn ten_thousand_gears_down_and_a_later_key_propagate() {
        let transport = chitchat::transport::ChannelTransport::with_mtu(65_507);
        let addrs: [SocketAddr; 2] = [
            "127.0.0.1:17101".parse().unwrap(),
            "127.0.0.1:17102".parse().unwrap(),
        ];
        let mut handles = Vec::new();
        for (i, addr) in addrs.iter().enumerate() {
            let id = ChitchatId::new(format!("lb{i}"), 1, *addr);
            let seeds = vec![addrs[1 - i].to_string()];
            let cfg = chitchat_config(id, "app", Duration::from_millis(50), *addr, seeds);
            handles.push(
                spawn_chitchat(cfg, vec![("ready".into(), "1".into())], &transport)
                    .await
                    .unwrap(),
            );
        }
        let labels: Vec<String> = (0..10_000)
            .map(|i| {
                format!(
                    "{:032x}-abcdefghijklmnop",
                    (i as u128) * 0x9e37_79b9_7f4a_7c15
                )
            })
            .collect();
        let buckets = keys::down_buckets(labels.iter().map(String::as_str));
        handles[0]
            .with_chitchat(|c| {
                let me = c.self_node_state();
                me.set(keys::SUBSET_EPOCH, "e");
                for (k, v) in &buckets {
                    me.set(k, v);
                }
                me.set("ack:later", "after the big ones");
            })
            .await;
        let sender = handles[0].chitchat_id().clone();
        let t = tokio::time::Instant::now();
        let report = loop {
            let got = handles[1]
                .with_chitchat(|c| {
                    let ns = c.node_state(&sender)?;
                    ns.get("ack:later")?;
                    keys::HealthReport::from_keys(ns.key_values())
                })
                .await;
            if let Some(r) = got {
                break r;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "keys did not propagate"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(report.down.len(), 10_000);
    }
}
