//! The supervisor: one check loop per backend of this balancer's subset, their results
//! and the request path's ejections (passive checks) applied to each backend's
//! [`Machine`], and health written into the routing table.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::router::{Router, Target};
use gearlb_core::routing::{BackendId, CheckReport};

use super::check::Checker;
use gearlb_core::health::HealthSettings;
use gearlb_core::health::{Machine, Transition};

/// Where the request path reports a backend that reached `fall` failures.
pub type EjectSender = mpsc::UnboundedSender<Arc<Target>>;

/// Keep checking the backends of `router` until `shutdown`, applying results and
/// ejections to the routing table.
pub async fn run<C: Checker>(
    router: Arc<Router>,
    checker: Arc<C>,
    settings: Arc<ArcSwap<HealthSettings>>,
    mut ejections: mpsc::UnboundedReceiver<Arc<Target>>,
    shutdown: CancellationToken,
) {
    struct Watched {
        backend: Arc<Target>,
        machine: Machine,
        stop: CancellationToken,
        /// The version it last announced on a check (`X-Gearlb-Version`).
        announced: Option<String>,
    }
    let mut watched: HashMap<BackendId, Watched> = HashMap::new();
    let (results_tx, mut results) = mpsc::unbounded_channel::<(Arc<Target>, CheckReport)>();
    let mut changes = router.subscribe();
    let mut enabled = settings.load().enabled;
    let mut reconcile = true;
    loop {
        if reconcile {
            reconcile = false;
            let table = router.snapshot();
            let mut keep = std::collections::HashSet::new();
            for (e, t) in table.iter().filter(|(e, _)| e.in_subset && enabled) {
                let k = e.backend.id;
                keep.insert(k);
                watched.entry(k).or_insert_with(|| {
                    let stop = shutdown.child_token();
                    tokio::spawn(check_loop(
                        t.clone(),
                        checker.clone(),
                        settings.clone(),
                        results_tx.clone(),
                        stop.clone(),
                    ));
                    Watched {
                        backend: t.clone(),
                        machine: Machine::new(e.up),
                        stop,
                        announced: None,
                    }
                });
            }
            watched.retain(|k, w| {
                let stays = keep.contains(k);
                if !stays {
                    w.stop.cancel();
                }
                stays
            });
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            r = changes.changed() => {
                if r.is_err() { break; }
                reconcile = true;
            }
            Some((backend, report)) = results.recv() => {
                let s = settings.load();
                if s.enabled != enabled {
                    enabled = s.enabled;
                    reconcile = true;
                }
                let ok = report.ok;
                let result = report.result.clone();
                if let Some(w) = watched.get_mut(&backend.id).filter(|w| ok && w.announced != report.version) {
                    info!(backend = %backend.name(), version = ?report.version, "backend announces its version");
                    w.announced = report.version.clone();
                    let parsed = report
                        .version
                        .as_deref()
                        .and_then(|v| gearlb_core::routing::versions::Version::parse(v).ok());
                    router.set_announced(backend.id, parsed);
                }
                backend.last_check.store(Some(Arc::new(report)));
                backend.stats.check_result(ok);
                if let Some(w) = watched.get_mut(&backend.id) {
                    if ok {
                        backend.passive_failures.store(0, Ordering::Relaxed);
                    }
                    match w.machine.check(ok, s.fall, s.rise) {
                        Some(Transition::Down) => {
                            warn!(backend = %backend.name(), check = %result, "backend DOWN: {} failed checks", s.fall);
                            router.set_health(w.backend.id, false);
                            backend.stats.health_changed(false);
                        }
                        Some(Transition::Up) => {
                            info!(backend = %backend.name(), "backend UP: {} successful checks", s.rise);
                            router.set_health(w.backend.id, true);
                            backend.stats.health_changed(true);
                        }
                        None => debug!(backend = %backend.name(), check = %result, ok, "health check"),
                    }
                }
            }
            Some(backend) = ejections.recv() => {
                if !enabled { continue; }
                if let Some(w) = watched.get_mut(&backend.id) {
                    if w.machine.eject() == Some(Transition::Down) {
                        warn!(backend = %backend.name(), "backend DOWN: failures on live traffic; back when checks pass");
                        router.set_health(w.backend.id, false);
                        backend.stats.health_changed(false);
                    }
                }
            }
        }
    }
    for w in watched.values() {
        w.stop.cancel();
    }
}

async fn check_loop<C: Checker>(
    backend: Arc<Target>,
    checker: Arc<C>,
    settings: Arc<ArcSwap<HealthSettings>>,
    results: mpsc::UnboundedSender<(Arc<Target>, CheckReport)>,
    stop: CancellationToken,
) {
    // A random phase spreads the checks of all backends over the interval.
    let interval = settings.load().interval;
    let phase = Duration::from_millis(fastrand::u64(..interval.as_millis().max(1) as u64));
    tokio::select! {
        _ = stop.cancelled() => return,
        _ = tokio::time::sleep(phase) => {}
    }
    let mut conn = C::Conn::default();
    loop {
        let s = settings.load_full();
        let next = Instant::now() + s.interval;
        let report = tokio::select! {
            _ = stop.cancelled() => return,
            r = checker.check(&mut conn, &backend, &s) => r,
        };
        if results.send((backend.clone(), report)).is_err() {
            return;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(next) => {}
        }
    }
}
