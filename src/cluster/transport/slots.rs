//! Who holds the incoming gossip connections' slots, and who gives one up: the pure
//! bookkeeping behind [`super::net`]'s inbound limit.
//!
//! A connection is *unproven* until its first authentic frame, then *proven* under the
//! identity that frame names (the sender's advertised address). When every slot is
//! taken, a new connection displaces the oldest unproven one, else the proven one
//! silent the longest, if it has been silent at least [`EVICTABLE_AFTER_MS`]. At most
//! [`PER_IDENTITY`] proven connections keep one identity: a further one closes that
//! identity's oldest. So recorded frames replayed over many connections hold a handful
//! of slots at most, and silent ones give way to a peer that talks.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

/// Proven connections kept for one identity (a peer reconnecting has a new one while
/// its old one is still being closed).
pub const PER_IDENTITY: usize = 4;
/// A proven connection silent this long may be displaced by a new one when every slot
/// is taken.
pub const EVICTABLE_AFTER_MS: u64 = 2_000;

/// The slots' holders, by connection id.
#[derive(Debug, Default)]
pub struct Slots {
    /// Unproven connections, oldest first.
    unproven: VecDeque<u64>,
    /// Proven connections: identity and the last time (ms) a frame arrived.
    proven: HashMap<u64, (SocketAddr, u64)>,
    /// Proven connections of each identity, oldest first.
    by_identity: HashMap<SocketAddr, VecDeque<u64>>,
}

impl Slots {
    /// A new connection took a slot.
    pub fn opened(&mut self, id: u64) {
        self.unproven.push_back(id);
    }

    /// The connection that gives its slot up for a new one when every slot is taken:
    /// the oldest unproven, else the proven one silent the longest (at least
    /// [`EVICTABLE_AFTER_MS`]); `None`: the new one is refused.
    pub fn victim(&self, now_ms: u64) -> Option<u64> {
        if let Some(&id) = self.unproven.front() {
            return Some(id);
        }
        self.proven
            .iter()
            .filter(|(_, (_, last))| now_ms.saturating_sub(*last) >= EVICTABLE_AFTER_MS)
            .min_by_key(|(id, (_, last))| (*last, **id))
            .map(|(id, _)| *id)
    }

    /// An authentic frame from `identity` arrived on `id`; returns a connection of the
    /// same identity to close (past [`PER_IDENTITY`]), if any.
    pub fn frame(&mut self, id: u64, identity: SocketAddr, now_ms: u64) -> Option<u64> {
        if let Some(entry) = self.proven.get_mut(&id) {
            entry.1 = now_ms;
            return None;
        }
        self.unproven.retain(|&i| i != id);
        self.proven.insert(id, (identity, now_ms));
        let list = self.by_identity.entry(identity).or_default();
        list.push_back(id);
        if list.len() > PER_IDENTITY {
            list.pop_front()
        } else {
            None
        }
    }

    /// The connection closed (or was closed): its slot is free.
    pub fn closed(&mut self, id: u64) {
        self.unproven.retain(|&i| i != id);
        if let Some((identity, _)) = self.proven.remove(&id) {
            if let Some(list) = self.by_identity.get_mut(&identity) {
                list.retain(|&i| i != id);
                if list.is_empty() {
                    self.by_identity.remove(&identity);
                }
            }
        }
    }

    /// Connections holding a slot.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.unproven.len() + self.proven.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(n: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, n], 7946))
    }

    #[test]
    fn the_oldest_unproven_goes_first() {
        let mut s = Slots::default();
        for id in 1..=3 {
            s.opened(id);
        }
        assert_eq!(s.victim(0), Some(1));
        assert_eq!(s.frame(1, addr(1), 0), None);
        assert_eq!(s.victim(0), Some(2));
        s.closed(2);
        s.closed(3);
        // Only proven, all talking: nobody gives way.
        assert_eq!(s.victim(500), None);
    }

    #[test]
    fn a_silent_proven_connection_gives_way_to_a_new_one() {
        let mut s = Slots::default();
        for id in 1..=3 {
            s.opened(id);
            s.frame(id, addr(id as u8), 0);
        }
        s.frame(2, addr(2), 5_000);
        s.frame(3, addr(3), 5_000);
        assert_eq!(s.victim(5_000), Some(1), "silent for 5 s");
        assert_eq!(s.victim(1_500), None, "not silent long enough");
    }

    #[test]
    fn one_identity_keeps_a_few_connections_only() {
        let mut s = Slots::default();
        let mut closed = Vec::new();
        // A recorded frame of one peer replayed over 1 000 connections.
        for id in 1..=1_000 {
            s.opened(id);
            if let Some(old) = s.frame(id, addr(9), id) {
                closed.push(old);
                s.closed(old);
            }
        }
        assert_eq!(s.len(), PER_IDENTITY);
        assert_eq!(closed.len(), 1_000 - PER_IDENTITY);
        assert_eq!(closed[0], 1, "oldest first");
        // Another peer is not affected.
        s.opened(2_000);
        assert_eq!(s.frame(2_000, addr(1), 2_000), None);
        assert_eq!(s.len(), PER_IDENTITY + 1);
        for id in [997, 998, 999, 1_000, 2_000] {
            s.closed(id);
        }
        assert!(s.is_empty());
    }
}
