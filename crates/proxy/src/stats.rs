//! The request path's counters: a leaf of the crate.
//!
//! Owns the per-frontend and per-backend counters (plain relaxed atomics, bumped on the
//! request path without locks). Nothing here reads the routing table, the cluster or
//! the scaler: the application's `report` assembles what leaves the process from them.
//!
//! [`latency`] holds the lock-free response-time histogram and ring; [`rate`] the
//! per-second rates the application's sampler (`report::sampler`) keeps; [`availability`]
//! whether any backend can take a request, and its history.

pub mod availability;
pub mod latency;
pub mod rate;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use latency::{Histogram, Recent};
pub use rate::Rate;

/// Unix time, seconds ([`gearlb_core::time::unix_secs`]).
pub use gearlb_core::time::unix_secs as unix_now;

/// Index of a status code's class (1xx → 0 … 5xx → 4).
fn class_index(status: u16) -> usize {
    (status / 100).clamp(1, 5) as usize - 1
}

/// Bytes moved on some connections (headers, bodies and tunnelled bytes alike), counted
/// by the socket wrapper [`crate::io::Counted`].
#[derive(Debug, Default)]
pub struct Traffic {
    pub received: AtomicU64,
    pub sent: AtomicU64,
}

/// Counters of the client side.
#[derive(Debug, Default)]
pub struct FrontendStats {
    pub connections_current: AtomicU64,
    pub connections_max: AtomicU64,
    pub connections_total: AtomicU64,
    /// Connections closed at once because `limits.max_connections` was reached.
    pub connections_refused: AtomicU64,
    /// Connections closed for client inactivity (`timeouts.client`), or because a
    /// request they had begun was not whole within `timeouts.request_header` (a slow
    /// head or body): HAProxy's `ereq` for timeouts. An idle keep-alive connection
    /// closed at `request_header` is not counted.
    pub client_timeouts: AtomicU64,
    /// Idle keep-alive connections holding no HTTP state now (see `proxy::downstream`).
    pub connections_parked: AtomicU64,
    pub requests_total: AtomicU64,
    pub requests_current: AtomicU64,
    pub responses: [AtomicU64; 5],
    /// Requests answered by the balancer itself because no backend was available (503).
    pub no_backend: AtomicU64,
    /// `limits.max_connections` (HAProxy `slim`), set once at start.
    pub connections_limit: AtomicU64,
    /// Most requests in flight at once.
    pub requests_max: AtomicU64,
    /// Bytes read from and written to client connections.
    pub traffic: Arc<Traffic>,
    /// New connections per second (sampled).
    pub connection_rate: Rate,
    /// New requests per second (sampled).
    pub request_rate: Rate,
    /// Moving average of sessions on the backends, requests in flight and open tunnels
    /// (f64 bits; sampled once a second): the old autoscaler averaged HAProxy's
    /// `BACKEND` `scur`, which counts both; the scaler adds it up across balancers.
    pub inflight_avg: AtomicU64,
    /// Weight of each new sample in `inflight_avg` (f64 bits), from the averaging window.
    pub inflight_alpha: AtomicU64,
    /// Upgraded connections (WebSocket) whose tunnel is open now. Each is also one of
    /// `connections_current`, but not of `requests_current`.
    pub tunnels_current: AtomicU64,
}

impl FrontendStats {
    pub fn connection_opened(&self) {
        self.connections_total.fetch_add(1, Ordering::Relaxed);
        let now = self.connections_current.fetch_add(1, Ordering::Relaxed) + 1;
        self.connections_max.fetch_max(now, Ordering::Relaxed);
    }

    pub fn connection_closed(&self) {
        self.connections_current.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn request_started(&self) {
        self.requests_total.fetch_add(1, Ordering::Relaxed);
        let now = self.requests_current.fetch_add(1, Ordering::Relaxed) + 1;
        // Load first: the maximum rarely moves, a write on every request would bounce
        // the cache line.
        if now > self.requests_max.load(Ordering::Relaxed) {
            self.requests_max.fetch_max(now, Ordering::Relaxed);
        }
    }

    pub fn response(&self, status: u16) {
        self.responses[class_index(status)].fetch_add(1, Ordering::Relaxed);
    }

    /// Average requests in flight over about `window` (see `inflight_avg`).
    pub fn set_average_window(&self, window: std::time::Duration) {
        let alpha = 1.0 - (-1.0 / window.as_secs_f64().max(1.0)).exp();
        self.inflight_alpha
            .store(alpha.to_bits(), Ordering::Relaxed);
    }

    /// The moving average of requests in flight and open tunnels.
    pub fn inflight_average(&self) -> f64 {
        f64::from_bits(self.inflight_avg.load(Ordering::Relaxed))
    }

    /// Sessions on the backends now: requests in flight and open tunnels (an upgrade
    /// request becomes a tunnel once its `101` went out: counted once).
    pub fn sessions_now(&self) -> u64 {
        self.requests_current.load(Ordering::Relaxed) + self.tunnels_current.load(Ordering::Relaxed)
    }

    /// Fold the current sessions into the average (once a second).
    pub fn sample_inflight(&self) {
        let alpha = f64::from_bits(self.inflight_alpha.load(Ordering::Relaxed));
        let alpha = if alpha > 0.0 {
            alpha
        } else {
            1.0 - (-1.0f64 / 50.0).exp()
        };
        let now = self.sessions_now() as f64;
        let avg = self.inflight_average();
        self.inflight_avg
            .store((avg + (now - avg) * alpha).to_bits(), Ordering::Relaxed);
    }
}

/// Counters of one backend.
#[derive(Debug)]
pub struct BackendStats {
    /// Sessions on this backend (HAProxy `scur`): requests sent and not yet fully
    /// answered, and open tunnels (an upgrade request stays one until its tunnel
    /// closes). What least-outstanding selection compares, as HAProxy's `leastconn`.
    pub outstanding: AtomicU64,
    pub outstanding_max: AtomicU64,
    /// Requests sent (HAProxy `stot`).
    pub requests: AtomicU64,
    /// Failed connection attempts (HAProxy `econ`).
    pub connect_errors: AtomicU64,
    /// Failures after the connection was made: reset, closed, bad response (`eresp`).
    pub response_errors: AtomicU64,
    /// Response headers not received within `timeouts.server`.
    pub timeouts: AtomicU64,
    pub responses: [AtomicU64; 5],
    pub connections_opened: AtomicU64,
    /// Requests that left this backend for another one after it failed them (HAProxy
    /// `wredis`).
    pub redispatches: AtomicU64,
    /// Time to the response head.
    pub latency: Histogram,
    /// Recent mean time to the response head (sampled).
    pub recent: Recent,
    /// Requests per second (sampled).
    pub rate: Rate,
    pub checks_ok: AtomicU64,
    pub checks_failed: AtomicU64,
    /// Up → down transitions (HAProxy `chkdown`).
    pub went_down: AtomicU64,
    /// Unix time of the last up/down transition, else of the backend's creation.
    pub last_change: AtomicU64,
    /// Seconds spent down, not counting the current down period (HAProxy `downtime`).
    pub downtime_before: AtomicU64,
}

impl Default for BackendStats {
    fn default() -> Self {
        BackendStats {
            outstanding: AtomicU64::new(0),
            outstanding_max: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            connect_errors: AtomicU64::new(0),
            response_errors: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            responses: Default::default(),
            connections_opened: AtomicU64::new(0),
            redispatches: AtomicU64::new(0),
            latency: Histogram::default(),
            recent: Recent::default(),
            rate: Rate::default(),
            checks_ok: AtomicU64::new(0),
            checks_failed: AtomicU64::new(0),
            went_down: AtomicU64::new(0),
            last_change: AtomicU64::new(gearlb_core::time::unix_secs()),
            downtime_before: AtomicU64::new(0),
        }
    }
}

impl BackendStats {
    pub fn request_started(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let now = self.outstanding.fetch_add(1, Ordering::Relaxed) + 1;
        self.outstanding_max.fetch_max(now, Ordering::Relaxed);
    }

    pub fn request_finished(&self) {
        self.outstanding.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn response(&self, status: u16) {
        self.responses[class_index(status)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn errors(&self) -> u64 {
        self.connect_errors.load(Ordering::Relaxed)
            + self.response_errors.load(Ordering::Relaxed)
            + self.timeouts.load(Ordering::Relaxed)
    }

    /// A response head arrived `d` after the request was handed to this backend.
    pub fn response_head(&self, d: Duration) {
        self.latency.observe(d);
    }

    /// An active health check's result (health supervisor only).
    pub fn check_result(&self, ok: bool) {
        let c = if ok {
            &self.checks_ok
        } else {
            &self.checks_failed
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The backend's health changed (health supervisor only).
    pub fn health_changed(&self, up: bool) {
        let now = gearlb_core::time::unix_secs();
        let since = self.last_change.swap(now, Ordering::Relaxed);
        if up {
            self.downtime_before
                .fetch_add(now.saturating_sub(since), Ordering::Relaxed);
        } else {
            self.went_down.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_of_status() {
        assert_eq!(class_index(101), 0);
        assert_eq!(class_index(200), 1);
        assert_eq!(class_index(404), 3);
        assert_eq!(class_index(503), 4);
        assert_eq!(class_index(999), 4);
        assert_eq!(class_index(0), 0);
    }
}
