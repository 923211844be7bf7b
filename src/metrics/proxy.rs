//! The proxy's metrics ([`CoreCollector`]): frontend and backend metrics read at scrape
//! time from the request path's relaxed counters ([`crate::stats`]) and the routing snapshot.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use super::family::{counter, family, gauge, labels, Labels, CLASSES};
use crate::routing::{BackendState, Entry, Router, Target};
use crate::stats::latency::BUCKETS_SECS;
use crate::stats::FrontendStats;

/// A backend in a scrape: its service (none: the default one), entry and target.
type BackendRow<'a> = (&'a Option<Arc<str>>, &'a Entry, &'a Arc<Target>);

/// The routers of the services beside the default one, read at scrape time.
pub type ServiceRouters = Arc<dyn Fn() -> Vec<(Arc<str>, Arc<Router>)> + Send + Sync>;

/// Frontend and backend metrics, read from the live counters at scrape time.
pub struct CoreCollector {
    pub(super) router: Arc<Router>,
    /// The other services' routers, by name.
    pub(super) services: ServiceRouters,
    pub(super) frontend: Arc<FrontendStats>,
    pub(super) start_unix: u64,
}

impl fmt::Debug for CoreCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoreCollector").finish_non_exhaustive()
    }
}

impl Collector for CoreCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        let f = &*self.frontend;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let e = &mut enc;

        gauge(
            e,
            "gearlb_start_time_seconds",
            "Unix time the balancer started.",
            i64::try_from(self.start_unix).unwrap_or(i64::MAX),
        )?;

        // Frontend (client side).
        let fg = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        gauge(
            e,
            "gearlb_frontend_connections",
            "Client connections open now, upgraded ones (WebSocket tunnels) included.",
            fg(r(&f.connections_current)),
        )?;
        counter(
            e,
            "gearlb_frontend_connections_accepted",
            "Client connections accepted.",
            r(&f.connections_total),
        )?;
        counter(
            e,
            "gearlb_frontend_connections_refused",
            "Client connections closed at once because limits.max_connections was reached.",
            r(&f.connections_refused),
        )?;
        gauge(
            e,
            "gearlb_frontend_connections_parked",
            "Idle keep-alive client connections holding no HTTP buffers now.",
            fg(r(&f.connections_parked)),
        )?;
        counter(
            e,
            "gearlb_frontend_client_timeouts",
            "Client connections closed for inactivity (timeouts.client) or with a request not whole within timeouts.request_header.",
            r(&f.client_timeouts),
        )?;
        gauge(
            e,
            "gearlb_frontend_requests_in_flight",
            "Client requests being handled now.",
            fg(r(&f.requests_current)),
        )?;
        gauge(
            e,
            "gearlb_frontend_tunnels",
            "Upgraded client connections (WebSocket) whose tunnel is open now; each is \
             also one of gearlb_frontend_connections.",
            fg(r(&f.tunnels_current)),
        )?;
        counter(
            e,
            "gearlb_frontend_requests",
            "Client requests received.",
            r(&f.requests_total),
        )?;
        let by_class: Vec<(Labels, u64)> = CLASSES
            .iter()
            .zip(&f.responses)
            .map(|(c, a)| (labels(&[("class", c)]), r(a)))
            .collect();
        family(
            e,
            "gearlb_frontend_responses",
            "Responses sent to clients, by status class.",
            MetricType::Counter,
            &by_class,
        )?;
        counter(
            e,
            "gearlb_frontend_no_backend",
            "Requests answered 503 by the balancer because no backend was available.",
            r(&f.no_backend),
        )?;
        counter(
            e,
            "gearlb_frontend_received_bytes",
            "Bytes read from client connections.",
            r(&f.traffic.received),
        )?;
        counter(
            e,
            "gearlb_frontend_sent_bytes",
            "Bytes written to client connections.",
            r(&f.traffic.sent),
        )?;

        // Backends (the web gears).
        // The default service's backends keep the labels they always had; those of
        // the other services also have a `service` label.
        let services = (self.services)();
        let mut snaps = vec![(None, self.router.snapshot())];
        snaps.extend(
            services
                .iter()
                .map(|(name, r)| (Some(name.clone()), r.snapshot())),
        );
        let rows: Vec<BackendRow> = snaps
            .iter()
            .flat_map(|(s, t)| t.iter().map(move |(en, tg)| (s, en, tg)))
            .collect();
        let bl = backend_labels;
        let each = |get: &dyn Fn(&Entry, &Target) -> u64| -> Vec<(Labels, u64)> {
            rows.iter()
                .map(|(s, en, t)| (bl(s, en, &[]), get(en, t)))
                .collect()
        };
        family(
            e,
            "gearlb_backend_requests",
            "Requests sent to the backend.",
            MetricType::Counter,
            &each(&|_, t| r(&t.stats.requests)),
        )?;
        let mut responses = Vec::new();
        for (s, en, t) in rows.iter() {
            for (c, a) in CLASSES.iter().zip(&t.stats.responses) {
                responses.push((bl(s, en, &[("class", c)]), r(a)));
            }
        }
        family(
            e,
            "gearlb_backend_responses",
            "Responses received from the backend, by status class.",
            MetricType::Counter,
            &responses,
        )?;
        let mut errors = Vec::new();
        for (svc, en, t) in rows.iter() {
            let s = &t.stats;
            for (kind, a) in [
                ("connect", &s.connect_errors),
                ("response", &s.response_errors),
                ("timeout", &s.timeouts),
            ] {
                errors.push((bl(svc, en, &[("kind", kind)]), r(a)));
            }
        }
        family(
            e,
            "gearlb_backend_errors",
            "Failed requests: connect (could not connect), response (failed after \
             connecting), timeout (no response head within timeouts.server).",
            MetricType::Counter,
            &errors,
        )?;
        family(
            e,
            "gearlb_backend_redispatches",
            "Requests moved to another backend after this one failed them.",
            MetricType::Counter,
            &each(&|_, t| r(&t.stats.redispatches)),
        )?;
        family(
            e,
            "gearlb_backend_sessions",
            "Sessions on the backend (HAProxy scur): requests in flight and open tunnels.",
            MetricType::Gauge,
            &each(&|_, t| t.outstanding()),
        )?;
        family(
            e,
            "gearlb_backend_requests_in_flight",
            "Requests sent to the backend and not yet answered in full.",
            MetricType::Gauge,
            &each(&|_, t| t.outstanding().saturating_sub(r(&t.tunnels))),
        )?;
        family(
            e,
            "gearlb_backend_tunnels",
            "Upgraded connections (WebSocket) open to the backend.",
            MetricType::Gauge,
            &each(&|_, t| r(&t.tunnels)),
        )?;
        family(
            e,
            "gearlb_backend_connections",
            "Connections open to the backend (busy and idle).",
            MetricType::Gauge,
            &each(&|_, t| t.pool.open_connections()),
        )?;
        family(
            e,
            "gearlb_backend_connections_opened",
            "Connections opened to the backend for requests. Against gearlb_backend_requests: \
             the share of requests that found no pooled connection to reuse.",
            MetricType::Counter,
            &each(&|_, t| r(&t.stats.connections_opened)),
        )?;
        family(
            e,
            "gearlb_backend_connections_idle",
            "Idle pooled connections to the backend.",
            MetricType::Gauge,
            &each(&|_, t| t.pool.idle_connections() as u64),
        )?;
        let mut states = Vec::new();
        for (svc, en, _) in rows.iter() {
            let now = en.state();
            for (label, s) in [
                ("up", BackendState::Up),
                ("down", BackendState::Down),
                ("draining", BackendState::Draining),
                ("drained", BackendState::Drained),
            ] {
                states.push((bl(svc, en, &[("state", label)]), u64::from(now == s)));
            }
        }
        family(
            e,
            "gearlb_backend_state",
            "1 for the backend's current state (up, down, draining, drained), else 0.",
            MetricType::Gauge,
            &states,
        )?;
        family(
            e,
            "gearlb_backend_in_subset",
            "1 when the backend is in this balancer's subset, 0 when it is a backup.",
            MetricType::Gauge,
            &each(&|en, _| u64::from(en.in_subset)),
        )?;
        let mut checks = Vec::new();
        for (svc, en, t) in rows.iter() {
            let s = &t.stats;
            for (result, a) in [("ok", &s.checks_ok), ("fail", &s.checks_failed)] {
                checks.push((bl(svc, en, &[("result", result)]), r(a)));
            }
        }
        family(
            e,
            "gearlb_backend_health_checks",
            "Active health checks, by result.",
            MetricType::Counter,
            &checks,
        )?;
        family(
            e,
            "gearlb_backend_down_transitions",
            "Times the backend went from up to down.",
            MetricType::Counter,
            &each(&|_, t| r(&t.stats.went_down)),
        )?;
        family(
            e,
            "gearlb_backend_sent_bytes",
            "Bytes written to the backend's connections.",
            MetricType::Counter,
            &each(&|_, t| r(&t.pool.traffic().sent)),
        )?;
        family(
            e,
            "gearlb_backend_received_bytes",
            "Bytes read from the backend's connections.",
            MetricType::Counter,
            &each(&|_, t| r(&t.pool.traffic().received)),
        )?;

        family(
            e,
            "gearlb_backend_queued",
            "Requests waiting for a slot on the backend (max_connections) now.",
            MetricType::Gauge,
            &each(&|_, t| r(&t.queued)),
        )?;
        // Version groups of the services whose backends have versions.
        let mut groups = Vec::new();
        for ((name, router), (_, snap)) in services.iter().zip(snaps.iter().skip(1)) {
            let Some(v) = crate::services::versions_report(router, snap) else {
                continue;
            };
            for (i, g) in v.groups.iter().enumerate() {
                let state = match (v.active == Some(i), v.canary == Some(i)) {
                    (true, _) => "active",
                    (_, true) => "canary",
                    _ => "waiting",
                };
                let versions = g.join(",");
                groups.push((
                    labels(&[("service", name), ("versions", &versions), ("state", state)]),
                    1,
                ));
            }
        }
        if !groups.is_empty() {
            family(
                e,
                "gearlb_service_version_group",
                "1 for each version group of a service, labelled active, canary or waiting.",
                MetricType::Gauge,
                &groups,
            )?;
        }

        let mut m = e.encode_descriptor(
            "gearlb_backend_response_head_seconds",
            "Time from handing a request to the backend to its response head.",
            None,
            MetricType::Histogram,
        )?;
        for (s, en, t) in rows.iter() {
            let h = t.stats.latency.snapshot();
            let buckets: Vec<(f64, u64)> = h
                .counts
                .iter()
                .enumerate()
                .map(|(i, n)| (BUCKETS_SECS.get(i).copied().unwrap_or(f64::INFINITY), *n))
                .collect();
            let l = bl(s, en, &[]);
            let mut s = m.encode_family(&l)?;
            s.encode_histogram::<NoLabelSet>(h.sum_secs(), h.count(), &buckets, None)?;
        }
        Ok(())
    }
}

/// A backend's labels: its service (unless it is the default one's), its name, and
/// `extra`.
fn backend_labels(s: &Option<Arc<str>>, en: &Entry, extra: &[(&'static str, &str)]) -> Labels {
    let mut l: Vec<(&'static str, &str)> = Vec::with_capacity(extra.len() + 2);
    if let Some(s) = s {
        l.push(("service", s));
    }
    l.push(("backend", en.backend.name()));
    l.extend_from_slice(extra);
    labels(&l)
}
