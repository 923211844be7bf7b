//! `gearlb ctl …`: one request to the balancer's control socket, and its reply
//! printed for a person (or as JSON).

use std::collections::BTreeMap;
use std::path::Path;

use clap::Subcommand;

use crate::config::{self, EXIT_CONFIG};
use crate::control::{self, Request};
use crate::report::StatusReport;

/// Exit code when the balancer cannot be reached (sysexits `EX_UNAVAILABLE`).
pub const EXIT_UNAVAILABLE: i32 = 69;

#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// Show frontend and backend status.
    Status {
        /// Print the JSON report instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Replace the set of web gears: entries `<gear-dns>|<host>:<port>`, as one word
    /// with spaces or as many words.
    UpdateCluster {
        #[arg(allow_hyphen_values = true)]
        entries: Vec<String>,
    },
    /// Show the peer balancers: live or not, their load.
    Peers {
        #[arg(long)]
        json: bool,
    },
    /// Replace the known peer balancers: entries `'uuid'='uuid|host:port'` (the
    /// subscriber hook's format), as one word with spaces or as many words.
    SetPeers {
        #[arg(allow_hyphen_values = true)]
        entries: Vec<String>,
    },
    /// Take a web gear out of rotation on every balancer, wait until all live ones
    /// stopped sending it traffic (drained), and print the result.
    RotateOut {
        /// Gear uuid, gear name, or server name (with --service: the backend's name).
        gear: String,
        /// The service the backend belongs to (default: the top-level backends).
        #[arg(long)]
        service: Option<String>,
        /// Drain deadline: what is still running then is cut (default rotate.timeout).
        #[arg(long)]
        timeout: Option<String>,
        /// Accepted for compatibility: rotation always persists until rotate-in.
        #[arg(long)]
        persist: bool,
        /// Print only the JSON result on stdout.
        #[arg(long)]
        as_json: bool,
    },
    /// Put a web gear back in rotation on every balancer.
    RotateIn {
        gear: String,
        #[arg(long)]
        service: Option<String>,
        #[arg(long)]
        persist: bool,
        #[arg(long)]
        as_json: bool,
    },
    /// Ask the broker for one more (`up`) or one less (`down`) web gear, now.
    Scale {
        /// `up` or `down`.
        direction: String,
    },
    /// Re-read the configuration file and environment without a restart.
    Reload,
    /// Show the services: routes, where they came from, backends.
    Services {
        #[arg(long)]
        json: bool,
    },
    /// A router: its routing SPI (broker, events, refused events and why, the table,
    /// its peers'); `gearlb ctl spi reconcile` reconciles the table with the broker's
    /// REST API now.
    Spi {
        /// `reconcile`: now, and show what it repaired.
        action: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Announce an instance of a service (or renew its lease): it takes requests until
    /// it deregisters or its lease lapses.
    Register {
        service: String,
        backend: String,
        /// `host:port` the instance serves on.
        addr: String,
        /// Lease (default discovery.ttl); register again before it lapses.
        #[arg(long)]
        ttl: Option<String>,
        /// A host the service answers for (first instance of a new service); repeat.
        #[arg(long = "host")]
        hosts: Vec<String>,
        /// A path prefix of the service (default /); repeat.
        #[arg(long = "path")]
        paths: Vec<String>,
        /// The version it runs (`catalog-2.4.1`).
        #[arg(long)]
        version: Option<String>,
        /// Versions it is compatible with, comma-separated.
        #[arg(long, value_delimiter = ',')]
        compatible: Vec<String>,
    },
    /// Make a version's group of a service active now: the older groups drain.
    Cutover {
        service: String,
        version: String,
        /// How long to wait for the drain (default rotate.timeout).
        #[arg(long)]
        timeout: Option<String>,
    },
    /// Hold a version's group of a service back (never active, never the canary).
    Hold {
        service: String,
        version: String,
        /// Release it instead.
        #[arg(long)]
        release: bool,
    },
    /// Take an instance out: it drains, then goes.
    Deregister { service: String, backend: String },
}

/// Send `command` to the balancer at `socket`, print its reply; the exit code.
pub(super) fn ctl(socket: &Path, command: CtlCommand) -> i32 {
    let (request, json) = match command {
        CtlCommand::Status { json } => (Request::Status, json),
        CtlCommand::UpdateCluster { entries } => (Request::UpdateCluster { args: entries }, false),
        CtlCommand::Peers { json } => (Request::Peers, json),
        CtlCommand::Scale { direction } => (Request::Scale { event: direction }, false),
        CtlCommand::RotateOut {
            gear,
            service,
            timeout,
            persist: _,
            as_json,
        } => {
            let timeout_ms = match duration_ms("--timeout", timeout.as_deref()) {
                Ok(ms) => ms,
                Err(code) => return code,
            };
            (
                Request::Rotate {
                    gear,
                    op: crate::rotation::Op::Out,
                    timeout_ms,
                    node: false,
                    service,
                },
                as_json,
            )
        }
        CtlCommand::RotateIn {
            gear,
            service,
            persist: _,
            as_json,
        } => (
            Request::Rotate {
                gear,
                op: crate::rotation::Op::In,
                timeout_ms: None,
                node: false,
                service,
            },
            as_json,
        ),
        CtlCommand::SetPeers { entries } => (Request::SetPeers { args: entries }, false),
        CtlCommand::Services { json } => (Request::Services, json),
        CtlCommand::Spi { action, json } => match action.as_deref() {
            None => (Request::Spi, json),
            Some("reconcile") => (Request::SpiReconcile, json),
            Some(other) => {
                eprintln!("gearlb ctl spi: unknown action {other:?} (only \"reconcile\")");
                return 64;
            }
        },
        CtlCommand::Register {
            service,
            backend,
            addr,
            ttl,
            hosts,
            paths,
            version,
            compatible,
        } => {
            let ttl_ms = match duration_ms("--ttl", ttl.as_deref()) {
                Ok(ms) => ms,
                Err(code) => return code,
            };
            (
                Request::Register {
                    service,
                    backend,
                    addr,
                    hosts,
                    paths,
                    ttl_ms,
                    version,
                    compatible,
                },
                false,
            )
        }
        CtlCommand::Cutover {
            service,
            version,
            timeout,
        } => {
            let timeout_ms = match duration_ms("--timeout", timeout.as_deref()) {
                Ok(ms) => ms,
                Err(code) => return code,
            };
            (
                Request::Cutover {
                    service,
                    version,
                    timeout_ms,
                },
                false,
            )
        }
        CtlCommand::Hold {
            service,
            version,
            release,
        } => (
            Request::Hold {
                service,
                version,
                release,
            },
            false,
        ),
        CtlCommand::Deregister { service, backend } => {
            (Request::Deregister { service, backend }, false)
        }
        CtlCommand::Reload => {
            // The daemon re-reads its file with the caller's gear environment.
            let env: BTreeMap<String, String> = std::env::vars()
                .filter(|(k, _)| k.starts_with("OPENSHIFT_") || k.starts_with("GEARLB_"))
                .collect();
            (Request::Reload { env }, false)
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gearlb: {e}");
            return 1;
        }
    };
    // Progress on stderr: a live line on a terminal, one line per change otherwise.
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut shown = false;
    let on_progress = |line: &str| {
        if tty {
            eprint!("\r\x1b[K{line}");
            shown = true;
        } else {
            eprintln!("{line}");
        }
    };
    let result = rt.block_on(control::call_with_progress(socket, &request, on_progress));
    if shown {
        eprintln!();
    }
    let reply = match result {
        Ok(r) => r,
        Err(control::ClientError::Connect { path, source })
            if source.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            eprintln!(
                "gearlb: permission denied: {} belongs to another user (only the balancer's own user or root may control it)",
                path.display()
            );
            return control::EXIT_REFUSED;
        }
        Err(e @ control::ClientError::Connect { .. }) => {
            eprintln!("gearlb: {e}");
            return EXIT_UNAVAILABLE;
        }
        Err(e) => {
            eprintln!("gearlb: {e}");
            return 1;
        }
    };
    match request {
        Request::Status if reply.exit_code == 0 => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&reply.data).unwrap_or_default()
                );
            } else {
                match serde_json::from_value::<StatusReport>(reply.data) {
                    Ok(r) => print!("{}", r.to_text()),
                    Err(e) => {
                        eprintln!("gearlb: unexpected status report: {e}");
                        return 1;
                    }
                }
            }
        }
        Request::Rotate { .. } if !reply.data.is_null() => {
            if json {
                println!("{}", serde_json::to_string(&reply.data).unwrap_or_default());
            } else {
                println!("{}", reply.message);
                if let Some(results) = reply.data["proxy_results"].as_object() {
                    for (proxy, r) in results {
                        let notes: Vec<&str> = r["messages"]
                            .as_array()
                            .into_iter()
                            .chain(r["errors"].as_array())
                            .flatten()
                            .filter_map(|v| v.as_str())
                            .collect();
                        println!(
                            "  {proxy:<38} {:<12} {}",
                            r["status"].as_str().unwrap_or(""),
                            notes.join("; ")
                        );
                    }
                }
            }
        }
        Request::Spi | Request::SpiReconcile if reply.exit_code == 0 => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&reply.data).unwrap_or_default()
                );
            } else {
                match serde_json::from_value::<crate::report::spi::SpiReport>(reply.data.clone()) {
                    Ok(r) => print!("{}", crate::report::spi::text(&r)),
                    Err(_) => println!("{}", reply.message),
                }
            }
        }
        Request::Services if reply.exit_code == 0 => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&reply.data).unwrap_or_default()
                );
            } else {
                print!("{}", services_text(&reply.data));
            }
        }
        Request::Peers if reply.exit_code == 0 => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&reply.data).unwrap_or_default()
                );
            } else {
                let scaler = reply.data["scaler"]["scaler"].as_str().map(str::to_string);
                let keep_seen: Option<crate::idler::KeepSeenReport> =
                    serde_json::from_value(reply.data["keep_seen"].clone()).ok();
                match serde_json::from_value::<crate::cluster::ClusterView>(reply.data) {
                    Ok(v) => {
                        print!("{}", v.to_text());
                        if v.enabled {
                            match scaler.filter(|s| !s.is_empty()) {
                                Some(s) => println!("scaler: {s}"),
                                None => println!("scaler: none elected"),
                            }
                        }
                        if let Some(k) = keep_seen.filter(|k| k.enabled) {
                            println!(
                                "idler keep-seen: every {} ms while serving; {} rounds, {} \
                                 requests to {} peer gear(s) in the last, {} failed",
                                k.interval_ms, k.rounds, k.sent, k.peers, k.failed
                            );
                        }
                    }
                    Err(e) => {
                        eprintln!("gearlb: unexpected cluster view: {e}");
                        return 1;
                    }
                }
            }
        }
        _ => {
            if !reply.message.is_empty() {
                if reply.exit_code == 0 {
                    println!("{}", reply.message);
                } else {
                    eprintln!("{}", reply.message);
                }
            }
        }
    }
    reply.exit_code
}

/// A duration flag's value in milliseconds; a bad one is said and exits 64.
fn duration_ms(flag: &str, value: Option<&str>) -> Result<Option<u64>, i32> {
    match value.map(config::parse_duration) {
        None => Ok(None),
        Some(Ok(d)) => Ok(Some(d.as_millis() as u64)),
        Some(Err(why)) => {
            eprintln!("gearlb: {flag} {why}; use {}", config::DURATION_RULE);
            Err(EXIT_CONFIG)
        }
    }
}

/// `ctl services` for a person, from the JSON report.
fn services_text(data: &serde_json::Value) -> String {
    let mut out = String::new();
    let s = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
    for svc in data["services"].as_array().into_iter().flatten() {
        let origin = match svc["origin"]["path"].as_str() {
            Some(p) => format!("{} {p}", s(&svc["origin"]["kind"])),
            None => s(&svc["origin"]["kind"]),
        };
        out.push_str(&format!(
            "{} ({origin}){}{}\n  hosts {} paths {}{}\n",
            s(&svc["name"]),
            if svc["up"].as_bool() == Some(true) {
                ""
            } else {
                " DOWN"
            },
            if svc["retiring"].as_bool() == Some(true) {
                " retiring"
            } else {
                ""
            },
            svc["hosts"],
            svc["paths"],
            svc["listen"]
                .as_str()
                .map(|l| format!(" listener {l}"))
                .unwrap_or_default(),
        ));
        if let Some(v) = svc["versions"].as_object() {
            let groups: Vec<String> = v["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
                .map(|(i, g)| {
                    let mark = if v["active"].as_u64() == Some(i as u64) {
                        " (active)"
                    } else if v["canary"].as_u64() == Some(i as u64) {
                        " (canary)"
                    } else {
                        ""
                    };
                    format!("{}{mark}", g)
                })
                .collect();
            out.push_str(&format!("  versions: {}\n", groups.join(" < ")));
        }
        for b in svc["backends"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  {:<24} {:<22} {:<9} {} in flight {}{}{}{}\n",
                s(&b["name"]),
                s(&b["addr"]),
                s(&b["state"]),
                s(&b["version"]),
                b["outstanding"],
                if b["backup"].as_bool() == Some(true) {
                    " backup"
                } else {
                    ""
                },
                b["queued"]
                    .as_u64()
                    .filter(|q| *q > 0)
                    .map(|q| format!(" queued {q}"))
                    .unwrap_or_default(),
                b["lease_left_s"]
                    .as_f64()
                    .map(|l| format!(" lease {l:.0}s"))
                    .unwrap_or_default(),
            ));
        }
    }
    for r in data["refused"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "refused: {}: {}\n",
            s(&r["service"]),
            s(&r["why"])
        ));
    }
    for f in data["files"].as_array().into_iter().flatten() {
        if let Some(p) = f["problem"].as_str() {
            out.push_str(&format!("file refused: {p}\n"));
        }
    }
    out
}
