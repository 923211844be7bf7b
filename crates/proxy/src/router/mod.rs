//! The [`Router`]: owner of the current routing [`Snapshot`] (a pure
//! `gearlb_core::routing::RoutingTable` and the data plane's [`Target`] of each
//! backend), swapped atomically (arc-swap), and its writers (backend-set replacement,
//! health, rotation, subsets, parking), serialised by a mutex the request path never
//! touches; and [`Change`], what a backend-set replacement changed.
//!
//! A [`Target`] (pool, counters) is carried over from one snapshot to the next while its
//! backend's name and address stay the same, so an unchanged gear keeps its state and
//! connections across `update-cluster`.

mod snapshot;
mod target;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use gearlb_core::routing::{Admin, Backend, BackendId, BackendSpec, Entry, RoutingTable};
use serde::{Deserialize, Serialize};

pub use snapshot::Snapshot;
pub use target::Target;

use crate::stats::availability::{Availability, AvailabilityReport};

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
    table: ArcSwap<Snapshot>,
    /// Serialises writers; never taken on the request path.
    write: Mutex<()>,
    max_idle: usize,
    changes: tokio::sync::watch::Sender<u64>,
    /// Sticky labels of gears rotated out: a backend (re)created with one of these
    /// starts out of rotation, so `update-cluster` never brings a rotated gear back.
    rotated_out: ArcSwap<std::collections::HashSet<String>>,
    /// Whether any backend can take a request, updated with every table published.
    availability: Availability,
    /// How its backends' versions are served (`gearlb_core::routing::versions`).
    versions: ArcSwap<gearlb_core::routing::versions::Policy>,
}

impl Router {
    pub fn new(max_idle: usize) -> Self {
        Router {
            table: ArcSwap::from_pointee(Snapshot::default()),
            write: Mutex::new(()),
            max_idle,
            changes: tokio::sync::watch::Sender::new(0),
            rotated_out: ArcSwap::from_pointee(Default::default()),
            availability: Availability::new(false),
            versions: ArcSwap::from_pointee(Default::default()),
        }
    }

    /// Whether any backend can take a request, and since when (HAProxy's `BACKEND`
    /// `chkdown`, `lastchg`, `downtime`).
    pub fn availability(&self) -> AvailabilityReport {
        self.availability.report()
    }

    /// The current snapshot (lock-free).
    pub fn load(&self) -> arc_swap::Guard<Arc<Snapshot>> {
        self.table.load()
    }

    /// The current snapshot as an owned `Arc`, for long reads (status reports).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.table.load_full()
    }

    /// The specs of the current backends, in table order.
    pub fn specs(&self) -> Vec<BackendSpec> {
        self.load()
            .entries()
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
        let mut old: HashMap<&str, (&Entry, &Arc<Target>)> = current
            .iter()
            .map(|(e, t)| (e.backend.name(), (e, t)))
            .collect();
        let mut change = Change::default();
        let mut entries = Vec::with_capacity(specs.len());
        let mut targets = Vec::with_capacity(specs.len());
        for spec in specs {
            let (entry, target) = match old.remove(spec.name.as_str()) {
                Some((e, t)) if e.backend.spec == spec => {
                    change.unchanged += 1;
                    (e.clone(), t.clone())
                }
                Some((_, t)) => {
                    change.readdressed.push(spec.name.clone());
                    t.pool.close();
                    self.new_entry(spec)
                }
                None => {
                    change.added.push(spec.name.clone());
                    self.new_entry(spec)
                }
            };
            entries.push(entry);
            targets.push(target);
        }
        for (name, (_, t)) in old {
            change.removed.push(name.to_string());
            t.pool.close();
        }
        change.removed.sort();
        self.publish(entries, targets);
        change
    }

    fn new_entry(&self, spec: BackendSpec) -> (Entry, Arc<Target>) {
        let backend = Arc::new(Backend::new(spec));
        let target = Target::new(backend.clone(), self.max_idle);
        let mut e = Entry::new(backend);
        if self.rotated_out.load().contains(&e.backend.sticky) {
            e.admin = Admin::Drained;
            target.pool.close();
        }
        (e, target)
    }

    /// Serve the backends' versions by `policy` from now on (a new table when it
    /// changed).
    pub fn set_versions(&self, policy: gearlb_core::routing::versions::Policy) {
        let _w = self.lock();
        if **self.versions.load() == policy {
            return;
        }
        self.versions.store(Arc::new(policy));
        let current = self.table.load_full();
        self.publish(current.entries().to_vec(), current.targets().to_vec());
    }

    /// The version a backend announced on its health check (none: its spec's).
    pub fn set_announced(
        &self,
        backend: BackendId,
        version: Option<gearlb_core::routing::versions::Version>,
    ) -> bool {
        self.edit(
            |e| e.backend.id == backend,
            |e| e.announced = version.clone(),
        )
    }

    /// The version policy in force.
    pub fn versions(&self) -> Arc<gearlb_core::routing::versions::Policy> {
        self.versions.load_full()
    }

    /// The gears (sticky labels) currently rotated out.
    pub fn set_rotated_out(&self, labels: std::collections::HashSet<String>) {
        self.rotated_out.store(Arc::new(labels));
    }

    /// Put the backend with this sticky label in or out of rotation.
    pub fn set_admin_of(&self, label: &str, admin: Admin) -> bool {
        self.edit(|e| e.backend.sticky == label, |e| e.admin = admin)
    }

    fn publish(&self, entries: Vec<Entry>, targets: Vec<Arc<Target>>) {
        // Writers are serialised (`lock`), so this generation is new and unique.
        let generation = *self.changes.borrow() + 1;
        let table = RoutingTable::with_versions(entries, generation, &self.versions.load());
        self.availability.observe(table.can_serve());
        self.table.store(Arc::new(Snapshot::new(table, targets)));
        self.changes.send_replace(generation);
    }

    /// Change the entries matching `pick` with `edit`; false when none matched or
    /// nothing changed.
    fn edit(&self, pick: impl Fn(&Entry) -> bool, edit: impl Fn(&mut Entry)) -> bool {
        let _w = self.lock();
        let current = self.table.load_full();
        let mut changed = false;
        let entries = current
            .entries()
            .iter()
            .map(|e| {
                let mut e = e.clone();
                if pick(&e) {
                    let before = (e.up, e.admin, e.in_subset, e.parked, e.announced.clone());
                    edit(&mut e);
                    changed |=
                        before != (e.up, e.admin, e.in_subset, e.parked, e.announced.clone());
                }
                e
            })
            .collect();
        if changed {
            self.publish(entries, current.targets().to_vec());
        }
        changed
    }

    /// Mark this very backend (not a later one of the same name) up or down.
    /// Returns true when its health changed.
    pub fn set_health(&self, backend: BackendId, up: bool) -> bool {
        self.edit(|e| e.backend.id == backend, |e| e.up = up)
    }

    /// Put a backend in or out of rotation. Returns false when no backend has that
    /// name or it already was in that state.
    pub fn set_admin(&self, name: &str, admin: Admin) -> bool {
        self.edit(|e| e.backend.name() == name, |e| e.admin = admin)
    }

    /// Apply the cluster's decisions: which gears are in this balancer's subset, and the
    /// health peers report for the others. Returns true when something changed.
    pub fn apply_cluster(
        &self,
        in_subset: impl Fn(&str) -> bool,
        remote_up: impl Fn(&str) -> Option<bool>,
    ) -> bool {
        self.edit(
            |_| true,
            |e| {
                e.in_subset = in_subset(&e.backend.sticky);
                if !e.in_subset {
                    if let Some(up) = remote_up(&e.backend.sticky) {
                        e.up = up;
                    }
                }
            },
        )
    }

    /// Park or unpark a backend by name (gear ratio). True when it changed.
    pub fn set_parked(&self, name: &str, parked: bool) -> bool {
        self.edit(|e| e.backend.name() == name, |e| e.parked = parked)
    }

    /// Park or unpark every backend `pick` selects. True when something changed.
    pub fn set_parked_where(&self, pick: impl Fn(&Entry) -> bool, parked: bool) -> bool {
        self.edit(pick, |e| e.parked = parked)
    }

    /// Notified (a generation number) whenever the table changes.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Close every pool (shutdown).
    pub fn close_all(&self) {
        for t in self.load().targets() {
            t.pool.close();
        }
    }
}
