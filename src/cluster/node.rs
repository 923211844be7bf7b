//! [`Cluster`]: one balancer's running gossip node: the chitchat handle, the known
//! membership, and the [`ClusterView`] snapshot kept up to date by [`model::Model`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use chitchat::{spawn_chitchat, ChitchatHandle, ChitchatId, ListenerHandle};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::ClusterConfig;
use crate::gear::PeerSpec;

use super::keys;
use super::model;
use super::settings::{chitchat_config, failure_timeout, NodeSettings};
use super::transport::{Auth, GossipCounters, GossipStats, GossipTransport, Note, Notes};
use super::view::{ClusterView, KeyEvent};
use gearlb_core::rotation::register::Ack;

/// How long a balancer may see no peer live before it says so.
const ALONE_WARNING: Duration = Duration::from_secs(10);

/// A running gossip node.
pub struct Cluster {
    pub(super) handle: ChitchatHandle,
    /// Gossip's side of the proxy port (`http` transport).
    upgrade: Option<Arc<dyn crate::proxy::upgrade::UpgradeEndpoint>>,
    self_id: String,
    advertise: SocketAddr,
    gossip_interval: Duration,
    /// This node's incarnation (start time, Unix ms).
    generation: u64,
    known: Mutex<Vec<PeerSpec>>,
    known_changed: watch::Sender<u64>,
    view: ArcSwap<ClusterView>,
    view_changed: watch::Sender<u64>,
    /// Each live peer by id with when its heartbeat last advanced, as of the last
    /// gossip round (for the scaler's fence).
    heard: ArcSwap<Vec<(Arc<str>, tokio::time::Instant)>>,
    stats: Arc<GossipStats>,
    /// Bumped when ids of address-only peers were learnt (the state file keeps them).
    learned: watch::Sender<u64>,
    /// chitchat's key events, taken by [`Cluster::run`].
    events: Mutex<Option<mpsc::UnboundedReceiver<KeyEvent>>>,
    /// Sends notes to peers (the authenticated transports; not the simulator's).
    notes: OnceLock<Notes>,
    /// Acknowledgments peers sent here as notes: peer id → gear → its last one.
    direct_acks: Mutex<HashMap<String, HashMap<String, Ack>>>,
    direct_changed: watch::Sender<u64>,
    /// Keeps the subscription to chitchat's key events.
    _listener: ListenerHandle,
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
            cfg.gossip_wire,
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
            .map(|u| u as Arc<dyn crate::proxy::upgrade::UpgradeEndpoint>);
        let generation = crate::time::unix_ms();
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
        if let Some((notes, inbox)) = transport.notes() {
            let _ = cluster.notes.set(notes);
            tokio::spawn(Self::take_notes(Arc::downgrade(&cluster), inbox));
        }
        info!(node = %cluster.self_id, gossip = %cluster.advertise, transport = cfg.transport.as_str(), peers = cluster.known().len(), "gossip started");
        Ok(cluster)
    }

    /// Start chitchat on any transport (the authenticated one in [`Cluster::start`];
    /// an in-memory one in the simulator, `gearlb_sim`).
    pub async fn start_on(
        transport: &dyn chitchat::transport::Transport,
        settings: NodeSettings,
        known: Vec<PeerSpec>,
        stats: Arc<GossipStats>,
        upgrade: Option<Arc<dyn crate::proxy::upgrade::UpgradeEndpoint>>,
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
        let mut initial = vec![(keys::READY.to_string(), "1".to_string())];
        if let Some(n) = name {
            initial.push((keys::NAME.to_string(), n));
        }
        let handle = spawn_chitchat(config, initial, transport).await?;
        // Every key written from now on, here or learnt from a peer, is an event; the
        // keys already there are read once, under the same lock.
        let (tx, rx) = mpsc::unbounded_channel();
        let listener = handle
            .with_chitchat(|c| {
                for (id, ns) in c.node_states() {
                    for (k, v) in ns.key_values() {
                        let _ = tx.send(KeyEvent {
                            node: id.clone(),
                            key: k.to_string(),
                            value: v.to_string(),
                        });
                    }
                }
                let tx = tx.clone();
                c.subscribe_event("", move |e| {
                    let _ = tx.send(KeyEvent {
                        node: e.node.clone(),
                        key: e.key.to_string(),
                        value: e.value.to_string(),
                    });
                })
            })
            .await;
        let model = model::Model::new(
            &self_id,
            generation,
            advertise,
            known.clone(),
            failure_timeout(gossip_interval),
            gossip_interval,
        );
        Ok(Arc::new(Cluster {
            handle,
            upgrade,
            self_id,
            advertise,
            gossip_interval,
            generation,
            known: Mutex::new(known),
            known_changed: watch::Sender::new(0),
            view: ArcSwap::new(model.view()),
            view_changed: watch::Sender::new(0),
            heard: ArcSwap::from_pointee(Vec::new()),
            stats,
            learned: watch::Sender::new(0),
            events: Mutex::new(Some(rx)),
            notes: OnceLock::new(),
            direct_acks: Mutex::new(HashMap::new()),
            direct_changed: watch::Sender::new(0),
            _listener: listener,
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
    pub fn upgrade_endpoint(&self) -> Option<Arc<dyn crate::proxy::upgrade::UpgradeEndpoint>> {
        self.upgrade.clone()
    }

    /// The current view (lock-free).
    /// Each live peer by id with when its heartbeat was last seen advancing (not
    /// credited with this balancer's own stalls), as of the last gossip round.
    pub fn heard(&self) -> Arc<Vec<(Arc<str>, tokio::time::Instant)>> {
        self.heard.load_full()
    }

    /// The failure detector's timeout: a peer not heard from for this long is dead.
    pub fn liveness_window(&self) -> Duration {
        failure_timeout(self.gossip_interval)
    }

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

    /// How many balancers the known membership counts, this one included, as of now
    /// (the view's `known_count` follows a moment later): what a majority is of.
    pub fn known_count_now(&self) -> usize {
        self.known
            .lock()
            .map_or(1, |k| super::model::known_count(&k, &self.self_id))
    }

    /// Notified when the known membership learnt an address-only peer's id.
    pub fn subscribe_learned(&self) -> watch::Receiver<u64> {
        self.learned.subscribe()
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

    /// Delete one of this node's keys (a tombstone that gossip spreads).
    pub async fn unpublish(&self, key: &str) {
        self.handle
            .with_chitchat(|c| c.self_node_state().delete(key))
            .await;
    }

    /// The keys under `prefix` that each live peer publishes: (peer id, key, value).
    pub async fn peer_keys(&self, prefix: &str) -> Vec<(String, String, String)> {
        let view = self.view();
        let live: std::collections::HashSet<&str> = view.live.iter().map(String::as_str).collect();
        let me = self.self_id.clone();
        self.handle
            .with_chitchat(|c| {
                // A restarted peer's earlier incarnation may linger: its newest counts.
                let mut newest: HashMap<&str, (&ChitchatId, &chitchat::NodeState)> = HashMap::new();
                for (id, ns) in c.node_states() {
                    if *id.node_id == *me || !live.contains(&*id.node_id) {
                        continue;
                    }
                    let e = newest.entry(&*id.node_id).or_insert((id, ns));
                    if id.generation_id > e.0.generation_id {
                        *e = (id, ns);
                    }
                }
                let mut out = Vec::new();
                for (id, ns) in newest.into_values() {
                    for (k, v) in ns.iter_prefix(prefix) {
                        out.push((id.node_id.to_string(), k.to_string(), v.value.clone()));
                    }
                }
                out
            })
            .await
    }

    /// Gossip with every live peer now rather than at the next random round: the
    /// balancer that takes a rotate command does it once, so that every peer has the
    /// op after one round trip.
    pub fn push_now(&self) {
        for addr in self.view().addrs.values() {
            let _ = self.handle.gossip(*addr);
        }
    }

    /// Gossip with one live peer now (an acknowledgment on its way to the balancer
    /// waiting for it). False when that peer is not live.
    pub fn push_to(&self, id: &str) -> bool {
        match self.view().addrs.get(id) {
            Some(addr) => self.handle.gossip(*addr).is_ok(),
            None => false,
        }
    }

    /// Tell the balancer `to` (a live peer) this balancer's acknowledgment of the op
    /// in force on `gear`, straight (see [`super::transport::notes`]); without notes
    /// (the simulator's transport), open a gossip exchange with it instead. False
    /// when `to` is not live.
    pub async fn send_ack(&self, to: &str, gear: &str, ack: &Ack) -> bool {
        let Some(notes) = self.notes.get() else {
            return self.push_to(to);
        };
        let Some(addr) = self.view().addrs.get(to).copied() else {
            return false;
        };
        let note = Note::Ack {
            from: self.self_id.clone(),
            gear: gear.to_string(),
            ack: ack.clone(),
        };
        notes.send(addr, &note).await;
        true
    }

    /// The last acknowledgment of `gear` each peer sent here as a note, by peer id.
    pub fn direct_acks(&self, gear: &str) -> HashMap<String, Ack> {
        let Ok(acks) = self.direct_acks.lock() else {
            return HashMap::new();
        };
        acks.iter()
            .filter_map(|(peer, a)| Some((peer.clone(), a.get(gear)?.clone())))
            .collect()
    }

    /// Notified when a peer's acknowledgment arrives as a note.
    pub fn subscribe_direct(&self) -> watch::Receiver<u64> {
        self.direct_changed.subscribe()
    }

    /// Take the notes peers send here until the transport or the node stops. A note
    /// counts only from a live member, sent from the gossip address this balancer
    /// knows it by; what peers no longer live sent is forgotten.
    async fn take_notes(
        cluster: std::sync::Weak<Self>,
        mut inbox: super::transport::notes::NoteInbox,
    ) {
        while let Some((from_addr, message)) = inbox.recv().await {
            let Some(c) = cluster.upgrade() else { return };
            match Note::decode(&message) {
                Some(Note::Ack { from, gear, ack }) => {
                    let view = c.view();
                    if view.addrs.get(&from) != Some(&from_addr) {
                        continue;
                    }
                    if let Ok(mut acks) = c.direct_acks.lock() {
                        acks.retain(|peer, _| view.addrs.contains_key(peer));
                        acks.entry(from).or_default().insert(gear, ack);
                    }
                    c.direct_changed.send_modify(|g| *g += 1);
                }
                None => {
                    c.stats
                        .rejected_malformed
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
    }

    /// Send a gossip round to every known peer not seen live.
    async fn introduce(&self) {
        let view = self.view();
        for p in self.known() {
            if p.id
                .as_ref()
                .is_some_and(|id| view.live.contains(id) || id == &self.self_id)
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
                if !view.addrs.values().any(|live| *live == a) {
                    let _ = self.handle.gossip(a);
                }
            }
        }
    }

    /// Every node's heartbeat, as gossip has it now.
    async fn heartbeats(&self) -> Vec<(ChitchatId, u64)> {
        self.handle
            .with_chitchat(|c| {
                c.node_states()
                    .iter()
                    .map(|(id, ns)| (id.clone(), u64::from(ns.heartbeat())))
                    .collect()
            })
            .await
    }

    /// The `rot:` keys every node publishes (replayed when the known membership
    /// changes: nodes that count now were ignored before).
    async fn rotation_keys(&self) -> Vec<KeyEvent> {
        self.handle
            .with_chitchat(|c| {
                let mut out = Vec::new();
                for (id, ns) in c.node_states() {
                    for (k, v) in ns.iter_prefix(keys::ROTATION_PREFIX) {
                        out.push(KeyEvent {
                            node: id.clone(),
                            key: k.to_string(),
                            value: v.value.clone(),
                        });
                    }
                }
                out
            })
            .await
    }

    /// Keep the view in step with chitchat until `stop`; then announce leaving.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let events = self.events.lock().ok().and_then(|mut e| e.take());
        let Some(mut events) = events else {
            warn!("cluster view already running");
            return;
        };
        let mut model = model::Model::new(
            &self.self_id,
            self.generation,
            self.advertise,
            self.known(),
            failure_timeout(self.gossip_interval),
            self.gossip_interval,
        );
        let mut known_rx = self.known_changed.subscribe();
        let mut poll = tokio::time::interval(self.gossip_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut intro = tokio::time::interval(Duration::from_secs(2));
        intro.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut alone_since = Some(tokio::time::Instant::now());
        let mut alone_warned = false;
        loop {
            // Introduce ourselves to known peers that are not live: at once when the
            // known list changes (set-peers), then every two seconds (a peer back after
            // a partition or a restart on a new port).
            let mut introduce = false;
            tokio::select! {
                _ = stop.cancelled() => break,
                ev = events.recv() => {
                    let Some(ev) = ev else { break };
                    model.apply(ev);
                    // Everything that arrived with it (one message carries many keys).
                    while let Ok(ev) = events.try_recv() {
                        model.apply(ev);
                    }
                }
                _ = poll.tick() => {
                    let beats = self.heartbeats().await;
                    model.heartbeats(tokio::time::Instant::now(), beats);
                    self.heard.store(Arc::new(model.heard()));
                }
                _ = known_rx.changed() => {
                    model.set_known(self.known());
                    for ev in self.rotation_keys().await {
                        model.apply(ev);
                    }
                    introduce = true;
                }
                _ = intro.tick() => introduce = true,
            }
            if let Some(next) = model.build() {
                let old = self.view.load_full();
                log_membership(&old, &next);
                self.view.store(next);
                self.view_changed.send_modify(|g| *g += 1);
                if let Some(known) = model.learned_known() {
                    for p in known.iter().filter(|p| p.learned) {
                        info!(peer = %p.addr, id = p.id.as_deref().unwrap_or_default(), "identity of peer balancer learnt");
                    }
                    if let Ok(mut k) = self.known.lock() {
                        *k = known.clone();
                    }
                    model.set_known(known);
                    self.learned.send_modify(|g| *g += 1);
                }
            }
            if introduce {
                self.introduce().await;
            }
            // A balancer that reaches none of its known peers says so (wrong
            // addresses, ports or secret), once, until it reaches one.
            let view = self.view();
            if view.live.len() > 1 {
                alone_since = None;
                alone_warned = false;
            } else if view.known_count > 1 {
                let since = *alone_since.get_or_insert_with(tokio::time::Instant::now);
                if !alone_warned && since.elapsed() >= ALONE_WARNING {
                    let addrs: Vec<String> = self
                        .known()
                        .iter()
                        .filter(|p| p.id.as_deref() != Some(self.self_id.as_str()))
                        .map(|p| p.addr.to_string())
                        .collect();
                    let g = self.stats.read();
                    warn!(
                        peers = %addrs.join(" "),
                        send_failures = g.send_failures,
                        rejected = g.rejected_bad_tag + g.rejected_other_cluster + g.rejected_handshake,
                        "no known peer balancer reachable for {}s: check their addresses (cluster.peers or set-peers), that they run, and that they share cluster.secret and cluster.id",
                        ALONE_WARNING.as_secs()
                    );
                    alone_warned = true;
                }
            }
        }
        self.publish(keys::READY, "0".into()).await;
        // One gossip round so peers learn we are leaving, then stop.
        tokio::time::sleep(Duration::from_millis(250)).await;
        if let Err(e) = self.handle.initiate_shutdown() {
            warn!(error = %e, "gossip shutdown");
        }
    }
}

/// Log peers that became live or left.
fn log_membership(old: &ClusterView, next: &ClusterView) {
    if old.live == next.live {
        return;
    }
    for id in next.live.iter().filter(|id| !old.live.contains(id)) {
        info!(peer = %id, "peer balancer live");
    }
    for id in old.live.iter().filter(|id| !next.live.contains(id)) {
        warn!(peer = %id, "peer balancer dead or left");
    }
}
