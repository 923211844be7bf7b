//! The immutable routing table: one [`Entry`] per backend in a [`RoutingTable`], the
//! selectable and backup sets derived from them, and selection (least outstanding,
//! connection affinity, sticky targets). Read on the request path: no lock, no waiting.
//!
//! Selection names entries by their index in the table. The load it compares (requests
//! and tunnels in flight) is the data plane's, read through the `load` function each
//! selection takes: the table itself holds values only.

use std::collections::HashMap;
use std::sync::Arc;

use super::affinity::{self, Affinity};
use super::backend::{Admin, Backend, BackendId, BackendState};
use super::select;
use super::versions;

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
    /// The version the backend announced on its health check (a web gear that cannot
    /// register); it counts over its spec's.
    pub announced: Option<versions::Version>,
}

impl Entry {
    pub fn new(backend: Arc<Backend>) -> Self {
        Entry {
            backend,
            up: true,
            admin: Admin::Active,
            in_subset: true,
            parked: false,
            announced: None,
        }
    }

    /// Healthy and in rotation: may take new requests.
    pub fn usable(&self) -> bool {
        self.up && self.admin == Admin::Active && !self.parked
    }

    /// A first choice: in the subset and not a backup. The others take requests only
    /// when no first choice is usable.
    pub fn primary(&self) -> bool {
        self.in_subset && !self.backend.spec.backup
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
    /// Indices of usable backends outside the subset, and backups: the last resort when
    /// no backend of the subset is usable.
    backups: Vec<usize>,
    /// The canary group's usable backends (see [`versions`]), and its share of new
    /// sessions, per mille.
    canary: Vec<usize>,
    canary_per_mille: u32,
    /// Sticky cookie value → index.
    by_sticky: HashMap<String, usize>,
    /// Which publication of the router this is (0 for the empty initial table): a
    /// connection's [`Affinity`] hint is only good for the snapshot it was taken from.
    generation: u64,
}

impl RoutingTable {
    /// The table of these entries; `generation` numbers the publication it belongs to
    /// (0 for the empty initial table).
    pub fn new(entries: Vec<Entry>, generation: u64) -> Self {
        Self::with_versions(entries, generation, &versions::Policy::default())
    }

    /// As [`RoutingTable::new`], new sessions going only to the backends `policy` lets
    /// them (see [`versions::plan`]): the active group's, and the canary group's for
    /// its share. A table whose backends have no version is the same as `new`'s.
    pub fn with_versions(entries: Vec<Entry>, generation: u64, policy: &versions::Policy) -> Self {
        // Versions are rare (the cartridge's gears have none): no plan without them.
        let versioned = entries
            .iter()
            .any(|e| e.announced.is_some() || e.backend.version.is_some());
        let plan = if versioned {
            versions::plan(&members_of(&entries), policy)
        } else {
            versions::Plan::default()
        };
        let mut allowed = vec![!plan.versioned; entries.len()];
        for &i in &plan.active {
            allowed[i] = true;
        }
        let usable = |want_subset: bool| -> Vec<usize> {
            entries
                .iter()
                .enumerate()
                .filter(|(i, e)| allowed[*i] && e.usable() && e.primary() == want_subset)
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
                .filter(|(i, e)| allowed[*i] && e.parked && e.up && e.admin == Admin::Active)
                .map(|(i, _)| i)
                .collect();
        }
        let canary: Vec<usize> = plan
            .canary
            .iter()
            .copied()
            .filter(|&i| entries[i].usable())
            .collect();
        let by_sticky = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.backend.sticky.clone(), i))
            .collect();
        RoutingTable {
            entries,
            selectable,
            backups,
            canary_per_mille: if canary.is_empty() {
                0
            } else {
                plan.canary_per_mille
            },
            canary,
            by_sticky,
            generation,
        }
    }

    /// Which of this table's backends new sessions may go to under `policy` (what
    /// [`RoutingTable::with_versions`] built it by, for reports and drains).
    pub fn version_plan(&self, policy: &versions::Policy) -> versions::Plan {
        versions::plan(&members_of(&self.entries), policy)
    }

    /// The canary's pick for a new session, when this one is the canary's (its share
    /// of draws).
    fn canary_pick(&self, load: &impl Fn(usize) -> u64) -> Option<usize> {
        if self.canary_per_mille == 0 || fastrand::u32(..1000) >= self.canary_per_mille {
            return None;
        }
        self.least_loaded_in(&self.canary, load)
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Which publication this table is.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The index of the entry with this name.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.backend.name() == name)
    }

    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.position(name).map(|i| &self.entries[i])
    }

    /// The index of the entry of the gear with this sticky label (`<gearname>-<ns>`).
    pub fn label_position(&self, label: &str) -> Option<usize> {
        self.by_sticky.get(label).copied()
    }

    /// The entry of the gear with this sticky label (`<gearname>-<ns>`).
    pub fn by_label(&self, label: &str) -> Option<&Entry> {
        self.label_position(label).map(|i| &self.entries[i])
    }

    pub fn selectable_count(&self) -> usize {
        self.selectable.len()
    }

    /// Whether some backend can take a new request (in the subset, or as a backup).
    pub fn can_serve(&self) -> bool {
        !self.selectable.is_empty() || !self.backups.is_empty()
    }

    /// Pick a backend for a new request: least loaded among the selectable ones, else
    /// among the backups. `load(i)` is entry `i`'s requests and tunnels in flight.
    pub fn select(&self, load: impl Fn(usize) -> u64) -> Option<usize> {
        if let Some(i) = self.canary_pick(&load) {
            return Some(i);
        }
        self.least_loaded_in(&self.selectable, &load)
            .or_else(|| self.least_loaded_in(&self.backups, &load))
    }

    /// As [`RoutingTable::select`], never returning one of `tried` (retries).
    pub fn select_excluding(
        &self,
        tried: &[BackendId],
        load: impl Fn(usize) -> u64,
    ) -> Option<usize> {
        if tried.is_empty() {
            return self.select(load);
        }
        self.pick_untried(&self.selectable, tried, &load)
            .or_else(|| self.pick_untried(&self.backups, tried, &load))
    }

    /// As [`RoutingTable::select`] for a request of a client connection with this
    /// [`Affinity`]: the backend of the connection's previous request keeps it while it
    /// is no busier than the least-loaded pick, for up to `max_run` requests in a row
    /// (0: never). Records the choice in `affinity`.
    pub fn select_for(
        &self,
        affinity: &Affinity,
        max_run: u32,
        load: impl Fn(usize) -> u64,
    ) -> Option<usize> {
        let (set, subset) = if self.selectable.is_empty() {
            (&self.backups, false)
        } else {
            (&self.selectable, true)
        };
        let pick = || self.least_loaded_in(set, &load);
        let remembered = affinity
            .last(self.generation)
            .filter(|&(i, run)| run < max_run && self.in_set(i, subset));
        // A new session (no backend remembered) may be the canary's.
        if remembered.is_none() {
            if let Some(i) = self.canary_pick(&load) {
                return Some(i);
            }
        }
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
        Some(i)
    }

    /// Entry `i` exists, may take new requests and is in the subset (or is a backup, for
    /// `subset` false): what a hint from this very table always is, checked anyway.
    fn in_set(&self, i: usize, subset: bool) -> bool {
        self.entries
            .get(i)
            .is_some_and(|e| e.usable() && e.primary() == subset)
    }

    /// The entry index least-loaded selection picks in `set` (entry indices).
    fn least_loaded_in(&self, set: &[usize], load: &impl Fn(usize) -> u64) -> Option<usize> {
        select::least_loaded(set.len(), fastrand::usize(..), fastrand::usize(..), |k| {
            load(set[k])
        })
        .map(|k| set[k])
    }

    fn pick_untried(
        &self,
        set: &[usize],
        tried: &[BackendId],
        load: &impl Fn(usize) -> u64,
    ) -> Option<usize> {
        // Retries are rare: a plain scan over what has not been tried.
        set.iter()
            .copied()
            .filter(|&i| !tried.contains(&self.entries[i].backend.id))
            .min_by_key(|&i| load(i))
    }

    /// The entry a sticky cookie value names, when it may take the request: known,
    /// healthy and in rotation (inside the subset or not).
    pub fn sticky_target(&self, value: &str) -> Option<usize> {
        let i = *self.by_sticky.get(value)?;
        self.entries[i].usable().then_some(i)
    }

    /// The entry for a client `key` (its address), not one of `tried`: the usable
    /// non-backup entry with the highest rendezvous score of (key, backend name), else
    /// the best backup. Subsets are not looked at, so every balancer that sees the
    /// same backends usable picks the same one (HAProxy's `balance source`, which also
    /// moves only the clients of a backend that comes or goes).
    pub fn select_by_key(&self, key: &[u8], tried: &[BackendId]) -> Option<usize> {
        let best = |backup: bool| {
            self.entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.usable() && e.backend.spec.backup == backup)
                .filter(|(_, e)| !tried.contains(&e.backend.id))
                .max_by_key(|(_, e)| (key_score(key, e.backend.name()), e.backend.name()))
                .map(|(i, _)| i)
        };
        best(false).or_else(|| best(true))
    }
}

/// A stable score of (key, name): FNV-1a over both, then a 64-bit finaliser so that
/// names differing in one byte score independently. The same on every balancer.
fn key_score(key: &[u8], name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.iter().chain([0xffu8].iter()).chain(name.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The entries as the version plan sees them: an instance counts while it is in
/// rotation.
fn members_of(entries: &[Entry]) -> Vec<versions::Member> {
    entries
        .iter()
        .map(|e| versions::Member {
            version: e.announced.clone().or_else(|| e.backend.version.clone()),
            compatible: e.backend.compatible.clone(),
            present: e.admin == Admin::Active && !e.parked,
        })
        .collect()
}
