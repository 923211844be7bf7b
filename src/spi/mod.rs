//! A router fed by the broker's routing SPI (`[routing_spi]`): the [`Spi`] keeps the
//! table of applications (`gearlb_core::spi`), consumes the routing events from the
//! brokers ([`crate::stomp`]), persists the table before an event is acknowledged
//! ([`store`]), and serves what it routes: each application with a load-balancer
//! endpoint is a service of the [`crate::services::ServiceSet`] (origin `routing SPI
//! <destination>`), each alias's certificate is served by SNI
//! ([`crate::tls::AliasCerts`]).
//!
//! Parts: `apply` (one event: parse, check, apply, journal, publish), [`store`] (the
//! table on disk), `report` (what `gearlb ctl spi` and the status JSON show),
//! `peers` (routers of one cluster compare their tables by gossip, and a router that
//! starts with none takes a peer's), `rest` (reconciliation with the broker's REST
//! API), `keep_seen` (each served application's head gear kept seen by its node's
//! idler), `run` (the tasks, in order).

mod apply;
mod keep_seen;
mod peers;
mod report;
mod rest;
mod run;
pub mod store;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tracing::{info, warn};

use crate::config::RoutingSpiConfig;
use crate::services::ServiceSet;
pub use gearlb_core::spi::{derive, event, parse, reconcile, table, Action, Event, Table};
pub use peers::{serve_table, TABLE_PATH};
pub use report::{text as report_text, Failure, ReconcileReport, SpiReport};
pub use run::{client_id, start, Running};

/// The failures kept for the report.
const FAILURES_KEPT: usize = 64;

/// Events counted by what became of them.
#[derive(Debug, Default)]
struct Counters {
    received: AtomicU64,
    applied: AtomicU64,
    duplicates: AtomicU64,
    failed: AtomicU64,
    ignored: AtomicU64,
}

/// A router's routing SPI: its table and what serves it.
pub struct Spi {
    cfg: RoutingSpiConfig,
    /// The `client-id` and durable subscription name in use.
    client_id: String,
    /// The table; also orders the events (one applied at a time).
    table: tokio::sync::Mutex<Table>,
    store: Arc<Mutex<store::TableStore>>,
    services: Arc<ServiceSet>,
    /// The HTTPS listener's alias certificates, when it runs.
    certs: Option<crate::tls::AliasCerts>,
    /// Parsed certificates by fingerprint, so that a change parses only what is new.
    parsed: Mutex<HashMap<String, Arc<rustls::sign::CertifiedKey>>>,
    broker: Arc<crate::stomp::Status>,
    counters: Counters,
    failures: Mutex<VecDeque<Failure>>,
    /// Where the table came from (`state file`, `peer <id>`, `REST API`, `empty`).
    source: ArcSwap<String>,
    /// What the table routes, as last published (gossip and report).
    digest: ArcSwap<String>,
    /// The table summed up, as last published (report).
    summary: ArcSwap<report::TableReport>,
    /// When the table was last current (Unix ms), as last published (lock-free).
    current_ms: AtomicU64,
    /// Applied events, as last published (lock-free).
    applied: AtomicU64,
    reconcile: Mutex<ReconcileReport>,
    /// The peers' tables as last compared (report).
    peers: ArcSwap<Vec<report::PeerTable>>,
    /// Actions that are not routing changes, logged once each.
    logged_actions: Mutex<HashSet<String>>,
    /// The table is loaded and served (readiness).
    ready: AtomicBool,
    keep_seen: Arc<crate::idler::Counters>,
    /// Cancelled when the balancer stops.
    stop: tokio_util::sync::CancellationToken,
    /// Open once the table is bootstrapped: events wait for it (`run`).
    gate: tokio::sync::watch::Sender<bool>,
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
        let (table, source) = match store.load(apply::replay) {
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
            summary: ArcSwap::from_pointee(report::TableReport::default()),
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

    /// True once the table is ready (loaded, or taken from a peer or the REST API),
    /// and while a broker is connected or the table was current within
    /// `max_table_age`: what `/health` answers for a router (keepalived moves the
    /// virtual address off a router that is not). A new router connected to its broker
    /// but still waiting for a peer's table routes nothing yet: not healthy.
    pub fn healthy(&self) -> bool {
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
    async fn is_empty(&self) -> bool {
        let t = self.table.lock().await;
        t.apps.is_empty() && t.applied == 0
    }

    /// Serve what `table` routes: its services and its aliases' certificates.
    async fn publish(&self, table: &Table) {
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

    /// Record a failure for the report (the oldest go first).
    fn failed(&self, f: Failure) {
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
        let mut list = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        list.push_back(f);
        while list.len() > FAILURES_KEPT {
            list.pop_front();
        }
    }

    /// Write the whole table now (off the runtime's threads).
    async fn write_snapshot(&self, table: &Table) -> Result<(), String> {
        let store = self.store.clone();
        let copy = table.clone();
        tokio::task::spawn_blocking(move || {
            store.lock().unwrap_or_else(|p| p.into_inner()).write(&copy)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
    }

    /// Reconcile with the broker's REST API now (`gearlb ctl spi reconcile`).
    pub async fn reconcile_now(&self) -> Result<(), String> {
        if self.cfg.rest_url.is_none() {
            return Err("no routing_spi.rest_url: nothing to reconcile with".into());
        }
        rest::reconcile_and_report(self).await;
        let r = self.reconcile.lock().unwrap_or_else(|p| p.into_inner());
        match &r.error {
            Some(e) => Err(format!("reconciliation failed: {e}")),
            None => Ok(()),
        }
    }

    /// Mark the table current now (a broker is connected).
    async fn touch(&self) {
        let now = crate::time::unix_ms();
        self.current_ms.fetch_max(now, Ordering::Relaxed);
        self.table.lock().await.current_ms = now;
    }
}
