//! The one duration rule of every source: the file (`timeouts.connect = "10s"`), the
//! environment (`OPENSHIFT_GEARLB_ROTATE_TIMEOUT`) and the command line (`gearlb ctl
//! rotate-out --timeout`) all parse with [`parse_duration`].
//!
//! A duration is written as `"10s"`, `"2m"`, `"1m 30s"` or `"300ms"` (humantime's units),
//! or as whole seconds (`"120"`), and is more than zero and at most [`MAX_DURATION`]
//! (7 days). The lower bound is any positive time because tests and tight setups use
//! sub-second timers (`gossip_interval = "100ms"`); the upper bound keeps every timer
//! well inside what `Instant` arithmetic and the status pages handle.

use std::time::Duration;

/// The longest duration any key, variable or option accepts: 7 days.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// The rule in words, for messages that explain what to write.
pub const DURATION_RULE: &str =
    "a duration like \"10s\", \"2m\", \"300ms\" or whole seconds, more than 0 and at most 7 days";

/// Parses a duration by the rule above. The error is a message for the operator that
/// quotes `s` (escaped, so control characters are never echoed) and says what is wrong.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    let d = match text.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) if text.starts_with('-') => {
            return Err(format!("{s:?}: a duration cannot be negative"));
        }
        // humantime's own message lists units (months, years) that the 7-day bound
        // refuses anyway, and escapes the quotes it puts around the text: ours says which
        // units there are.
        Err(_) => humantime::parse_duration(text).map_err(|_| {
            format!("{s:?} is not a duration (units: ms, s, m, h, d; or whole seconds)")
        })?,
    };
    if d.is_zero() {
        Err(format!("{s:?}: must be greater than zero"))
    } else if d > MAX_DURATION {
        Err(format!("{s:?} is longer than 7 days"))
    } else {
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_or_whole_seconds_above_zero_up_to_seven_days() {
        for (text, want) in [
            ("10s", Duration::from_secs(10)),
            ("1m 30s", Duration::from_secs(90)),
            ("100ms", Duration::from_millis(100)),
            ("120", Duration::from_secs(120)),
            (" 2m ", Duration::from_secs(120)),
            ("7d", MAX_DURATION),
            ("604800", MAX_DURATION),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text:?}");
        }
        for (text, why) in [
            ("0", "greater than zero"),
            ("0s", "greater than zero"),
            ("7d 1s", "longer than 7 days"),
            ("99999999999999999999s", "not a duration"),
            ("-1s", "cannot be negative"),
            ("5x", "units: ms, s, m, h, d"),
            ("soon", "not a duration"),
            ("", "not a duration"),
            ("5\u{1b}", "not a duration"),
        ] {
            let err = parse_duration(text).unwrap_err();
            assert!(err.contains(why), "{text:?}: {err}");
            assert!(!err.contains("\\\"") && !err.contains("months"), "{err}");
            assert!(!err.contains('\u{1b}'), "{text:?}: {err:?}");
        }
    }
}
