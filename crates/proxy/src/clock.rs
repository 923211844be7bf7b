//! The request path's clock: the coarse monotonic millisecond clock read for inactivity
//! timeouts on every socket read and write. (Wall-clock time is `gearlb_core::time`.)

/// Milliseconds on the kernel's coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`: a few
/// milliseconds of resolution, no hardware clock read), cheap enough for every socket
/// read and write of the request path; only millisecond timeouts are kept with it.
#[cfg(not(test))]
#[inline]
pub fn coarse_ms() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    (t.tv_sec as u64) * 1000 + (t.tv_nsec as u64) / 1_000_000
}

/// Unit tests read tokio's clock instead, so that activity times and timers agree
/// under paused time (`start_paused`).
#[cfg(test)]
pub fn coarse_ms() -> u64 {
    static BASE: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
    let now = tokio::time::Instant::now();
    let base = *BASE.get_or_init(|| now - std::time::Duration::from_secs(1));
    now.saturating_duration_since(base).as_millis() as u64
}
