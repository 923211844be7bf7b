//! The balancer as a daemon of the gear: started detached, found again, stopped.
//!
//! Owns how `bin/control start` runs `gearlb run`: in a process group of its own (so
//! nothing the node does to the control script's group reaches it), with no descriptor
//! of the caller (the node reads the script's output until every writer closes it), its
//! output through the node's `logshifter -tag gearlb` when the node has one (rotation
//! within the gear's quota, or syslog, as the node is configured; what the old cartridge
//! did) or appended to `$OPENSHIFT_LOG_DIR/gearlb.log`, and its command line starting
//! with [`PROCESS_NAME`]: the node's watchman (`gear_state_plugin.rb`) counts a gear's
//! daemons to decide whether its web server runs, and skips those whose command line
//! matches `/haproxy/` or `/logshifter/` (bz1133629), as it did the old balancer. Also
//! owns the pid file, telling our process from a reused pid, and `tidy` of the logs.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

/// `argv[0]` of the running balancer: the watchman's rule for web-proxy daemons is a
/// match of `haproxy` in the command line.
pub const PROCESS_NAME: &str = "gearlb-haproxy";
/// The node's log shipper.
pub const LOGSHIFTER: &str = "/usr/bin/logshifter";
/// Names another log shipper, or `none` for the log file (tests, unusual nodes).
pub const LOGSHIFTER_ENV: &str = "GEARLB_LOGSHIFTER";
/// The log file when there is no log shipper.
pub const LOG_FILE: &str = "gearlb.log";

/// Where the balancer's output goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogSink {
    /// `<logshifter> -tag gearlb` reading it on a pipe.
    Logshifter(PathBuf),
    /// Appended to this file.
    File(PathBuf),
}

impl LogSink {
    /// The node's log shipper when present (or the one `GEARLB_LOGSHIFTER` names),
    /// else `log_dir/gearlb.log`.
    pub fn choose(logshifter_override: Option<String>, log_dir: &Path) -> LogSink {
        let shifter = match logshifter_override.as_deref() {
            Some("none") => None,
            Some(p) => Some(PathBuf::from(p)),
            None => Some(PathBuf::from(LOGSHIFTER)),
        };
        match shifter.filter(|p| is_executable(p)) {
            Some(p) => LogSink::Logshifter(p),
            None => LogSink::File(log_dir.join(LOG_FILE)),
        }
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A started balancer: the caller waits for it to serve, then lets go of it.
pub struct Started {
    pub child: Child,
    /// The log shipper reading its output, if any.
    pub shifter: Option<Child>,
}

/// Start `exe run --config conf` detached, with `env` added to the caller's
/// environment and `cwd` as working directory.
pub fn spawn(
    exe: &Path,
    conf: Option<&Path>,
    env: &[(String, String)],
    cwd: &Path,
    sink: &LogSink,
) -> std::io::Result<Started> {
    use std::os::unix::process::CommandExt;
    let (out, shifter) = match sink {
        LogSink::Logshifter(p) => {
            let mut shifter = Command::new(p)
                .args(["-tag", "gearlb"])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .current_dir(cwd)
                .process_group(0)
                .spawn()?;
            let pipe = shifter
                .stdin
                .take()
                .ok_or_else(|| std::io::Error::other("log shipper without a pipe"))?;
            (std::os::fd::OwnedFd::from(pipe), Some(shifter))
        }
        LogSink::File(path) => {
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir)?;
            }
            let f = OpenOptions::new().create(true).append(true).open(path)?;
            (std::os::fd::OwnedFd::from(f), None)
        }
    };
    let err = out.try_clone()?;
    let mut cmd = Command::new(exe);
    cmd.arg0(PROCESS_NAME).arg("run");
    if let Some(c) = conf {
        cmd.arg("--config").arg(c);
    }
    let child = cmd
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .process_group(0)
        .spawn();
    match child {
        Ok(child) => Ok(Started { child, shifter }),
        Err(e) => {
            if let Some(mut s) = shifter {
                let _ = s.kill();
                let _ = s.wait();
            }
            Err(e)
        }
    }
}

/// The pid in a pid file, if it names a running balancer (not a reused pid).
pub fn running_pid(pidfile: &Path) -> Option<i32> {
    let pid: i32 = fs::read_to_string(pidfile).ok()?.trim().parse().ok()?;
    is_balancer(pid).then_some(pid)
}

/// True when `pid` is a live (not zombie) `gearlb` process.
pub fn is_balancer(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let arg0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    let arg0 = String::from_utf8_lossy(arg0);
    let ours = arg0.ends_with(PROCESS_NAME) || arg0.ends_with("gearlb");
    ours && alive(pid)
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the field after the command's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Write the pid file (atomically: a reader never sees half a pid).
pub fn write_pidfile(pidfile: &Path, pid: u32) -> std::io::Result<()> {
    if let Some(dir) = pidfile.parent() {
        fs::create_dir_all(dir)?;
    }
    let tmp = pidfile.with_extension("pid.tmp");
    let mut f = File::create(&tmp)?;
    writeln!(f, "{pid}")?;
    fs::rename(&tmp, pidfile)
}

/// Ask `pid` to stop (SIGTERM: a graceful stop), and kill it when it has not stopped
/// within `grace`. True when it had to be killed.
pub fn stop(pid: i32, grace: Duration) -> bool {
    let Some(p) = Pid::from_raw(pid) else {
        return false;
    };
    let _ = kill_process(p, Signal::TERM);
    let end = Instant::now() + grace;
    while alive(pid) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    let killed = alive(pid);
    if killed {
        let _ = kill_process(p, Signal::KILL);
        let end = Instant::now() + Duration::from_secs(5);
        while alive(pid) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // Gone once its parent (init, for a detached balancer) has reaped it: until then a
    // process table still lists it. Bounded: a parent that never reaps does not hold
    // the node's stop.
    let end = Instant::now() + Duration::from_secs(2);
    while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    killed
}

/// Empty the logs, as the node's `tidy` asks: rotated files are removed; the live log
/// is truncated in place (the balancer appends to it, so it goes on writing at the new
/// end; removing it would leave it writing to a deleted file).
pub fn tidy(log_dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut emptied = Vec::new();
    let entries = match fs::read_dir(log_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(emptied),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == LOG_FILE {
            OpenOptions::new()
                .write(true)
                .open(entry.path())?
                .set_len(0)?;
            emptied.push(entry.path());
        } else if name.starts_with(&format!("{LOG_FILE}.")) || name.starts_with("gearlb.log-") {
            fs::remove_file(entry.path())?;
            emptied.push(entry.path());
        }
    }
    Ok(emptied)
}

/// The last `n` lines of the log file, for a start that failed.
pub fn log_tail(sink: &LogSink, n: usize) -> Vec<String> {
    let LogSink::File(path) = sink else {
        return Vec::new();
    };
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_shipper_is_used_when_present() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            LogSink::choose(Some("none".into()), dir.path()),
            LogSink::File(dir.path().join(LOG_FILE))
        );
        assert_eq!(
            LogSink::choose(Some("/nonexistent/logshifter".into()), dir.path()),
            LogSink::File(dir.path().join(LOG_FILE))
        );
        let shifter = dir.path().join("logshifter");
        fs::write(&shifter, "#!/bin/sh\ncat >/dev/null\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&shifter, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            LogSink::choose(Some(shifter.display().to_string()), dir.path()),
            LogSink::Logshifter(shifter)
        );
    }

    #[test]
    fn tidy_truncates_the_live_log_and_removes_old_ones() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join(LOG_FILE);
        fs::write(&live, "old lines\n").unwrap();
        fs::write(dir.path().join("gearlb.log.1"), "older\n").unwrap();
        fs::write(dir.path().join("php.log"), "not ours\n").unwrap();
        // The writer keeps appending after the truncation.
        let mut writer = OpenOptions::new().append(true).open(&live).unwrap();
        let emptied = tidy(dir.path()).unwrap();
        assert_eq!(emptied.len(), 2);
        writeln!(writer, "new line").unwrap();
        assert_eq!(fs::read_to_string(&live).unwrap(), "new line\n");
        assert!(!dir.path().join("gearlb.log.1").exists());
        assert!(dir.path().join("php.log").exists());
        assert!(tidy(&dir.path().join("missing")).unwrap().is_empty());
    }

    #[test]
    fn our_pid_and_a_reused_one() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("run/gearlb.pid");
        assert_eq!(running_pid(&pidfile), None);
        // This test process is alive but is not a balancer.
        write_pidfile(&pidfile, std::process::id()).unwrap();
        assert_eq!(running_pid(&pidfile), None);
        assert!(alive(std::process::id() as i32));
        assert!(!alive(0));
        fs::write(&pidfile, "garbage").unwrap();
        assert_eq!(running_pid(&pidfile), None);
    }
}
