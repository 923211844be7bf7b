//! Every harness of `bench/` in its smoke mode (bench/README.md, "Smoke modes"): a few
//! seconds against this build's debug binary, one round, tiny sizes, nothing judged. A
//! harness fails when what it measures cannot be read from the product (a field of the
//! JSON report or of `ctl … --json`, a log line it reads, a reply it times), so a
//! harness that drifted from the product fails here instead of recording empty figures.
//!
//! Two lanes run side by side: the harnesses on fixed ports and pinned CPUs (run.sh,
//! slow_read.sh, soak.sh, tcp.sh) one after another in one, the others in the other.
//! Each needs the tools its harness needs (`.ci/run` installs them); a missing tool is a
//! failure, not a skip.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

/// The lane of the harnesses on fixed ports and pinned CPUs.
static PINNED: Mutex<()> = Mutex::new(());
/// The lane of the others.
static FREE: Mutex<()> = Mutex::new(());

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

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn gearlb() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gearlb"))
}

/// Fails (naming the package) unless every tool is on the PATH.
fn need(tools: &[(&str, &str)]) {
    for (tool, package) in tools {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            found || (*tool == "oha" && home_oha().exists()),
            "{tool} is missing: {package} (.ci/run installs it)"
        );
    }
}

fn home_oha() -> PathBuf {
    PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cargo/bin/oha")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Runs one harness in its smoke mode (SMOKE=1, GEARLB_BIN = this build's binary) in its
/// lane, within `limit` seconds, and fails with its output unless it exits 0.
fn smoke(lane: &Mutex<()>, what: &str, limit: u32, cmd: &[&str], env: &[(&str, &str)]) {
    let _one = lane.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = Command::new("timeout");
    c.arg(limit.to_string()).args(cmd).current_dir(repo());
    for v in HARNESS_VARS {
        c.env_remove(v);
    }
    // oha may be where `cargo install` puts it.
    let path = format!(
        "{}:{}",
        home_oha().parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    c.env("SMOKE", "1")
        .env("GEARLB_BIN", gearlb())
        .env("PATH", path);
    c.envs(env.iter().copied());
    let t = Instant::now();
    let out = c.output().expect("run the harness");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprintln!("{what}: {:.1} s, {}", t.elapsed().as_secs_f64(), out.status);
    assert!(
        out.status.success(),
        "{what} failed ({}; 124 is the {limit} s limit):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
}

const LOAD: &[(&str, &str)] = &[
    ("wrk", "apt-get install wrk"),
    ("nginx", "apt-get install nginx-light"),
    ("haproxy", "apt-get install haproxy"),
    ("curl", "apt-get install curl"),
    ("python3", "apt-get install python3"),
];

#[test]
fn run_sh_every_scenario() {
    need(LOAD);
    need(&[
        ("valgrind", "apt-get install valgrind"),
        ("oha", "cargo install --locked oha"),
    ]);
    smoke(&PINNED, "bench/run.sh", 400, &["bash", "bench/run.sh"], &[]);
}

#[test]
fn run_sh_the_other_targets_and_tls() {
    need(LOAD);
    need(&[
        ("valgrind", "apt-get install valgrind"),
        ("oha", "cargo install --locked oha"),
    ]);
    let alt = gearlb();
    smoke(
        &PINNED,
        "bench/run.sh (other targets, instructions over TLS with bodies)",
        300,
        &["bash", "bench/run.sh"],
        &[
            ("SCENARIOS", "peak_small instructions"),
            (
                "TARGETS",
                "gearlb-allfwd gearlb-noaff gearlb-alt haproxy-close haproxy-fwd haproxy-last haproxy-reuse",
            ),
            ("GEARLB_ALT_BIN", alt.to_str().unwrap()),
            ("INSTR_TLS", "1"),
            ("INSTR_BODY", "64"),
        ],
    );
}

#[test]
fn slow_read_sh() {
    need(LOAD);
    need(&[("slowhttptest", "apt-get install slowhttptest")]);
    smoke(
        &PINNED,
        "bench/slow_read.sh",
        120,
        &["bash", "bench/slow_read.sh"],
        &[],
    );
}

#[test]
fn tcp_sh() {
    need(LOAD);
    need(&[("oha", "cargo install --locked oha")]);
    smoke(&PINNED, "bench/tcp.sh", 120, &["bash", "bench/tcp.sh"], &[]);
}

#[test]
fn soak_sh() {
    need(LOAD);
    smoke(
        &PINNED,
        "bench/soak.sh",
        120,
        &["bash", "bench/soak.sh"],
        &[],
    );
}

#[test]
fn tls_handshake_sh() {
    need(&[
        ("haproxy", "apt-get install haproxy"),
        ("openssl", "apt-get install openssl"),
    ]);
    smoke(
        &FREE,
        "bench/tls_handshake.sh",
        120,
        &["bash", "bench/tls_handshake.sh"],
        &[],
    );
}

#[test]
fn cluster_py() {
    need(&[("python3", "apt-get install python3")]);
    let bin = gearlb();
    smoke(
        &FREE,
        "bench/cluster.py --smoke",
        240,
        &[
            "python3",
            "bench/cluster.py",
            "--smoke",
            "--bin",
            bin.to_str().unwrap(),
        ],
        &[],
    );
}

#[test]
fn partition_py() {
    assert!(
        is_root(),
        "bench/partition.py needs root (network namespaces); CI runs as root"
    );
    need(&[
        ("python3", "apt-get install python3"),
        ("ip", "apt-get install iproute2"),
    ]);
    let bin = gearlb();
    smoke(
        &FREE,
        "bench/partition.py --smoke",
        240,
        &[
            "python3",
            "bench/partition.py",
            "--smoke",
            "--bin",
            bin.to_str().unwrap(),
        ],
        &[],
    );
}

#[test]
fn rotation_sh() {
    need(&[("python3", "apt-get install python3")]);
    smoke(
        &FREE,
        "bench/rotation.sh",
        120,
        &["bash", "bench/rotation.sh"],
        &[],
    );
}

#[test]
fn cluster_sim_sh() {
    need(&[("python3", "apt-get install python3")]);
    // `cargo test` builds the workspace's examples beside the binaries.
    let sim = gearlb().parent().unwrap().join("examples/cluster_sim");
    smoke(
        &FREE,
        "bench/cluster_sim.sh",
        240,
        &["bash", "bench/cluster_sim.sh"],
        &[("SIM_BIN", sim.to_str().unwrap())],
    );
}

#[test]
fn router_apps_sh() {
    need(&[
        ("valgrind", "apt-get install valgrind"),
        ("nginx", "apt-get install nginx-light"),
        ("python3", "apt-get install python3"),
        ("curl", "apt-get install curl"),
        ("oha", "cargo install --locked oha"),
    ]);
    smoke(
        &FREE,
        "bench/router_apps.sh",
        240,
        &["bash", "bench/router_apps.sh"],
        &[],
    );
}

#[test]
fn pool_py_reads_the_recorded_rounds() {
    need(&[("python3", "apt-get install python3")]);
    smoke(
        &FREE,
        "bench/pool.py",
        60,
        &["python3", "bench/pool.py"],
        &[],
    );
}
