//! The routing table: which backends exist, what state each is in, and which are
//! selectable right now.
//!
//! Owns the immutable [`RoutingTable`] snapshot and the [`Router`] that swaps it
//! atomically (arc-swap). The request path only ever `load()`s a snapshot and picks from
//! it: no lock, no waiting. Writers (control socket, config reload, later health and
//! cluster) are serialised by a mutex that the request path never touches.
//!
//! A [`Backend`] is the long-lived part of a backend (counters, connection pool) and is
//! carried over from one snapshot to the next while its name and address stay the same,
//! so an unchanged gear keeps its state and connections across `update-cluster`. A
//! request holds an `Arc<Backend>` for its whole life, so it finishes on the backend it
//! started on even if that backend is removed meanwhile.

pub mod select;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use crate::gear::Addr;
use crate::proxy::upstream::Pool;
use crate::stats::BackendStats;

/// What a backend is and where it is; persisted in the state file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendSpec {
    /// Server name: `gear-<gearname>-<ns>`, `local-gear`, or a `[[backends]]` name.
    pub name: String,
    pub addr: Addr,
    /// The gear's DNS name when the platform announced it (`update-cluster`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gear_dns: Option<String>,
}

/// Where a backend is in its life, as far as selection is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendState {
    /// Selectable.
    Up,
    /// Failed health checks or passive checks: not selected.
    Down,
    /// Being taken out of rotation: no new requests, in-flight ones finish.
    Draining,
    /// Out of rotation and idle.
    Drained,
}

impl BackendState {
    pub fn selectable(self) -> bool {
        self == BackendState::Up
    }
}

/// The long-lived part of one backend.
#[derive(Debug)]
pub struct Backend {
    pub spec: BackendSpec,
    pub stats: BackendStats,
    pub pool: Pool,
}

impl Backend {
    pub fn new(spec: BackendSpec, max_idle: usize) -> Arc<Self> {
        Arc::new(Backend {
            spec,
            stats: BackendStats::default(),
            pool: Pool::new(max_idle),
        })
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Requests sent to this backend and not yet answered in full.
    pub fn outstanding(&self) -> u64 {
        self.stats.outstanding.load(Ordering::Relaxed)
    }
}

/// One backend in one snapshot.
#[derive(Clone, Debug)]
pub struct Entry {
    pub backend: Arc<Backend>,
    pub state: BackendState,
}

/// An immutable view of all backends; replaced, never mutated.
#[derive(Debug, Default)]
pub struct RoutingTable {
    entries: Vec<Entry>,
    /// Indices into `entries` of the backends that may take new requests.
    selectable: Vec<usize>,
}

impl RoutingTable {
    fn new(entries: Vec<Entry>) -> Self {
        let selectable = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.state.selectable())
            .map(|(i, _)| i)
            .collect();
        RoutingTable {
            entries,
            selectable,
        }
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.backend.name() == name)
    }

    pub fn selectable_count(&self) -> usize {
        self.selectable.len()
    }

    /// Pick a backend for a new request: least outstanding among the selectable ones.
    pub fn select(&self) -> Option<&Arc<Backend>> {
        let n = self.selectable.len();
        let i = select::least_loaded(n, fastrand::usize(..), fastrand::usize(..), |k| {
            self.entries[self.selectable[k]].backend.outstanding()
        })?;
        Some(&self.entries[self.selectable[i]].backend)
    }
}

/// What a backend-set replacement changed, by server name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Same name, new address (or gear DNS name): a new backend with a fresh pool and
    /// counters; the old one finishes its in-flight requests.
    pub readdressed: Vec<String>,
    pub unchanged: usize,
}

impl Change {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.readdressed.is_empty()
    }
}

/// Owner of the current snapshot.
pub struct Router {
    table: ArcSwap<RoutingTable>,
    /// Serialises writers; never taken on the request path.
    write: Mutex<()>,
    max_idle: usize,
}

impl Router {
    pub fn new(max_idle: usize) -> Self {
        Router {
            table: ArcSwap::from_pointee(RoutingTable::default()),
            write: Mutex::new(()),
            max_idle,
        }
    }

    /// The current snapshot (lock-free).
    pub fn load(&self) -> arc_swap::Guard<Arc<RoutingTable>> {
        self.table.load()
    }

    /// The current snapshot as an owned `Arc`, for long reads (status reports).
    pub fn snapshot(&self) -> Arc<RoutingTable> {
        self.table.load_full()
    }

    /// The specs of the current backends, in table order.
    pub fn specs(&self) -> Vec<BackendSpec> {
        self.load()
            .entries
            .iter()
            .map(|e| e.backend.spec.clone())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        // The guarded data is `()`: a writer that panicked left nothing half-updated,
        // so a poisoned lock is safe to take over.
        self.write.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replace the whole backend set. Backends whose name and address are unchanged keep
    /// their state, counters and pooled connections; removed ones stop receiving new
    /// requests at once, their idle connections are closed and in-flight requests finish.
    pub fn replace_backends(&self, specs: Vec<BackendSpec>) -> Change {
        let _w = self.lock();
        let current = self.table.load_full();
        let mut old: HashMap<&str, &Entry> = current
            .entries
            .iter()
            .map(|e| (e.backend.name(), e))
            .collect();
        let mut change = Change::default();
        let mut entries = Vec::with_capacity(specs.len());
        for spec in specs {
            match old.remove(spec.name.as_str()) {
                Some(e) if e.backend.spec == spec => {
                    change.unchanged += 1;
                    entries.push(e.clone());
                }
                Some(e) => {
                    change.readdressed.push(spec.name.clone());
                    e.backend.pool.close();
                    entries.push(Entry {
                        backend: Backend::new(spec, self.max_idle),
                        state: BackendState::Up,
                    });
                }
                None => {
                    change.added.push(spec.name.clone());
                    entries.push(Entry {
                        backend: Backend::new(spec, self.max_idle),
                        state: BackendState::Up,
                    });
                }
            }
        }
        for (name, e) in old {
            change.removed.push(name.to_string());
            e.backend.pool.close();
        }
        change.removed.sort();
        self.table.store(Arc::new(RoutingTable::new(entries)));
        change
    }

    /// Set one backend's state. Returns false when no backend has that name.
    pub fn set_state(&self, name: &str, state: BackendState) -> bool {
        let _w = self.lock();
        let current = self.table.load_full();
        if !current.entries.iter().any(|e| e.backend.name() == name) {
            return false;
        }
        let entries = current
            .entries
            .iter()
            .map(|e| Entry {
                backend: e.backend.clone(),
                state: if e.backend.name() == name {
                    state
                } else {
                    e.state
                },
            })
            .collect();
        self.table.store(Arc::new(RoutingTable::new(entries)));
        true
    }

    /// Close every pool (shutdown).
    pub fn close_all(&self) {
        for e in self.load().entries.iter() {
            e.backend.pool.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, port: u16) -> BackendSpec {
        BackendSpec {
            name: name.into(),
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
            gear_dns: None,
        }
    }

    #[test]
    fn replace_keeps_unchanged_backends() {
        let r = Router::new(4);
        let c = r.replace_backends(vec![spec("a", 1), spec("b", 2)]);
        assert_eq!(c.added, vec!["a", "b"]);
        let a_before = r.load().get("a").unwrap().backend.clone();
        a_before.stats.requests.fetch_add(7, Ordering::Relaxed);
        assert!(r.set_state("a", BackendState::Down));

        let c = r.replace_backends(vec![spec("a", 1), spec("b", 3), spec("c", 4)]);
        assert_eq!(c.added, vec!["c"]);
        assert_eq!(c.readdressed, vec!["b"]);
        assert_eq!(c.unchanged, 1);
        let t = r.load();
        let a = t.get("a").unwrap();
        assert!(
            Arc::ptr_eq(&a.backend, &a_before),
            "unchanged backend is carried over"
        );
        assert_eq!(a.state, BackendState::Down, "state survives");
        assert_eq!(t.selectable_count(), 2);

        let c = r.replace_backends(vec![spec("c", 4)]);
        assert_eq!(c.removed, vec!["a", "b"]);
        assert!(a_before.pool.is_closed());
    }

    #[test]
    fn select_skips_down_and_draining() {
        let r = Router::new(4);
        r.replace_backends(vec![spec("a", 1), spec("b", 2), spec("c", 3)]);
        r.set_state("a", BackendState::Down);
        r.set_state("b", BackendState::Draining);
        for _ in 0..50 {
            assert_eq!(r.load().select().unwrap().name(), "c");
        }
        r.set_state("c", BackendState::Drained);
        assert!(r.load().select().is_none());
        assert!(!r.set_state("zzz", BackendState::Up));
    }

    #[test]
    fn select_prefers_least_outstanding() {
        let r = Router::new(4);
        r.replace_backends(vec![spec("a", 1), spec("b", 2)]);
        let t = r.load();
        t.get("a")
            .unwrap()
            .backend
            .stats
            .outstanding
            .store(3, Ordering::Relaxed);
        for _ in 0..20 {
            assert_eq!(t.select().unwrap().name(), "b");
        }
    }

    #[test]
    fn old_snapshot_stays_valid_after_swap() {
        let r = Router::new(4);
        r.replace_backends(vec![spec("a", 1)]);
        let old = r.snapshot();
        r.replace_backends(vec![]);
        assert_eq!(old.select().unwrap().name(), "a");
        assert!(r.load().select().is_none());
    }
}
