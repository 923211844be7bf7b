//! Which peers are live: the failure detector of the cluster view (pure; the caller
//! feeds it heartbeats and the time).
//!
//! chitchat's own detector declares a node dead when the time since its last heartbeat
//! exceeds `phi_threshold` (8) times the mean interval between heartbeats seen so far.
//! Heartbeats travel in every gossip message, so with many peers they arrive every
//! few tens of milliseconds, the mean shrinks, and any hiccup of a second (a burst of
//! gossip, a process descheduled on a busy host) becomes a "death": at M = 100 that
//! was thousands of false verdicts per run. This detector is simpler and does not
//! adapt: a peer is live while its heartbeat advanced within `timeout` (ten gossip
//! rounds by default), and *fresh* while it did within half of that.
//!
//! A balancer that was itself stalled (its process not scheduled, as under CPU
//! starvation or SIGSTOP) saw no heartbeat during the stall through no fault of its
//! peers: like memberlist's local health awareness (Lifeguard), the time this
//! balancer's own periodic check ran late is not held against them
//! ([`Liveness::tick`]). A peer stalled longer than the timeout is declared dead, as
//! it should be: nobody heard from it.
//!
//! The first heartbeat seen of a node is not proof of life (it may be an old value
//! relayed by others); it is live once its heartbeat has advanced.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

#[derive(Clone, Copy, Debug)]
struct Seen {
    heartbeat: u64,
    /// When the heartbeat last advanced (never, for a node only seen once), moved on by
    /// the time this balancer's own checks ran late (see [`Liveness::tick`]).
    advanced: Option<Instant>,
    /// When the heartbeat last advanced, as it was: never moved on (the scaler's fence
    /// asks who was heard after this balancer resumed, see [`Liveness::heard`]).
    heard: Option<Instant>,
}

/// Heartbeat-based liveness of the nodes of one cluster, keyed by `K`.
#[derive(Clone, Debug)]
pub struct Liveness<K> {
    timeout: Duration,
    period: Duration,
    seen: HashMap<K, Seen>,
    last_tick: Option<Instant>,
    /// Total time this balancer's own checks ran late (for reports).
    pub stalled: Duration,
}

impl<K: Eq + Hash + Clone> Liveness<K> {
    /// Dead after `timeout` without a heartbeat; [`Liveness::tick`] is expected every
    /// `period`.
    pub fn new(timeout: Duration, period: Duration) -> Self {
        Liveness {
            timeout,
            period,
            seen: HashMap::new(),
            last_tick: None,
            stalled: Duration::ZERO,
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The periodic check, at `now`: if it runs late (more than one period past the
    /// previous one), this balancer was not running meanwhile, and that time is
    /// credited to every peer.
    pub fn tick(&mut self, now: Instant) {
        if let Some(last) = self.last_tick {
            let late = now
                .saturating_duration_since(last)
                .saturating_sub(self.period * 2);
            if !late.is_zero() {
                self.stalled += late;
                for s in self.seen.values_mut() {
                    if let Some(t) = s.advanced.as_mut() {
                        *t = (*t + late).min(now);
                    }
                }
            }
        }
        self.last_tick = Some(now);
    }

    /// A node's heartbeat as gossip has it now. True when the node just became live.
    pub fn observe(&mut self, node: &K, heartbeat: u64, now: Instant) -> bool {
        let was = self.is_live(node, now);
        match self.seen.get_mut(node) {
            None => {
                self.seen.insert(
                    node.clone(),
                    Seen {
                        heartbeat,
                        advanced: None,
                        heard: None,
                    },
                );
            }
            Some(s) if heartbeat > s.heartbeat => {
                s.heartbeat = heartbeat;
                s.advanced = Some(now);
                s.heard = Some(now);
            }
            Some(_) => {}
        }
        !was && self.is_live(node, now)
    }

    /// Heartbeat advanced within the timeout.
    pub fn is_live(&self, node: &K, now: Instant) -> bool {
        self.within(node, now, self.timeout)
    }

    /// Heartbeat advanced within half the timeout: heard from recently enough that a
    /// partition starting now would not yet have made it dead anywhere (the scaler's
    /// quorum counts only fresh peers, see `scaler`).
    pub fn is_fresh(&self, node: &K, now: Instant) -> bool {
        self.within(node, now, self.timeout / 2)
    }

    fn within(&self, node: &K, now: Instant, limit: Duration) -> bool {
        self.seen
            .get(node)
            .and_then(|s| s.advanced)
            .is_some_and(|t| now.saturating_duration_since(t) <= limit)
    }

    /// When the node's heartbeat was last seen advancing, whatever this balancer's own
    /// stalls (not credited as [`Liveness::is_live`] credits them).
    pub fn heard(&self, node: &K) -> Option<Instant> {
        self.seen.get(node).and_then(|s| s.heard)
    }

    /// Forget nodes `keep` rejects (gone from gossip).
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.seen.retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(2);
    const P: Duration = Duration::from_millis(200);

    #[tokio::test(start_paused = true)]
    async fn live_after_an_advance_dead_after_the_timeout() {
        let mut l = Liveness::new(T, P);
        let t0 = Instant::now();
        assert!(!l.observe(&"a", 5, t0), "first sight is not proof of life");
        assert!(!l.is_live(&"a", t0));
        tokio::time::advance(P).await;
        assert!(l.observe(&"a", 6, Instant::now()), "became live");
        assert!(l.is_live(&"a", Instant::now()) && l.is_fresh(&"a", Instant::now()));
        // The same heartbeat again is no news.
        for _ in 0..6 {
            tokio::time::advance(P).await;
            l.tick(Instant::now());
            l.observe(&"a", 6, Instant::now());
        }
        assert!(l.is_live(&"a", Instant::now()));
        assert!(
            !l.is_fresh(&"a", Instant::now()),
            "1.2 s without news: not fresh"
        );
        for _ in 0..4 {
            tokio::time::advance(P).await;
            l.tick(Instant::now());
        }
        assert!(l.is_live(&"a", Instant::now()), "exactly the timeout");
        tokio::time::advance(P).await;
        l.tick(Instant::now());
        assert!(!l.is_live(&"a", Instant::now()), "dead after the timeout");
        // Back: live again at the next advance.
        assert!(l.observe(&"a", 7, Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_of_this_balancer_is_not_held_against_its_peers() {
        let mut l = Liveness::new(T, P);
        l.observe(&"a", 1, Instant::now());
        l.tick(Instant::now());
        tokio::time::advance(P).await;
        l.observe(&"a", 2, Instant::now());
        l.tick(Instant::now());
        // This process does not run for 5 s (SIGSTOP, starvation): no check, no news.
        tokio::time::advance(Duration::from_secs(5)).await;
        l.tick(Instant::now());
        assert!(
            l.is_live(&"a", Instant::now()),
            "not dead for our own stall"
        );
        assert!(l.stalled >= Duration::from_secs(4));
        // What was really heard, and when, is kept apart for the scaler's fence: the
        // peer was not heard during the stall.
        let heard = l.heard(&"a").unwrap();
        assert!(Instant::now().duration_since(heard) >= Duration::from_secs(5));
        // But a peer silent for the timeout after we are back is dead.
        for _ in 0..11 {
            tokio::time::advance(P).await;
            l.tick(Instant::now());
        }
        assert!(!l.is_live(&"a", Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn checks_on_time_credit_nothing() {
        let mut l = Liveness::new(T, P);
        l.observe(&"a", 1, Instant::now());
        l.observe(&"a", 2, Instant::now());
        // Checks one period apart (or a little late): silence counts in full.
        for _ in 0..7 {
            l.tick(Instant::now());
            tokio::time::advance(P + P / 2).await;
        }
        l.tick(Instant::now());
        assert_eq!(l.stalled, Duration::ZERO);
        assert!(!l.is_live(&"a", Instant::now()), "2.1 s of silence");
        l.retain(|_| false);
        assert!(
            !l.observe(&"a", 3, Instant::now()),
            "forgotten: first sight again"
        );
    }
}
