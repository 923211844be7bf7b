//! The simulated network: [`SimNet`], a chitchat [`Transport`] wrapping chitchat's own
//! [`ChannelTransport`] (wire encoding, the [`MTU`] limit) with, at the receiving end,
//! per-message latency, random loss, partitions and stalls; and each address's
//! [`Traffic`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chitchat::transport::{ChannelTransport, RecvOutcome, SendOutcome, Socket, Transport};
use chitchat::ChitchatEnvelope;
use tokio::time::Instant;

use crate::stall::Gate;

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
    /// Each node's process gate: while it is shut (stopped, or busy while starved)
    /// the node neither sends (its socket's `send` waits) nor takes delivery (its
    /// `recv` waits), and each send and delivery is charged to it.
    gates: HashMap<SocketAddr, Arc<Gate>>,
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

    /// The process gate of the node at `addr` (see [`Gate`]).
    pub fn attach(&self, addr: SocketAddr, gate: Arc<Gate>) {
        self.with(|s| {
            s.gates.insert(addr, gate);
        });
    }

    fn gate(&self, addr: SocketAddr) -> Option<Arc<Gate>> {
        self.with(|s| s.gates.get(&addr).cloned())
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
        // A process that is shut (stopped, or busy while starved) sends nothing until
        // it runs again: chitchat's loop waits here, as it would not run at all.
        if let Some(g) = self.net.gate(self.addr) {
            while let Some(until) = g.shut() {
                tokio::time::sleep_until(until).await;
            }
            g.charge();
        }
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
        let gate = self.net.gate(self.addr);
        loop {
            // A node whose process is shut (stopped, or busy while starved) takes no
            // delivery until it opens; each delivery is one event of its work.
            let open = gate.as_ref().and_then(|g| g.shut());
            if let Some(entry) = self.queue.first_entry() {
                if entry.key().0.max(open.unwrap_or(entry.key().0)) <= Instant::now() {
                    let m = entry.remove();
                    self.net.with(|s| {
                        let t = s.traffic.entry(self.addr).or_default();
                        t.messages_received += 1;
                        t.bytes_received += m.num_bytes_received as u64;
                    });
                    if let Some(g) = &gate {
                        g.charge();
                    }
                    return Ok(m);
                }
            }
            let next = self
                .queue
                .keys()
                .next()
                .map(|k| k.0.max(open.unwrap_or(k.0)));
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
