//! The [`Spi`] itself, a leaf of `crate::spi` that every other file there extends:
//! its state (the table, the store, the consumer's status, counters, failures, what
//! was last published), opening it, publishing what the table routes (services and
//! alias certificates), health and readiness.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use gearlb_core::spi::{derive, Table};
use tracing::{info, warn};

use super::store;
use crate::config::RoutingSpiConfig;
use crate::report::spi::{Failure, PeerTable, ReconcileReport, TableReport};
use crate::services::ServiceSet;

/// The failures kept for the report.
const FAILURES_KEPT: usize = 64;

/// Events counted by what became of them.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) received: AtomicU64,
    pub(super) applied: AtomicU64,
    pub(super) duplicates: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) ignored: AtomicU64,
}

/// A router's routing SPI: its table and what serves it.
pub struct Spi {
    pub(super) cfg: RoutingSpiConfig,
    /// The `client-id` and durable subscription name in use.
    pub(super) client_id: String,
    /// The table; also orders the events (one applied at a time).
    pub(super) table: tokio::sync::Mutex<Table>,
    pub(super) store: Arc<Mutex<store::TableStore>>,
    pub(super) services: Arc<ServiceSet>,
    /// The HTTPS listener's alias certificates, when it runs.
    pub(super) certs: Option<crate::tls::AliasCerts>,
    /// Parsed certificates by fingerprint, so that a change parses only what is new.
    pub(super) parsed: Mutex<HashMap<String, Arc<rustls::sign::CertifiedKey>>>,
    pub(super) broker: Arc<crate::stomp::Status>,
    pub(super) counters: Counters,
    pub(super) failures: Mutex<VecDeque<Failure>>,
    /// Where the table came from (`state file`, `peer <id>`, `REST API`, `empty`).
    pub(super) source: ArcSwap<String>,
    /// What the table routes, as last published (gossip and report).
    pub(super) digest: ArcSwap<String>,
    /// The table summed up, as last published (report).
    pub(super) summary: ArcSwap<TableReport>,
    /// When the table was last current (Unix ms), as last published (lock-free).
    pub(super) current_ms: AtomicU64,
    /// Applied events, as last published (lock-free).
    pub(super) applied: AtomicU64,
    pub(super) reconcile: Mutex<ReconcileReport>,
    /// The peers' tables as last compared (report).
    pub(super) peers: ArcSwap<Vec<PeerTable>>,
    /// Actions that are not routing changes, logged once each.
    pub(super) logged_actions: Mutex<HashSet<String>>,
    /// The table is loaded and served (readiness).
    pub(super) ready: AtomicBool,
    pub(super) keep_seen: Arc<crate::idler::Counters>,
    /// Cancelled when the balancer stops.
    pub(super) stop: tokio_util::sync::CancellationToken,
    /// Open once the table is bootstrapped: events wait for it (`run`).
    pub(super) gate: tokio::sync::watch::Sender<bool>,
}

impl Spi {
    /// The routing SPI of `cfg`, its table loaded from `state_dir` (replayed from its
    /// journal) and not yet published.
    pub fn open(
        cfg: RoutingSpiConfig,
        client_id: String,
        state_dir: &std::path::Path,
        services: Arc<ServiceSet>,
        certs: Option<crate::tls::AliasCerts>,
        stop: tokio_util::sync::CancellationToken,
    ) -> Arc<Spi> {
        let mut store = store::TableStore::new(state_dir);
        let (table, source) = match store.load(store::replay) {
            Ok(Some(t)) => {
                info!(
                    applications = t.apps.len(),
                    events = t.applied,
                    "routing table loaded from the state directory"
                );
                (t, "state file".to_string())
            }
            Ok(None) => (Table::default(), "empty".to_string()),
            Err(e) => {
                warn!(error = %e, "the saved routing table cannot be read: starting without it");
                match store.set_aside() {
                    Ok(p) => {
                        warn!(path = %p.display(), "unreadable routing table kept for inspection")
                    }
                    Err(e) => {
                        warn!(error = %e, "could not move the unreadable routing table aside")
                    }
                }
                (Table::default(), "empty".to_string())
            }
        };
        Arc::new(Spi {
            client_id,
            table: tokio::sync::Mutex::new(table),
            store: Arc::new(Mutex::new(store)),
            services,
            certs,
            parsed: Mutex::new(HashMap::new()),
            broker: Arc::new(crate::stomp::Status::default()),
            counters: Counters::default(),
            failures: Mutex::new(VecDeque::new()),
            source: ArcSwap::from_pointee(source),
            digest: ArcSwap::from_pointee(String::new()),
            summary: ArcSwap::from_pointee(TableReport::default()),
            current_ms: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            reconcile: Mutex::new(ReconcileReport::default()),
            peers: ArcSwap::from_pointee(Vec::new()),
            logged_actions: Mutex::new(HashSet::new()),
            ready: AtomicBool::new(false),
            keep_seen: Arc::new(crate::idler::Counters::default()),
            stop,
            gate: tokio::sync::watch::channel(false).0,
            cfg,
        })
    }

    /// Where the events come from, as services' origin says it.
    pub fn destination(&self) -> &str {
        &self.cfg.destination
    }

    /// True once the table is ready, while a broker is connected or the table was
    /// current within `max_table_age`: what `/health` answers for a router (keepalived moves the
    /// virtual address off a router that is not).
    pub fn healthy(&self) -> bool {
        // A router still waiting for its first table serves nothing.
        if !self.ready() {
            return false;
        }
        if self.broker.connected() {
            return true;
        }
        let current = self.current_ms.load(Ordering::Relaxed);
        let age = crate::time::unix_ms().saturating_sub(current);
        current > 0 && u128::from(age) < self.cfg.max_table_age.as_millis()
    }

    /// The table is loaded and served (systemd's readiness).
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Whether there is no table at all (a new router).
    pub(super) async fn is_empty(&self) -> bool {
        let t = self.table.lock().await;
        t.apps.is_empty() && t.applied == 0
    }

    /// Serve what `table` routes: its services and its aliases' certificates.
    pub(super) async fn publish(&self, table: &Table) {
        let services = derive::services(table, &self.cfg);
        self.services.set_spi(&self.cfg.destination, services).await;
        if let Some(certs) = &self.certs {
            let mut map = HashMap::new();
            let mut parsed = self.parsed.lock().unwrap_or_else(|p| p.into_inner());
            let mut used = HashSet::new();
            for (alias, c) in derive::certificates(table, &self.cfg) {
                used.insert(c.fingerprint.clone());
                let key = match parsed.get(&c.fingerprint) {
                    Some(k) => k.clone(),
                    None => {
                        match gearlb_proxy::certs::alias_cert(alias, &c.cert_pem, &c.key_pem, None)
                        {
                            Ok(a) => {
                                parsed.insert(c.fingerprint.clone(), a.key.clone());
                                a.key.clone()
                            }
                            Err(e) => {
                                warn!(%alias, error = %e, "saved certificate unusable: the default certificate answers for the alias");
                                continue;
                            }
                        }
                    }
                };
                map.insert(alias.to_string(), key);
            }
            parsed.retain(|fp, _| used.contains(fp));
            certs.replace_all(map);
        }
        let summary = self.table_report(table);
        self.digest.store(Arc::new(summary.digest.clone()));
        self.summary.store(Arc::new(summary));
        self.applied.store(table.applied, Ordering::Relaxed);
        self.current_ms
            .fetch_max(table.current_ms, Ordering::Relaxed);
    }

    /// What the table routes, summed up (at each publication).
    pub(super) fn table_report(&self, t: &Table) -> TableReport {
        TableReport {
            source: self.source.load().to_string(),
            applications: t.apps.len(),
            routed: derive::services(t, &self.cfg).len(),
            aliases: t.apps.values().map(|a| a.aliases.len()).sum(),
            certificates: derive::certificates(t, &self.cfg).len(),
            digest: derive::digest(t),
            events: t.applied,
            age_s: None,
        }
    }

    /// Record a failure for the report (the oldest go first).
    pub(super) fn failed(&self, f: Failure) {
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
        let mut list = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        list.push_back(f);
        while list.len() > FAILURES_KEPT {
            list.pop_front();
        }
    }

    /// Write the whole table now (off the runtime's threads).
    pub(super) async fn write_snapshot(&self, table: &Table) -> Result<(), String> {
        let store = self.store.clone();
        let copy = table.clone();
        tokio::task::spawn_blocking(move || {
            store.lock().unwrap_or_else(|p| p.into_inner()).write(&copy)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
    }

    /// Mark the table current now (a broker is connected).
    pub(super) async fn touch(&self) {
        let now = crate::time::unix_ms();
        self.current_ms.fetch_max(now, Ordering::Relaxed);
        self.table.lock().await.current_ms = now;
    }
}
