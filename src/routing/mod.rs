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

pub mod affinity;
pub mod select;
pub mod sticky;
pub mod subset;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::{ArcSwap, ArcSwapOption};
use serde::{Deserialize, Serialize};

pub use affinity::Affinity;

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
    /// Sticky cookie value, when it is not derived (see [`BackendSpec::sticky_value`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie: Option<String>,
}

impl BackendSpec {
    /// The sticky cookie value naming this backend, the same on every balancer: the
    /// gear's `<gearname>-<ns>` (first label of its DNS name), else the backend name.
    pub fn sticky_value(&self) -> String {
        if let Some(c) = &self.cookie {
            return c.clone();
        }
        match &self.gear_dns {
            Some(dns) => dns.split('.').next().unwrap_or(dns).to_string(),
            None => self.name.clone(),
        }
    }
}

/// A backend's state as reported (status, CSV, JSON): the administrative state when
/// the backend is out of rotation, else its health.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendState {
    /// Healthy and in rotation.
    Up,
    /// Failed health checks or passive checks: not selected.
    Down,
    /// Being taken out of rotation: no new requests, in-flight ones finish.
    Draining,
    /// Out of rotation and idle.
    Drained,
}

/// Whether a backend is in rotation (operator's decision, independent of health).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Admin {
    Active,
    Draining,
    Drained,
}

/// The result of the latest active health check of a backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckReport {
    pub ok: bool,
    /// Status code, or the error when there was none.
    pub result: String,
    /// Milliseconds the check took.
    pub ms: u64,
    /// Unix time of the check, seconds.
    pub at: u64,
}

/// The long-lived part of one backend.
#[derive(Debug)]
pub struct Backend {
    pub spec: BackendSpec,
    /// The sticky cookie value (cached [`BackendSpec::sticky_value`]).
    pub sticky: String,
    pub stats: BackendStats,
    pub pool: Pool,
    /// Consecutive failures seen on real traffic (reset by any answered request).
    pub passive_failures: AtomicU32,
    /// Upgraded connections (WebSocket) open now; each is also one of `outstanding`.
    pub tunnels: AtomicU64,
    /// Latest active check, if any ran.
    pub last_check: ArcSwapOption<CheckReport>,
}

impl Backend {
    pub fn new(spec: BackendSpec, max_idle: usize) -> Arc<Self> {
        Arc::new(Backend {
            sticky: spec.sticky_value(),
            spec,
            stats: BackendStats::default(),
            pool: Pool::new(max_idle),
            passive_failures: AtomicU32::new(0),
            tunnels: AtomicU64::new(0),
            last_check: ArcSwapOption::empty(),
        })
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Sessions on this backend: requests sent and not yet answered in full, and open
    /// tunnels (HAProxy's `scur`, what `leastconn` compares).
    pub fn outstanding(&self) -> u64 {
        self.stats.outstanding.load(Ordering::Relaxed)
    }
}

/// One backend in one snapshot.
#[derive(Clone, Debug)]
pub struct Entry {
    pub backend: Arc<Backend>,
    /// Health (active checks and passive ejection).
    pub up: bool,
    pub admin: Admin,
    /// In this balancer's subset (coverage-limited subsets; all are, by default).
    pub in_subset: bool,
    /// Taken out of selection by the gear ratio (`local-gear` only): no traffic at all,
    /// reported as drained (HAProxy's MAINT, as the old cartridge's disabled server).
    pub parked: bool,
}

impl Entry {
    fn new(backend: Arc<Backend>) -> Self {
        Entry {
            backend,
            up: true,
            admin: Admin::Active,
            in_subset: true,
            parked: false,
        }
    }

    /// Healthy and in rotation: may take new requests.
    pub fn usable(&self) -> bool {
        self.up && self.admin == Admin::Active && !self.parked
    }

    pub fn state(&self) -> BackendState {
        if self.parked && self.admin == Admin::Active {
            return BackendState::Drained;
        }
        match (self.admin, self.up) {
            (Admin::Draining, _) => BackendState::Draining,
            (Admin::Drained, _) => BackendState::Drained,
            (Admin::Active, true) => BackendState::Up,
            (Admin::Active, false) => BackendState::Down,
        }
    }
}

/// An immutable view of all backends; replaced, never mutated.
#[derive(Debug, Default)]
pub struct RoutingTable {
    entries: Vec<Entry>,
    /// Indices of usable backends in this balancer's subset.
    selectable: Vec<usize>,
    /// Indices of usable backends outside the subset: the last resort when no backend
    /// of the subset is usable.
    backups: Vec<usize>,
    /// Sticky cookie value → index.
    by_sticky: HashMap<String, usize>,
    /// Which publication of the router this is (0 for the empty initial table): a
    /// connection's [`Affinity`] hint is only good for the snapshot it was taken from.
    generation: u64,
}

impl RoutingTable {
    fn new(entries: Vec<Entry>, generation: u64) -> Self {
        let usable = |want_subset: bool| -> Vec<usize> {
            entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.usable() && e.in_subset == want_subset)
                .map(|(i, _)| i)
                .collect()
        };
        let selectable = usable(true);
        let mut backups = usable(false);
        if selectable.is_empty() && backups.is_empty() {
            // The gear ratio never leaves the application without a gear: when nothing
            // else can take a request (the last remote gear went, or went down, before
            // the next gear-ratio check), a healthy parked gear serves.
            backups = entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.parked && e.up && e.admin == Admin::Active)
                .map(|(i, _)| i)
                .collect();
        }
        let by_sticky = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.backend.sticky.clone(), i))
            .collect();
        RoutingTable {
            entries,
            selectable,
            backups,
            by_sticky,
            generation,
        }
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.backend.name() == name)
    }

    /// The entry of the gear with this sticky label (`<gearname>-<ns>`).
    pub fn by_label(&self, label: &str) -> Option<&Entry> {
        self.by_sticky.get(label).map(|&i| &self.entries[i])
    }

    pub fn selectable_count(&self) -> usize {
        self.selectable.len()
    }

    /// Whether some backend can take a new request (in the subset, or as a backup).
    pub fn can_serve(&self) -> bool {
        !self.selectable.is_empty() || !self.backups.is_empty()
    }

    /// Pick a backend for a new request: least outstanding among the selectable ones,
    /// else among the backups.
    pub fn select(&self) -> Option<&Arc<Backend>> {
        self.select_excluding(&[])
    }

    /// As [`RoutingTable::select`], never returning one of `tried` (retries).
    pub fn select_excluding(&self, tried: &[Arc<Backend>]) -> Option<&Arc<Backend>> {
        self.pick(&self.selectable, tried)
            .or_else(|| self.pick(&self.backups, tried))
    }

    /// As [`RoutingTable::select`] for a request of a client connection with this
    /// [`Affinity`]: the backend of the connection's previous request keeps it while it
    /// is no busier than the least-loaded pick, for up to `max_run` requests in a row
    /// (0: never). Records the choice in `affinity`.
    pub fn select_for(&self, affinity: &Affinity, max_run: u32) -> Option<&Arc<Backend>> {
        let (set, subset) = if self.selectable.is_empty() {
            (&self.backups, false)
        } else {
            (&self.selectable, true)
        };
        let load = |i: usize| self.entries[i].backend.outstanding();
        let pick = || self.least_loaded_in(set);
        let remembered = affinity
            .last(self.generation)
            .filter(|&(i, run)| run < max_run && self.in_set(i, subset));
        // The backend, and how many requests in a row it has taken with this one.
        let (i, run) = match remembered {
            // Nothing beats an idle backend: no need to look at the others.
            Some((i, run)) if load(i) == 0 => (i, run + 1),
            Some((i, run)) => {
                let p = pick()?;
                if affinity::keep(run, max_run, load(i), load(p)) {
                    (i, run + 1)
                } else {
                    (p, 1)
                }
            }
            None => (pick()?, 1),
        };
        if max_run > 0 {
            affinity.remember(self.generation, i, run);
        }
        Some(&self.entries[i].backend)
    }

    /// Entry `i` exists, may take new requests and is in the subset (or is a backup, for
    /// `subset` false): what a hint from this very snapshot always is, checked anyway.
    fn in_set(&self, i: usize, subset: bool) -> bool {
        self.entries
            .get(i)
            .is_some_and(|e| e.usable() && e.in_subset == subset)
    }

    /// The entry index least-outstanding selection picks in `set` (entry indices).
    fn least_loaded_in(&self, set: &[usize]) -> Option<usize> {
        select::least_loaded(set.len(), fastrand::usize(..), fastrand::usize(..), |k| {
            self.entries[set[k]].backend.outstanding()
        })
        .map(|k| set[k])
    }

    fn pick(&self, set: &[usize], tried: &[Arc<Backend>]) -> Option<&Arc<Backend>> {
        let untried = |k: usize| {
            !tried
                .iter()
                .any(|t| Arc::ptr_eq(t, &self.entries[set[k]].backend))
        };
        if tried.is_empty() {
            return self.least_loaded_in(set).map(|i| &self.entries[i].backend);
        }
        // Retries are rare: a plain scan over what has not been tried.
        (0..set.len())
            .filter(|&k| untried(k))
            .min_by_key(|&k| self.entries[set[k]].backend.outstanding())
            .map(|k| &self.entries[set[k]].backend)
    }

    /// The backend a sticky cookie value names, when it may take the request: known,
    /// healthy and in rotation (inside the subset or not).
    pub fn sticky_target(&self, value: &str) -> Option<&Arc<Backend>> {
        let e = &self.entries[*self.by_sticky.get(value)?];
        e.usable().then_some(&e.backend)
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
    changes: tokio::sync::watch::Sender<u64>,
    /// Sticky labels of gears rotated out: a backend (re)created with one of these
    /// starts out of rotation, so `update-cluster` never brings a rotated gear back.
    rotated_out: ArcSwap<std::collections::HashSet<String>>,
    /// Whether any backend can take a request, updated with every table published.
    availability: crate::stats::availability::Availability,
}

impl Router {
    pub fn new(max_idle: usize) -> Self {
        Router {
            table: ArcSwap::from_pointee(RoutingTable::default()),
            write: Mutex::new(()),
            max_idle,
            changes: tokio::sync::watch::Sender::new(0),
            rotated_out: ArcSwap::from_pointee(Default::default()),
            availability: crate::stats::availability::Availability::new(false),
        }
    }

    /// Whether any backend can take a request, and since when (HAProxy's `BACKEND`
    /// `chkdown`, `lastchg`, `downtime`).
    pub fn availability(&self) -> crate::stats::availability::AvailabilityReport {
        self.availability.report()
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
                    entries.push(self.new_entry(spec));
                }
                None => {
                    change.added.push(spec.name.clone());
                    entries.push(self.new_entry(spec));
                }
            }
        }
        for (name, e) in old {
            change.removed.push(name.to_string());
            e.backend.pool.close();
        }
        change.removed.sort();
        self.publish(entries);
        change
    }

    fn new_entry(&self, spec: BackendSpec) -> Entry {
        let mut e = Entry::new(Backend::new(spec, self.max_idle));
        if self.rotated_out.load().contains(&e.backend.sticky) {
            e.admin = Admin::Drained;
            e.backend.pool.close();
        }
        e
    }

    /// The gears (sticky labels) currently rotated out.
    pub fn set_rotated_out(&self, labels: std::collections::HashSet<String>) {
        self.rotated_out.store(Arc::new(labels));
    }

    /// Put the backend with this sticky label in or out of rotation.
    pub fn set_admin_of(&self, label: &str, admin: Admin) -> bool {
        self.edit(|e| e.backend.sticky == label, |e| e.admin = admin)
    }

    fn publish(&self, entries: Vec<Entry>) {
        // Writers are serialised (`lock`), so this generation is new and unique.
        let generation = *self.changes.borrow() + 1;
        let table = RoutingTable::new(entries, generation);
        self.availability.observe(table.can_serve());
        self.table.store(Arc::new(table));
        self.changes.send_replace(generation);
    }

    /// Change the entries matching `pick` with `edit`; false when none matched or
    /// nothing changed.
    fn edit(&self, pick: impl Fn(&Entry) -> bool, edit: impl Fn(&mut Entry)) -> bool {
        let _w = self.lock();
        let current = self.table.load_full();
        let mut changed = false;
        let entries = current
            .entries
            .iter()
            .map(|e| {
                let mut e = e.clone();
                if pick(&e) {
                    let before = (e.up, e.admin, e.in_subset, e.parked);
                    edit(&mut e);
                    changed |= before != (e.up, e.admin, e.in_subset, e.parked);
                }
                e
            })
            .collect();
        if changed {
            self.publish(entries);
        }
        changed
    }

    /// Mark this very backend (not a later one of the same name) up or down.
    /// Returns true when its health changed.
    pub fn set_health(&self, backend: &Arc<Backend>, up: bool) -> bool {
        self.edit(|e| Arc::ptr_eq(&e.backend, backend), |e| e.up = up)
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
            cookie: None,
        }
    }

    #[test]
    fn replace_keeps_unchanged_backends() {
        let r = Router::new(4);
        let c = r.replace_backends(vec![spec("a", 1), spec("b", 2)]);
        assert_eq!(c.added, vec!["a", "b"]);
        let a_before = r.load().get("a").unwrap().backend.clone();
        a_before.stats.requests.fetch_add(7, Ordering::Relaxed);
        assert!(r.set_health(&a_before, false));

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
        assert_eq!(a.state(), BackendState::Down, "state survives");
        assert_eq!(t.selectable_count(), 2);

        let c = r.replace_backends(vec![spec("c", 4)]);
        assert_eq!(c.removed, vec!["a", "b"]);
        assert!(a_before.pool.is_closed());
    }

    #[test]
    fn select_skips_down_and_draining() {
        let r = Router::new(4);
        r.replace_backends(vec![spec("a", 1), spec("b", 2), spec("c", 3)]);
        let a = r.load().get("a").unwrap().backend.clone();
        r.set_health(&a, false);
        r.set_admin("b", Admin::Draining);
        for _ in 0..50 {
            assert_eq!(r.load().select().unwrap().name(), "c");
        }
        r.set_admin("c", Admin::Drained);
        assert!(r.load().select().is_none());
        assert!(!r.set_admin("zzz", Admin::Active));
        assert_eq!(r.load().get("b").unwrap().state(), BackendState::Draining);
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
    fn sticky_targets_only_usable_backends() {
        let r = Router::new(4);
        let mut g = spec("gear-web1-ns", 1);
        g.gear_dns = Some("web1-ns.example.com".into());
        r.replace_backends(vec![g, spec("b", 2)]);
        let t = r.load();
        assert_eq!(t.sticky_target("web1-ns").unwrap().name(), "gear-web1-ns");
        assert_eq!(t.sticky_target("b").unwrap().name(), "b");
        assert!(t.sticky_target("gear-web1-ns").is_none());
        assert!(t.sticky_target("../etc").is_none());
        r.set_admin("gear-web1-ns", Admin::Draining);
        assert!(r.load().sticky_target("web1-ns").is_none());
    }

    #[test]
    fn a_parked_gear_serves_when_nothing_else_can() {
        let r = Router::new(4);
        r.replace_backends(vec![spec("local-gear", 1), spec("b", 2)]);
        r.set_parked("local-gear", true);
        for _ in 0..20 {
            assert_eq!(r.load().select().unwrap().name(), "b");
        }
        // The last remote gear goes down, or is removed, before the gear ratio is
        // looked at again: the parked gear serves rather than a 503.
        let b = r.load().get("b").unwrap().backend.clone();
        r.set_health(&b, false);
        assert_eq!(r.load().select().unwrap().name(), "local-gear");
        assert!(r.load().can_serve());
        r.replace_backends(vec![spec("local-gear", 1)]);
        assert_eq!(r.load().select().unwrap().name(), "local-gear");
        // Rotated out is out, parked or not.
        r.set_admin("local-gear", Admin::Drained);
        assert!(r.load().select().is_none());
        assert!(!r.load().can_serve());
    }

    #[test]
    fn out_of_subset_backends_are_backups() {
        let r = Router::new(4);
        r.replace_backends(vec![spec("a", 1), spec("b", 2)]);
        r.edit(|e| e.backend.name() == "b", |e| e.in_subset = false);
        for _ in 0..20 {
            assert_eq!(r.load().select().unwrap().name(), "a");
        }
        let a = r.load().get("a").unwrap().backend.clone();
        r.set_health(&a, false);
        assert_eq!(
            r.load().select().unwrap().name(),
            "b",
            "backup used when the subset is down"
        );
        assert!(r
            .load()
            .select_excluding(&[r.load().get("b").unwrap().backend.clone()])
            .is_none());
    }

    #[test]
    fn changes_are_notified() {
        let r = Router::new(4);
        let mut rx = r.subscribe();
        r.replace_backends(vec![spec("a", 1)]);
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        assert!(
            !r.set_admin("a", Admin::Active),
            "no-op edits publish nothing"
        );
        assert!(!rx.has_changed().unwrap());
    }

    #[test]
    fn availability_follows_every_published_table() {
        let r = Router::new(4);
        assert!(!r.availability().available, "no backend yet");
        r.replace_backends(vec![spec("a", 1), spec("b", 2)]);
        assert!(r.availability().available);
        let a = r.load().get("a").unwrap().backend.clone();
        let b = r.load().get("b").unwrap().backend.clone();
        r.set_health(&a, false);
        assert!(r.availability().available, "b still up");
        r.set_admin("b", Admin::Drained);
        let av = r.availability();
        assert_eq!((av.available, av.down_transitions), (false, 1));
        r.set_health(&b, false);
        assert_eq!(
            r.availability().down_transitions,
            1,
            "still down: no new transition"
        );
        r.set_health(&a, true);
        assert!(r.availability().available);
        r.replace_backends(vec![]);
        assert_eq!(r.availability().down_transitions, 2, "emptied: down");
    }

    fn router_of(n: usize) -> Router {
        let r = Router::new(4);
        r.replace_backends(
            (0..n)
                .map(|i| spec(&format!("g{i}"), i as u16 + 1))
                .collect(),
        );
        r
    }

    fn outstanding<'a>(t: &'a RoutingTable, name: &str) -> &'a AtomicU64 {
        &t.get(name).unwrap().backend.stats.outstanding
    }

    #[test]
    fn affinity_keeps_an_idle_backend_for_a_bounded_run() {
        for n in [3, 1000] {
            let r = router_of(n);
            let t = r.load();
            let a = Affinity::default();
            let first = t.select_for(&a, 16).unwrap().name().to_string();
            for k in 2..=16 {
                assert_eq!(
                    t.select_for(&a, 16).unwrap().name(),
                    first,
                    "n={n} request {k}"
                );
            }
            // The run is over: the 17th is chosen afresh and starts a new run.
            t.select_for(&a, 16).unwrap();
            assert_eq!(a.last(t.generation).unwrap().1, 1, "n={n}");
        }
    }

    #[test]
    fn affinity_never_keeps_a_busier_backend() {
        let r = router_of(3);
        let t = r.load();
        let a = Affinity::default();
        let first = t.select_for(&a, 16).unwrap().name().to_string();
        outstanding(&t, &first).store(1, Ordering::Relaxed);
        for _ in 0..20 {
            let a = Affinity::default();
            t.select_for(&a, 16).unwrap();
            let next = t.select_for(&a, 16).unwrap().name().to_string();
            assert_ne!(next, first, "an idle backend beats a busy remembered one");
        }
        // Equally busy everywhere: the remembered one wins the tie.
        for i in 0..3 {
            outstanding(&t, &format!("g{i}")).store(2, Ordering::Relaxed);
        }
        let a = Affinity::default();
        let first = t.select_for(&a, 16).unwrap().name().to_string();
        for _ in 0..10 {
            assert_eq!(t.select_for(&a, 16).unwrap().name(), first);
        }
    }

    #[test]
    fn affinity_ends_with_any_table_change() {
        let r = router_of(3);
        let a = Affinity::default();
        let first = r.load().select_for(&a, 1000).unwrap().name().to_string();
        r.set_admin(&first, Admin::Draining);
        for _ in 0..50 {
            assert_ne!(r.load().select_for(&a, 1000).unwrap().name(), first);
        }
        let b = r.load().get("g0").unwrap().backend.clone();
        r.set_admin(&first, Admin::Active);
        let a = Affinity::default();
        while r.load().select_for(&a, 1000).unwrap().name() != "g0" {}
        r.set_health(&b, false);
        for _ in 0..50 {
            assert_ne!(r.load().select_for(&a, 1000).unwrap().name(), "g0");
        }
        // Nothing usable in the subset: backups serve, with affinity among them.
        r.set_health(&b, true);
        r.apply_cluster(|label| label == "g0", |_| None);
        r.set_health(&r.load().get("g0").unwrap().backend.clone(), false);
        let t = r.load();
        let a = Affinity::default();
        let backup = t.select_for(&a, 1000).unwrap().name().to_string();
        assert_ne!(backup, "g0");
        for _ in 0..10 {
            assert_eq!(t.select_for(&a, 1000).unwrap().name(), backup);
        }
    }

    #[test]
    fn affinity_off_chooses_every_request_afresh() {
        let r = router_of(3);
        let t = r.load();
        let a = Affinity::default();
        let seen: std::collections::BTreeSet<String> = (0..60)
            .map(|_| t.select_for(&a, 0).unwrap().name().to_string())
            .collect();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert_eq!(a.last(t.generation), None, "nothing remembered when off");
    }

    /// A closed loop of `conns` client connections over `n` idle-at-start backends,
    /// `requests` in all: each finishes its request and sends the next. Returns how many
    /// requests each backend took, and the distinct backends of the last `window`.
    fn closed_loop(
        n: usize,
        conns: usize,
        max_run: u32,
        requests: usize,
        window: usize,
    ) -> (Vec<u64>, usize) {
        fastrand::seed(11);
        let r = router_of(n);
        let t = r.load();
        let index = |b: &Arc<Backend>| {
            t.entries
                .iter()
                .position(|e| Arc::ptr_eq(&e.backend, b))
                .unwrap()
        };
        let affinities: Vec<Affinity> = (0..conns).map(|_| Affinity::default()).collect();
        let mut current: Vec<Option<usize>> = vec![None; conns];
        let mut taken = vec![0u64; n];
        let mut recent = std::collections::VecDeque::new();
        for _ in 0..requests {
            let c = fastrand::usize(..conns);
            if let Some(i) = current[c] {
                t.entries[i]
                    .backend
                    .stats
                    .outstanding
                    .fetch_sub(1, Ordering::Relaxed);
            }
            let i = index(t.select_for(&affinities[c], max_run).unwrap());
            t.entries[i]
                .backend
                .stats
                .outstanding
                .fetch_add(1, Ordering::Relaxed);
            current[c] = Some(i);
            taken[i] += 1;
            recent.push_back(i);
            if recent.len() > window {
                recent.pop_front();
            }
        }
        let distinct = recent
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        (taken, distinct)
    }

    #[test]
    fn affinity_keeps_the_working_set_small_and_the_load_even() {
        // 64 connections over 1000 gears: chosen afresh, nearly every request lands on
        // a backend (so a connection) not used recently; with affinity the recent ones
        // are about one per client connection.
        let (_, spread) = closed_loop(1000, 64, 0, 20_000, 640);
        let (_, warm) = closed_loop(1000, 64, 16, 20_000, 640);
        assert!(
            spread > 400,
            "without affinity {spread} distinct in 640 requests"
        );
        assert!(warm < 200, "with affinity {warm} distinct in 640 requests");

        // Over time every gear still gets its share: runs end, and a fresh choice is
        // the least-loaded one.
        let (taken, _) = closed_loop(100, 8, 16, 200_000, 1);
        let (min, max) = (taken.iter().min().unwrap(), taken.iter().max().unwrap());
        assert!(
            *min > 1000 && *max < 3000,
            "per-gear requests {min}..{max} (mean 2000)"
        );
        let (taken, _) = closed_loop(3, 64, 16, 30_000, 1);
        let (min, max) = (taken.iter().min().unwrap(), taken.iter().max().unwrap());
        assert!(
            max - min < 3000,
            "per-gear requests {min}..{max} (mean 10000)"
        );
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
