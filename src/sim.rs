//! The cluster simulator: M balancers in one process, each running the real cluster
//! ([`crate::cluster`]), subset and health sync ([`crate::cluster::sync`]), rotation
//! ([`crate::rotation`]) and scaler election ([`crate::scaler`]) code, over an
//! in-memory network with configurable latency, loss, partitions and stalls.
//!
//! Owns the simulated network ([`SimNet`], a chitchat [`Transport`]) and the
//! simulated balancers ([`Sim`]). The network wraps chitchat's own
//! [`ChannelTransport`] (which encodes and decodes every message as on the wire and
//! enforces the 65 507-byte message limit) and adds, at the receiving end, per-message
//! latency, random loss, partitions (groups of addresses that cannot reach each other)
//! and stalls (a node that neither sends nor receives for a while, as a process
//! descheduled or stopped). Every balancer has its own routing table with the N gears.
//! No health checks or proxies run: gears are up unless a test says otherwise.
//!
//! Meant to run on a tokio current-thread runtime with paused time (`start_paused`):
//! virtual time then advances only when every balancer is idle, so the protocol's
//! timing (convergence, rotate-out latency, failure detection, failover) does not
//! depend on the host's speed, and M = 100-300 balancers fit on one core. CPU time is
//! still real: what a balancer costs is process CPU per balancer per virtual second.
//! `examples/cluster_sim.rs` measures configurations into `bench/CLUSTER.md`;
//! `tests/cluster_sim.rs` runs a small one in CI.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chitchat::transport::{ChannelTransport, RecvOutcome, SendOutcome, Socket, Transport};
use chitchat::ChitchatEnvelope;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster::transport::GossipStats;
use crate::cluster::{Cluster, NodeSettings};
use crate::gear::PeerSpec;
use crate::rotation::{self, AckState, Op, Rotations};
use crate::routing::{BackendSpec, Router};
use crate::scaler::{Scaler, ScalerSettings};
use crate::stats::FrontendStats;

/// chitchat's largest message (its UDP payload limit), enforced by the network.
pub const MTU: usize = 65_507;

/// How the simulated network behaves.
#[derive(Clone, Debug)]
pub struct NetConfig {
    /// One-way latency of every message.
    pub latency: Duration,
    /// Uniform extra latency, 0..jitter.
    pub jitter: Duration,
    /// Probability that a message is lost.
    pub loss: f64,
    pub seed: u64,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            latency: Duration::from_millis(1),
            jitter: Duration::from_millis(1),
            loss: 0.0,
            seed: 1,
        }
    }
}

/// Traffic counters of one address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub messages_sent: u64,
    pub bytes_sent: u64,
    pub messages_received: u64,
    pub bytes_received: u64,
    /// Messages dropped on their way here (loss, partition, stopped node).
    pub dropped: u64,
}

#[derive(Default)]
struct NetState {
    /// Partition group of each address (absent: group 0).
    group: HashMap<SocketAddr, u32>,
    /// Nodes stalled until the given instant.
    stalled: HashMap<SocketAddr, Instant>,
    /// Crashed nodes: nothing reaches or leaves them.
    down: HashSet<SocketAddr>,
    traffic: HashMap<SocketAddr, Traffic>,
}

/// The in-memory network: a chitchat [`Transport`] shared by every simulated node.
#[derive(Clone)]
pub struct SimNet {
    channel: ChannelTransport,
    cfg: NetConfig,
    state: Arc<Mutex<NetState>>,
    opened: Arc<AtomicU64>,
}

impl SimNet {
    pub fn new(cfg: NetConfig) -> Self {
        SimNet {
            channel: ChannelTransport::with_mtu(MTU),
            cfg,
            state: Arc::default(),
            opened: Arc::default(),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut NetState) -> T) -> T {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut s)
    }

    /// Split the network: each address in `groups[i]` is put in group `i + 1`;
    /// addresses of different groups cannot reach each other. Addresses not listed
    /// keep their group.
    pub fn partition(&self, groups: &[Vec<SocketAddr>]) {
        self.with(|s| {
            for (i, g) in groups.iter().enumerate() {
                for a in g {
                    s.group.insert(*a, i as u32 + 1);
                }
            }
        });
    }

    /// Undo every partition.
    pub fn heal(&self) {
        self.with(|s| s.group.clear());
    }

    /// `addr` neither sends nor receives until `until` (what it sends or is sent
    /// meanwhile arrives then).
    pub fn stall(&self, addr: SocketAddr, until: Instant) {
        self.with(|s| {
            s.stalled.insert(addr, until);
        });
    }

    /// `addr` crashed: nothing reaches or leaves it any more.
    pub fn crash(&self, addr: SocketAddr) {
        self.with(|s| {
            s.down.insert(addr);
        });
    }

    pub fn traffic(&self, addr: SocketAddr) -> Traffic {
        self.with(|s| s.traffic.get(&addr).copied().unwrap_or_default())
    }

    /// Whether a message from `from` to `to` arriving now gets through, and when it
    /// is delivered.
    fn route(&self, from: SocketAddr, to: SocketAddr, rng: &mut fastrand::Rng) -> Option<Instant> {
        let now = Instant::now();
        let jitter = self.cfg.jitter.mul_f64(rng.f64());
        let mut at = now + self.cfg.latency + jitter;
        self.with(|s| {
            let group = |a: &SocketAddr| s.group.get(a).copied().unwrap_or(0);
            let lost = self.cfg.loss > 0.0 && rng.f64() < self.cfg.loss;
            if s.down.contains(&from) || s.down.contains(&to) || group(&from) != group(&to) || lost
            {
                s.traffic.entry(to).or_default().dropped += 1;
                return None;
            }
            for a in [from, to] {
                if let Some(until) = s.stalled.get(&a) {
                    at = at.max(*until);
                }
            }
            Some(at)
        })
    }
}

#[async_trait]
impl Transport for SimNet {
    async fn open(&self, listen_addr: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let inner = self.channel.open(listen_addr).await?;
        let n = self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(SimSocket {
            addr: inner.local_addr()?,
            inner,
            net: self.clone(),
            queue: BTreeMap::new(),
            seq: 0,
            rng: fastrand::Rng::with_seed(self.cfg.seed.wrapping_mul(1_000_003).wrapping_add(n)),
        }))
    }
}

struct SimSocket {
    addr: SocketAddr,
    inner: Box<dyn Socket>,
    net: SimNet,
    /// Messages on their way to this socket, by delivery time.
    queue: BTreeMap<(Instant, u64), RecvOutcome>,
    seq: u64,
    rng: fastrand::Rng,
}

#[async_trait]
impl Socket for SimSocket {
    fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.addr)
    }

    async fn send(
        &mut self,
        to: SocketAddr,
        envelope: ChitchatEnvelope,
    ) -> anyhow::Result<SendOutcome> {
        let out = self.inner.send(to, envelope).await?;
        self.net.with(|s| {
            let t = s.traffic.entry(self.addr).or_default();
            t.messages_sent += 1;
            t.bytes_sent += out.num_bytes_sent as u64;
        });
        Ok(out)
    }

    /// Cancellable: the queue lives in the socket, and chitchat's channel receive is
    /// cancel-safe.
    async fn recv(&mut self) -> anyhow::Result<RecvOutcome> {
        loop {
            if let Some(entry) = self.queue.first_entry() {
                if entry.key().0 <= Instant::now() {
                    let m = entry.remove();
                    self.net.with(|s| {
                        let t = s.traffic.entry(self.addr).or_default();
                        t.messages_received += 1;
                        t.bytes_received += m.num_bytes_received as u64;
                    });
                    return Ok(m);
                }
            }
            let next = self.queue.keys().next().map(|k| k.0);
            tokio::select! {
                m = self.inner.recv() => {
                    let m = m?;
                    if let Some(at) = self.net.route(m.from_addr, self.addr, &mut self.rng) {
                        self.seq += 1;
                        self.queue.insert((at, self.seq), m);
                    }
                }
                _ = async {
                    match next {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
        }
    }
}

/// A simulated cluster's shape.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Balancers.
    pub m: usize,
    /// Web gears.
    pub n: usize,
    /// Coverage, percent.
    pub coverage: u32,
    pub gossip_interval: Duration,
    pub net: NetConfig,
    /// Scaler checks.
    pub check_interval: Duration,
    /// Names node ids and gears (32-hex, as gear uuids and names).
    pub seed: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            m: 3,
            n: 10,
            coverage: 100,
            gossip_interval: Duration::from_millis(200),
            net: NetConfig::default(),
            check_interval: Duration::from_secs(5),
            seed: 1,
        }
    }
}

/// One simulated balancer.
pub struct SimNode {
    pub id: String,
    pub addr: SocketAddr,
    pub cluster: Arc<Cluster>,
    pub router: Arc<Router>,
    pub rotations: Arc<Rotations>,
    pub scaler: Arc<Scaler>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    /// Still running (not crashed or stopped).
    pub running: bool,
}

/// The outcome of one simulated rotate command.
#[derive(Clone, Debug)]
pub struct RotateOutcome {
    pub took: Duration,
    /// Every live balancer acknowledged before `limit`.
    pub ok: bool,
    pub acked: usize,
    pub pending: Vec<String>,
}

/// A peer leaving a balancer's live set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Death {
    pub at: Duration,
    pub observer: String,
    pub peer: String,
}

/// M simulated balancers and their network.
pub struct Sim {
    pub cfg: SimConfig,
    pub net: SimNet,
    pub nodes: Vec<SimNode>,
    /// Gear sticky labels (`<32-hex>-<namespace>`).
    pub labels: Vec<String>,
    specs: Vec<BackendSpec>,
    /// When the simulation started (virtual time).
    pub t0: Instant,
    deaths: Arc<Mutex<Vec<Death>>>,
    generation: AtomicU64,
}

fn hex_id(rng: &mut fastrand::Rng) -> String {
    (0..32)
        .map(|_| char::from_digit(rng.u32(0..16), 16).unwrap_or('0'))
        .collect()
}

/// The simulated address of balancer `i`.
pub fn node_addr(i: usize) -> SocketAddr {
    let ip = Ipv4Addr::new(10, (i / 250) as u8 + 1, (i % 250) as u8 + 1, 1);
    SocketAddr::new(ip.into(), 7946)
}

impl Sim {
    /// Start `cfg.m` balancers that know each other (as `set-peers` tells them) and the
    /// same `cfg.n` gears.
    pub async fn start(cfg: SimConfig) -> anyhow::Result<Sim> {
        let mut rng = fastrand::Rng::with_seed(cfg.seed);
        let ns: String = (0..16)
            .map(|_| rng.alphabetic().to_ascii_lowercase())
            .collect();
        let labels: Vec<String> = (0..cfg.n)
            .map(|_| format!("{}-{ns}", hex_id(&mut rng)))
            .collect();
        let specs = labels
            .iter()
            .enumerate()
            .map(|(i, l)| BackendSpec {
                name: format!("gear-{l}"),
                addr: format!("127.0.0.1:{}", 10_000 + i % 50_000)
                    .parse()
                    .expect("valid address"),
                gear_dns: Some(format!("{l}.example.com")),
                cookie: None,
            })
            .collect();
        let ids: Vec<String> = (0..cfg.m).map(|_| hex_id(&mut rng)).collect();
        let mut sim = Sim {
            net: SimNet::new(cfg.net.clone()),
            cfg,
            nodes: Vec::new(),
            labels,
            specs,
            t0: Instant::now(),
            deaths: Arc::default(),
            generation: AtomicU64::new(1),
        };
        let known: Vec<PeerSpec> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| PeerSpec {
                id: Some(id.clone()),
                addr: node_addr(i).into(),
                learned: false,
            })
            .collect();
        for (i, id) in ids.iter().enumerate() {
            let node = sim.spawn_node(id, node_addr(i), known.clone()).await?;
            sim.nodes.push(node);
        }
        Ok(sim)
    }

    async fn spawn_node(
        &self,
        id: &str,
        addr: SocketAddr,
        known: Vec<PeerSpec>,
    ) -> anyhow::Result<SimNode> {
        let settings = NodeSettings {
            self_id: id.to_string(),
            cluster_id: "sim".into(),
            gossip_interval: self.cfg.gossip_interval,
            advertise: addr,
            listen: addr,
            // As chitchat's generation: when the balancer started, in milliseconds (of
            // virtual time here), plus a count so that it grows even within one.
            generation: 1_000_000
                + self.t0.elapsed().as_millis() as u64
                + self.generation.fetch_add(1, Ordering::Relaxed),
            name: Some(id.to_string()),
        };
        let cluster = Cluster::start_on(
            &self.net,
            settings,
            known,
            Arc::new(GossipStats::default()),
            None,
        )
        .await?;
        let router = Arc::new(Router::new(2));
        router.replace_backends(self.specs.clone());
        let rotations = Arc::new(Rotations::new(vec![]));
        let scaler = Scaler::new(
            ScalerSettings {
                enabled: true,
                preferred: None,
                app_name: None,
                policy: Default::default(),
                check_interval: self.cfg.check_interval,
                gear_ratio: -1,
                marker: None,
            },
            None,
            id.to_string(),
        );
        let frontend = Arc::new(FrontendStats::default());
        let stop = CancellationToken::new();
        let coverage = Arc::new(AtomicU32::new(self.cfg.coverage));
        let tasks = vec![
            tokio::spawn(cluster.clone().run(stop.clone())),
            tokio::spawn(crate::cluster::sync::run(
                cluster.clone(),
                router.clone(),
                frontend,
                coverage,
                stop.clone(),
            )),
            tokio::spawn(rotation::run(
                rotations.clone(),
                router.clone(),
                Some(cluster.clone()),
                |_| {},
                stop.clone(),
            )),
            tokio::spawn(scaler.clone().run(
                Some(cluster.clone()),
                router.clone(),
                Arc::new(|| 0.0),
                Some(id.to_string()),
                stop.clone(),
            )),
            tokio::spawn(watch_deaths(
                cluster.clone(),
                self.t0,
                self.deaths.clone(),
                stop.clone(),
            )),
        ];
        Ok(SimNode {
            id: id.to_string(),
            addr,
            cluster,
            router,
            rotations,
            scaler,
            stop,
            tasks,
            running: true,
        })
    }

    /// Indices of the running balancers.
    pub fn running(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|i| self.nodes[*i].running)
            .collect()
    }

    /// Wait (virtual time) until `f` holds, checking every 10 ms; the time it took.
    pub async fn wait_until(
        &self,
        limit: Duration,
        mut f: impl FnMut(&Sim) -> bool,
    ) -> Option<Duration> {
        let t = Instant::now();
        loop {
            if f(self) {
                return Some(t.elapsed());
            }
            if t.elapsed() >= limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Every running balancer sees exactly the running ones live.
    pub fn converged(&self) -> bool {
        let mut want: Vec<&str> = self
            .running()
            .into_iter()
            .map(|i| self.nodes[i].id.as_str())
            .collect();
        want.sort_unstable();
        self.running().into_iter().all(|i| {
            let v = self.nodes[i].cluster.view();
            v.live.len() == want.len() && v.live.iter().zip(&want).all(|(a, b)| a == b)
        })
    }

    /// Balancers acting as scaler now.
    pub fn acting(&self) -> Vec<usize> {
        self.running()
            .into_iter()
            .filter(|i| self.nodes[*i].scaler.report().acting)
            .collect()
    }

    /// Peers that left some balancer's live set since the start.
    pub fn deaths(&self) -> Vec<Death> {
        self.deaths.lock().map(|d| d.clone()).unwrap_or_default()
    }

    /// Take a rotate command on balancer `origin` and wait until every live balancer
    /// acknowledged it (at most `limit`), as `gearlb ctl rotate-out|in` does.
    pub async fn rotate(
        &self,
        origin: usize,
        gear: &str,
        op: Op,
        limit: Duration,
    ) -> RotateOutcome {
        let node = &self.nodes[origin];
        let t = Instant::now();
        let submitted = node
            .rotations
            .submit(gear, op, &node.id, Duration::from_secs(120));
        node.rotations.fan_out(submitted.epoch());
        let epoch = submitted.epoch();
        let done = match op {
            Op::Out => AckState::Drained,
            Op::In => AckState::Active,
        };
        let mut views = node.cluster.subscribe();
        let mut acks = node.rotations.subscribe_acks();
        loop {
            let view = node.cluster.view();
            let own = node.rotations.acks().get(gear).cloned();
            let p = rotation::progress(
                &node.id,
                own.as_ref(),
                view.peers.iter().filter(|p| p.live).filter_map(|p| {
                    let id = p.id.as_deref()?;
                    Some((id, view.acks.get(id).and_then(|m| m.get(gear))))
                }),
                &epoch,
                done,
            );
            if p.pending.is_empty() || t.elapsed() >= limit {
                return RotateOutcome {
                    took: t.elapsed(),
                    ok: p.pending.is_empty(),
                    acked: p.acked.len(),
                    pending: p.pending,
                };
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = views.changed() => {}
                _ = acks.changed() => {}
            }
        }
    }

    /// Start a new balancer; every running one learns it (as `set-peers` would tell
    /// them). Returns its index.
    pub async fn join(&mut self) -> anyhow::Result<usize> {
        let mut rng = fastrand::Rng::with_seed(self.cfg.seed ^ (self.nodes.len() as u64 + 1) << 32);
        let id = hex_id(&mut rng);
        let i = self.nodes.len();
        let mut known: Vec<PeerSpec> = self
            .nodes
            .iter()
            .map(|n| PeerSpec {
                id: Some(n.id.clone()),
                addr: n.addr.into(),
                learned: false,
            })
            .collect();
        known.push(PeerSpec {
            id: Some(id.clone()),
            addr: node_addr(i).into(),
            learned: false,
        });
        for n in self.nodes.iter().filter(|n| n.running) {
            n.cluster.set_known(known.clone());
        }
        let node = self.spawn_node(&id, node_addr(i), known).await?;
        self.nodes.push(node);
        Ok(i)
    }

    /// What the health checks of the balancers covering `label` find: set its health on
    /// every running balancer that has it in its subset (the others learn it by
    /// gossip). Returns how many balancers cover it.
    pub fn set_health_where_covered(&self, label: &str, up: bool) -> usize {
        let mut covering = 0;
        for i in self.running() {
            let router = &self.nodes[i].router;
            let table = router.snapshot();
            if let Some(e) = table
                .entries()
                .iter()
                .find(|e| e.backend.sticky == label && e.in_subset)
            {
                router.set_health(&e.backend, up);
                covering += 1;
            }
        }
        covering
    }

    /// The health every running balancer's routing table gives `label`.
    pub fn health_everywhere(&self, label: &str) -> Vec<bool> {
        self.running()
            .into_iter()
            .filter_map(|i| {
                let table = self.nodes[i].router.snapshot();
                let up = table
                    .entries()
                    .iter()
                    .find(|e| e.backend.sticky == label)
                    .map(|e| e.up);
                up
            })
            .collect()
    }

    /// Crash balancer `i` (as kill -9): it stops at once and says nothing.
    pub async fn crash(&mut self, i: usize) {
        self.net.crash(self.nodes[i].addr);
        self.stop_node(i).await;
    }

    /// Stop balancer `i` gracefully (it announces that it leaves).
    pub async fn stop(&mut self, i: usize) {
        self.stop_node(i).await;
    }

    async fn stop_node(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        node.stop.cancel();
        for t in node.tasks.drain(..) {
            let _ = t.await;
        }
        node.running = false;
    }

    /// Stop everything.
    pub async fn shutdown(mut self) {
        for i in self.running() {
            self.stop_node(i).await;
        }
    }

    /// Bytes and messages sent and received by balancer `i`.
    pub fn traffic(&self, i: usize) -> Traffic {
        self.net.traffic(self.nodes[i].addr)
    }
}

/// Record every peer that leaves `cluster`'s live set.
async fn watch_deaths(
    cluster: Arc<Cluster>,
    t0: Instant,
    deaths: Arc<Mutex<Vec<Death>>>,
    stop: CancellationToken,
) {
    let mut rx = cluster.subscribe();
    let mut live: Vec<String> = cluster.view().live.clone();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            r = rx.changed() => if r.is_err() { return },
        }
        let now = cluster.view().live.clone();
        let gone: Vec<&String> = live.iter().filter(|id| !now.contains(id)).collect();
        if !gone.is_empty() {
            if let Ok(mut d) = deaths.lock() {
                for peer in gone {
                    d.push(Death {
                        at: t0.elapsed(),
                        observer: cluster.self_id().to_string(),
                        peer: peer.clone(),
                    });
                }
            }
        }
        live = now;
    }
}

/// Process CPU time so far (user + system, every thread).
pub fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}
