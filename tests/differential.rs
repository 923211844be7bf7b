//! Request smuggling and response splitting beside HAProxy 2.6: the ~740 cases of
//! `tests/support/differential_cases.py` go through gearlb and through Debian's HAProxy,
//! each in front of a recording backend, and `tests/support/differential.py` checks that
//! every byte gearlb passed on to a backend or to a client parses strictly (RFC 9112), that
//! no backend's unasked-for answer reaches a client as a response, and that gearlb's
//! backend never receives a request HAProxy's did not, nor gearlb waits for more bytes
//! where HAProxy answered (but for the differences the script lists with the reason they
//! are safe). Traffic to 127.0.0.1 only.

mod support;

use std::path::Path;
use std::process::Command;

/// Debian's HAProxy (`apt-get install haproxy`; `.ci/run` installs it).
const HAPROXY: &str = "/usr/sbin/haproxy";

#[test]
fn gearlb_passes_on_nothing_ambiguous_and_nothing_haproxy_refuses() {
    assert!(
        Path::new(HAPROXY).exists(),
        "{HAPROXY} is missing: apt-get install haproxy (the comparison needs it)"
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/differential.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg("--gearlb")
        .arg(support::bin())
        .arg("--haproxy")
        .arg(HAPROXY)
        .output()
        .expect("python3 (the differential script)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let failed: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("FAIL") || l.starts_with("     "))
        .collect();
    assert!(
        out.status.success(),
        "findings:\n{}\n{stderr}\nlast line: {:?}",
        failed.join("\n"),
        stdout.lines().last()
    );
    // The cases really ran, through both proxies (a script that stopped early or ran
    // none would otherwise pass).
    let summary = stdout.lines().last().unwrap_or("");
    let cases: usize = summary
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(cases >= 390, "only {cases} cases ran: {summary:?}");
    assert_eq!(
        stdout.lines().filter(|l| l.contains(" haproxy [")).count(),
        cases,
        "every case went through HAProxy too"
    );
}
