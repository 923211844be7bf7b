//! The acting scaler's fence (pure): whether this balancer may still act, checked on
//! every turn of its loop and again right before every call to the broker, on a
//! monotonic clock.
//!
//! The election ([`super::elect`]) says who the scaler is from the last cluster view;
//! the fence guards the moments that view may be stale:
//!
//! - **Its own stall.** A process that was stopped (SIGSTOP, a VM's steal, swap) or
//!   starved sees a gap between two turns of its loop. A gap longer than
//!   [`Fence::max_gap`] makes it stand down at once, before anything else, and count
//!   itself as resumed at the end of the gap: while it did not run, the others may
//!   have declared it dead and elected another.
//! - **Its majority, heard after it resumed.** It may act only while a majority of the
//!   known balancers (itself included) were heard from within half the liveness window
//!   *and* after it last resumed: a view built before a stall, or a failure detector
//!   that forgives the stall, is no proof that the others still count it in.
//! - **Another claim.** Another live balancer that says it acts makes it stand down
//!   (that one stands down too unless it outranks; the one elected takes over once no
//!   claim is left).
//! - **Handover.** A balancer that takes over waits until the last claim it heard from
//!   another balancer is older than the liveness window plus a margin
//!   ([`claim_lapsed`]): by then the old scaler's own fence has stood it down, even if
//!   it was only stalled rather than dead. And it takes the role only once it has run
//!   on time for a whole liveness window since it last resumed or started
//!   ([`Fence::settled`]): a balancer woken from a stall with its old view does not
//!   take back a role another took meanwhile before news of that reached it.
//!
//! The acting role is a lease: [`Fence::valid_until`] is when it lapses without a
//! new turn of the loop (reports read it, so a balancer woken from a stall never shows
//! as acting before its loop has run).

use std::time::Duration;

/// Why an acting scaler stands down.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepDown {
    /// Its loop did not run for `gap_ms`: it was stopped or starved. Its role (a
    /// lease) lapsed `lapsed_ms_ago` before it noticed.
    Stalled { gap_ms: u64, lapsed_ms_ago: u64 },
    /// Fewer than a majority of the known balancers were heard from since it resumed
    /// (within half the liveness window).
    NoMajority { heard: usize, known: usize },
    /// Another live balancer says it acts.
    OtherClaims { id: String },
    /// It resumed (or started) this long ago: less than a liveness window, so a claim
    /// made meanwhile may not have reached it yet. It takes the role only after that.
    Settling { since_ms: u64 },
}

impl std::fmt::Display for StepDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepDown::Stalled {
                gap_ms,
                lapsed_ms_ago,
            } => write!(
                f,
                "this balancer did not run for {gap_ms} ms (stopped or starved): others may have taken over; its role lapsed {lapsed_ms_ago} ms ago"
            ),
            StepDown::NoMajority { heard, known } => write!(
                f,
                "only {heard} of {known} balancers heard from since it last ran on time"
            ),
            StepDown::OtherClaims { id } => write!(f, "balancer {id} says it acts as the scaler"),
            StepDown::Settling { since_ms } => write!(
                f,
                "resumed only {since_ms} ms ago: news of another scaler may still be on its way"
            ),
        }
    }
}

/// The fence of one balancer's scaler loop. Times are milliseconds on a monotonic
/// clock.
#[derive(Clone, Debug)]
pub struct Fence {
    /// The longest a turn of the loop may come after the previous one before this
    /// balancer counts itself as stopped or starved. Below half the liveness window, so
    /// that any stall long enough for the others to declare it dead is seen here.
    pub max_gap: Duration,
    /// The failure detector's timeout: a balancer not heard from for this long is dead.
    pub liveness: Duration,
    last_turn_ms: Option<u64>,
    resumed_ms: u64,
}

impl Fence {
    /// A fence for a loop that turns at least every `tick`, in a cluster whose failure
    /// detector's timeout is `liveness`: the longest gap allowed is a quarter of the
    /// liveness window, and never less than twice the tick.
    pub fn new(tick: Duration, liveness: Duration) -> Self {
        Fence {
            max_gap: (liveness / 4).max(tick * 2),
            liveness,
            last_turn_ms: None,
            resumed_ms: 0,
        }
    }

    /// A turn of the loop at `now_ms`. Returns [`StepDown::Stalled`] when the gap since
    /// the previous turn was longer than [`Fence::max_gap`]: the caller stands down. The
    /// first turn counts as a resume.
    pub fn turn(&mut self, now_ms: u64) -> Option<StepDown> {
        let gap = self.last_turn_ms.map(|last| now_ms.saturating_sub(last));
        self.last_turn_ms = Some(now_ms);
        match gap {
            None => {
                self.resumed_ms = now_ms;
                None
            }
            Some(g) if g > self.max_gap.as_millis() as u64 => {
                self.resumed_ms = now_ms;
                Some(self.stalled(g))
            }
            Some(_) => None,
        }
    }

    fn stalled(&self, gap_ms: u64) -> StepDown {
        StepDown::Stalled {
            gap_ms,
            lapsed_ms_ago: gap_ms.saturating_sub(self.max_gap.as_millis() as u64),
        }
    }

    /// When this balancer last resumed (its first turn, or the end of its last stall).
    pub fn resumed_ms(&self) -> u64 {
        self.resumed_ms
    }

    /// Until when an acting role is good without another turn of the loop.
    pub fn valid_until(&self) -> u64 {
        self.last_turn_ms
            .map_or(0, |t| t.saturating_add(self.max_gap.as_millis() as u64))
    }

    /// Whether this balancer may act at `now_ms`: no gap since its last turn, a
    /// majority of the `known` balancers (itself included) heard from since it resumed
    /// and within half the liveness window (`heard_ms`: when each other balancer's
    /// heartbeat last advanced), and no other live balancer claiming the role
    /// (`claims`: ids). A majority of exactly half counts when `half_ok` (the election's
    /// tie rule: every balancer not heard ranks below this one).
    pub fn check(
        &self,
        now_ms: u64,
        heard_ms: &[u64],
        known: usize,
        half_ok: bool,
        claims: &[String],
    ) -> Result<(), StepDown> {
        if let Some(last) = self.last_turn_ms {
            let gap_ms = now_ms.saturating_sub(last);
            if gap_ms > self.max_gap.as_millis() as u64 {
                return Err(self.stalled(gap_ms));
            }
        }
        if let Some(id) = claims.first() {
            return Err(StepDown::OtherClaims { id: id.clone() });
        }
        let window = (self.liveness / 2).as_millis() as u64;
        let since = self.resumed_ms.max(now_ms.saturating_sub(window));
        let heard = 1 + heard_ms.iter().filter(|&&t| t >= since).count();
        let known = known.max(heard);
        if heard * 2 > known || (heard * 2 == known && half_ok) {
            Ok(())
        } else {
            Err(StepDown::NoMajority { heard, known })
        }
    }
}

impl Fence {
    /// Whether this balancer may *take* the role at `now_ms` (on top of
    /// [`Fence::check`]): it has run on time for a whole liveness window since it
    /// resumed or started, so that any claim another balancer made while it was not
    /// running has reached it.
    pub fn settled(&self, now_ms: u64) -> Result<(), StepDown> {
        let since_ms = now_ms.saturating_sub(self.resumed_ms);
        if since_ms < self.liveness.as_millis() as u64 {
            return Err(StepDown::Settling { since_ms });
        }
        Ok(())
    }
}

/// Whether a claim to act last heard at `claim_ms` has lapsed at `now_ms`: older than
/// the liveness window and a margin of a quarter of it, so that the balancer that made
/// it has been declared dead and, if it was only stalled, its own fence has stood it
/// down.
pub fn claim_lapsed(now_ms: u64, claim_ms: u64, liveness: Duration) -> bool {
    let wait = liveness + liveness / 4;
    now_ms.saturating_sub(claim_ms) > wait.as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Duration = Duration::from_millis(2000);

    fn fence() -> Fence {
        let mut f = Fence::new(Duration::from_millis(100), L);
        assert_eq!(f.turn(10_000), None, "the first turn");
        f
    }

    #[test]
    fn a_gap_in_the_loop_stands_it_down_and_counts_as_a_resume() {
        let mut f = fence();
        assert_eq!(f.max_gap, Duration::from_millis(500));
        assert_eq!(f.turn(10_400), None);
        assert_eq!(f.check(10_400, &[10_300, 10_350], 3, false, &[]), Ok(()));
        // Stopped for 5 s: the next turn sees it.
        assert_eq!(
            f.turn(15_400),
            Some(StepDown::Stalled {
                gap_ms: 5_000,
                lapsed_ms_ago: 4_500
            })
        );
        assert_eq!(f.resumed_ms(), 15_400);
        // Peers heard before the stall (a view from before it) are no majority now.
        assert_eq!(
            f.check(15_400, &[10_300, 10_350], 3, false, &[]),
            Err(StepDown::NoMajority { heard: 1, known: 3 })
        );
        // One peer heard since: a majority of three again.
        assert_eq!(f.check(15_500, &[15_450, 10_350], 3, false, &[]), Ok(()));
    }

    #[test]
    fn a_check_after_a_gap_without_a_turn_refuses() {
        let f = fence();
        // The broker call comes 3 s after the last turn (the process was stopped
        // between the turn and the call).
        assert_eq!(
            f.check(13_000, &[12_990, 12_990], 3, false, &[]),
            Err(StepDown::Stalled {
                gap_ms: 3_000,
                lapsed_ms_ago: 2_500
            })
        );
        assert_eq!(
            f.valid_until(),
            10_500,
            "the lease ends max_gap after the turn"
        );
    }

    #[test]
    fn peers_must_be_heard_within_half_the_liveness_window() {
        let mut f = fence();
        for t in (10_100..=12_000).step_by(100) {
            assert_eq!(f.turn(t), None);
        }
        // Heard 1.1 s ago: not fresh (half the window is 1 s).
        assert_eq!(
            f.check(12_000, &[10_900, 10_900], 3, false, &[]),
            Err(StepDown::NoMajority { heard: 1, known: 3 })
        );
        assert_eq!(f.check(12_000, &[11_100, 10_900], 3, false, &[]), Ok(()));
    }

    #[test]
    fn exactly_half_needs_the_tie_rule() {
        let f = fence();
        assert!(f.check(10_000, &[10_000], 4, false, &[]).is_err());
        assert_eq!(f.check(10_000, &[10_000], 4, true, &[]), Ok(()));
    }

    #[test]
    fn another_claim_stands_it_down() {
        let f = fence();
        assert_eq!(
            f.check(10_000, &[10_000, 10_000], 3, false, &["lb2".to_string()]),
            Err(StepDown::OtherClaims { id: "lb2".into() })
        );
    }

    #[test]
    fn the_role_is_taken_only_a_liveness_window_after_a_resume() {
        let mut f = fence();
        assert_eq!(
            f.settled(11_000),
            Err(StepDown::Settling { since_ms: 1_000 })
        );
        assert_eq!(f.settled(12_000), Ok(()));
        assert!(f.turn(20_000).is_some());
        assert!(f.settled(21_999).is_err());
        assert_eq!(f.settled(22_000), Ok(()));
    }

    #[test]
    fn a_claim_lapses_after_the_liveness_window_and_a_margin() {
        assert!(!claim_lapsed(12_000, 10_000, L));
        assert!(!claim_lapsed(12_500, 10_000, L));
        assert!(claim_lapsed(12_501, 10_000, L));
    }

    #[test]
    fn the_gap_allowed_is_below_half_the_liveness_window() {
        let f = Fence::new(Duration::from_millis(1000), Duration::from_secs(10));
        assert!(f.max_gap < Duration::from_secs(5));
        let f = Fence::new(Duration::from_millis(100), Duration::from_secs(2));
        assert!(f.max_gap < Duration::from_secs(1));
    }
}
