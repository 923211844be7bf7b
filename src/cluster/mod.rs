//! The application's balancers as one cluster: membership, liveness and shared state
//! by gossip (chitchat), over the authenticated transport in [`transport`].
//!
//! Owns the chitchat node (its handle lives as long as the [`Cluster`]), the known
//! membership (the broker's truth, from `cluster.peers` or `gearlb ctl set-peers`), and
//! the [`ClusterView`] snapshot (arc-swap) kept up to date by [`view::Model`] from
//! chitchat's key events and heartbeats, one change at a time. The request path never
//! touches chitchat; it reads the routing table, which [`sync`] keeps in step with the
//! view.
//!
//! Each node writes only its own keys; [`keys`] is the schema. No value grows with the
//! number of gears (chitchat cannot send a value larger than one message, and such a
//! value would stop every later key of its node): gear health is published by
//! exception, in buckets, relative to a subset epoch; rotations and acknowledgments
//! have one key per gear. `load` is published once a second, health when it changes.
//!
//! Liveness is [`liveness`]'s: a peer is dead after [`FAILURE_ROUNDS`] gossip rounds
//! (2 s at the default 200 ms) without a new heartbeat, not counting time this
//! balancer itself was stalled, and a peer saying `ready` = `0` (stopping) is dropped
//! at once. chitchat's own adaptive detector, which only picks gossip targets here,
//! is tuned to agree with it (see [`chitchat_config`]).

pub mod keys;
pub mod liveness;
pub mod sync;
pub mod transport;
pub mod view;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use chitchat::{
    spawn_chitchat, ChitchatConfig, ChitchatHandle, ChitchatId, FailureDetectorConfig,
    ListenerHandle, ProtocolVersion,
};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::ClusterConfig;
use crate::gear::PeerSpec;
use transport::{Auth, GossipCounters, GossipStats, GossipTransport};

pub use view::{ClusterView, KeyEvent, Load, PeerView, ScalerClaim, Versions};

/// Where the known membership at start came from ([`combine_peers`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerSource {
    /// Nothing saved yet: `cluster.peers`.
    Configured,
    /// The saved list (the last `set-peers`, and identities learnt from addresses):
    /// `cluster.peers` is what it was when it was saved.
    Saved,
    /// `cluster.peers` changed since the list was saved: the configuration wins, and
    /// this many saved peers were dropped.
    ConfigurationChanged { dropped: usize },
}

/// What a state file remembers of `cluster.peers`, to tell whether it changed.
pub fn peers_fingerprint(configured: &[crate::gear::Addr]) -> String {
    let mut v: Vec<String> = configured.iter().map(|a| a.to_string()).collect();
    v.sort();
    v.dedup();
    v.join(" ")
}

/// The known membership at start (pure): the saved list, unless `cluster.peers`
/// changed since it was saved (`saved_fingerprint`, [`peers_fingerprint`]), in which
/// case the configuration wins, keeping identities learnt at addresses it still lists.
/// A state file without a fingerprint (older versions) counts as unchanged when every
/// configured address is in the saved list.
pub fn combine_peers(
    configured: &[crate::gear::Addr],
    saved: &[PeerSpec],
    saved_fingerprint: Option<&str>,
) -> (Vec<PeerSpec>, PeerSource) {
    let from_config = || -> Vec<PeerSpec> {
        configured
            .iter()
            .map(|a| {
                let learnt = saved.iter().find(|p| p.learned && p.addr == *a);
                PeerSpec {
                    id: learnt.and_then(|p| p.id.clone()),
                    addr: a.clone(),
                    learned: learnt.is_some(),
                }
            })
            .collect()
    };
    if saved.is_empty() {
        return (from_config(), PeerSource::Configured);
    }
    let unchanged = match saved_fingerprint {
        Some(f) => f == peers_fingerprint(configured),
        None => configured
            .iter()
            .all(|a| saved.iter().any(|p| p.addr == *a)),
    };
    if unchanged {
        (saved.to_vec(), PeerSource::Saved)
    } else {
        (
            from_config(),
            PeerSource::ConfigurationChanged {
                dropped: saved.len(),
            },
        )
    }
}

/// Gossip rounds without a new heartbeat after which a peer is dead.
pub const FAILURE_ROUNDS: u32 = 10;

/// The failure detector's timeout for a gossip interval (at least 1 s).
pub fn failure_timeout(gossip_interval: Duration) -> Duration {
    (gossip_interval * FAILURE_ROUNDS).max(Duration::from_secs(1))
}

/// chitchat's configuration for one balancer.
///
/// chitchat's own failure detector only chooses gossip targets here (the view's
/// liveness is [`liveness`]'s), but a target wrongly thought dead is gossiped with
/// less, so it is tuned to agree with ours. It declares a node dead after
/// `phi_threshold` × the mean interval between heartbeats seen, smoothed towards
/// `initial_interval` with a weight of 5 samples: with a window of 10 samples and a
/// prior of a quarter of our timeout, the mean cannot fall below a twelfth of the
/// timeout however fast heartbeats arrive (with chitchat's window of 1000 it falls to
/// the heartbeat rate, and at M = 100 any 0.8 s hiccup was a death), so its verdicts
/// land between about 0.7× and 1× ours.
pub fn chitchat_config(
    id: ChitchatId,
    cluster_id: &str,
    interval: Duration,
    listen: SocketAddr,
    seeds: Vec<String>,
) -> ChitchatConfig {
    let timeout = failure_timeout(interval);
    ChitchatConfig {
        chitchat_id: id,
        cluster_id: cluster_id.to_string(),
        gossip_interval: interval,
        listen_addr: listen,
        seed_nodes: seeds,
        failure_detector_config: FailureDetectorConfig {
            phi_threshold: 8.0,
            sampling_window_size: 10,
            initial_interval: timeout / 4,
            max_interval: timeout * 5,
            dead_node_grace_period: Duration::from_secs(3600),
        },
        marked_for_deletion_grace_period: Duration::from_secs(3600),
        catchup_callback: None,
        extra_liveness_predicate: Some(Box::new(|ns| ns.get(keys::READY) == Some("1"))),
        protocol_version: ProtocolVersion::V0,
    }
}

/// How long a balancer may see no peer live before it says so.
const ALONE_WARNING: Duration = Duration::from_secs(10);

/// A running gossip node.
pub struct Cluster {
    handle: ChitchatHandle,
    /// Gossip's side of the proxy port (`http` transport).
    upgrade: Option<Arc<dyn crate::proxy::UpgradeEndpoint>>,
    self_id: String,
    advertise: SocketAddr,
    gossip_interval: Duration,
    /// This node's incarnation (start time, Unix ms).
    generation: u64,
    known: Mutex<Vec<PeerSpec>>,
    known_changed: watch::Sender<u64>,
    view: ArcSwap<ClusterView>,
    view_changed: watch::Sender<u64>,
    stats: Arc<GossipStats>,
    /// Bumped when ids of address-only peers were learnt (the state file keeps them).
    learned: watch::Sender<u64>,
    /// chitchat's key events, taken by [`Cluster::run`].
    events: Mutex<Option<mpsc::UnboundedReceiver<KeyEvent>>>,
    /// Keeps the subscription to chitchat's key events.
    _listener: ListenerHandle,
}

/// What a cluster node needs besides its transport (see [`Cluster::start_on`]).
#[derive(Clone, Debug)]
pub struct NodeSettings {
    /// This balancer's id (`cluster.node_id`).
    pub self_id: String,
    /// The application (`cluster.id`): nodes of other clusters are refused.
    pub cluster_id: String,
    /// Time between gossip rounds.
    pub gossip_interval: Duration,
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
        let model = view::Model::new(
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
            stats,
            learned: watch::Sender::new(0),
            events: Mutex::new(Some(rx)),
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
        let mut model = view::Model::new(
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Three balancers' clusters on `transports`, at `addrs`, knowing each other.
    async fn start_three(
        transports: [&dyn chitchat::transport::Transport; 3],
        addrs: [SocketAddr; 3],
        interval: Duration,
    ) -> Vec<(Arc<Cluster>, CancellationToken)> {
        let known: Vec<PeerSpec> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| PeerSpec {
                id: Some(format!("lb{i}")),
                addr: (*a).into(),
                learned: false,
            })
            .collect();
        let mut out = Vec::new();
        for (i, t) in transports.into_iter().enumerate() {
            let settings = NodeSettings {
                self_id: format!("lb{i}"),
                cluster_id: "app".into(),
                gossip_interval: interval,
                advertise: addrs[i],
                listen: addrs[i],
                generation: 1,
                name: None,
            };
            let c = Cluster::start_on(t, settings, known.clone(), Arc::default(), None)
                .await
                .unwrap();
            let stop = CancellationToken::new();
            tokio::spawn(c.clone().run(stop.clone()));
            out.push((c, stop));
        }
        out
    }

    /// All live within 3 s; one that crashes (no goodbye) dropped by the others within
    /// the failure timeout and a round or two.
    async fn membership_contract(
        nodes: Vec<(Arc<Cluster>, CancellationToken)>,
        interval: Duration,
    ) {
        let t = tokio::time::Instant::now();
        while t.elapsed() < Duration::from_secs(3)
            && !nodes.iter().all(|(c, _)| c.view().live.len() == 3)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for (c, _) in &nodes {
            assert_eq!(c.view().live.len(), 3, "not all live within 3 s");
        }
        let (dead, stop) = &nodes[2];
        dead.handle.abort();
        stop.cancel();
        let t = tokio::time::Instant::now();
        while t.elapsed() < Duration::from_secs(8)
            && !nodes[..2].iter().all(|(c, _)| c.view().live.len() == 2)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let took = t.elapsed();
        // The timeout, plus slack for a busy CI host running tests side by side.
        let limit = failure_timeout(interval) + Duration::from_millis(1500);
        assert!(took < limit, "dead peer noticed after {took:?}");
        assert!(
            took + interval >= failure_timeout(interval) / 2,
            "noticed after {took:?}: too soon"
        );
        for (_, stop) in &nodes {
            stop.cancel();
        }
    }

    #[tokio::test]
    async fn membership_over_chitchats_channel_transport() {
        let transport = chitchat::transport::ChannelTransport::with_mtu(65_507);
        let addrs: [SocketAddr; 3] = [
            "127.0.0.1:17001".parse().unwrap(),
            "127.0.0.1:17002".parse().unwrap(),
            "127.0.0.1:17003".parse().unwrap(),
        ];
        let interval = Duration::from_millis(200);
        let nodes = start_three([&transport, &transport, &transport], addrs, interval).await;
        membership_contract(nodes, interval).await;
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
        let interval = Duration::from_millis(200);
        let nodes = start_three([&ts[0], &ts[1], &ts[2]], addrs, interval).await;
        membership_contract(nodes, interval).await;
    }

    #[tokio::test]
    async fn membership_over_authenticated_udp() {
        let ts = authenticated(transport::Carrier::Udp).await;
        let addrs = [ts[0].local_addr(), ts[1].local_addr(), ts[2].local_addr()];
        let interval = Duration::from_millis(200);
        let nodes = start_three([&ts[0], &ts[1], &ts[2]], addrs, interval).await;
        membership_contract(nodes, interval).await;
    }

    #[test]
    fn configured_and_saved_peers_combine_by_the_fingerprint() {
        let a = |s: &str| -> crate::gear::Addr { s.parse().unwrap() };
        let spec = |id: Option<&str>, addr: &str, learned: bool| PeerSpec {
            id: id.map(str::to_string),
            addr: a(addr),
            learned,
        };
        let conf = [a("10.0.0.1:7001"), a("10.0.0.2:7001")];
        // Nothing saved: the configuration.
        let (k, src) = combine_peers(&conf, &[], None);
        assert_eq!(src, PeerSource::Configured);
        assert_eq!(k.len(), 2);
        // Saved with the same configuration: the saved list (learnt ids, set-peers).
        let saved = vec![
            spec(Some("lb1"), "10.0.0.1:7001", true),
            spec(None, "10.0.0.2:7001", false),
        ];
        let fp = peers_fingerprint(&conf);
        assert_eq!(
            combine_peers(&conf, &saved, Some(&fp)),
            (saved.clone(), PeerSource::Saved)
        );
        // The ports changed in the configuration: it wins; a learnt id stays with the
        // address still listed.
        let moved = [a("10.0.0.1:7001"), a("10.0.0.2:8001")];
        let (k, src) = combine_peers(&moved, &saved, Some(&fp));
        assert_eq!(src, PeerSource::ConfigurationChanged { dropped: 2 });
        assert_eq!(
            k,
            vec![
                spec(Some("lb1"), "10.0.0.1:7001", true),
                spec(None, "10.0.0.2:8001", false)
            ]
        );
        // set-peers lists survive a configuration without cluster.peers.
        let hook = vec![spec(Some("u1"), "10.0.0.9:35561", false)];
        let none = peers_fingerprint(&[]);
        assert_eq!(combine_peers(&[], &hook, Some(&none)).1, PeerSource::Saved);
        // An older state file (no fingerprint): unchanged while it has every address.
        assert_eq!(combine_peers(&conf, &saved, None).1, PeerSource::Saved);
        assert!(matches!(
            combine_peers(&moved, &saved, None).1,
            PeerSource::ConfigurationChanged { .. }
        ));
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
