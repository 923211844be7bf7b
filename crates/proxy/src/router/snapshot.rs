//! [`Snapshot`]: one published routing table ([`RoutingTable`], values only) with the
//! data plane's [`Target`] of each of its backends, and selection that answers with the
//! target. What the request path loads, lock-free.

use std::ops::Deref;
use std::sync::Arc;

use gearlb_core::routing::{Affinity, BackendId, Entry, RoutingTable};

use super::target::Target;

/// An immutable routing snapshot: `targets[i]` is the data plane's state of
/// `table.entries()[i]` (the same backend id). Derefs to the table.
#[derive(Debug, Default)]
pub struct Snapshot {
    table: RoutingTable,
    targets: Vec<Arc<Target>>,
}

impl Snapshot {
    /// A snapshot of `table` with one target per entry, in entry order.
    pub(super) fn new(table: RoutingTable, targets: Vec<Arc<Target>>) -> Self {
        debug_assert!(table
            .entries()
            .iter()
            .zip(&targets)
            .all(|(e, t)| e.backend.id == t.backend.id));
        debug_assert_eq!(table.entries().len(), targets.len());
        Snapshot { table, targets }
    }

    /// The targets, in entry order.
    pub fn targets(&self) -> &[Arc<Target>] {
        &self.targets
    }

    /// Each entry with its target.
    pub fn iter(&self) -> impl Iterator<Item = (&Entry, &Arc<Target>)> {
        self.table.entries().iter().zip(&self.targets)
    }

    /// The target of the backend with this name.
    pub fn target(&self, name: &str) -> Option<&Arc<Target>> {
        self.table.position(name).map(|i| &self.targets[i])
    }

    fn load(&self) -> impl Fn(usize) -> u64 + '_ {
        |i| self.targets[i].outstanding()
    }

    /// Pick a backend for a new request ([`RoutingTable::select`]).
    pub fn select(&self) -> Option<&Arc<Target>> {
        self.table.select(self.load()).map(|i| &self.targets[i])
    }

    /// As [`Snapshot::select`], never returning one of `tried` (retries).
    pub fn select_excluding(&self, tried: &[Arc<Target>]) -> Option<&Arc<Target>> {
        let ids: Vec<BackendId> = tried.iter().map(|t| t.backend.id).collect();
        self.table
            .select_excluding(&ids, self.load())
            .map(|i| &self.targets[i])
    }

    /// As [`Snapshot::select`] for a request of a connection with this [`Affinity`]
    /// ([`RoutingTable::select_for`]).
    pub fn select_for(&self, affinity: &Affinity, max_run: u32) -> Option<&Arc<Target>> {
        self.table
            .select_for(affinity, max_run, self.load())
            .map(|i| &self.targets[i])
    }

    /// The backend a sticky cookie value names, when it may take the request.
    pub fn sticky_target(&self, value: &str) -> Option<&Arc<Target>> {
        self.table.sticky_target(value).map(|i| &self.targets[i])
    }
}

impl Deref for Snapshot {
    type Target = RoutingTable;

    fn deref(&self) -> &RoutingTable {
        &self.table
    }
}
