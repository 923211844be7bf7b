//! Giving freed heap memory back to the system when a worker thread goes idle.
//!
//! Owns the trimming policy. The binary's allocator (mimalloc, chosen in `main.rs`)
//! returns freed pages to the system lazily, only when the same thread allocates again.
//! A burst of connections that then sit idle (each made a request, its buffers were freed
//! when it parked) would otherwise keep the process's resident memory at the burst's peak
//! for as long as nothing else happens. The runtime calls [`on_park`] each time a worker
//! thread is about to wait for events; at most once per [`TRIM_EVERY_MS`] per thread it
//! calls the binary's release function, which purges that thread's freed pages.
//!
//! The library knows no allocator (its own tests run on the system one): without a
//! release function nothing is trimmed.

use std::cell::Cell;

/// The least time between two trims of one thread's heap, in milliseconds.
pub const TRIM_EVERY_MS: u64 = 1000;

/// Returns freed memory of the calling thread's heap to the system.
pub type Release = fn();

thread_local! {
    /// When this thread last trimmed (coarse monotonic milliseconds); 0: never.
    static LAST_TRIM: Cell<u64> = const { Cell::new(0) };
}

/// Whether a thread that last trimmed at `last` should trim again at `now`.
pub fn due(last: u64, now: u64, every_ms: u64) -> bool {
    last == 0 || now.saturating_sub(last) >= every_ms
}

/// Called by the runtime just before a worker thread parks: trims its heap if due.
/// Costs one coarse clock read when not due.
pub fn on_park(release: Release) {
    let now = gearlb_proxy::clock::coarse_ms().max(1);
    LAST_TRIM.with(|last| {
        if due(last.get(), now, TRIM_EVERY_MS) {
            last.set(now);
            release();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn due_first_time_then_once_per_interval() {
        assert!(due(0, 5, 1000));
        assert!(!due(5, 5, 1000));
        assert!(!due(5, 1004, 1000));
        assert!(due(5, 1005, 1000));
        // A clock that went backwards never trims in a loop.
        assert!(!due(2000, 1000, 1000));
    }

    static CALLS: AtomicUsize = AtomicUsize::new(0);

    fn count() {
        CALLS.fetch_add(1, Ordering::Relaxed);
    }

    #[test]
    fn parks_in_quick_succession_trim_once() {
        // A fresh thread: its own LAST_TRIM, so other tests cannot interfere.
        std::thread::spawn(|| {
            for _ in 0..100 {
                on_park(count);
            }
        })
        .join()
        .unwrap();
        assert_eq!(CALLS.load(Ordering::Relaxed), 1);
    }
}
