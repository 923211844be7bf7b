//! The process's clocks, in one place: wall-clock Unix time (seconds, milliseconds) for
//! what is shown to people or compared across balancers, and the coarse monotonic
//! millisecond clock the request path reads for inactivity timeouts.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time, seconds (0 if the clock is before 1970).
pub fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Unix time, milliseconds (0 if the clock is before 1970).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
