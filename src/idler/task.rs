//! The keep-seen task: samples whether the application serves, and when a round is due
//! ([`Pacer`]) reads the node's gear registry and requests each peer gear through its
//! node's frontend ([`Touch`]), a few at a time, each within `idler.timeout`. Failures
//! are counted ([`Counters`]) and logged at debug level, at most once a minute; nothing
//! here can stop or slow the balancer: the task is on its own, stopped with it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::plan::{answered, request, status_of, targets, LogLimit, Pacer, Sample, Target};
use crate::cartridge::registry::{self, Registry};
use crate::config::Config;

/// Requests of one round in flight at once.
const AT_ONCE: usize = 8;
/// The longest answer head read: the status line is all that is looked at.
const MAX_HEAD: usize = 1024;

/// What the task works with, from the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub interval: Duration,
    pub timeout: Duration,
    /// The node frontend's port.
    pub port: u16,
    /// The node's gear registry of this gear.
    pub registry: PathBuf,
    /// This balancer's gear uuid.
    pub own_uuid: Option<String>,
    /// Other names of this balancer's node (`PUBLIC_HOSTNAME`, `PUBLIC_IP`).
    pub own_names: Vec<String>,
}

impl Settings {
    /// `None` when keep-seen is off, or when there is no gear registry to name the peers
    /// (not in a gear: `OPENSHIFT_HOMEDIR` unset). `node_conf` is the node's
    /// configuration file's text, when readable.
    pub fn of(cfg: &Config, node_conf: Option<&str>) -> Option<Settings> {
        let in_gear = cfg.gear.homedir.is_some() && cfg.gear.uuid.is_some();
        if !cfg.idler.keep_seen_on(in_gear) {
            return None;
        }
        let Some(home) = cfg.gear.homedir.as_deref() else {
            tracing::warn!(
                "idler.keep_seen is on, but there is no gear registry to name the peers \
                 (OPENSHIFT_HOMEDIR unset): no gear is kept seen"
            );
            return None;
        };
        Some(Settings {
            interval: cfg.idler.interval,
            timeout: cfg.idler.timeout,
            port: cfg.idler.frontend_port,
            registry: registry::path(home),
            own_uuid: cfg.gear.uuid.clone(),
            own_names: node_conf.map(super::plan::node_names).unwrap_or_default(),
        })
    }
}

/// One request to a peer gear's node frontend; the status it got.
#[async_trait::async_trait]
pub trait Touch: Send + Sync {
    async fn touch(&self, target: &Target, port: u16) -> Result<u16, String>;
}

/// [`Touch`] over plain HTTP/1.1: `HEAD /health` with the gear's name as `Host`, to
/// `port` of the gear's node.
pub struct FrontendTouch;

#[async_trait::async_trait]
impl Touch for FrontendTouch {
    async fn touch(&self, target: &Target, port: u16) -> Result<u16, String> {
        let addrs = tokio::net::lookup_host((target.host.as_str(), port))
            .await
            .map_err(|e| format!("{}: {e}", target.host))?;
        let mut last = format!("{}: no address", target.host);
        for a in addrs.take(4) {
            match tokio::net::TcpStream::connect(a).await {
                Ok(s) => {
                    return exchange(s, &target.dns)
                        .await
                        .map_err(|e| format!("{a}: {e}"))
                }
                Err(e) => last = format!("{a}: {e}"),
            }
        }
        Err(last)
    }
}

async fn exchange(mut s: tokio::net::TcpStream, dns: &str) -> Result<u16, String> {
    s.write_all(request(dns).as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut head = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    while head.len() < MAX_HEAD {
        let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
        if let Some(code) = status_of(&head) {
            return Ok(code);
        }
    }
    Err("no HTTP status line in the answer".into())
}

/// What the task did; read by `gearlb ctl peers`.
#[derive(Debug, Default)]
pub struct Counters {
    enabled: AtomicBool,
    interval_ms: AtomicU64,
    rounds: AtomicU64,
    sent: AtomicU64,
    failed: AtomicU64,
    peers: AtomicU64,
}

/// A snapshot of [`Counters`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeepSeenReport {
    /// The task runs.
    pub enabled: bool,
    pub interval_ms: u64,
    /// Rounds made (each while the application served).
    pub rounds: u64,
    /// Requests sent to peers' node frontends, and those of them that failed (no
    /// answer in time, or not a 2xx or 3xx).
    pub sent: u64,
    pub failed: u64,
    /// Peer gears requested in the last round.
    pub peers: u64,
}

impl Counters {
    /// A keep-seen task runs, a round every `interval`.
    pub fn start(&self, interval: Duration) {
        self.enabled.store(true, Ordering::Relaxed);
        let ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
        self.interval_ms.store(ms, Ordering::Relaxed);
    }

    /// A round of `targets` requests begins.
    pub fn round(&self, targets: u64) {
        self.rounds.fetch_add(1, Ordering::Relaxed);
        self.peers.store(targets, Ordering::Relaxed);
    }

    /// A request was answered (or `failed`).
    pub fn sent(&self, failed: bool) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn read(&self) -> KeepSeenReport {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        KeepSeenReport {
            enabled: self.enabled.load(Ordering::Relaxed),
            interval_ms: r(&self.interval_ms),
            rounds: r(&self.rounds),
            sent: r(&self.sent),
            failed: r(&self.failed),
            peers: r(&self.peers),
        }
    }
}

/// Run until `stop`: sample with `sample`, and make a round when one is due.
pub async fn run(
    settings: Settings,
    mut sample: impl FnMut() -> Sample + Send,
    touch: Arc<dyn Touch>,
    counters: Arc<Counters>,
    stop: CancellationToken,
) {
    counters.start(settings.interval);
    let mut pacer = Pacer::new(Instant::now().into_std(), settings.interval);
    let mut tick = tokio::time::interval(pacer.sample_every());
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut log = LogLimit::new(Duration::from_secs(60));
    let mut last: Option<Vec<Target>> = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        if !pacer.sample(Instant::now().into_std(), sample()) {
            continue;
        }
        let peers = match Registry::load(&settings.registry) {
            Ok(reg) => targets(&reg, settings.own_uuid.as_deref(), &settings.own_names),
            Err(e) => {
                if let Some(held) = log.allow(Instant::now().into_std()) {
                    debug!(error = %e, held_back = held, "idler keep-seen: gear registry unreadable");
                }
                continue;
            }
        };
        if last.as_ref() != Some(&peers) {
            let list: Vec<String> = peers
                .iter()
                .map(|t| format!("{}@{}", t.dns, t.host))
                .collect();
            info!(
                peers = %list.join(" "),
                "idler keep-seen: requesting these peer gears through their node frontends while the application serves"
            );
            last = Some(peers.clone());
        }
        counters.round(peers.len() as u64);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = round(peers, &settings, &touch, &counters, &mut log) => {}
        }
    }
}

/// Request every target, [`AT_ONCE`] at a time, each within the timeout.
async fn round(
    peers: Vec<Target>,
    settings: &Settings,
    touch: &Arc<dyn Touch>,
    counters: &Counters,
    log: &mut LogLimit,
) {
    let mut pending = peers.into_iter();
    let mut running = JoinSet::new();
    loop {
        while running.len() < AT_ONCE {
            let Some(t) = pending.next() else { break };
            let (touch, port, limit) = (touch.clone(), settings.port, settings.timeout);
            running.spawn(async move {
                let got = match tokio::time::timeout(limit, touch.touch(&t, port)).await {
                    Ok(r) => r,
                    Err(_) => Err(format!("no answer within {limit:?}")),
                };
                (t, got)
            });
        }
        let Some(done) = running.join_next().await else {
            return;
        };
        let failure = match done {
            Ok((_, Ok(code))) if answered(code) => None,
            Ok((t, Ok(code))) => Some((t.dns, t.host, format!("status {code}"))),
            Ok((t, Err(e))) => Some((t.dns, t.host, e)),
            Err(e) => Some((String::new(), String::new(), e.to_string())),
        };
        counters.sent(failure.is_some());
        if let Some((gear, node, error)) = failure {
            if let Some(held) = log.allow(Instant::now().into_std()) {
                debug!(%gear, %node, %error, held_back = held, "idler keep-seen request failed");
            }
        }
    }
}

#[cfg(test)]
mod tests;
