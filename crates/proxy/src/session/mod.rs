//! A downstream connection as a session: counted in `connections_current`, holding
//! one of the `limits.max_connections` permits, and keeping the graceful stop waiting,
//! from accept to the last holder of its state (its tunnel included); and that state
//! ([`state`]: what the connection's task, its socket wrapper, its requests and its
//! tunnel share). A leaf below the connection (`downstream`) and the requests.

pub(crate) mod state;

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;
use tokio_util::task::task_tracker::TaskTrackerToken;

use crate::stats::FrontendStats;

/// One client connection as HAProxy counts a session: from accept to close, the tunnel
/// of an upgraded connection included, and once, whatever happens on the connection
/// (keep-alive requests, parking, an upgrade). While it lives it is in
/// `connections_current` (FRONTEND `scur`), holds one of the `limits.max_connections`
/// permits, and keeps the graceful stop waiting (a token of the server's task tracker).
///
/// It lives in the connection's [`ConnState`], shared by the connection task, its
/// requests and, after an upgrade, the tunnel: the session ends when the last of them
/// lets go, not when hyper hands an upgraded socket over and the connection task returns.
pub(crate) struct Session {
    stats: Arc<FrontendStats>,
    _permit: OwnedSemaphorePermit,
    _tracked: TaskTrackerToken,
}

impl Session {
    /// A connection was accepted with `permit`: counted from now.
    pub fn open(
        stats: Arc<FrontendStats>,
        permit: OwnedSemaphorePermit,
        tracked: TaskTrackerToken,
    ) -> Self {
        stats.connection_opened();
        Session {
            stats,
            _permit: permit,
            _tracked: tracked,
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Then the permit and the tracker token go, with the fields.
        self.stats.connection_closed();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    /// A session is one connection from accept to its last holder: counted once, its
    /// permit held, the stop kept waiting; all three end together.
    #[test]
    fn a_session_counts_holds_and_is_tracked_until_dropped() {
        let stats = Arc::new(FrontendStats::default());
        let permits = Arc::new(tokio::sync::Semaphore::new(1));
        let tracker = tokio_util::task::TaskTracker::new();
        let s = Session::open(
            stats.clone(),
            permits.clone().try_acquire_owned().unwrap(),
            tracker.token(),
        );
        assert_eq!(stats.connections_current.load(Ordering::Relaxed), 1);
        assert_eq!(permits.available_permits(), 0);
        tracker.close();
        assert_eq!(tracker.len(), 1);
        assert!(!tracker.is_empty());
        drop(s);
        assert_eq!(stats.connections_current.load(Ordering::Relaxed), 0);
        assert_eq!(permits.available_permits(), 1);
        assert!(tracker.is_empty());
    }
}
