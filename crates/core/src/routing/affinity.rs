//! Connection affinity: which backend a client connection's previous request went to,
//! so that its next one can stay there while that costs the balance nothing.
//!
//! A keep-alive client connection's next request goes to the backend that took its
//! previous one when that backend is no busier than the one least-outstanding selection
//! would pick (for a small set: it is among the least loaded; for a large one: it is no
//! busier than the better of the two random choices). The balance of in-flight requests
//! is therefore the same; what changes is which of the equally loaded backends wins,
//! and it is the one whose pooled connection, socket buffers and kernel state are warm.
//! With many gears this matters: spread at random over 1000 backends, nearly every
//! request lands on a cold connection on both sides of the wire.
//!
//! HAProxy's `option prefer-last-server` does the same without a bound. Here a run is
//! bounded by `proxy.connection_affinity` requests, after which the next request is
//! chosen afresh, so that a long-lived connection carrying many users' first requests
//! (the node's front proxy) still spreads new sessions over every gear. A request with
//! a sticky cookie goes where its cookie says; retries never use affinity; a failed
//! attempt forgets it.
//!
//! The memory is a hint, not a reference: the routing snapshot's generation and the
//! backend's index in it, packed in one atomic. Any change of the routing table
//! (health, rotation, `update-cluster`, subsets) makes a new generation, so the hint
//! then no longer applies and the next request is chosen afresh; a backend taken out of
//! rotation is never chosen through it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// No backend remembered.
const NONE: u64 = u64::MAX;

/// One client connection's memory of where its previous request went.
#[derive(Debug)]
pub struct Affinity {
    /// `generation << 32 | index`, or [`NONE`].
    last: AtomicU64,
    /// Requests in a row sent to that backend through this connection.
    run: AtomicU32,
}

impl Default for Affinity {
    fn default() -> Self {
        Affinity {
            last: AtomicU64::new(NONE),
            run: AtomicU32::new(0),
        }
    }
}

impl Affinity {
    /// The index of the backend remembered for routing snapshot `generation`, and how
    /// many requests in a row it has taken; `None` when nothing is remembered or the
    /// table has changed since.
    pub fn last(&self, generation: u64) -> Option<(usize, u32)> {
        let v = self.last.load(Ordering::Relaxed);
        if v == NONE || v >> 32 != generation & 0xffff_ffff {
            return None;
        }
        Some(((v & 0xffff_ffff) as usize, self.run.load(Ordering::Relaxed)))
    }

    /// Remember that backend `index` of snapshot `generation` took a request, the
    /// `run`-th in a row.
    pub fn remember(&self, generation: u64, index: usize, run: u32) {
        let v = (generation & 0xffff_ffff) << 32 | (index as u64 & 0xffff_ffff);
        self.last.store(v, Ordering::Relaxed);
        self.run.store(run, Ordering::Relaxed);
    }

    /// Forget the backend: the next request is chosen afresh.
    pub fn forget(&self) {
        self.last.store(NONE, Ordering::Relaxed);
    }
}

/// Whether the remembered backend keeps the request: it has taken fewer than `max` in a
/// row, and is no busier (`last_load` outstanding requests) than the backend selection
/// would otherwise pick (`pick_load`). `max` 0 turns affinity off.
pub fn keep(run: u32, max: u32, last_load: u64, pick_load: u64) -> bool {
    run < max && last_load <= pick_load
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_per_generation() {
        let a = Affinity::default();
        assert_eq!(a.last(1), None);
        a.remember(7, 42, 3);
        assert_eq!(a.last(7), Some((42, 3)));
        assert_eq!(a.last(8), None, "a new routing table invalidates the hint");
        a.forget();
        assert_eq!(a.last(7), None);
    }

    #[test]
    fn generation_wraps_without_aliasing_none() {
        let a = Affinity::default();
        a.remember(u64::MAX, 5, 1);
        assert_eq!(a.last(u64::MAX), Some((5, 1)));
        a.remember(0xffff_ffff, 0xffff_fffe, 1);
        assert_eq!(a.last(0xffff_ffff), Some((0xffff_fffe, 1)));
    }

    #[test]
    fn keep_needs_room_in_the_run_and_no_more_load() {
        assert!(keep(0, 1, 0, 0));
        assert!(
            keep(15, 16, 2, 2),
            "equal load: the warm backend wins the tie"
        );
        assert!(keep(3, 16, 1, 4));
        assert!(!keep(16, 16, 0, 0), "the run is over: choose afresh");
        assert!(!keep(3, 16, 3, 2), "busier than the pick: never kept");
        assert!(!keep(0, 0, 0, 0), "0 turns affinity off");
    }
}
