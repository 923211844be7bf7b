//! Text of the status page: HTML escaping ([`esc`]) and the short human forms of
//! counts, byte sizes, durations, ages and backend states.

use crate::routing::BackendState;

/// Escape text for HTML element content and quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// 1234567 → "1,234,567".
pub(super) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub(super) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub(super) fn ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.1} ms")
    } else if v < 10_000.0 {
        format!("{v:.0} ms")
    } else {
        format!("{:.1} s", v / 1000.0)
    }
}

pub(super) fn ago(secs: u64) -> String {
    // Keep it short: the largest unit only.
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m", secs / 60),
        3600..=86_399 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

/// The CSS class and label of a backend's state.
pub(super) fn state_badge(state: BackendState) -> (&'static str, &'static str) {
    match state {
        BackendState::Up => ("up", "up"),
        BackendState::Down => ("down", "down"),
        BackendState::Draining => ("draining", "draining"),
        BackendState::Drained => ("drained", "drained"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            esc("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
    }

    #[test]
    fn formats() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(ms(2.5), "2.5 ms");
        assert_eq!(ms(250.0), "250 ms");
        assert_eq!(ago(5), "5s");
        assert_eq!(ago(125), "2m");
    }
}
