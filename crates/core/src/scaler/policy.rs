//! When to ask for more or fewer web gears: a pure function over a load sample and the
//! policy's memory, compatible with the old cartridge's autoscaler (`haproxy_ctld.rb`).
//!
//! capacity = sessions / gears / max_sessions_per_gear (as a percentage).
//! - Up when capacity ≥ `up_pct` (90) and gears < scale_max, unless a scale-up is still
//!   pending (no new gear has arrived since the last one and `up_cooldown` has not
//!   passed: the old autoscaler got this from its blocking broker call).
//! - Down when capacity < `90·max(1−1/n, 0.85) − 90/n` for `down_checks` (20)
//!   consecutive checks, not within `flap_protection` (10 min) of the last scale-up (or
//!   of the start), and gears > scale_min.
//! - Nothing for `error_backoff` (10 min) after a failed broker call.
//!
//! Times are milliseconds on any monotonic clock the caller chooses.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Thresholds (all configurable).
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyConfig {
    pub max_sessions_per_gear: f64,
    pub up_pct: f64,
    pub down_checks: u32,
    pub flap_protection: Duration,
    pub error_backoff: Duration,
    pub up_cooldown: Duration,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            max_sessions_per_gear: 16.0,
            up_pct: 90.0,
            down_checks: 20,
            flap_protection: Duration::from_secs(600),
            error_backoff: Duration::from_secs(600),
            up_cooldown: Duration::from_secs(120),
        }
    }
}

/// One check's inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub now_ms: u64,
    /// Sum over live balancers of their moving-average sessions.
    pub sessions: f64,
    /// Web gears of the application.
    pub gears: usize,
    pub scale_min: usize,
    /// `None`: no maximum.
    pub scale_max: Option<usize>,
}

/// What to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    ScaleUp,
    ScaleDown,
    Hold,
}

/// The outcome of a broker call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// 422: already at the gear limit; not an error.
    AtLimit,
    Failed,
}

/// What the policy remembers between checks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PolicyState {
    /// Consecutive checks below the scale-down threshold.
    pub below: u32,
    /// Last successful scale-up (or the start): flap protection counts from here.
    pub last_up_ms: u64,
    /// Gear count when the last scale-up was asked for, while it is pending.
    pub pending_up_gears: Option<usize>,
    /// No decision before this time (after a failed broker call).
    pub backoff_until_ms: u64,
    /// Capacity at the last check, percent.
    pub capacity: f64,
}

impl PolicyState {
    /// Start: no scale-down within flap protection of `now_ms`.
    pub fn starting(now_ms: u64) -> Self {
        PolicyState {
            last_up_ms: now_ms,
            ..Default::default()
        }
    }
}

/// The old autoscaler's scale-down threshold for `n` gears, percent.
pub fn down_threshold(n: usize) -> f64 {
    if n <= 1 {
        return 1.0;
    }
    let n = n as f64;
    90.0 * (1.0 - 1.0 / n).max(0.85) - 90.0 / n
}

/// Decide for one check.
pub fn decide(st: &mut PolicyState, s: &Sample, c: &PolicyConfig) -> Decision {
    if s.gears == 0 {
        st.below = 0;
        return Decision::Hold;
    }
    let capacity = s.sessions / s.gears as f64 / c.max_sessions_per_gear * 100.0;
    st.capacity = capacity;
    if s.now_ms < st.backoff_until_ms {
        return Decision::Hold;
    }
    if let Some(g) = st.pending_up_gears {
        let waited = s.now_ms.saturating_sub(st.last_up_ms) >= c.up_cooldown.as_millis() as u64;
        if s.gears > g || waited {
            st.pending_up_gears = None;
        }
    }
    if capacity >= c.up_pct {
        st.below = 0;
        let room = s.scale_max.is_none_or(|max| s.gears < max);
        if room && st.pending_up_gears.is_none() {
            return Decision::ScaleUp;
        }
        return Decision::Hold;
    }
    if s.gears > 1 && capacity < down_threshold(s.gears) {
        st.below += 1;
        let calm = s.now_ms.saturating_sub(st.last_up_ms) >= c.flap_protection.as_millis() as u64;
        if st.below >= c.down_checks && calm && s.gears > s.scale_min {
            return Decision::ScaleDown;
        }
        return Decision::Hold;
    }
    st.below = 0;
    Decision::Hold
}

/// Remember what the broker said about `decision` at `now_ms` with `gears` gears.
pub fn record(
    st: &mut PolicyState,
    decision: &Decision,
    outcome: Outcome,
    gears: usize,
    now_ms: u64,
    c: &PolicyConfig,
) {
    match (decision, outcome) {
        (Decision::ScaleUp, Outcome::Done) => {
            st.last_up_ms = now_ms;
            st.pending_up_gears = Some(gears);
        }
        (Decision::ScaleDown, Outcome::Done) => st.below = 0,
        (_, Outcome::AtLimit) => st.below = 0,
        (_, Outcome::Failed) => st.backoff_until_ms = now_ms + c.error_backoff.as_millis() as u64,
        (Decision::Hold, _) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEP: u64 = 5_000;

    fn sample(now_ms: u64, sessions: f64, gears: usize) -> Sample {
        Sample {
            now_ms,
            sessions,
            gears,
            scale_min: 1,
            scale_max: Some(10),
        }
    }

    #[test]
    fn thresholds_match_the_old_autoscaler() {
        assert_eq!(down_threshold(1), 1.0);
        assert!((down_threshold(2) - 31.5).abs() < 1e-9);
        assert!((down_threshold(3) - 46.5).abs() < 1e-9);
        assert!((down_threshold(10) - 72.0).abs() < 1e-9);
    }

    #[test]
    fn scale_up_at_ninety_percent_once_until_a_gear_arrives() {
        let c = PolicyConfig::default();
        let mut st = PolicyState::starting(0);
        // 2 gears × 16 sessions: 90% is 28.8 sessions.
        assert_eq!(decide(&mut st, &sample(STEP, 28.0, 2), &c), Decision::Hold);
        assert_eq!(
            decide(&mut st, &sample(2 * STEP, 28.8, 2), &c),
            Decision::ScaleUp
        );
        record(&mut st, &Decision::ScaleUp, Outcome::Done, 2, 2 * STEP, &c);
        // Still hot, the gear is not there yet: hold, not a second scale-up.
        for i in 3..10 {
            assert_eq!(
                decide(&mut st, &sample(i * STEP, 40.0, 2), &c),
                Decision::Hold
            );
        }
        // The new gear arrives and load stays high: up again.
        assert_eq!(
            decide(&mut st, &sample(10 * STEP, 60.0, 3), &c),
            Decision::ScaleUp
        );
    }

    #[test]
    fn pending_scale_up_expires_after_the_cooldown() {
        let c = PolicyConfig::default();
        let mut st = PolicyState::starting(0);
        assert_eq!(
            decide(&mut st, &sample(STEP, 100.0, 2), &c),
            Decision::ScaleUp
        );
        record(&mut st, &Decision::ScaleUp, Outcome::Done, 2, STEP, &c);
        let later = STEP + c.up_cooldown.as_millis() as u64;
        assert_eq!(
            decide(&mut st, &sample(later - 1, 100.0, 2), &c),
            Decision::Hold
        );
        assert_eq!(
            decide(&mut st, &sample(later, 100.0, 2), &c),
            Decision::ScaleUp
        );
    }

    #[test]
    fn scale_down_needs_twenty_low_checks_and_no_recent_scale_up() {
        let c = PolicyConfig::default();
        let mut st = PolicyState::starting(0);
        // 3 gears, threshold 46.5%: 10 sessions is 20.8%. Within 10 min of start: hold.
        let mut t = 0;
        for _ in 0..30 {
            t += STEP;
            assert_eq!(decide(&mut st, &sample(t, 10.0, 3), &c), Decision::Hold);
        }
        // After flap protection, the 20th consecutive low check scales down.
        t = 600_000;
        st.below = 0;
        for i in 1..=20 {
            t += STEP;
            let d = decide(&mut st, &sample(t, 10.0, 3), &c);
            assert_eq!(
                d,
                if i == 20 {
                    Decision::ScaleDown
                } else {
                    Decision::Hold
                },
                "check {i}"
            );
        }
        record(&mut st, &Decision::ScaleDown, Outcome::Done, 3, t, &c);
        assert_eq!(st.below, 0);
    }

    #[test]
    fn a_normal_check_resets_the_low_count() {
        let c = PolicyConfig::default();
        let mut st = PolicyState::starting(0);
        let mut t = 700_000;
        for _ in 0..19 {
            t += STEP;
            decide(&mut st, &sample(t, 10.0, 3), &c);
        }
        t += STEP;
        assert_eq!(
            decide(&mut st, &sample(t, 30.0, 3), &c),
            Decision::Hold,
            "62% is in the band"
        );
        for i in 1..=20 {
            t += STEP;
            let d = decide(&mut st, &sample(t, 10.0, 3), &c);
            assert_eq!(
                d == Decision::ScaleDown,
                i == 20,
                "flapping load restarts the count"
            );
        }
    }

    #[test]
    fn limits_are_respected() {
        let c = PolicyConfig::default();
        let mut st = PolicyState::starting(0);
        let mut s = sample(STEP, 1000.0, 10);
        assert_eq!(decide(&mut st, &s, &c), Decision::Hold, "at scale_max");
        s.scale_max = None;
        assert_eq!(decide(&mut st, &s, &c), Decision::ScaleUp, "no maximum");
        let mut st = PolicyState::starting(0);
        let mut t = 700_000;
        for _ in 0..40 {
            t += STEP;
            let mut low = sample(t, 0.0, 2);
            low.scale_min = 2;
            assert_eq!(decide(&mut st, &low, &c), Decision::Hold, "at scale_min");
        }
        assert_eq!(
            decide(&mut st, &sample(t, 0.0, 1), &c),
            Decision::Hold,
            "one gear never goes"
        );
    }

    #[test]
    fn failed_broker_calls_back_off_but_limits_do_not() {
        let c = PolicyConfig::default();
        let mut st = PolicyState::starting(0);
        assert_eq!(
            decide(&mut st, &sample(STEP, 100.0, 2), &c),
            Decision::ScaleUp
        );
        record(&mut st, &Decision::ScaleUp, Outcome::Failed, 2, STEP, &c);
        let until = STEP + c.error_backoff.as_millis() as u64;
        assert_eq!(
            decide(&mut st, &sample(until - 1, 100.0, 2), &c),
            Decision::Hold
        );
        assert_eq!(
            decide(&mut st, &sample(until, 100.0, 2), &c),
            Decision::ScaleUp
        );
        record(&mut st, &Decision::ScaleUp, Outcome::AtLimit, 2, until, &c);
        assert_eq!(st.backoff_until_ms, until, "422 is not an error");
    }

    #[test]
    fn no_gears_no_decision() {
        let c = PolicyConfig::default();
        let mut st = PolicyState::starting(0);
        assert_eq!(decide(&mut st, &sample(STEP, 100.0, 0), &c), Decision::Hold);
    }
}
