//! The node harness: [`Sim`], M simulated balancers (each a [`SimNode`] running the real
//! cluster, rotation and scaler code with its own routing table) on one [`SimNet`]:
//! starting them, stopping or crashing one, and recording every [`Death`] a balancer
//! observes.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::net::{NetConfig, SimNet, Traffic};
use super::stall::Gate;
use gearlb::cluster::transport::GossipStats;
use gearlb::cluster::{Cluster, NodeSettings};
use gearlb::gear::PeerSpec;
use gearlb::rotation::{self, Rotations};
use gearlb::routing::{BackendSpec, Router};
use gearlb::scaler::{Scaler, ScalerSettings};
use gearlb::stats::FrontendStats;

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
    pub(super) stop: CancellationToken,
    pub(super) tasks: Vec<JoinHandle<()>>,
    /// Every task of the balancer runs behind it (a stopped or starved process).
    pub gate: Arc<Gate>,
    /// Still running (not crashed or stopped).
    pub running: bool,
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
    pub(super) specs: Vec<BackendSpec>,
    /// When the simulation started (virtual time).
    pub t0: Instant,
    pub(super) deaths: Arc<Mutex<Vec<Death>>>,
    pub(super) generation: AtomicU64,
}

pub(super) fn hex_id(rng: &mut fastrand::Rng) -> String {
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
                backup: false,
                max_connections: None,
                version: None,
                compatible: Vec::new(),
                send_proxy: None,
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

    pub(super) async fn spawn_node(
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
        let gate = Arc::new(Gate::default());
        self.net.attach(addr, gate.clone());
        let tasks = vec![
            tokio::spawn(gate.run(cluster.clone().run(stop.clone()))),
            tokio::spawn(gate.run(gearlb::cluster::sync::run(
                cluster.clone(),
                router.clone(),
                frontend,
                coverage,
                stop.clone(),
            ))),
            tokio::spawn(gate.run(rotation::run(
                rotations.clone(),
                router.clone(),
                |_| None,
                Some(cluster.clone()),
                |_| {},
                stop.clone(),
            ))),
            tokio::spawn(gate.run(scaler.clone().run(
                Some(cluster.clone()),
                router.clone(),
                Arc::new(|| 0.0),
                Some(id.to_string()),
                stop.clone(),
            ))),
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
            gate,
            running: true,
        })
    }

    /// Indices of the running balancers.
    pub fn running(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|i| self.nodes[*i].running)
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
    let mut live = cluster.view().live.clone();
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
