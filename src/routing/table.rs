//! The immutable routing snapshot: one [`Entry`] per backend in a [`RoutingTable`],
//! the selectable and backup sets derived from them, and selection (least outstanding,
//! connection affinity, sticky targets). Read on the request path: no lock, no waiting.

use std::collections::HashMap;
use std::sync::Arc;

use super::affinity::{self, Affinity};
use super::backend::{Admin, Backend, BackendState};
use super::select;

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
    pub(super) fn new(backend: Arc<Backend>) -> Self {
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
    pub(super) entries: Vec<Entry>,
    /// Indices of usable backends in this balancer's subset.
    selectable: Vec<usize>,
    /// Indices of usable backends outside the subset: the last resort when no backend
    /// of the subset is usable.
    backups: Vec<usize>,
    /// Sticky cookie value → index.
    by_sticky: HashMap<String, usize>,
    /// Which publication of the router this is (0 for the empty initial table): a
    /// connection's [`Affinity`] hint is only good for the snapshot it was taken from.
    pub(super) generation: u64,
}

impl RoutingTable {
    pub(super) fn new(entries: Vec<Entry>, generation: u64) -> Self {
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
