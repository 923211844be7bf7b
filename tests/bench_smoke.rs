//! Every harness of `bench/` in its smoke mode (bench/README.md, "Smoke modes"): a few
//! seconds against this build's debug binary, one round, tiny sizes, nothing judged. A
//! harness fails when what it measures cannot be read from the product (a field of the
//! JSON report or of `ctl … --json`, a log line it reads, a reply it times), so a
//! harness that drifted from the product fails here instead of recording empty figures.
//!
//! Two lanes, two tests, run side by side: the harnesses on fixed ports and pinned CPUs
//! (run.sh, slow_read.sh, tcp.sh) one after another in one, the others in the other.
//! Each lane runs all of its harnesses and then fails naming every one that failed,
//! with its output. A missing tool (`.ci/run` installs them all) is a failure, not a
//! skip.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Variables of the harnesses that must come from the test, not from the environment.
const HARNESS_VARS: &[&str] = &[
    "SCENARIOS",
    "SCENARIO",
    "TARGETS",
    "ROUNDS",
    "DURATION",
    "WARMUP",
    "CONNECTIONS",
    "BUILD",
    "GEARLB_ALT_BIN",
    "OPENLOOP_BIN",
    "KEEP_TMP",
    "REF",
    "PIN",
    "FIXED_RATE",
    "INSTR_TLS",
    "INSTR_BODY",
    "SIM_BIN",
    "KEEP",
];

/// One harness: what to call it, its tools (command, how to install it), its time limit
/// in seconds, its command line and its variables beyond SMOKE=1 and GEARLB_BIN.
struct Harness {
    what: &'static str,
    tools: &'static [(&'static str, &'static str)],
    limit: u32,
    cmd: Vec<String>,
    env: Vec<(&'static str, String)>,
}

const WRK: (&str, &str) = ("wrk", "apt-get install wrk");
const NGINX: (&str, &str) = ("nginx", "apt-get install nginx-light");
const HAPROXY: (&str, &str) = ("haproxy", "apt-get install haproxy");
const CURL: (&str, &str) = ("curl", "apt-get install curl");
const PYTHON: (&str, &str) = ("python3", "apt-get install python3");
const VALGRIND: (&str, &str) = ("valgrind", "apt-get install valgrind");
const OPENSSL: (&str, &str) = ("openssl", "apt-get install openssl");
const SLOWHTTPTEST: (&str, &str) = ("slowhttptest", "apt-get install slowhttptest");
const IP: (&str, &str) = ("ip", "apt-get install iproute2");

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn gearlb() -> String {
    env!("CARGO_BIN_EXE_gearlb").to_string()
}

fn home_bin() -> PathBuf {
    PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cargo/bin")
}

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

/// The PATH of a harness: oha may be where `cargo install` puts it (without it, the
/// smoke modes take `bench/lib/oha_lite.py`).
fn path() -> String {
    format!(
        "{}:{}",
        home_bin().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn missing_tools(h: &Harness) -> Vec<String> {
    h.tools
        .iter()
        .filter(|(tool, _)| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .env("PATH", path())
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(|(tool, package)| format!("{tool} is missing: {package} (.ci/run installs it)"))
        .collect()
}

/// Runs one harness in its smoke mode within its time limit: None if it exited 0, else
/// why not, with its output.
fn run(h: &Harness) -> Option<String> {
    let missing = missing_tools(h);
    if !missing.is_empty() {
        return Some(missing.join("; "));
    }
    let mut c = Command::new("timeout");
    c.arg(h.limit.to_string()).args(&h.cmd).current_dir(repo());
    for v in HARNESS_VARS {
        c.env_remove(v);
    }
    c.env("SMOKE", "1")
        .env("GEARLB_BIN", gearlb())
        .env("PATH", path());
    for (k, v) in &h.env {
        c.env(k, v);
    }
    let t = Instant::now();
    let out = match c.output() {
        Ok(out) => out,
        Err(e) => return Some(format!("cannot run {:?}: {e}", h.cmd)),
    };
    eprintln!(
        "{}: {:.1} s, {}",
        h.what,
        t.elapsed().as_secs_f64(),
        out.status
    );
    (!out.status.success()).then(|| {
        format!(
            "{} (124 would be its {} s limit)\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            h.limit,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Runs every harness of a lane, one after another; fails naming each that failed.
fn lane(harnesses: Vec<Harness>) {
    let failed: Vec<String> = harnesses
        .iter()
        .filter_map(|h| run(h).map(|why| format!("==== {} failed: {why}", h.what)))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// The harnesses on fixed ports (or random ones among them) and pinned CPUs.
#[test]
fn pinned_harnesses_read_the_product() {
    lane(vec![
        Harness {
            what: "bench/run.sh (every scenario)",
            tools: &[WRK, NGINX, HAPROXY, CURL, PYTHON, VALGRIND],
            limit: 400,
            cmd: argv(&["bash", "bench/run.sh"]),
            env: vec![],
        },
        Harness {
            what: "bench/run.sh (the other targets; instructions over TLS, with bodies)",
            tools: &[WRK, NGINX, HAPROXY, CURL, PYTHON, VALGRIND, OPENSSL],
            limit: 300,
            cmd: argv(&["bash", "bench/run.sh"]),
            env: vec![
                ("SCENARIOS", "peak_small instructions".into()),
                (
                    "TARGETS",
                    "gearlb-allfwd gearlb-noaff gearlb-alt haproxy-close haproxy-fwd \
                     haproxy-last haproxy-reuse"
                        .into(),
                ),
                ("GEARLB_ALT_BIN", gearlb()),
                ("INSTR_TLS", "1".into()),
                ("INSTR_BODY", "64".into()),
            ],
        },
        Harness {
            what: "bench/slow_read.sh",
            tools: &[NGINX, HAPROXY, PYTHON, SLOWHTTPTEST],
            limit: 120,
            cmd: argv(&["bash", "bench/slow_read.sh"]),
            env: vec![],
        },
        Harness {
            what: "bench/tcp.sh",
            tools: &[NGINX, HAPROXY, PYTHON],
            limit: 120,
            cmd: argv(&["bash", "bench/tcp.sh"]),
            env: vec![],
        },
    ]);
}

/// The others (ports of their own, no pinning; partition.py in network namespaces).
#[test]
fn other_harnesses_read_the_product() {
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    assert!(
        is_root,
        "bench/partition.py needs root (network namespaces); CI runs as root"
    );
    // `cargo test` builds the workspace's examples beside the binaries.
    let sim = Path::new(&gearlb())
        .parent()
        .unwrap()
        .join("examples/cluster_sim");
    lane(vec![
        Harness {
            what: "bench/cluster.py --smoke",
            tools: &[PYTHON],
            limit: 240,
            cmd: argv(&["python3", "bench/cluster.py", "--smoke", "--bin", &gearlb()]),
            env: vec![],
        },
        Harness {
            what: "bench/partition.py --smoke",
            tools: &[PYTHON, IP],
            limit: 240,
            cmd: argv(&[
                "python3",
                "bench/partition.py",
                "--smoke",
                "--bin",
                &gearlb(),
            ]),
            env: vec![],
        },
        Harness {
            what: "bench/soak.sh",
            tools: &[WRK, NGINX, CURL, PYTHON],
            limit: 120,
            cmd: argv(&["bash", "bench/soak.sh"]),
            env: vec![],
        },
        Harness {
            what: "bench/rotation.sh",
            tools: &[PYTHON],
            limit: 120,
            cmd: argv(&["bash", "bench/rotation.sh"]),
            env: vec![],
        },
        Harness {
            what: "bench/cluster_sim.sh",
            tools: &[PYTHON],
            limit: 240,
            cmd: argv(&["bash", "bench/cluster_sim.sh"]),
            env: vec![("SIM_BIN", sim.display().to_string())],
        },
        Harness {
            what: "bench/router_apps.sh",
            tools: &[VALGRIND, NGINX, PYTHON, CURL],
            limit: 240,
            cmd: argv(&["bash", "bench/router_apps.sh"]),
            env: vec![],
        },
        Harness {
            what: "bench/tls_handshake.sh",
            tools: &[HAPROXY, OPENSSL],
            limit: 120,
            cmd: argv(&["bash", "bench/tls_handshake.sh"]),
            env: vec![],
        },
        Harness {
            what: "bench/pool.py",
            tools: &[PYTHON],
            limit: 60,
            cmd: argv(&["python3", "bench/pool.py"]),
            env: vec![],
        },
    ]);
}
