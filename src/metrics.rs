//! Prometheus metrics for `/metrics` on the status listener, encoded by the
//! `prometheus-client` crate in OpenMetrics text and served in the format the scraper
//! asks for ([`negotiate`]): OpenMetrics when its `Accept` prefers it (Prometheus's
//! own scrapes do), else the classic text format 0.0.4 ([`to_text_004`]), which is what
//! `curl`, `promtool check metrics` and older scrapers read.
//!
//! Owns [`Metrics`], the registry encoded on each scrape, and [`CoreCollector`], which
//! reads what the request path already counts (relaxed atomics in [`crate::stats`], the
//! routing snapshot) at scrape time: the request path holds no metric handle and takes no
//! lock for metrics. Only metrics with real data are exported.
//!
//! Extension point: a later feature (cluster, rotations, scaler) implements
//! [`prometheus_client::collector::Collector`] over its own state and adds it with
//! [`Metrics::register`] while the balancer is assembled (`server`). Its metric names
//! start with `gearlb_<feature>_`.

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::routing::{BackendState, Router};
use crate::stats::latency::BUCKETS_SECS;
use crate::stats::FrontendStats;

/// Content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the classic text format ([`to_text_004`]).
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The exposition formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    /// Prometheus text format 0.0.4.
    Text,
}

/// The format a scraper's `Accept` header asks for: OpenMetrics when it weighs
/// `application/openmetrics-text` at least as high as `text/plain` (and above 0), the
/// text format otherwise, and without the header (as Prometheus's Go client does).
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Text;
    };
    let (mut om, mut text, mut any) = (0.0f32, 0.0f32, 0.0f32);
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .and_then(|(_, v)| v.trim().parse::<f32>().ok())
            .unwrap_or(1.0)
            .clamp(0.0, 1.0);
        let slot = match media.as_str() {
            "application/openmetrics-text" => &mut om,
            "text/plain" | "text/*" => &mut text,
            "*/*" => &mut any,
            _ => continue,
        };
        *slot = slot.max(q);
    }
    let text = text.max(any);
    if om > 0.0 && om >= text {
        Format::OpenMetrics
    } else {
        Format::Text
    }
}

/// OpenMetrics text as the classic text format 0.0.4: a counter's `HELP`/`TYPE` name
/// its `_total` samples, `_created` samples and `UNIT` lines go, `info` and `stateset`
/// become gauges, `unknown` untyped, and there is no `# EOF`.
pub fn to_text_004(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<(&str, &str)> = None;
    let mut counter = false;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = rest.split_once(' ').or(Some((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            counter = kind == "counter";
            let (name_out, kind_out) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "stateset" => (name.to_string(), "gauge"),
                "gaugehistogram" => (name.to_string(), "histogram"),
                "unknown" => (name.to_string(), "untyped"),
                k => (name.to_string(), k),
            };
            if let Some((_, h_text)) = help.take().filter(|(n, _)| *n == name) {
                // OpenMetrics escapes `"` in HELP; the text format does not.
                out.push_str(&format!(
                    "# HELP {name_out} {}\n",
                    h_text.replace("\\\"", "\"")
                ));
            }
            out.push_str(&format!("# TYPE {name_out} {kind_out}\n"));
            continue;
        }
        if line.starts_with('#') {
            continue; // # UNIT, # EOF
        }
        let sample = line.split(['{', ' ']).next().unwrap_or("");
        if counter && sample.ends_with("_created") {
            continue;
        }
        // Exemplars (` # {…} v`) are OpenMetrics only.
        let line = line.split_once(" # ").map_or(line, |(l, _)| l);
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The metrics of one balancer.
pub struct Metrics {
    registry: Registry,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Metrics of the proxy: frontend and backends.
    pub fn new(router: Arc<Router>, frontend: Arc<FrontendStats>, start_unix: u64) -> Self {
        let mut m = Metrics {
            registry: Registry::default(),
        };
        m.register(CoreCollector {
            router,
            frontend,
            start_unix,
        });
        m
    }

    /// Add a feature's collector (see the module documentation).
    pub fn register(&mut self, collector: impl Collector) {
        self.registry.register_collector(Box::new(collector));
    }

    /// The exposition text, ending with `# EOF`.
    pub fn encode(&self) -> Result<String, fmt::Error> {
        let mut out = String::with_capacity(16 * 1024);
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// Frontend and backend metrics, read from the live counters at scrape time.
pub struct CoreCollector {
    router: Arc<Router>,
    frontend: Arc<FrontendStats>,
    start_unix: u64,
}

impl fmt::Debug for CoreCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoreCollector").finish_non_exhaustive()
    }
}

type Labels = Vec<(Cow<'static, str>, Cow<'static, str>)>;

fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (Cow::Borrowed(*k), Cow::Owned(v.to_string())))
        .collect()
}

fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    let c = ConstCounter::new(v);
    let m = enc.encode_descriptor(name, help, None, c.metric_type())?;
    c.encode(m)
}

fn counter_f64(enc: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> fmt::Result {
    let c = ConstCounter::new(v);
    let m = enc.encode_descriptor(name, help, None, c.metric_type())?;
    c.encode(m)
}

fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: i64) -> fmt::Result {
    let g = ConstGauge::new(v);
    let m = enc.encode_descriptor(name, help, None, g.metric_type())?;
    g.encode(m)
}

/// One metric family: `(labels, value)` samples of one type.
fn family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: &[(Labels, u64)],
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, kind)?;
    for (l, v) in samples {
        let s = m.encode_family(l)?;
        match kind {
            MetricType::Counter => ConstCounter::new(*v).encode(s)?,
            _ => ConstGauge::new(i64::try_from(*v).unwrap_or(i64::MAX)).encode(s)?,
        }
    }
    Ok(())
}

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

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
            "Client connections closed for inactivity (timeouts.client).",
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
        let table = self.router.snapshot();
        let entries = table.entries();
        let each = |get: &dyn Fn(&crate::routing::Entry) -> u64| -> Vec<(Labels, u64)> {
            entries
                .iter()
                .map(|en| (labels(&[("backend", en.backend.name())]), get(en)))
                .collect()
        };
        family(
            e,
            "gearlb_backend_requests",
            "Requests sent to the backend.",
            MetricType::Counter,
            &each(&|en| r(&en.backend.stats.requests)),
        )?;
        let mut responses = Vec::new();
        for en in entries {
            for (c, a) in CLASSES.iter().zip(&en.backend.stats.responses) {
                responses.push((
                    labels(&[("backend", en.backend.name()), ("class", c)]),
                    r(a),
                ));
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
        for en in entries {
            let s = &en.backend.stats;
            for (kind, a) in [
                ("connect", &s.connect_errors),
                ("response", &s.response_errors),
                ("timeout", &s.timeouts),
            ] {
                errors.push((
                    labels(&[("backend", en.backend.name()), ("kind", kind)]),
                    r(a),
                ));
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
            &each(&|en| r(&en.backend.stats.redispatches)),
        )?;
        family(
            e,
            "gearlb_backend_sessions",
            "Sessions on the backend (HAProxy scur): requests in flight and open tunnels.",
            MetricType::Gauge,
            &each(&|en| en.backend.outstanding()),
        )?;
        family(
            e,
            "gearlb_backend_requests_in_flight",
            "Requests sent to the backend and not yet answered in full.",
            MetricType::Gauge,
            &each(&|en| {
                en.backend
                    .outstanding()
                    .saturating_sub(r(&en.backend.tunnels))
            }),
        )?;
        family(
            e,
            "gearlb_backend_tunnels",
            "Upgraded connections (WebSocket) open to the backend.",
            MetricType::Gauge,
            &each(&|en| r(&en.backend.tunnels)),
        )?;
        family(
            e,
            "gearlb_backend_connections",
            "Connections open to the backend (busy and idle).",
            MetricType::Gauge,
            &each(&|en| en.backend.pool.open_connections()),
        )?;
        family(
            e,
            "gearlb_backend_connections_opened",
            "Connections opened to the backend for requests. Against gearlb_backend_requests: \
             the share of requests that found no pooled connection to reuse.",
            MetricType::Counter,
            &each(&|en| r(&en.backend.stats.connections_opened)),
        )?;
        family(
            e,
            "gearlb_backend_connections_idle",
            "Idle pooled connections to the backend.",
            MetricType::Gauge,
            &each(&|en| en.backend.pool.idle_connections() as u64),
        )?;
        let mut states = Vec::new();
        for en in entries {
            let now = en.state();
            for (label, s) in [
                ("up", BackendState::Up),
                ("down", BackendState::Down),
                ("draining", BackendState::Draining),
                ("drained", BackendState::Drained),
            ] {
                states.push((
                    labels(&[("backend", en.backend.name()), ("state", label)]),
                    u64::from(now == s),
                ));
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
            &each(&|en| u64::from(en.in_subset)),
        )?;
        let mut checks = Vec::new();
        for en in entries {
            let s = &en.backend.stats;
            for (result, a) in [("ok", &s.checks_ok), ("fail", &s.checks_failed)] {
                checks.push((
                    labels(&[("backend", en.backend.name()), ("result", result)]),
                    r(a),
                ));
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
            &each(&|en| r(&en.backend.stats.went_down)),
        )?;
        family(
            e,
            "gearlb_backend_sent_bytes",
            "Bytes written to the backend's connections.",
            MetricType::Counter,
            &each(&|en| r(&en.backend.pool.traffic().sent)),
        )?;
        family(
            e,
            "gearlb_backend_received_bytes",
            "Bytes read from the backend's connections.",
            MetricType::Counter,
            &each(&|en| r(&en.backend.pool.traffic().received)),
        )?;

        let mut m = e.encode_descriptor(
            "gearlb_backend_response_head_seconds",
            "Time from handing a request to the backend to its response head.",
            None,
            MetricType::Histogram,
        )?;
        for en in entries {
            let h = en.backend.stats.latency.snapshot();
            let buckets: Vec<(f64, u64)> = h
                .counts
                .iter()
                .enumerate()
                .map(|(i, n)| (BUCKETS_SECS.get(i).copied().unwrap_or(f64::INFINITY), *n))
                .collect();
            let l = labels(&[("backend", en.backend.name())]);
            let mut s = m.encode_family(&l)?;
            s.encode_histogram::<NoLabelSet>(h.sum_secs(), h.count(), &buckets, None)?;
        }
        Ok(())
    }
}

/// Counters of rotate commands taken by this balancer.
#[derive(Debug, Default)]
pub struct RotationCounters {
    pub out_ok: AtomicU64,
    pub out_failed: AtomicU64,
    pub in_ok: AtomicU64,
    pub in_failed: AtomicU64,
    /// Requests and tunnels cut at drain deadlines, over all balancers' acks.
    pub forced: AtomicU64,
    /// Sum of the durations of finished rotate commands, milliseconds.
    pub duration_ms: AtomicU64,
}

/// Gossip, rotation and scaler metrics, read at scrape time.
pub struct ClusterCollector {
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
    pub scaler: Arc<crate::scaler::Scaler>,
    pub rotations: Arc<RotationCounters>,
}

impl fmt::Debug for ClusterCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterCollector").finish_non_exhaustive()
    }
}

impl Collector for ClusterCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        let e = &mut enc;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        if let Some(c) = &self.cluster {
            let v = c.view();
            let g = c.gossip_counters();
            let live = v.peers.iter().filter(|p| p.live).count() as u64;
            let dead = v.peers.iter().filter(|p| !p.live).count() as u64;
            family(
                e,
                "gearlb_gossip_peers",
                "Peer balancers by liveness as this balancer sees them (itself excluded).",
                MetricType::Gauge,
                &[
                    (labels(&[("state", "live")]), live),
                    (labels(&[("state", "dead")]), dead),
                ],
            )?;
            counter(
                e,
                "gearlb_gossip_frames_sent",
                "Gossip frames sent.",
                g.frames_sent,
            )?;
            counter(
                e,
                "gearlb_gossip_frames_received",
                "Authenticated gossip frames received.",
                g.frames_received,
            )?;
            family(
                e,
                "gearlb_gossip_frames_rejected",
                "Gossip frames dropped, by reason.",
                MetricType::Counter,
                &[
                    (labels(&[("reason", "bad_tag")]), g.rejected_bad_tag),
                    (
                        labels(&[("reason", "other_cluster")]),
                        g.rejected_other_cluster,
                    ),
                    (labels(&[("reason", "malformed")]), g.rejected_malformed),
                    (labels(&[("reason", "oversized")]), g.rejected_oversized),
                ],
            )?;
            counter(
                e,
                "gearlb_gossip_handshakes_rejected",
                "Gossip upgrade requests on the proxy port refused (no valid proof of the cluster secret).",
                g.rejected_handshake,
            )?;
            counter(
                e,
                "gearlb_gossip_send_failures",
                "Gossip frames that could not be sent.",
                g.send_failures,
            )?;
        }
        let rc = &*self.rotations;
        family(
            e,
            "gearlb_rotations",
            "Rotate commands taken by this balancer, by operation and result.",
            MetricType::Counter,
            &[
                (
                    labels(&[("op", "out"), ("result", "success")]),
                    r(&rc.out_ok),
                ),
                (
                    labels(&[("op", "out"), ("result", "failure")]),
                    r(&rc.out_failed),
                ),
                (labels(&[("op", "in"), ("result", "success")]), r(&rc.in_ok)),
                (
                    labels(&[("op", "in"), ("result", "failure")]),
                    r(&rc.in_failed),
                ),
            ],
        )?;
        counter(
            e,
            "gearlb_rotation_forced",
            "Requests and tunnels cut at drain deadlines (rotations taken here).",
            r(&rc.forced),
        )?;
        counter_f64(
            e,
            "gearlb_rotation_duration_seconds",
            "Total time of rotate commands taken here, seconds.",
            r(&rc.duration_ms) as f64 / 1000.0,
        )?;
        let rep = self.scaler.report();
        let c = self.scaler.counters();
        gauge(
            e,
            "gearlb_scaler_acting",
            "1 while this balancer acts as the application's scaler.",
            i64::from(rep.acting),
        )?;
        gauge(
            e,
            "gearlb_scaler_quorum",
            "1 while this balancer sees a quorum of the known balancers.",
            i64::from(rep.quorum),
        )?;
        gauge(
            e,
            "gearlb_scaler_capacity_percent",
            "Capacity at the scaler's last check, percent.",
            rep.capacity.round() as i64,
        )?;
        family(
            e,
            "gearlb_scaler_decisions",
            "Scale decisions made here, by event.",
            MetricType::Counter,
            &[
                (labels(&[("event", "scale-up")]), c.0),
                (labels(&[("event", "scale-down")]), c.1),
            ],
        )?;
        family(
            e,
            "gearlb_broker_calls",
            "Broker calls made here, by outcome.",
            MetricType::Counter,
            &[
                (labels(&[("outcome", "done")]), c.2),
                (labels(&[("outcome", "at_limit")]), c.3),
                (labels(&[("outcome", "failed")]), c.4),
            ],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_is_negotiated_as_scrapers_expect() {
        // Prometheus 2.x's scrape header.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(
            negotiate(Some("application/openmetrics-text; version=1.0.0")),
            Format::OpenMetrics
        );
        for text in [
            None,
            Some("*/*"),
            Some("text/plain; version=0.0.4"),
            Some("text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5"),
            Some("application/openmetrics-text;q=0"),
            Some("application/json"),
            Some(""),
            Some(";;,,q=x"),
        ] {
            assert_eq!(negotiate(text), Format::Text, "{text:?}");
        }
    }

    #[test]
    fn openmetrics_to_the_text_format() {
        let om = "# HELP a_requests Requests \\\"served\\\".\n# TYPE a_requests counter\na_requests_total{code=\"200\"} 3\na_requests_created 1.7e9\n# HELP a_up Up.\n# TYPE a_up gauge\n# UNIT a_up ratio\na_up 1\n# HELP a_build Build.\n# TYPE a_build info\na_build_info{version=\"1\"} 1\n# HELP a_t Time.\n# TYPE a_t histogram\na_t_bucket{le=\"+Inf\"} 2 # {trace=\"x\"} 0.5\na_t_sum 0.7\na_t_count 2\n# EOF\n";
        let text = to_text_004(om);
        assert_eq!(
            text,
            "# HELP a_requests_total Requests \"served\".\n# TYPE a_requests_total counter\na_requests_total{code=\"200\"} 3\n# HELP a_up Up.\n# TYPE a_up gauge\na_up 1\n# HELP a_build_info Build.\n# TYPE a_build_info gauge\na_build_info{version=\"1\"} 1\n# HELP a_t Time.\n# TYPE a_t histogram\na_t_bucket{le=\"+Inf\"} 2\na_t_sum 0.7\na_t_count 2\n"
        );
    }
}
