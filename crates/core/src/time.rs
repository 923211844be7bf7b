//! Wall-clock Unix time (seconds, milliseconds, microseconds), for what is shown to
//! people or compared across balancers. (The request path's coarse monotonic clock is
//! the data plane's: `gearlb_proxy::clock`.)

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time, seconds (0 if the clock is before 1970).
pub fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Unix time, microseconds (0 if the clock is before 1970).
pub fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Unix time, milliseconds (0 if the clock is before 1970).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
