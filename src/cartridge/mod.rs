//! The cartridge: what the node platform runs in a balancer gear, in Rust.
//!
//! Owns the node's calling convention for `bin/control`, `bin/setup` and the
//! publish/subscribe hooks, which are one-line scripts that `exec gearlb cartridge …`
//! (nodes run bash 4.1/4.2, whose quirks no logic should meet). It is driven exactly as
//! origin-server's v2 node drives a web-proxy cartridge (`v2_cart_model.rb`
//! `do_control`, `cartridge_actions.rb`): the gear's environment only; arguments joined
//! into one shell-escaped word; the gear's uuids naming gears; and **any nonzero exit
//! aborting the deploy or restart in progress** (`ShellExecutionException`, which the
//! node's `rescue => e` does not catch). So an action exits nonzero only when the
//! platform should stop: the balancer cannot start, an argument is not what the node
//! ever sends, or a call could be neither applied nor kept.
//!
//! Actions: `start` `stop` `restart` `reload` `force-reload` `status` `tidy`
//! `update-cluster` `disable-server` `enable-server`; any other exits 0. Calls that
//! change what the balancer routes (`update-cluster`, `disable-server`,
//! `enable-server`, the peer list) go to the running balancer over its control socket;
//! while it is stopped they are recorded (see [`crate::state::Pending`]) and applied at
//! its start, as the old cartridge rewrote its configuration even when stopped. Output
//! lines carry the node's prefixes `CLIENT_RESULT:`, `CLIENT_MESSAGE:`, `CLIENT_ERROR:`.

pub mod daemon;
pub mod node;
pub mod registry;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{self, Config, Env, ProcessEnv};
use crate::control::{self, ClientError, Reply, Request};
use crate::rotation::{Op, RotationOp};
use crate::state::{Pending, StateStore};

/// How long `start` waits for the balancer to serve.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a call waits for a balancer that is starting (it holds the state lock but
/// does not answer on its control socket yet).
const STARTING_TIMEOUT: Duration = Duration::from_secs(30);

/// What the node runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    /// `bin/control ACTION [ARGS…]`.
    Control { action: String, args: Vec<String> },
    /// `bin/setup [--version V]`.
    Setup { args: Vec<String> },
    /// `hooks/publish-gearlb-peer <gear_name> <namespace> <gear_uuid>`.
    PublishPeer { args: Vec<String> },
    /// `hooks/set-gearlb-peers <gear_name> <namespace> <gear_uuid> "<list>"`.
    SetPeers { args: Vec<String> },
}

/// The process environment with some variables added (those `start` computes).
struct Overlay<'a> {
    base: &'a dyn Env,
    extra: &'a BTreeMap<String, String>,
}

impl Env for Overlay<'_> {
    fn var(&self, name: &str) -> Option<String> {
        self.extra
            .get(name)
            .cloned()
            .filter(|v| !v.is_empty())
            .or_else(|| self.base.var(name))
    }
}

/// Where the cartridge keeps things.
struct Paths {
    /// The cartridge directory (`$OPENSHIFT_GEARLB_DIR`).
    dir: PathBuf,
    conf: PathBuf,
    pidfile: PathBuf,
    log_dir: PathBuf,
}

impl Paths {
    fn find(env: &dyn Env) -> Result<Paths, String> {
        let dir = match env.var("OPENSHIFT_GEARLB_DIR") {
            Some(d) => PathBuf::from(d),
            None => std::env::current_exe()
                .ok()
                .and_then(|exe| Some(exe.parent()?.parent()?.to_path_buf()))
                .ok_or(
                    "OPENSHIFT_GEARLB_DIR is not set and the cartridge directory cannot be found",
                )?,
        };
        let log_dir = env
            .var("OPENSHIFT_GEARLB_LOG_DIR")
            .or_else(|| env.var("OPENSHIFT_LOG_DIR"))
            .map(PathBuf::from)
            .unwrap_or_else(|| dir.join("logs"));
        Ok(Paths {
            conf: dir.join("conf").join("gearlb.toml"),
            pidfile: dir.join("run").join("gearlb.pid"),
            log_dir,
            dir,
        })
    }

    fn conf(&self) -> Option<&Path> {
        self.conf.exists().then_some(self.conf.as_path())
    }
}

/// Lines for the node, collected and printed once (stdout: the node logs it and hands
/// `CLIENT_*` lines to the user).
#[derive(Default)]
struct Out(Vec<String>);

impl Out {
    fn result(&mut self, s: impl AsRef<str>) {
        self.prefixed("CLIENT_RESULT", s.as_ref());
    }
    fn message(&mut self, s: impl AsRef<str>) {
        self.prefixed("CLIENT_MESSAGE", s.as_ref());
    }
    fn error(&mut self, s: impl AsRef<str>) {
        self.prefixed("CLIENT_ERROR", s.as_ref());
    }
    fn plain(&mut self, s: impl Into<String>) {
        self.0.push(s.into());
    }
    fn prefixed(&mut self, prefix: &str, s: &str) {
        for line in s.lines().filter(|l| !l.trim().is_empty()) {
            self.0.push(format!("{prefix}: {line}"));
        }
    }
    fn print(&self) {
        for l in &self.0 {
            println!("{l}");
        }
    }
}

/// Run one invocation; returns the exit code.
pub fn main(inv: Invocation) -> i32 {
    let mut out = Out::default();
    let code = match run(inv, &ProcessEnv, &mut out) {
        Ok(code) => code,
        Err(e) => {
            out.error(e);
            1
        }
    };
    out.print();
    code
}

fn run(inv: Invocation, env: &dyn Env, out: &mut Out) -> Result<i32, String> {
    match inv {
        Invocation::Control { action, args } => control_action(&action, &args, env, out),
        Invocation::Setup { args } => setup(&args, env, out),
        Invocation::PublishPeer { args } => publish_peer(&args, env, out),
        Invocation::SetPeers { args } => {
            // `<gear_name> <namespace> <gear_uuid> "<list>"`: the list is everything
            // after the first three (one word as the broker sends it, or several).
            let list: Vec<String> = args.iter().skip(3).cloned().collect();
            let paths = Paths::find(env)?;
            let extra = additions(env);
            let cfg = load_config(&paths, env, &extra, out)?;
            let reply = call_or_record(&cfg, Request::SetPeers { args: list.clone() }, |p| {
                crate::gear::parse_peers(&list).map_err(|bad| describe_bad(&bad))?;
                p.set_peers = Some(list.clone());
                Ok("peer list".to_string())
            })?;
            Ok(report(reply, out))
        }
    }
}

/// The variables `start` (and `reload`) add to the gear's environment: the local web
/// server and the advertised address (see [`node`]).
fn additions(env: &dyn Env) -> BTreeMap<String, String> {
    let mut extra = BTreeMap::new();
    if env.var("GEARLB_LOCAL_GEAR").is_none() {
        if let Some(a) = node::local_gear(env) {
            extra.insert("GEARLB_LOCAL_GEAR".to_string(), a);
        }
    }
    if env.var("GEARLB_GOSSIP_ADVERTISE").is_none() {
        if let Some((a, _)) = node::advertise(env) {
            extra.insert("GEARLB_GOSSIP_ADVERTISE".to_string(), a.to_string());
        }
    }
    extra
}

fn load_config(
    paths: &Paths,
    env: &dyn Env,
    extra: &BTreeMap<String, String>,
    out: &mut Out,
) -> Result<Config, String> {
    let overlay = Overlay { base: env, extra };
    config::load(paths.conf(), &overlay).map_err(|e| {
        out.error("gearlb configuration has problems:");
        for p in &e.0 {
            out.error(format!("  {p}"));
        }
        "fix them in conf/gearlb.toml or the gear's environment".to_string()
    })
}

/// The words of the node's one-word argument (or of several words).
fn words(args: &[String]) -> Vec<String> {
    args.iter()
        .flat_map(|a| a.split_whitespace())
        .map(str::to_string)
        .collect()
}

fn control_action(
    action: &str,
    args: &[String],
    env: &dyn Env,
    out: &mut Out,
) -> Result<i32, String> {
    let paths = Paths::find(env)?;
    match action {
        "start" => start(&paths, env, out),
        "stop" => stop(&paths, env, out),
        "restart" => {
            let code = stop(&paths, env, out)?;
            if code != 0 {
                return Ok(code);
            }
            start(&paths, env, out)
        }
        "reload" | "force-reload" => {
            if running(&paths, env).is_some() {
                reload(&paths, env, out)
            } else if action == "reload" {
                start(&paths, env, out)
            } else {
                out.result("gearlb instance is stopped: nothing to reload");
                Ok(0)
            }
        }
        "status" => {
            match running(&paths, env) {
                Some(_) => out.result("gearlb instance is running"),
                None => out.result("gearlb instance is stopped"),
            }
            Ok(0)
        }
        "tidy" => {
            out.message(format!(
                "Emptying gearlb logs in dir: {}",
                paths.log_dir.display()
            ));
            daemon::tidy(&paths.log_dir)
                .map_err(|e| format!("tidy {}: {e}", paths.log_dir.display()))?;
            Ok(0)
        }
        "update-cluster" => {
            let extra = additions(env);
            let cfg = load_config(&paths, env, &extra, out)?;
            let entries = words(args);
            if entries.is_empty() {
                out.message(
                    "update-cluster with no web gear: the node's registry lists none, so remote gears are removed (this gear's own web server stays)",
                );
            }
            // Invalid entries are reported and skipped with exit 22, stopped or not.
            let invalid = std::cell::Cell::new(false);
            let reply = call_or_record(
                &cfg,
                Request::UpdateCluster {
                    args: entries.clone(),
                },
                |p| {
                    let parsed = crate::gear::parse_entries(&entries);
                    invalid.set(!parsed.invalid.is_empty());
                    if parsed.valid.is_empty() && !parsed.invalid.is_empty() {
                        return Err(format!(
                            "no valid entry; nothing recorded\n{}",
                            describe_bad(&parsed.invalid)
                        ));
                    }
                    p.update_cluster = Some(entries.clone());
                    let mut what = format!("gear list ({} gear(s))", parsed.valid.len());
                    if !parsed.invalid.is_empty() {
                        what.push_str(&format!("; skipped:\n{}", describe_bad(&parsed.invalid)));
                    }
                    Ok(what)
                },
            );
            match reply {
                Ok(r) => {
                    let code = report(r, out);
                    Ok(if invalid.get() && code == 0 {
                        crate::app::EXIT_BAD_ENTRIES
                    } else {
                        code
                    })
                }
                Err(e) if invalid.get() => {
                    out.error(e);
                    Ok(crate::app::EXIT_BAD_ENTRIES)
                }
                Err(e) => Err(e),
            }
        }
        "disable-server" => rotate(&paths, env, args, Op::Out, out),
        "enable-server" => rotate(&paths, env, args, Op::In, out),
        _ => Ok(0),
    }
}

/// The running balancer's pid: from the pid file, else as its control socket says.
fn running(paths: &Paths, env: &dyn Env) -> Option<i32> {
    if let Some(pid) = daemon::running_pid(&paths.pidfile) {
        return Some(pid);
    }
    let extra = BTreeMap::new();
    let overlay = Overlay {
        base: env,
        extra: &extra,
    };
    // The socket is where the gear's environment puts it, even when the file has since
    // been broken by an edit.
    let socket = config::load(paths.conf(), &overlay)
        .map(|c| c.control.socket)
        .unwrap_or_else(|_| paths.dir.join("run").join("control.sock"));
    let reply = call(&socket, &Request::Status).ok()?;
    let pid = reply.data.get("pid")?.as_i64()? as i32;
    daemon::is_balancer(pid).then_some(pid)
}

fn start(paths: &Paths, env: &dyn Env, out: &mut Out) -> Result<i32, String> {
    if running(paths, env).is_some() {
        out.result("gearlb instance is already running");
        return Ok(0);
    }
    let extra = additions(env);
    let cfg = load_config(paths, env, &extra, out)?;
    if let Err(e) = crate::state::dir_writable(&cfg.state.dir) {
        return Err(format!(
            "state.dir {} is not writable: {e}",
            cfg.state.dir.display()
        ));
    }
    if cfg.cluster.gossip() {
        match node::advertise(&Overlay { base: env, extra: &extra }) {
            None => out.message("no public address found for this balancer (node.conf PUBLIC_IP, OPENSHIFT_GEAR_DNS, OPENSHIFT_GEARLB_IP): other balancers may not reach it"),
            Some((a, how)) if how.contains("only") => {
                out.message(format!("other balancers reach this one at {a}, from {how}"))
            }
            Some(_) => {}
        }
    }
    for d in [paths.dir.join("run"), paths.log_dir.clone()] {
        std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the gearlb binary: {e}"))?;
    let sink = daemon::LogSink::choose(env.var(daemon::LOGSHIFTER_ENV), &paths.log_dir);
    let extra_env: Vec<(String, String)> = extra.into_iter().collect();
    let mut started = daemon::spawn(&exe, paths.conf(), &extra_env, &paths.dir, &sink)
        .map_err(|e| format!("cannot start gearlb: {e}"))?;
    let pid = started.child.id();
    daemon::write_pidfile(&paths.pidfile, pid)
        .map_err(|e| format!("{}: {e}", paths.pidfile.display()))?;
    let deadline = std::time::Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = started.child.try_wait() {
            let _ = std::fs::remove_file(&paths.pidfile);
            if let Some(mut s) = started.shifter.take() {
                let _ = s.wait();
            }
            out.error(format!("gearlb did not start ({status}); last log lines:"));
            for l in daemon::log_tail(&sink, 10) {
                out.error(format!("  {l}"));
            }
            return Ok(1);
        }
        if let Ok(r) = call(&cfg.control.socket, &Request::Status) {
            if r.data.get("pid").and_then(|p| p.as_u64()) == Some(u64::from(pid)) {
                out.result("gearlb instance is started");
                return Ok(0);
            }
        }
        if std::time::Instant::now() >= deadline {
            out.error(format!(
                "gearlb (pid {pid}) does not answer on {} after {START_TIMEOUT:?}",
                cfg.control.socket.display()
            ));
            return Ok(1);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn stop(paths: &Paths, env: &dyn Env, out: &mut Out) -> Result<i32, String> {
    let Some(pid) = running(paths, env) else {
        let _ = std::fs::remove_file(&paths.pidfile);
        out.result("gearlb instance is already stopped");
        return Ok(0);
    };
    let extra = BTreeMap::new();
    let grace = config::load(
        paths.conf(),
        &Overlay {
            base: env,
            extra: &extra,
        },
    )
    .map(|c| c.timeouts.shutdown_grace)
    .unwrap_or(Duration::from_secs(30));
    if daemon::stop(pid, grace + Duration::from_secs(5)) {
        out.message("gearlb did not stop in time: killed");
    }
    if daemon::alive(pid) {
        out.error(format!("gearlb (pid {pid}) could not be stopped"));
        return Ok(1);
    }
    let _ = std::fs::remove_file(&paths.pidfile);
    out.result("gearlb instance is stopped");
    Ok(0)
}

fn reload(paths: &Paths, env: &dyn Env, out: &mut Out) -> Result<i32, String> {
    let extra = additions(env);
    let cfg = load_config(paths, env, &extra, out)?;
    // The balancer re-reads its file with the gear's current variables.
    let mut vars: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("OPENSHIFT_") || k.starts_with("GEARLB_"))
        .collect();
    vars.extend(extra);
    let reply =
        call(&cfg.control.socket, &Request::Reload { env: vars }).map_err(|e| e.to_string())?;
    Ok(report(Outcome::Applied(reply), out))
}

/// `disable-server|enable-server [persist] <gear-uuid>...` (one word or several).
fn rotate(
    paths: &Paths,
    env: &dyn Env,
    args: &[String],
    op: Op,
    out: &mut Out,
) -> Result<i32, String> {
    let extra = additions(env);
    let cfg = load_config(paths, env, &extra, out)?;
    let gears: Vec<String> = words(args).into_iter().filter(|w| w != "persist").collect();
    if gears.is_empty() {
        return Err("no gear named (expected [persist] <gear-uuid>...)".into());
    }
    if let Some(bad) = gears.iter().find(|g| !registry::is_uuid(g)) {
        return Err(format!(
            "{:?} is not a gear uuid: nothing changed",
            crate::gear::printable(bad)
        ));
    }
    let mut code = 0;
    for gear in &gears {
        let request = Request::Rotate {
            gear: gear.clone(),
            op,
            timeout_ms: None,
            node: true,
        };
        let reply = call_or_record(&cfg, request, |p| {
            let names = crate::app::gear_names(&cfg);
            let reg = cfg
                .gear
                .homedir
                .as_deref()
                .map(registry::path)
                .map(|path| registry::Registry::load(&path).unwrap_or_default())
                .unwrap_or_default();
            let label = registry::label_for_uuid(gear, &names, &reg).ok_or_else(|| {
                format!("cannot name gear {gear}: OPENSHIFT_NAMESPACE is not set")
            })?;
            let now_us = crate::rotation::Hlc::default().now();
            // Later than anything already recorded for the gear.
            let ts = p
                .rotations
                .iter()
                .filter(|o| o.gear == label)
                .map(|o| o.ts + 1)
                .fold(now_us, u64::max);
            let deadline_ms = match op {
                Op::Out => {
                    crate::rotation::unix_ms().saturating_add(cfg.rotate.timeout.as_millis() as u64)
                }
                Op::In => 0,
            };
            p.add_rotation(RotationOp {
                gear: label.clone(),
                op,
                ts,
                by: cfg
                    .cluster
                    .node_id
                    .clone()
                    .or_else(|| cfg.gear.uuid.clone())
                    .unwrap_or_else(|| "self".into()),
                deadline_ms,
            });
            Ok(format!(
                "{} of gear {label}",
                match op {
                    Op::Out => "rotate-out",
                    Op::In => "rotate-in",
                }
            ))
        })?;
        let c = match &reply {
            Outcome::Applied(r) => {
                if !r.data.is_null() {
                    out.plain(serde_json::to_string(&r.data).unwrap_or_default());
                }
                if r.exit_code == 0 {
                    out.message(&r.message);
                } else {
                    out.error(&r.message);
                }
                r.exit_code
            }
            Outcome::Recorded(what) => {
                out.result(format!(
                    "gearlb is stopped: {what} recorded; applied when it starts"
                ));
                0
            }
        };
        if c != 0 {
            code = c;
        }
    }
    Ok(code)
}

/// A call's fate: applied by the running balancer, or recorded for its start.
enum Outcome {
    Applied(Reply),
    Recorded(String),
}

/// Send `request` to the running balancer; when it is stopped, `record` adds the call
/// to the pending file (under the state lock, so a balancer starting meanwhile either
/// sees it or is the one that answers). `record` returns what was recorded, or why the
/// call is refused.
fn call_or_record(
    cfg: &Config,
    request: Request,
    record: impl FnOnce(&mut Pending) -> Result<String, String>,
) -> Result<Outcome, String> {
    let socket = &cfg.control.socket;
    let store = StateStore::new(&cfg.state.dir);
    let mut record = Some(record);
    let deadline = std::time::Instant::now() + STARTING_TIMEOUT;
    loop {
        match call(socket, &request) {
            Ok(reply) => return Ok(Outcome::Applied(reply)),
            Err(ClientError::Connect { source, .. })
                if source.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                return Err(format!(
                    "{} belongs to another user: {source}",
                    socket.display()
                ))
            }
            Err(ClientError::Connect { .. }) => {}
            Err(e) => return Err(e.to_string()),
        }
        // Not answering: stopped, or starting (it holds the lock before it answers).
        match store.try_lock().map_err(|e| e.to_string())? {
            Some(lock) => {
                let mut pending = store
                    .load_pending()
                    .map_err(|e| e.to_string())?
                    .unwrap_or_default();
                let Some(record) = record.take() else {
                    return Err("internal: call recorded twice".into());
                };
                let what = record(&mut pending)?;
                store.save_pending(&lock, &pending).map_err(|e| {
                    format!("gearlb is stopped and the call could not be kept: {e}")
                })?;
                return Ok(Outcome::Recorded(what));
            }
            None if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            None => {
                return Err(format!(
                    "gearlb holds {} but does not answer on {}",
                    cfg.state.dir.display(),
                    socket.display()
                ))
            }
        }
    }
}

/// Print a reply the node's way; its exit code.
fn report(outcome: Outcome, out: &mut Out) -> i32 {
    match outcome {
        Outcome::Applied(r) => {
            if r.exit_code == 0 {
                out.result(&r.message);
            } else {
                out.error(&r.message);
            }
            r.exit_code
        }
        Outcome::Recorded(what) => {
            out.result(format!(
                "gearlb is stopped: {what} recorded; applied when it starts"
            ));
            0
        }
    }
}

fn describe_bad(bad: &[crate::gear::BadEntry]) -> String {
    bad.iter()
        .map(|b| format!("invalid entry {:?}: {}", b.entry, b.reason))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `bin/setup [--version V]`: the directories and a default `conf/gearlb.toml`; an
/// existing one (the user's) is kept as it is.
fn setup(args: &[String], env: &dyn Env, out: &mut Out) -> Result<i32, String> {
    let paths = Paths::find(env)?;
    let mut version = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-v" | "--version" => version = it.next().cloned(),
            _ => {}
        }
    }
    for d in ["conf", "run", "env"] {
        let p = paths.dir.join(d);
        std::fs::create_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if !paths.conf.exists() {
        std::fs::write(&paths.conf, DEFAULT_CONF)
            .map_err(|e| format!("{}: {e}", paths.conf.display()))?;
    }
    if let Some(v) = version {
        let p = paths.dir.join("env").join("OPENSHIFT_GEARLB_VERSION");
        std::fs::write(&p, format!("{v}\n")).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    out.result("gearlb cartridge set up");
    Ok(0)
}

/// The configuration `setup` writes: the gear environment supplies everything else.
pub const DEFAULT_CONF: &str =
    "# gearlb configuration of this gear. The gear environment supplies the listen
# addresses, the identity and secret of the balancers, the state directory and the
# broker; settings here apply on top (see `gearlb check`, and README for every key).
# This file is yours: setup never overwrites it.

[timeouts]
client = \"1m\"
server = \"1m\"
tunnel = \"1h\"
";

/// `publish-gearlb-peer <gear_name> <namespace> <gear_uuid>`: how the other balancers
/// reach this one, `<gear_uuid>|<ip>:<port>` (its public HTTP endpoint, which carries
/// gossip too).
fn publish_peer(args: &[String], env: &dyn Env, out: &mut Out) -> Result<i32, String> {
    let uuid = env
        .var("OPENSHIFT_GEAR_UUID")
        .or_else(|| args.get(2).cloned())
        .ok_or("OPENSHIFT_GEAR_UUID is not set")?;
    let (addr, _) = node::advertise(env).ok_or(
        "no address to publish: OPENSHIFT_GEARLB_IP and OPENSHIFT_GEARLB_PORT are not set",
    )?;
    out.plain(format!("{uuid}|{addr}"));
    Ok(0)
}

/// One control-socket call, on a small runtime of its own.
fn call(socket: &Path, request: &Request) -> Result<Reply, ClientError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| ClientError::Io {
            path: socket.to_path_buf(),
            source,
        })?;
    rt.block_on(control::call(socket, request))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_nodes_one_word_and_many_words_are_the_same() {
        assert_eq!(
            words(&["persist 5a1e01 5a1e02".into()]),
            vec!["persist", "5a1e01", "5a1e02"]
        );
        assert_eq!(
            words(&["persist".into(), "5a1e01".into()]),
            vec!["persist", "5a1e01"]
        );
        assert!(words(&["".into()]).is_empty(), "the node's '' is no word");
        assert!(words(&[]).is_empty());
    }

    #[test]
    fn output_lines_carry_the_nodes_prefixes() {
        let mut out = Out::default();
        out.result("started");
        out.error("two\nlines\n\n");
        out.plain("{\"status\":\"success\"}");
        assert_eq!(
            out.0,
            vec![
                "CLIENT_RESULT: started",
                "CLIENT_ERROR: two",
                "CLIENT_ERROR: lines",
                "{\"status\":\"success\"}"
            ]
        );
    }

    #[test]
    fn setup_keeps_the_users_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let cart = dir.path().join("gearlb");
        let e = env(&[("OPENSHIFT_GEARLB_DIR", &format!("{}/", cart.display()))]);
        let mut out = Out::default();
        assert_eq!(
            setup(&["--version".into(), "0.1".into()], &e, &mut out),
            Ok(0)
        );
        let conf = cart.join("conf/gearlb.toml");
        assert_eq!(std::fs::read_to_string(&conf).unwrap(), DEFAULT_CONF);
        assert_eq!(
            std::fs::read_to_string(cart.join("env/OPENSHIFT_GEARLB_VERSION")).unwrap(),
            "0.1\n"
        );
        // The default configuration is valid as it is.
        assert!(config::from_toml(DEFAULT_CONF, &env(&[])).is_ok());
        std::fs::write(&conf, "[timeouts]\nclient = \"5m\"\n").unwrap();
        assert_eq!(setup(&[], &e, &mut out), Ok(0));
        assert_eq!(
            std::fs::read_to_string(&conf).unwrap(),
            "[timeouts]\nclient = \"5m\"\n"
        );
    }

    #[test]
    fn a_call_to_a_stopped_balancer_is_recorded_under_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = Config::default();
        cfg.control.socket = dir.path().join("run/control.sock");
        cfg.state.dir = dir.path().join("data");
        let request = Request::UpdateCluster {
            args: vec!["a-ns.x.com|127.0.0.1:9001".into()],
        };
        let outcome = call_or_record(&cfg, request.clone(), |p| {
            p.update_cluster = Some(vec!["a-ns.x.com|127.0.0.1:9001".into()]);
            Ok("gear list".into())
        })
        .unwrap();
        assert!(matches!(outcome, Outcome::Recorded(ref w) if w == "gear list"));
        let store = StateStore::new(&cfg.state.dir);
        let pending = store.load_pending().unwrap().unwrap();
        assert_eq!(
            pending.update_cluster,
            Some(vec!["a-ns.x.com|127.0.0.1:9001".to_string()])
        );
        // A call refused while recording changes nothing.
        let refused = call_or_record(&cfg, request, |p| {
            p.update_cluster = None;
            Err("no valid entry".into())
        });
        assert_eq!(refused.err().as_deref(), Some("no valid entry"));
        assert_eq!(store.load_pending().unwrap().unwrap(), pending);
    }

    #[test]
    fn publish_peer_prints_the_public_http_address() {
        let e = env(&[
            (node::NODE_CONF_ENV, "/nonexistent/node.conf"),
            ("OPENSHIFT_GEAR_UUID", "5a1e01"),
            ("OPENSHIFT_GEARLB_IP", "127.0.0.5"),
            ("OPENSHIFT_GEARLB_PORT", "8080"),
            ("OPENSHIFT_GEARLB_PROXY_PORT", "35561"),
        ]);
        let mut out = Out::default();
        assert_eq!(publish_peer(&[], &e, &mut out), Ok(0));
        assert_eq!(out.0, vec!["5a1e01|127.0.0.5:35561"]);
        let mut out = Out::default();
        assert!(publish_peer(&[], &env(&[("OPENSHIFT_GEAR_UUID", "x")]), &mut out).is_err());
    }
}
