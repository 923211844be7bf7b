//! The command line: `gearlb run | check | ctl …`, parsed with clap, mapped to exit codes.
//!
//! Owns argument parsing, logging set-up (`--log-format text|json` on stdout,
//! `--log-requests`), the tokio runtime, signal handling for `run`
//! (SIGTERM/SIGINT: graceful stop, a second one stops at once; SIGHUP: reload), and how
//! `ctl` finds the control socket (`--socket`, else the configuration's
//! `control.socket`). Exit codes: 0 ok, 1 failure, 22 invalid `update-cluster` entries,
//! 64 configuration or usage error, 69 balancer not reachable, 77 caller not allowed.

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::app::Server;
use crate::config::{self, ProcessEnv, EXIT_CONFIG};
use crate::memory;

mod ctl;
pub use ctl::{CtlCommand, EXIT_UNAVAILABLE};

#[derive(Debug, Parser)]
#[command(
    name = "gearlb",
    version,
    about = "In-gear HTTP load balancer for scalable applications"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the balancer in the foreground.
    Run {
        /// Configuration file (default: $GEARLB_CONFIG, else built-in defaults + environment).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Log line format on stdout.
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
        /// Log one line per request at info level (as `[log] requests = true`).
        #[arg(long)]
        log_requests: bool,
    },
    /// Local showcase: 3 web gears, 2 gossiping balancers, a broker that really scales.
    Demo,
    /// Validate the configuration (the file, the gear's environment, certificates, the
    /// state directory) as `run` would; exit 64 listing every problem, and say what is
    /// allowed but likely a mistake.
    Check {
        /// Configuration file (default: $GEARLB_CONFIG, else built-in defaults + environment).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// What the node platform runs in a balancer gear (`bin/control`, `bin/setup`
    /// and the hooks exec into this; see the README's cartridge section).
    Cartridge {
        #[command(subcommand)]
        command: CartridgeCommand,
    },
    /// Talk to a running balancer over its control socket.
    Ctl {
        /// Control socket (default: control.socket from the configuration).
        #[arg(long, global = true)]
        socket: Option<PathBuf>,
        /// Configuration file used to find the control socket.
        #[arg(long, short, global = true)]
        config: Option<PathBuf>,
        #[command(subcommand)]
        command: CtlCommand,
    },
}

/// The cartridge's entry points, called with the node's arguments as they come.
#[derive(Debug, Subcommand)]
pub enum CartridgeCommand {
    /// `bin/control ACTION [ARGS...]`: start, stop, restart, reload, force-reload,
    /// status, tidy, update-cluster, disable-server, enable-server (others exit 0).
    Control {
        action: Option<String>,
        #[arg(allow_hyphen_values = true, trailing_var_arg = true)]
        args: Vec<String>,
    },
    /// `bin/setup [--version V]`.
    Setup {
        #[arg(allow_hyphen_values = true, trailing_var_arg = true)]
        args: Vec<String>,
    },
    /// `hooks/publish-gearlb-peer <gear_name> <namespace> <gear_uuid>`.
    PublishPeer {
        #[arg(allow_hyphen_values = true, trailing_var_arg = true)]
        args: Vec<String>,
    },
    /// `hooks/set-gearlb-peers <gear_name> <namespace> <gear_uuid> "<list>"`.
    SetPeers {
        #[arg(allow_hyphen_values = true, trailing_var_arg = true)]
        args: Vec<String>,
    },
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields`, `target`).
    Json,
}

/// Parse arguments, run, and return the process exit code. `release` returns the calling
/// thread's freed heap memory to the system; `run` calls it from idle worker threads
/// (see [`crate::memory`]).
pub fn main(release: Option<memory::Release>) -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_CONFIG } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    match cli.command {
        Command::Run {
            config,
            log_format,
            log_requests,
        } => run(config.as_deref(), log_format, log_requests, release),
        Command::Check { config } => check(config.as_deref()),
        Command::Demo => demo(),
        Command::Cartridge { command } => {
            use crate::cartridge::{self, Invocation};
            cartridge::main(match command {
                CartridgeCommand::Control { action, args } => Invocation::Control {
                    action: action.unwrap_or_default(),
                    args,
                },
                CartridgeCommand::Setup { args } => Invocation::Setup { args },
                CartridgeCommand::PublishPeer { args } => Invocation::PublishPeer { args },
                CartridgeCommand::SetPeers { args } => Invocation::SetPeers { args },
            })
        }
        Command::Ctl {
            socket,
            config,
            command,
        } => match socket.ok_or(()).or_else(|()| ctl_socket(config.as_deref())) {
            Ok(socket) => ctl::ctl(&socket, command),
            Err(code) => code,
        },
    }
}

/// Whether two of this process's descriptors are the same file (the same terminal, log
/// file or pipe).
fn same_file(a: i32, b: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let meta = |fd: i32| std::fs::metadata(format!("/proc/self/fd/{fd}")).ok();
    match (meta(a), meta(b)) {
        (Some(x), Some(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("GEARLB_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stdout);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
}

fn load_config(flag: Option<&Path>) -> Result<config::Config, i32> {
    let path = config::config_path(flag, &ProcessEnv);
    config::load(path.as_deref(), &ProcessEnv).map_err(|e| {
        eprintln!("gearlb: {e}");
        EXIT_CONFIG
    })
}

fn check(flag: Option<&Path>) -> i32 {
    let cfg = match load_config(flag) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Err(e) = crate::state::dir_writable(&cfg.state.dir) {
        eprintln!(
            "gearlb: 1 configuration problem(s):\n  state.dir: {} is not writable: {e}",
            cfg.state.dir.display()
        );
        return EXIT_CONFIG;
    }
    // Certificates are files: read them now, as `run` would.
    if cfg.listen.tls.is_some() || cfg.tls != Default::default() {
        if let Err(problems) = crate::tls::load(&cfg.tls, cfg.proxy.h2c) {
            eprintln!("gearlb: {} configuration problem(s):", problems.len());
            for p in problems {
                eprintln!("  {p}");
            }
            return EXIT_CONFIG;
        }
    }
    for w in cfg.warnings() {
        eprintln!("gearlb: warning: {w}");
    }
    let tls = cfg
        .listen
        .tls
        .map(|a| format!(", https {a}"))
        .unwrap_or_default();
    println!(
        "configuration OK: proxy {}{tls}, status {}, {} backend(s)",
        cfg.listen.proxy,
        cfg.listen.status,
        cfg.backends.len()
    );
    0
}

fn run(
    flag: Option<&Path>,
    log_format: LogFormat,
    log_requests: bool,
    release: Option<memory::Release>,
) -> i32 {
    init_logging(log_format);
    let mut cfg = match load_config(flag) {
        Ok(c) => c,
        Err(code) => return code,
    };
    cfg.log.requests_forced = log_requests;
    for w in cfg.warnings() {
        warn!(key = %w.path, "{}", w.message);
    }
    if let Err(e) = raise_nofile_limit() {
        warn!(error = %e, "could not raise the open-files limit");
    }
    // One worker thread: tokio's current-thread scheduler, an event loop like HAProxy's
    // `nbthread 1` (no work-stealing queues or cross-thread wake-ups on the request path).
    let mut rt = if cfg.runtime.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        if cfg.runtime.threads > 0 {
            b.worker_threads(cfg.runtime.threads);
        }
        b
    };
    rt.enable_all();
    if let Some(release) = release {
        rt.on_thread_park(move || memory::on_park(release));
    }
    let rt = match rt.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gearlb: cannot start the runtime: {e}");
            return 1;
        }
    };
    rt.block_on(async move {
        let server = match Server::bind(cfg).await {
            Ok(s) => s,
            Err(e) => {
                error!("{e:#}");
                // Once: the log line is on stdout, which is often stderr's file too (a
                // terminal, the gear's log).
                if !same_file(1, 2) {
                    eprintln!("gearlb: {e:#}");
                }
                return 1;
            }
        };
        let app = server.app();
        let stop = CancellationToken::new();
        let signals = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
        ) {
            (Ok(t), Ok(i), Ok(h)) => (t, i, h),
            _ => {
                eprintln!("gearlb: cannot install signal handlers");
                return 1;
            }
        };
        let stop2 = stop.clone();
        tokio::spawn(async move {
            let (mut term, mut int, mut hup) = signals;
            loop {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                    _ = hup.recv() => {
                        info!("SIGHUP: reloading configuration");
                        crate::systemd::reloading();
                        let reply = app.reload(&ProcessEnv).await;
                        if reply.exit_code == 0 {
                            info!("{}", reply.message);
                        }
                        crate::systemd::notify("READY=1");
                        continue;
                    }
                }
                if stop2.is_cancelled() {
                    warn!("second stop signal: exiting now");
                    std::process::exit(1);
                }
                info!("stop signal received: graceful stop");
                stop2.cancel();
            }
        });
        server.run(stop).await;
        0
    })
}

/// Raise the soft limit on open files to the hard one (as HAProxy does for `maxconn`).
fn raise_nofile_limit() -> rustix::io::Result<()> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return Ok(());
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        },
    )
}

fn demo() -> i32 {
    // The demo prints its own summary; logs only for problems unless asked.
    if std::env::var_os("GEARLB_LOG").is_none() && std::env::var_os("RUST_LOG").is_none() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
            .with_writer(std::io::stderr)
            .try_init();
    } else {
        init_logging(LogFormat::Text);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gearlb: cannot start the runtime: {e}");
            return 1;
        }
    };
    rt.block_on(async {
        let stop = CancellationToken::new();
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            eprintln!("gearlb: cannot install signal handlers");
            return 1;
        };
        let s = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            s.cancel();
        });
        match crate::demo::run(stop).await {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("gearlb demo: {e:#}");
                1
            }
        }
    })
}

/// The control socket `ctl` talks to when `--socket` is not given: the
/// configuration's.
fn ctl_socket(config_flag: Option<&Path>) -> Result<PathBuf, i32> {
    match load_config(config_flag) {
        Ok(c) => Ok(c.control.socket),
        Err(code) => {
            eprintln!("gearlb: give --socket, or a valid --config to find the control socket");
            Err(code)
        }
    }
}
