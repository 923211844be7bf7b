//! The crate graph is the architecture: `gearlb-core` holds the pure decisions and pulls
//! in no runtime, socket or TLS crate; `gearlb-proxy`, the data plane, never depends on
//! the application. Read from `cargo tree` (normal dependencies, this lock file).

use std::collections::BTreeSet;
use std::process::Command;

/// The packages `cargo tree` lists under `package` (normal edges only, no dev or build
/// dependencies), by name.
fn normal_dependencies(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "tree",
            "--locked",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}", "-p", package])
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Crates that do I/O the core must not: an async runtime, sockets, HTTP, TLS, gossip.
fn io_crate(name: &str) -> bool {
    const IO: &[&str] = &[
        "tokio", "mio", "socket2", "hyper", "h2", "rustls", "reqwest", "chitchat",
    ];
    IO.iter()
        .any(|c| name == *c || name.starts_with(&format!("{c}-")))
}

#[test]
fn the_core_names_no_runtime_socket_or_tls_crate() {
    let deps = normal_dependencies("gearlb-core");
    assert!(deps.contains("gearlb-core"), "cargo tree listed: {deps:?}");
    let io: Vec<&String> = deps.iter().filter(|d| io_crate(d)).collect();
    assert!(io.is_empty(), "gearlb-core depends on {io:?}");
}

#[test]
fn the_data_plane_does_not_depend_on_the_application() {
    let deps = normal_dependencies("gearlb-proxy");
    assert!(deps.contains("gearlb-core"), "cargo tree listed: {deps:?}");
    assert!(!deps.contains("gearlb"), "gearlb-proxy depends on gearlb");
    assert!(
        !deps.contains("gearlb-sim"),
        "gearlb-proxy depends on gearlb-sim"
    );
    // Gossip is the application's.
    assert!(
        !deps.contains("chitchat"),
        "gearlb-proxy depends on chitchat"
    );
}

#[test]
fn the_checker_knows_an_io_crate() {
    assert!(io_crate("tokio") && io_crate("tokio-util") && io_crate("hyper-util"));
    assert!(!io_crate("serde") && !io_crate("http") && !io_crate("tokenizer"));
}
