//! The scaler of this balancer ([`Scaler`]): its loop elects on every change of the
//! cluster view, and while acting decides every `scaler.check_interval` from the
//! gossiped loads and calls the broker; manual scale events; its report for `status`.
//!
//! The acting role is fenced (`gearlb_core::scaler::fence`): the loop turns at least
//! every [`FENCE_TICK`] while elected, acting or next in line ([`QUIET_TICK`]
//! otherwise), and on every turn and right before every call to the broker
//! it checks on a monotonic clock that it was not stopped or starved, that a majority
//! was heard from since it resumed, and that no other balancer claims the role; it
//! stands down otherwise, and says why in the log. A balancer takes over only once the
//! last claim it heard from another has lapsed (`fence::claim_lapsed`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::broker::{self, Broker};
use crate::cluster::{keys, Cluster, ClusterView};
use crate::routing::Router;
use gearlb_core::scaler::election::{elect, park_local_gear, Candidate, Election};
use gearlb_core::scaler::failures;
use gearlb_core::scaler::fence::Fence;
use gearlb_core::scaler::policy::{self, Decision, Outcome, PolicyConfig, PolicyState, Sample};

/// Scaler settings in force (swapped on reload).
#[derive(Clone, Debug)]
pub struct ScalerSettings {
    pub enabled: bool,
    pub preferred: Option<String>,
    pub app_name: Option<String>,
    pub policy: PolicyConfig,
    pub check_interval: Duration,
    /// See `config::ScalerConfig::gear_ratio`.
    pub gear_ratio: i64,
    /// `.openshift/markers/disable_auto_scaling` under the repository, if known.
    pub marker: Option<PathBuf>,
}

/// What `ctl status` shows of the scaler.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ScalerReport {
    /// Who this balancer believes the scaler is.
    pub scaler: Option<String>,
    /// This balancer acts as scaler now.
    pub acting: bool,
    pub quorum: bool,
    pub live: usize,
    pub known: usize,
    /// Auto-scaling on (setting and marker).
    pub enabled: bool,
    /// Capacity at the last check, percent.
    pub capacity: f64,
    pub sessions: f64,
    pub gears: usize,
    /// Last decision made here and what came of it.
    pub last_event: Option<String>,
    /// Whether a broker is configured.
    pub broker: bool,
    /// The application's scale limits as last read from the broker (`null` until read).
    #[serde(default)]
    pub scale_limits: Option<broker::Limits>,
    /// Why the last call to the broker failed (`null` when it succeeded).
    #[serde(default)]
    pub broker_error: Option<String>,
    /// Calls to the broker that failed in a row.
    #[serde(default)]
    pub broker_failures: u64,
    /// Checks made since the balancer started (every `scaler.check_interval`).
    #[serde(default)]
    pub checks: u64,
}

/// How often the scaler's loop turns at least while this balancer is elected, acts, or
/// is next in line (its fence's tick): a turn that comes much later than this shows a
/// stall, and a balancer that takes over must have run on time for a while before.
pub const FENCE_TICK: Duration = Duration::from_millis(100);

/// How often it turns otherwise (at most two fifths of the fence's longest gap):
/// nothing to fence, but its stall detection stays on, so that it knows when it last
/// resumed should it come to be elected. A change of the view turns it at once.
pub const QUIET_TICK: Duration = Duration::from_millis(200);

/// The scaler of this balancer.
pub struct Scaler {
    pub settings: arc_swap::ArcSwap<ScalerSettings>,
    pub(super) broker: Option<Broker>,
    /// scale-up, scale-down decisions; broker done, at limit, failed.
    counts: [std::sync::atomic::AtomicU64; 5],
    pub(super) report: Mutex<ScalerReport>,
    pub(super) self_id: String,
    /// The monotonic clock's origin for this scaler's times (milliseconds since).
    pub(super) clock: tokio::time::Instant,
    /// The acting role's lease: it lapses at this time unless the loop turns again
    /// (0: not acting). A report read while the loop is not running (a stalled process
    /// that just woke) never shows it acting past its lease.
    pub(super) acting_until_ms: AtomicU64,
    /// Set when the role was revoked outside the loop ([`Scaler::membership_replaced`]):
    /// the loop's next turn decides afresh, and no lease it computed meanwhile holds.
    pub(super) revoked: AtomicBool,
}

use crate::time::unix_ms;
use gearlb_core::scaler::event::ScaleEvent;

impl Scaler {
    pub fn new(settings: ScalerSettings, broker: Option<Broker>, self_id: String) -> Arc<Self> {
        Arc::new(Scaler {
            settings: arc_swap::ArcSwap::from_pointee(settings),
            counts: Default::default(),
            report: Mutex::new(ScalerReport {
                broker: broker.is_some(),
                ..Default::default()
            }),
            broker,
            self_id,
            clock: tokio::time::Instant::now(),
            acting_until_ms: AtomicU64::new(0),
            revoked: Default::default(),
        })
    }

    /// Milliseconds on the monotonic clock since this scaler was made.
    pub(super) fn mono_ms(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }

    /// Whether this balancer acts as the scaler now: elected, fenced, and its lease not
    /// lapsed (what reports say and what `status` shows).
    pub fn acting(&self) -> bool {
        self.mono_ms() <= self.acting_until_ms.load(Ordering::Relaxed)
    }

    /// (scale-up decisions, scale-down decisions, broker calls done, at limit, failed).
    pub fn counters(&self) -> (u64, u64, u64, u64, u64) {
        let r = |i: usize| self.counts[i].load(std::sync::atomic::Ordering::Relaxed);
        (r(0), r(1), r(2), r(3), r(4))
    }

    fn count_call(&self, outcome: Outcome) {
        let i = match outcome {
            Outcome::Done => 2,
            Outcome::AtLimit => 3,
            Outcome::Failed => 4,
        };
        self.counts[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn report(&self) -> ScalerReport {
        let mut r = self.report.lock().map(|r| r.clone()).unwrap_or_default();
        r.acting = r.acting && self.acting();
        r
    }

    pub(super) fn update(&self, f: impl FnOnce(&mut ScalerReport)) {
        if let Ok(mut r) = self.report.lock() {
            f(&mut r);
        }
    }

    /// One manual scale event through the broker (`gearlb ctl scale up|down`).
    pub async fn manual(&self, event: &str) -> (Outcome, String) {
        match &self.broker {
            Some(b) => {
                let r = b.event(event).await;
                self.count_call(r.0);
                info!(event, result = %r.1, "manual scale event");
                self.update(|rep| rep.last_event = Some(format!("manual {}", r.1)));
                r
            }
            None => (
                Outcome::Failed,
                "no broker configured (OPENSHIFT_BROKER_HOST or scaler.broker_url)".into(),
            ),
        }
    }

    fn election(
        &self,
        view: &ClusterView,
        names: &HashMap<String, String>,
        acting: bool,
    ) -> Election {
        let cands = self.candidates(view, names, acting);
        self.elect_among(&cands, view, acting)
    }

    /// Whether this balancer would be elected should the scaler `e` elected die: the
    /// one that takes over, whose loop turns as often as the scaler's meanwhile.
    fn next_in_line(
        &self,
        view: &ClusterView,
        names: &HashMap<String, String>,
        e: &Election,
    ) -> bool {
        let Some(scaler) = e.scaler.as_deref().filter(|s| *s != self.self_id) else {
            return false;
        };
        let mut cands = self.candidates(view, names, false);
        for c in cands.iter_mut().filter(|c| c.id == scaler) {
            c.live = false;
            c.fresh = false;
            c.acting = false;
        }
        self.elect_among(&cands, view, false).scaler.as_deref() == Some(self.self_id.as_str())
    }

    fn elect_among(&self, cands: &[Candidate], view: &ClusterView, acting: bool) -> Election {
        let s = self.settings.load();
        elect(
            &self.self_id,
            cands,
            view.known_count,
            s.preferred.as_deref(),
            s.app_name.as_deref(),
            acting,
        )
    }

    /// This balancer and every known or live peer, as the election sees them.
    fn candidates(
        &self,
        view: &ClusterView,
        names: &HashMap<String, String>,
        acting: bool,
    ) -> Vec<Candidate> {
        let mut cands = vec![Candidate {
            id: self.self_id.clone(),
            name: names.get(&self.self_id).cloned(),
            live: true,
            fresh: true,
            acting,
        }];
        for p in view.peers.iter() {
            if let Some(id) = &p.id {
                if p.known || p.live {
                    cands.push(Candidate {
                        id: id.clone(),
                        name: p.name.clone().or_else(|| names.get(id).cloned()),
                        live: p.live,
                        fresh: p.live && view.fresh.contains(id),
                        acting: p.live && view.scaler.get(id).is_some_and(|c| c.acting),
                    });
                }
            }
        }
        cands
    }

    /// Elect on every change of the view, decide every `scaler.check_interval` while
    /// acting, until `stop`.
    pub async fn run(
        self: Arc<Self>,
        cluster: Option<Arc<Cluster>>,
        router: Arc<Router>,
        own_load: Arc<dyn Fn() -> f64 + Send + Sync>,
        self_name: Option<String>,
        stop: CancellationToken,
    ) {
        let mut state = PolicyState::starting(unix_ms());
        let mut names: HashMap<String, String> = HashMap::new();
        if let Some(n) = &self_name {
            names.insert(self.self_id.clone(), n.clone());
        }
        let mut limits: Option<(broker::Limits, u64)> = None;
        // The limits may fail to be read at every check: logged with a back-off, on a
        // monotonic clock.
        let mut limits_log = failures::FailureLog::default();
        let started = tokio::time::Instant::now();
        let mut was_acting = false;
        let mut last_belief: Option<String> = None;
        let mut last_seen_event: Option<ScaleEvent> = None;
        let mut views = cluster.as_ref().map(|c| c.subscribe());
        let mut next_check = tokio::time::Instant::now() + self.settings.load().check_interval;
        let mut elected_on: Option<(u64, u64)> = None;
        let mut e = Election {
            scaler: None,
            acts: false,
            live: 1,
            known: 1,
            quorum: true,
            first: true,
        };
        let liveness = cluster
            .as_ref()
            .map_or(Duration::from_secs(2), |c| c.liveness_window());
        let mut fence = Fence::new(FENCE_TICK, liveness);
        let mut next_turn = tokio::time::Instant::now() + FENCE_TICK;
        // Next in line should the scaler die: turns as often as the scaler.
        let mut standby = false;
        // At most two fifths of the fence's longest gap (short liveness windows), so a
        // standby tolerates as much lateness as it did at 100 ms less a turn.
        let quiet_tick = QUIET_TICK.min(fence.max_gap * 2 / 5).max(FENCE_TICK);
        // Other balancers' claims to act, by id: when each was last heard making one.
        let mut claims: HashMap<String, u64> = HashMap::new();
        loop {
            let check = tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep_until(next_check) => true,
                _ = tokio::time::sleep_until(next_turn) => false,
                r = async {
                    match views.as_mut() {
                        Some(v) => v.changed().await.is_ok(),
                        None => std::future::pending::<bool>().await,
                    }
                } => {
                    if !r {
                        return;
                    }
                    false
                }
            };
            // First of all, whether this process was stopped or starved since the last
            // turn: if so it stands down below, before anything else.
            let now_ms = self.mono_ms();
            let stalled = fence.turn(now_ms);
            let revoked = self.revoked.swap(false, Ordering::SeqCst);
            let s = self.settings.load_full();
            let view = match &cluster {
                Some(c) => c.view(),
                None => Arc::new(ClusterView::single(&self.self_id)),
            };
            if let Some(c) = &cluster {
                self.note_claims(&mut claims, &view, &c.heard(), now_ms, liveness);
            }
            let inputs = (view.versions.members, view.versions.scaler);
            if elected_on != Some(inputs) || check {
                elected_on = Some(inputs);
                for p in view.peers.iter() {
                    if let (Some(id), Some(n)) = (&p.id, &p.name) {
                        names.insert(id.clone(), n.clone());
                    }
                }
                e = self.election(&view, &names, was_acting);
                standby = self.next_in_line(&view, &names, &e);
                if last_belief != e.scaler {
                    info!(scaler = %e.scaler.as_deref().unwrap_or_default(), acting = e.acts, live = e.live, known = e.known, "scaler elected");
                    if let Some(c) = &cluster {
                        c.publish(keys::SCALER, e.scaler.clone().unwrap_or_default())
                            .await;
                    }
                    last_belief = e.scaler.clone();
                }
                self.update(|r| {
                    r.scaler = e.scaler.clone();
                    r.quorum = e.quorum;
                    r.live = e.live;
                    r.known = e.known;
                });
            }
            // Elected, and fenced: it acts.
            // Alone (no cluster), nobody else can have taken over: no fence.
            // Not elected: nothing to fence (it does not act either way).
            let fenced = match stalled {
                Some(why) if cluster.is_some() => Err(why),
                _ if !e.acts => Ok(()),
                _ => self.fenced(&fence, &cluster, &view, &e, &claims, was_acting, now_ms),
            };
            let acts = e.acts && fenced.is_ok();
            // After a revocation the log said it stood down: acting again is said again.
            if acts != was_acting || (revoked && acts) {
                was_acting = acts;
                self.set_acting(&cluster, &e, acts, fenced.err()).await;
            }
            next_turn = tokio::time::Instant::now()
                + if e.acts || standby {
                    FENCE_TICK
                } else {
                    quiet_tick
                };
            let lease = match (acts, &cluster) {
                (false, _) => 0,
                (true, None) => u64::MAX,
                (true, Some(_)) => fence.valid_until(),
            };
            self.acting_until_ms.store(lease, Ordering::SeqCst);
            // A revocation that came during this turn wins over the lease just stored.
            if self.revoked.load(Ordering::SeqCst) {
                self.acting_until_ms.store(0, Ordering::SeqCst);
            }
            self.update(|r| r.acting = acts);
            if !check {
                continue;
            }
            next_check = tokio::time::Instant::now() + s.check_interval;
            // A successor keeps its predecessor's cooldown.
            if let Some(ev) = view.scale_events.iter().max_by_key(|e| e.at_ms) {
                if last_seen_event.as_ref().is_none_or(|l| l.at_ms < ev.at_ms)
                    && ev.event == "scale-up"
                {
                    state.last_up_ms = state.last_up_ms.max(ev.at_ms);
                    state.pending_up_gears = Some(ev.gears);
                    last_seen_event = Some(ev.clone());
                }
            }
            // Gear ratio, on every balancer, scaler or not: the web servers colocated
            // with balancers (ours is `local-gear`; the others are the gears named like
            // a known balancer) take no traffic, the same on every balancer.
            {
                let mut balancer_names: Vec<&str> = names.values().map(String::as_str).collect();
                balancer_names.extend(view.peers.iter().filter_map(|p| p.id.as_deref()));
                balancer_names.push(&self.self_id);
                let colocated = |e: &crate::routing::Entry| {
                    e.backend.name() == "local-gear"
                        || e.backend
                            .sticky
                            .rsplit_once('-')
                            .is_some_and(|(n, _)| balancer_names.contains(&n))
                };
                let table = router.snapshot();
                if table.entries().iter().any(&colocated) {
                    let remote_up = table
                        .entries()
                        .iter()
                        .any(|e| !colocated(e) && e.up && e.admin == crate::routing::Admin::Active);
                    let park = park_local_gear(
                        table.entries().len(),
                        e.live.max(1),
                        s.gear_ratio,
                        remote_up,
                    );
                    if router.set_parked_where(colocated, park) {
                        info!(
                            parked = park,
                            web_gears = table.entries().len(),
                            balancers = e.live,
                            "gears colocated with balancers {} by the gear ratio",
                            if park {
                                "out of selection"
                            } else {
                                "back in selection"
                            }
                        );
                    }
                }
            }
            let sessions = own_load() + view.loads.values().map(|l| l.sessions_avg).sum::<f64>();
            let gears = router.load().entries().len();
            let marker_set = s.marker.as_ref().is_some_and(|m| m.exists());
            let enabled = s.enabled && !marker_set;
            self.update(|r| {
                r.enabled = enabled;
                r.sessions = sessions;
                r.gears = gears;
                r.checks += 1;
            });
            if !was_acting || !enabled {
                continue;
            }
            let Some(b) = &self.broker else { continue };
            // Right before the broker: still the one acting?
            if let Err(why) =
                self.fenced(&fence, &cluster, &view, &e, &claims, true, self.mono_ms())
            {
                was_acting = false;
                self.set_acting(&cluster, &e, false, Some(why)).await;
                continue;
            }
            let now = unix_ms();
            if limits.is_none_or(|(_, at)| now.saturating_sub(at) > 300_000) {
                let result = b.limits().await;
                let mono = started.elapsed().as_millis() as u64;
                match result {
                    Ok(l) => {
                        if let Some((n, since)) = limits_log.succeeded() {
                            let secs = mono.saturating_sub(since) / 1000;
                            info!(
                                failures = n,
                                min = l.min,
                                max = %l.max.map_or("none".to_string(), |m| m.to_string()),
                                "the broker answers again: scale limits read after {secs}s of failures"
                            );
                        }
                        limits = Some((l, now));
                        self.update(|r| {
                            r.scale_limits = Some(l);
                            r.broker_error = None;
                            r.broker_failures = 0;
                        });
                    }
                    Err(err) => {
                        let meanwhile = match limits {
                            Some(_) => "the limits read last",
                            None => "scale_min 1 and no scale_max",
                        };
                        match limits_log.failed(mono, &err.cause()) {
                            failures::Note::New => warn!(
                                error = %err,
                                "could not read the application's scale limits; tried again at every check, decisions use {meanwhile} meanwhile"
                            ),
                            failures::Note::Still { count, since_ms } => {
                                let secs = mono.saturating_sub(since_ms) / 1000;
                                warn!(
                                    error = %err,
                                    failures = count,
                                    "still cannot read the application's scale limits, for {secs}s; decisions use {meanwhile}"
                                )
                            }
                            failures::Note::Quiet => {
                                debug!(error = %err, "could not read the application's scale limits")
                            }
                        }
                        self.update(|r| {
                            r.broker_error = Some(err.to_string());
                            r.broker_failures += 1;
                        });
                    }
                }
            }
            let (min, max) = limits.map(|(l, _)| (l.min, l.max)).unwrap_or((1, None));
            let sample = Sample {
                now_ms: now,
                sessions,
                gears,
                scale_min: min,
                scale_max: max,
            };
            let decision = policy::decide(&mut state, &sample, &s.policy);
            self.update(|r| r.capacity = (state.capacity * 10.0).round() / 10.0);
            let event = match decision {
                Decision::ScaleUp => "scale-up",
                Decision::ScaleDown => "scale-down",
                Decision::Hold => continue,
            };
            info!(
                event,
                capacity = state.capacity,
                sessions,
                gears,
                "scale decision"
            );
            // The limits call may have taken long: still the one acting?
            if let Err(why) =
                self.fenced(&fence, &cluster, &view, &e, &claims, true, self.mono_ms())
            {
                was_acting = false;
                self.set_acting(&cluster, &e, false, Some(why)).await;
                continue;
            }
            self.counts[usize::from(event == "scale-down")]
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (outcome, text) = b.event(event).await;
            self.count_call(outcome);
            self.update(|r| {
                if outcome == Outcome::Failed {
                    r.broker_error = Some(text.clone());
                    r.broker_failures += 1;
                } else {
                    r.broker_error = None;
                    r.broker_failures = 0;
                }
            });
            match outcome {
                Outcome::Done => info!("{text}"),
                Outcome::AtLimit => {
                    info!("{text}");
                    limits = None;
                }
                Outcome::Failed => warn!("{text}; no decision for {:?}", s.policy.error_backoff),
            }
            policy::record(&mut state, &decision, outcome, gears, unix_ms(), &s.policy);
            if outcome == Outcome::Done {
                let ev = ScaleEvent {
                    event: event.to_string(),
                    at_ms: unix_ms(),
                    gears,
                };
                if let (Some(c), Ok(v)) = (&cluster, serde_json::to_string(&ev)) {
                    c.publish(keys::SCALE, v).await;
                }
                last_seen_event = Some(ev);
            }
            self.update(|r| r.last_event = Some(text));
        }
    }
}
