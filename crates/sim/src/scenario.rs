//! Scenarios on a running [`Sim`]: waiting for a condition in virtual time, whether
//! the cluster converged and who acts as scaler, rotate commands and their
//! acknowledgments, a balancer joining, and gear health set where it is covered.

use std::time::Duration;

use tokio::time::Instant;

use super::node::{hex_id, node_addr, Death, Sim};
use gearlb::gear::PeerSpec;
use gearlb::rotation::{self, AckState, Op};

/// The outcome of one simulated rotate command.
#[derive(Clone, Debug)]
pub struct RotateOutcome {
    pub took: Duration,
    /// Every live balancer acknowledged before `limit`.
    pub ok: bool,
    pub acked: usize,
    pub pending: Vec<String>,
}

impl Sim {
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

    /// Stop balancer `i`'s process for `d`, as SIGSTOP (or starvation) would: none of
    /// its tasks runs, it neither sends nor receives, and when it resumes its clock has
    /// moved on by `d`.
    pub fn stall_process(&self, i: usize, d: Duration) {
        self.nodes[i].gate.shut_until(Instant::now() + d);
    }

    /// Starve balancer `i` for `d`: every event of its work (a poll of one of its
    /// tasks, a message delivered to it) costs `cost` of virtual time, one after the
    /// other (see [`crate::stall`]).
    pub fn starve_process(&self, i: usize, cost: Duration, d: Duration) {
        self.nodes[i].gate.starve(cost, Instant::now() + d);
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
                router.set_health(e.backend.id, up);
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
}
