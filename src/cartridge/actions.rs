//! The node's `bin/control` actions: `start` `stop` `restart` `reload` `force-reload`
//! `status` `tidy` `update-cluster` `disable-server` `enable-server` (any other exits
//! 0): the daemon's life, and the calls that change what the balancer routes.

use std::collections::BTreeMap;
use std::time::Duration;

use super::convention::{additions, load_config, words, Out, Overlay, Paths};
use super::pending::{call, call_or_record, describe_bad, report, Outcome};
use super::{daemon, node, registry};
use crate::config::{self, Env};
use crate::control::Request;
use crate::rotation::{Op, RotationOp};

/// How long `start` waits for the balancer to serve.
const START_TIMEOUT: Duration = Duration::from_secs(30);

pub(super) fn control_action(
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
                        crate::gear::EXIT_BAD_ENTRIES
                    } else {
                        code
                    })
                }
                Err(e) if invalid.get() => {
                    out.error(e);
                    Ok(crate::gear::EXIT_BAD_ENTRIES)
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
            service: None,
        };
        let reply = call_or_record(&cfg, request, |p| {
            let names = super::registry::Names::of(&cfg.gear);
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
