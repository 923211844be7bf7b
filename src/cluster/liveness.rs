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
//! Two rules keep a starved balancer from tipping its own view over:
//!
//! - **Its own stalls are not held against its peers.** A balancer that was itself
//!   stalled (its process not scheduled, as under CPU starvation or SIGSTOP) saw no
//!   heartbeat during the stall through no fault of its peers: like memberlist's local
//!   health awareness (Lifeguard), the time this balancer's own periodic check ran late
//!   is credited to every peer ([`Liveness::tick`]). A peer stalled longer than the
//!   timeout is declared dead, as it should be: nobody heard from it.
//! - **A flood of deaths is rate-limited.** One crash is one death; many peers falling
//!   silent within one window at once is more often this balancer falling behind (its
//!   gossip backlog unread) than many crashes. Within any window of `timeout`, at most
//!   [`Liveness::verdict_budget`] members are declared dead (a quarter of the live
//!   members, at least two); the others stay live, *held*, until the window moves on or
//!   their heartbeat advances again. The longest silent go first. Only members count
//!   (the caller says which nodes are): an old incarnation or a node that left is let
//!   go without using the budget. A real partition still converges, a window per batch
//!   later, and meanwhile a held peer still counts as live for the election and for
//!   rotations (a takeover or a rotation's completion may wait that long after a mass
//!   failure); the scaler's fence, which keeps two from acting, does not wait for these
//!   verdicts (it asks who was [`Liveness::heard`]).
//!
//! The first heartbeat seen of a node is not proof of life (it may be an old value
//! relayed by others); it is live once its heartbeat has advanced.
//!
//! Verdicts are taken once per gossip round in [`Liveness::sweep`], which says whether
//! anything changed, so the caller rebuilds nothing in a round where nobody was born,
//! died, or stopped being fresh.

use std::collections::{HashMap, VecDeque};
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
    /// The verdict as of the last sweep (or an advance since).
    live: bool,
    /// Whether it was fresh as of the last sweep.
    fresh: bool,
    /// The last round (sweep) whose heartbeats listed this node.
    round: u64,
}

/// Heartbeat-based liveness of the nodes of one cluster, keyed by `K`.
#[derive(Clone, Debug)]
pub struct Liveness<K> {
    timeout: Duration,
    period: Duration,
    seen: HashMap<K, Seen>,
    last_tick: Option<Instant>,
    /// The round the heartbeats being observed belong to.
    round: u64,
    /// When each death verdict of the last `timeout` was taken.
    verdicts: VecDeque<Instant>,
    /// A node was first seen or became live since the last sweep.
    news: bool,
    /// Total time this balancer's own checks ran late (for reports).
    pub stalled: Duration,
    /// Death verdicts held back so far, one per peer and sweep.
    pub held: u64,
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
            round: 0,
            verdicts: VecDeque::new(),
            news: false,
            stalled: Duration::ZERO,
            held: 0,
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How many death verdicts one window of the timeout may take while `live` peers
    /// are live: a quarter of them, and at least two (a crash, or a pair, is never
    /// held back).
    pub fn verdict_budget(live: usize) -> usize {
        live.div_ceil(4).max(2)
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

    /// A node's heartbeat as gossip has it now (one call per node and round, before
    /// the round's [`Liveness::sweep`]). True when the node just became live.
    pub fn observe(&mut self, node: &K, heartbeat: u64, now: Instant) -> bool {
        let round = self.round;
        match self.seen.get_mut(node) {
            None => {
                self.seen.insert(
                    node.clone(),
                    Seen {
                        heartbeat,
                        advanced: None,
                        heard: None,
                        live: false,
                        fresh: false,
                        round,
                    },
                );
                self.news = true;
                false
            }
            Some(s) => {
                s.round = round;
                if heartbeat <= s.heartbeat {
                    return false;
                }
                s.heartbeat = heartbeat;
                s.advanced = Some(now);
                s.heard = Some(now);
                let became_live = !s.live;
                self.news |= became_live || !s.fresh;
                s.live = true;
                s.fresh = true;
                became_live
            }
        }
    }

    /// The round's verdicts at `now`: forget the nodes its heartbeats did not list
    /// (gone from gossip), declare dead the live ones silent for longer than the
    /// timeout (the `member`s within the window's budget, the longest silent first, the
    /// rest held; other nodes at once), and note who stopped being fresh. True when the
    /// set of nodes, a verdict or a freshness changed.
    pub fn sweep(&mut self, now: Instant, member: impl Fn(&K) -> bool) -> bool {
        let round = self.round;
        self.round += 1;
        let before = self.seen.len();
        self.seen.retain(|_, s| s.round == round);
        let mut changed = std::mem::take(&mut self.news) || self.seen.len() != before;
        while self
            .verdicts
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= self.timeout)
        {
            self.verdicts.pop_front();
        }
        let fresh_limit = self.timeout / 2;
        let mut live = 0;
        let mut due = Vec::new();
        for (k, s) in self.seen.iter_mut() {
            let silent = s.advanced.map(|t| now.saturating_duration_since(t));
            let fresh = silent.is_some_and(|d| d <= fresh_limit);
            if fresh != s.fresh {
                s.fresh = fresh;
                changed = true;
            }
            if s.live {
                let overdue = silent.is_none_or(|d| d > self.timeout);
                if !member(k) {
                    if overdue {
                        s.live = false;
                        changed = true;
                    }
                    continue;
                }
                live += 1;
                if overdue {
                    due.push((s.advanced, k.clone()));
                }
            }
        }
        if due.is_empty() {
            return changed;
        }
        due.sort_by_key(|(t, _)| *t);
        let room = Self::verdict_budget(live).saturating_sub(self.verdicts.len());
        for (i, (_, k)) in due.into_iter().enumerate() {
            if i >= room {
                self.held += 1;
                continue;
            }
            if let Some(s) = self.seen.get_mut(&k) {
                s.live = false;
            }
            self.verdicts.push_back(now);
            changed = true;
        }
        changed
    }

    /// Live as of the last sweep (or since, by an advance of its heartbeat).
    pub fn is_live(&self, node: &K) -> bool {
        self.seen.get(node).is_some_and(|s| s.live)
    }

    /// Heartbeat advanced within half the timeout as of the last sweep: heard from
    /// recently enough that a partition starting now would not yet have made it dead
    /// anywhere (the scaler's quorum counts only fresh peers, see `scaler`).
    pub fn is_fresh(&self, node: &K) -> bool {
        self.seen.get(node).is_some_and(|s| s.fresh)
    }

    /// Whether gossip listed the node in the last round.
    pub fn knows(&self, node: &K) -> bool {
        self.seen.contains_key(node)
    }

    /// When the node's heartbeat was last seen advancing, whatever this balancer's own
    /// stalls (not credited as [`Liveness::is_live`] credits them).
    pub fn heard(&self, node: &K) -> Option<Instant> {
        self.seen.get(node).and_then(|s| s.heard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(2);
    const P: Duration = Duration::from_millis(200);

    /// One gossip round at the current (paused) time: the check, every node's
    /// heartbeat as gossip lists it, and the verdicts. Returns whether anything changed.
    fn round(l: &mut Liveness<&'static str>, beats: &[(&'static str, u64)]) -> bool {
        let now = Instant::now();
        l.tick(now);
        for (n, hb) in beats {
            l.observe(n, *hb, now);
        }
        l.sweep(now, |_| true)
    }

    #[tokio::test(start_paused = true)]
    async fn live_after_an_advance_dead_after_the_timeout() {
        let mut l = Liveness::new(T, P);
        let t0 = Instant::now();
        assert!(!l.observe(&"a", 5, t0), "first sight is not proof of life");
        assert!(l.sweep(t0, |_| true), "a new node is a change");
        assert!(!l.is_live(&"a"));
        tokio::time::advance(P).await;
        assert!(l.observe(&"a", 6, Instant::now()), "became live");
        l.sweep(Instant::now(), |_| true);
        assert!(l.is_live(&"a") && l.is_fresh(&"a"));
        // The same heartbeat again is no news, and nothing changes until it is stale.
        for i in 0..6 {
            tokio::time::advance(P).await;
            let changed = round(&mut l, &[("a", 6)]);
            assert_eq!(
                changed,
                i == 5,
                "round {i}: only the loss of freshness is news"
            );
        }
        assert!(l.is_live(&"a"));
        assert!(!l.is_fresh(&"a"), "1.2 s without news: not fresh");
        for _ in 0..4 {
            tokio::time::advance(P).await;
            round(&mut l, &[("a", 6)]);
        }
        assert!(l.is_live(&"a"), "exactly the timeout");
        tokio::time::advance(P).await;
        assert!(round(&mut l, &[("a", 6)]));
        assert!(!l.is_live(&"a"), "dead after the timeout");
        // Back: live again at the next advance.
        assert!(l.observe(&"a", 7, Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_of_this_balancer_is_not_held_against_its_peers() {
        let mut l = Liveness::new(T, P);
        round(&mut l, &[("a", 1)]);
        tokio::time::advance(P).await;
        round(&mut l, &[("a", 2)]);
        // This process does not run for 5 s (SIGSTOP, starvation): no check, no news.
        tokio::time::advance(Duration::from_secs(5)).await;
        round(&mut l, &[("a", 2)]);
        assert!(l.is_live(&"a"), "not dead for our own stall");
        assert!(l.stalled >= Duration::from_secs(4));
        // What was really heard, and when, is kept apart for the scaler's fence: the
        // peer was not heard during the stall.
        let heard = l.heard(&"a").unwrap();
        assert!(Instant::now().duration_since(heard) >= Duration::from_secs(5));
        // But a peer silent for the timeout after we are back is dead.
        for _ in 0..11 {
            tokio::time::advance(P).await;
            round(&mut l, &[("a", 2)]);
        }
        assert!(!l.is_live(&"a"));
    }

    #[tokio::test(start_paused = true)]
    async fn checks_on_time_credit_nothing() {
        let mut l = Liveness::new(T, P);
        round(&mut l, &[("a", 1)]);
        round(&mut l, &[("a", 2)]);
        // Checks one period apart (or a little late): silence counts in full.
        for _ in 0..7 {
            tokio::time::advance(P + P / 2).await;
            round(&mut l, &[("a", 2)]);
        }
        assert_eq!(l.stalled, Duration::ZERO);
        assert!(!l.is_live(&"a"), "2.1 s of silence");
        // Gone from gossip: forgotten, and the next sight is a first sight again.
        assert!(round(&mut l, &[]));
        assert!(!l.knows(&"a"));
        assert!(!l.observe(&"a", 3, Instant::now()), "first sight again");
    }

    const NAMES: [&str; 12] = [
        "n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11",
    ];

    /// Twelve peers seen live for three rounds; the next heartbeat to send.
    async fn twelve_live() -> (Liveness<&'static str>, u64) {
        let mut l = Liveness::new(T, P);
        let mut hb = 1;
        for _ in 0..3 {
            let beats: Vec<_> = NAMES.iter().map(|n| (*n, hb)).collect();
            round(&mut l, &beats);
            hb += 1;
            tokio::time::advance(P).await;
        }
        (l, hb)
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_deaths_is_taken_a_window_at_a_time() {
        // Twelve live peers; then all but n0 fall silent at once (this balancer's
        // gossip backlog unread, say). A quarter of twelve may die per window of 2 s.
        let (mut l, mut hb) = twelve_live().await;
        assert!(NAMES.iter().all(|n| l.is_live(n)));
        let frozen = hb - 1;
        let live_count = |l: &Liveness<&str>| NAMES.iter().filter(|n| l.is_live(n)).count();
        let mut deaths_by_round = Vec::new();
        for _ in 0..70 {
            let mut beats: Vec<_> = NAMES.iter().map(|n| (*n, frozen)).collect();
            beats[0].1 = hb;
            hb += 1;
            let before = live_count(&l);
            round(&mut l, &beats);
            deaths_by_round.push(before - live_count(&l));
            tokio::time::advance(P).await;
        }
        // n0 kept talking and is live; the eleven silent ones all died in the end,
        // never more than the budget (3 of 12) within one window.
        assert!(l.is_live(&"n0"));
        assert_eq!(live_count(&l), 1, "{deaths_by_round:?}");
        let window = (T.as_millis() / P.as_millis()) as usize;
        for w in deaths_by_round.windows(window) {
            assert!(w.iter().sum::<usize>() <= 3, "{deaths_by_round:?}");
        }
        assert!(l.held > 0);
    }

    #[tokio::test(start_paused = true)]
    async fn held_peers_that_speak_again_never_died() {
        let (mut l, hb) = twelve_live().await;
        // Everybody silent for 2.4 s: three die (a quarter of twelve), the rest are
        // held.
        for _ in 0..12 {
            let beats: Vec<_> = NAMES.iter().map(|n| (*n, hb - 1)).collect();
            round(&mut l, &beats);
            tokio::time::advance(P).await;
        }
        let dead: Vec<_> = NAMES.iter().filter(|n| !l.is_live(n)).collect();
        assert_eq!(dead.len(), 3, "{dead:?}");
        // Then gossip is read again: the held ones simply carry on.
        let beats: Vec<_> = NAMES.iter().map(|n| (*n, hb)).collect();
        round(&mut l, &beats);
        assert!(NAMES.iter().all(|n| l.is_live(n)));
    }

    #[tokio::test(start_paused = true)]
    async fn nodes_that_are_not_members_die_without_using_the_budget() {
        // Four members and four old incarnations (restarted balancers), all silent.
        let mut l = Liveness::new(T, P);
        for hb in 1..=3 {
            let beats: Vec<_> = NAMES[..8].iter().map(|n| (*n, hb)).collect();
            round(&mut l, &beats);
            tokio::time::advance(P).await;
        }
        let member = |n: &&str| NAMES[..4].contains(n);
        for _ in 0..11 {
            let now = Instant::now();
            l.tick(now);
            for n in &NAMES[..8] {
                l.observe(n, 3, now);
            }
            l.sweep(now, member);
            tokio::time::advance(P).await;
        }
        let dead: Vec<_> = NAMES[..8].iter().filter(|n| !l.is_live(n)).collect();
        // Every old incarnation at once, and the budget (two) of the members.
        assert_eq!(dead.len(), 6, "{dead:?}");
        assert!(NAMES[4..8].iter().all(|n| !l.is_live(n)));
    }

    #[test]
    fn the_budget_is_a_quarter_of_the_live_and_at_least_two() {
        assert_eq!(Liveness::<u8>::verdict_budget(0), 2);
        assert_eq!(Liveness::<u8>::verdict_budget(4), 2);
        assert_eq!(Liveness::<u8>::verdict_budget(12), 3);
        assert_eq!(Liveness::<u8>::verdict_budget(99), 25);
    }
}
