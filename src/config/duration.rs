//! Durations as an operator writes them.

use std::time::Duration;

/// A timeout as an operator writes it: `"2m"`, `"90s"`, or plain seconds (`"120"`).
/// Between 1 second and 1 day.
pub fn parse_timeout(s: &str) -> Option<Duration> {
    let d = match s.trim().parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => humantime::parse_duration(s.trim()).ok()?,
    };
    (Duration::from_secs(1)..=Duration::from_secs(86_400))
        .contains(&d)
        .then_some(d)
}
