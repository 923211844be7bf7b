//! Whether the backend set as a whole can take a request, and its history: HAProxy's
//! `chkdown`, `lastchg` and `downtime` of a `BACKEND` row.
//!
//! Owns [`Availability`]: the [`Router`](crate::router::Router) reports every table it
//! publishes (control plane only: update-cluster, health, rotation, cluster, gear ratio),
//! so a change is counted when it happens, never sampled and never on the request path.
//! "Available" means at least one backend is healthy and in rotation (inside the subset
//! or a backup): the same rule as the `BACKEND` row's `UP`/`DOWN` and `/health`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use gearlb_core::time::unix_secs;

/// Availability of the backend set and its transitions.
#[derive(Debug)]
pub struct Availability {
    available: AtomicBool,
    /// Available → unavailable transitions (HAProxy `chkdown` of a backend).
    went_down: AtomicU64,
    /// Unix time of the last transition, else of creation.
    last_change: AtomicU64,
    /// Seconds unavailable, not counting the current unavailable period.
    downtime_before: AtomicU64,
}

/// [`Availability`] as reported (`availability` in the status JSON).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AvailabilityReport {
    /// At least one backend can take a request now.
    pub available: bool,
    /// Times the balancer was left with no backend that could take a request.
    pub down_transitions: u64,
    /// Seconds since availability last changed (or since start).
    pub last_change_secs: u64,
    /// Seconds spent with no backend available, in total.
    pub downtime_secs: u64,
}

impl Availability {
    /// Starting now, available or not (an empty backend set is not).
    pub fn new(available: bool) -> Self {
        Availability {
            available: AtomicBool::new(available),
            went_down: AtomicU64::new(0),
            last_change: AtomicU64::new(unix_secs()),
            downtime_before: AtomicU64::new(0),
        }
    }

    /// The backend set is now `available` or not; counts a transition when it changed.
    /// Called by the router's single writer, so a swap is enough to see each change once.
    pub fn observe(&self, available: bool) {
        self.observe_at(available, unix_secs());
    }

    fn observe_at(&self, available: bool, now: u64) {
        if self.available.swap(available, Ordering::Relaxed) == available {
            return;
        }
        let since = self.last_change.swap(now, Ordering::Relaxed);
        if available {
            self.downtime_before
                .fetch_add(now.saturating_sub(since), Ordering::Relaxed);
        } else {
            self.went_down.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn report(&self) -> AvailabilityReport {
        self.report_at(unix_secs())
    }

    fn report_at(&self, now: u64) -> AvailabilityReport {
        let available = self.available.load(Ordering::Relaxed);
        let since = now.saturating_sub(self.last_change.load(Ordering::Relaxed));
        let before = self.downtime_before.load(Ordering::Relaxed);
        AvailabilityReport {
            available,
            down_transitions: self.went_down.load(Ordering::Relaxed),
            last_change_secs: since,
            downtime_secs: before + if available { 0 } else { since },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_and_downtime() {
        let a = Availability::new(false);
        let t0 = a.last_change.load(Ordering::Relaxed);
        // Down from the start: that time is downtime, but not a transition to down.
        let r = a.report_at(t0 + 3);
        assert_eq!(
            (r.available, r.down_transitions, r.downtime_secs),
            (false, 0, 3)
        );
        a.observe_at(true, t0 + 5);
        a.observe_at(true, t0 + 6); // no change: nothing counted
        let r = a.report_at(t0 + 10);
        assert_eq!(
            (
                r.available,
                r.down_transitions,
                r.last_change_secs,
                r.downtime_secs
            ),
            (true, 0, 5, 5)
        );
        a.observe_at(false, t0 + 20);
        a.observe_at(false, t0 + 21);
        let r = a.report_at(t0 + 24);
        assert_eq!(
            (
                r.available,
                r.down_transitions,
                r.last_change_secs,
                r.downtime_secs
            ),
            (false, 1, 4, 9)
        );
        a.observe_at(true, t0 + 30);
        let r = a.report_at(t0 + 31);
        assert_eq!(
            (r.down_transitions, r.last_change_secs, r.downtime_secs),
            (1, 1, 15)
        );
    }
}
