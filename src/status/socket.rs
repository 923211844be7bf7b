//! The stats socket: HAProxy's stats socket (`stats socket run/stats level admin` of the
//! old cartridge) for the tools written against it: `haproxy_ctld.rb` copies (`show
//! stat`, read line by line), `bin/control`-style `echo "disable server express/<gear>" |
//! socat stdio run/stats`, and people at a `prompt`.
//!
//! Owns the socket's life (bound like the control socket: mode 0600, a stale file
//! replaced, a live one never stolen, removed on stop; only the balancer's own user or
//! root may use it), HAProxy's text protocol (one line of commands separated by `;`,
//! each answer followed by an empty line, the connection closed after the line unless
//! `prompt` switched to interactive mode), and the commands: `help`, `prompt`, `quit`,
//! `show info`, `show stat` (the CSV of [`super::csv`], with HAProxy's
//! `<iid> <type> <sid>` and `up`/`no-maint` filters), `disable server` and `enable
//! server`. What `disable`/`enable` do is the [`Source`]'s business: in gearlb a
//! cluster-wide rotate-out/in (see `App::rotate_server`).
//!
//! Bounds: a command line is at most [`MAX_LINE`] bytes, a line must arrive within
//! [`LINE_TIMEOUT`] ([`PROMPT_TIMEOUT`] at a prompt), an answer must be taken within
//! [`WRITE_TIMEOUT`], and at most [`MAX_CLIENTS`] connections are served at once. Each
//! connection is its own task working on a snapshot of the status, so a slow client
//! delays nobody else.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::csv::{self, Filter};
use super::StatusSource;
use crate::report::StatusReport;

/// Longest command line, in bytes (HAProxy's default `tune.bufsize`).
pub const MAX_LINE: usize = 16 * 1024;
/// Time to send a command line (HAProxy's default `stats timeout`).
pub const LINE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time to send the next line at a prompt (the guide's suggested `stats timeout 2m`).
pub const PROMPT_TIMEOUT: Duration = Duration::from_secs(120);
/// Time a client has to take an answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more are closed at once.
pub const MAX_CLIENTS: usize = 16;

/// What the stats socket needs from the application beyond the status report.
pub trait Source: StatusSource {
    /// Take the server `server` of the `express` proxy out of rotation (`enable` false:
    /// HAProxy's `disable server`) or put it back (`enable server`). Returns without
    /// waiting for the drain.
    fn set_server(
        &self,
        server: &str,
        enable: bool,
    ) -> impl Future<Output = Result<(), AdminError>> + Send;
}

/// Why `disable server` / `enable server` changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminError {
    /// No server of that name (HAProxy's "No such server.").
    NoSuchServer,
    /// Refused, with the reason for the operator (one line).
    Refused(String),
}

/// How the connection goes on after a line (HAProxy's `prompt` modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One line, then the connection closes (the default).
    NonInteractive,
    /// Lines until `quit` or end of input, no prompt.
    Interactive,
    /// As interactive, with a `> ` prompt.
    Prompt,
}

/// One parsed command.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Help,
    Quit,
    /// `prompt` alone (`None`: cycle prompt → non-interactive) or with a mode.
    Prompt(Option<Mode>),
    ShowInfo,
    ShowStat(Filter),
    /// `enable server` (true) or `disable server` (false) of `backend/server`.
    SetServer {
        backend: String,
        server: String,
        enable: bool,
    },
    /// Answered with this text (an error in HAProxy's words).
    Reply(String),
    /// Not a command: the usage, introduced by HAProxy's "Unknown command" line.
    Unknown(String),
}

/// The commands `help` lists.
const USAGE: &[(&str, &str)] = &[
    ("help", "this message"),
    (
        "prompt [n|i|p]",
        "toggle interactive mode with prompt (n: none, i: interactive, p: prompt)",
    ),
    ("quit", "disconnect"),
    ("show info", "report information about the running process"),
    (
        "show stat [<iid>|<proxy> <type> <sid>] [up|no-maint]",
        "report counters for each proxy and server (CSV)",
    ),
    (
        "disable server <backend>/<server>",
        "take a server out of rotation (gearlb: on every balancer, persisted)",
    ),
    (
        "enable server <backend>/<server>",
        "put a server back in rotation (gearlb: on every balancer)",
    ),
];

fn usage(first_line: &str) -> String {
    let mut out = String::from(first_line);
    for (cmd, what) in USAGE {
        out.push_str(&format!("  {cmd:<52}: {what}\n"));
    }
    out
}

/// HAProxy's answer to a line it does not understand: name the first word, and list the
/// commands (those starting with it, when some do).
fn unknown(words: &[String]) -> Command {
    let first = words.first().map(String::as_str).unwrap_or("");
    let shown: String = first.chars().filter(|c| !c.is_control()).take(64).collect();
    let related: Vec<&(&str, &str)> = USAGE
        .iter()
        .filter(|(c, _)| !first.is_empty() && c.split(' ').next() == Some(first))
        .collect();
    if related.is_empty() {
        return Command::Unknown(usage(&format!(
            "Unknown command: '{shown}'. Please enter one of the following commands only:\n"
        )));
    }
    let mut out = format!(
        "Unknown command: '{shown}', but maybe one of the following ones is a better match:\n"
    );
    for (cmd, what) in related {
        out.push_str(&format!("  {cmd:<52}: {what}\n"));
    }
    Command::Unknown(out)
}

/// A line into its commands and their words. Commands are separated by `;`, words by
/// blanks; a backslash makes the next character ordinary (`\;`, `\\`, `\ `), as HAProxy's
/// command line reads it. Empty commands are dropped.
pub fn parse_line(line: &str) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    word.push(n);
                }
                in_word = true;
            }
            ';' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
                if !words.is_empty() {
                    commands.push(std::mem::take(&mut words));
                }
            }
            c if c == ' ' || c == '\t' || c == '\r' || c == '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if !words.is_empty() {
        commands.push(words);
    }
    commands
}

/// C's `atoi`, as HAProxy reads `show stat` numbers: leading digits (and sign), else 0.
fn atoi(s: &str) -> i64 {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let n = digits
        .chars()
        .take_while(char::is_ascii_digit)
        .take(18)
        .fold(0i64, |n, d| n * 10 + i64::from(d as u8 - b'0'));
    if neg {
        -n
    } else {
        n
    }
}

fn parse_show_stat(args: &[String]) -> Command {
    let mut args = args;
    if args.first().map(String::as_str) == Some("domain") {
        match args.get(1).map(String::as_str) {
            Some("proxy") => args = &args[2..],
            Some("resolvers") => {
                return Command::Reply("gearlb has no resolvers statistics.\n".into())
            }
            _ => return Command::Reply("Invalid statistics domain.\n".into()),
        }
    }
    let mut filter = Filter::default();
    if args.len() >= 3 {
        let iid = csv::proxy_id(&args[0])
            .map(i64::from)
            .unwrap_or_else(|| atoi(&args[0]));
        if iid == 0 {
            return Command::Reply("No such proxy.\n".into());
        }
        // Negative numbers select everything, as in HAProxy.
        filter.iid = u32::try_from(iid).ok();
        let types = atoi(&args[1]);
        filter.types = u32::try_from(types).unwrap_or(filter.types);
        filter.sid = u32::try_from(atoi(&args[2])).ok();
        args = &args[3..];
    }
    for a in args {
        match a.as_str() {
            "up" => filter.hide_down = true,
            "no-maint" => filter.hide_maint = true,
            "typed" | "json" => {
                return Command::Reply(format!(
                    "gearlb: 'show stat {a}' is not available; 'show stat' gives the CSV.\n"
                ))
            }
            // HAProxy ignores what it does not know here.
            _ => {}
        }
    }
    Command::ShowStat(filter)
}

fn parse_set_server(args: &[String], enable: bool) -> Command {
    let target = args.first().map(String::as_str).unwrap_or("");
    match target.split_once('/') {
        Some((backend, server)) if !backend.is_empty() && !server.is_empty() => {
            Command::SetServer {
                backend: backend.to_string(),
                server: server.to_string(),
                enable,
            }
        }
        _ => Command::Reply("Require 'backend/server'.\n".into()),
    }
}

/// One command's words into a [`Command`].
pub fn parse_command(words: &[String]) -> Command {
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    match w.as_slice() {
        ["help", ..] => Command::Help,
        ["quit", ..] => Command::Quit,
        ["prompt"] => Command::Prompt(None),
        ["prompt", rest @ ..] => {
            let mut mode = None;
            for a in rest {
                mode = match *a {
                    "n" => Some(Mode::NonInteractive),
                    "i" => Some(Mode::Interactive),
                    // `timed` adds the uptime to the prompt in HAProxy: here a plain one.
                    "p" | "timed" => Some(Mode::Prompt),
                    _ => {
                        return Command::Reply(
                            "Usage: prompt [n|i|p]: non-interactive, interactive, prompt.\n".into(),
                        )
                    }
                };
            }
            Command::Prompt(mode)
        }
        ["show", "info", ..] => Command::ShowInfo,
        ["show", "stat", ..] => parse_show_stat(&words[2..]),
        ["disable", "server", ..] => parse_set_server(&words[2..], false),
        ["enable", "server", ..] => parse_set_server(&words[2..], true),
        _ => unknown(words),
    }
}

/// HAProxy's `Uptime`: `0d 0h00m04s`.
fn uptime(secs: u64) -> String {
    format!(
        "{}d {}h{:02}m{:02}s",
        secs / 86400,
        (secs % 86400) / 3600,
        (secs % 3600) / 60,
        secs % 60
    )
}

/// `show info`: HAProxy's `Name: value` lines, for what gearlb has.
pub fn info(report: &StatusReport, threads: usize, stopping: bool) -> String {
    let f = &report.frontend;
    let s = report.status_listener.as_ref();
    let status = |v: fn(&crate::report::FrontendReport) -> u64| s.map(v).unwrap_or(0);
    let start = crate::time::unix_secs().saturating_sub(report.uptime_secs);
    let nofile = rlimit::getrlimit(rlimit::Resource::NOFILE)
        .map(|(soft, _)| soft)
        .unwrap_or(0);
    let lines: Vec<(&str, String)> = vec![
        ("Name", "gearlb".into()),
        ("Version", report.version.clone()),
        ("Nbthread", threads.to_string()),
        ("Nbproc", "1".into()),
        ("Process_num", "1".into()),
        ("Pid", report.pid.to_string()),
        ("Uptime", uptime(report.uptime_secs)),
        ("Uptime_sec", report.uptime_secs.to_string()),
        ("Start_time_sec", start.to_string()),
        ("Ulimit-n", nofile.to_string()),
        ("Maxconn", f.connections_limit.to_string()),
        ("Hard_maxconn", f.connections_limit.to_string()),
        (
            "CurrConns",
            (f.connections_current + status(|s| s.connections_current)).to_string(),
        ),
        (
            "CumConns",
            (f.connections_total + status(|s| s.connections_total)).to_string(),
        ),
        (
            "CumReq",
            (f.requests_total + status(|s| s.requests_total)).to_string(),
        ),
        ("ConnRate", f.connection_rate.to_string()),
        ("ConnRateLimit", "0".into()),
        ("MaxConnRate", f.connection_rate_max.to_string()),
        ("SessRate", f.connection_rate.to_string()),
        ("SessRateLimit", "0".into()),
        ("MaxSessRate", f.connection_rate_max.to_string()),
        ("node", report.gear_dns.clone().unwrap_or_default()),
        ("description", String::new()),
        ("Stopping", u8::from(stopping).to_string()),
    ];
    let mut out = String::new();
    for (k, v) in lines {
        let v: String = v.chars().filter(|c| !c.is_control()).collect();
        out.push_str(&format!("{k}: {v}\n"));
    }
    out
}

/// Remove empty lines from an answer: the empty line marks its end.
fn no_empty_lines(mut s: String) -> String {
    while s.contains("\n\n") {
        s = s.replace("\n\n", "\n");
    }
    if s == "\n" {
        s.clear();
    }
    s
}

/// Serve the stats socket until `shutdown`; then remove the socket file. `listener` is
/// bound with [`crate::control::bind_socket`].
pub async fn serve<S: Source>(
    listener: UnixListener,
    path: PathBuf,
    source: Arc<S>,
    shutdown: CancellationToken,
) {
    let me = rustix::process::geteuid().as_raw();
    let slots = Arc::new(Semaphore::new(MAX_CLIENTS));
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    warn!(error = %e, "stats socket accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        match stream.peer_cred() {
            Ok(cred) if crate::control::peer_allowed(cred.uid(), me) => {}
            Ok(cred) => {
                warn!(
                    uid = cred.uid(),
                    "stats socket connection from another user refused"
                );
                tokio::spawn(refuse(stream));
                continue;
            }
            Err(e) => {
                warn!(error = %e, "stats socket connection without credentials refused");
                continue;
            }
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            debug!("stats socket: {MAX_CLIENTS} connections already, one closed");
            continue;
        };
        let source = source.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                r = serve_one(stream, &*source, &shutdown) => if let Err(e) = r {
                    debug!(error = %e, "stats socket connection failed");
                },
                _ = shutdown.cancelled() => {}
            }
            drop(slot);
        });
    }
    drop(listener);
    let _ = std::fs::remove_file(&path);
}

/// HAProxy's answer to a client without the level: "Permission denied". The line is read
/// (briefly, never looked at) so the caller sees the answer rather than a broken pipe.
async fn refuse(stream: UnixStream) {
    let (read, mut write) = stream.into_split();
    let mut line = Vec::new();
    let mut reader = BufReader::new(read.take(MAX_LINE as u64));
    let _ = tokio::time::timeout(Duration::from_secs(1), reader.read_until(b'\n', &mut line)).await;
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        write.write_all(b"Permission denied\n\n"),
    )
    .await;
}

/// One line from the client: `None` at the end of input; `Err` for a line too long or
/// late. A last line without its newline still counts (`printf 'show stat' | socat`).
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    limit: Duration,
) -> Result<Option<String>, &'static str> {
    let mut buf = Vec::new();
    let mut bounded = reader.take(MAX_LINE as u64 + 1);
    match tokio::time::timeout(limit, bounded.read_until(b'\n', &mut buf)).await {
        Err(_) => Err("timed out waiting for a command"),
        Ok(Err(_)) => Ok(None),
        Ok(Ok(0)) => Ok(None),
        Ok(Ok(_)) if buf.len() > MAX_LINE => Err("command line too long"),
        Ok(Ok(_)) => Ok(Some(String::from_utf8_lossy(&buf).into_owned())),
    }
}

async fn serve_one<S: Source>(
    stream: UnixStream,
    source: &S,
    shutdown: &CancellationToken,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut mode = Mode::NonInteractive;
    loop {
        let limit = if mode == Mode::Prompt {
            PROMPT_TIMEOUT
        } else {
            LINE_TIMEOUT
        };
        let line = match read_line(&mut reader, limit).await {
            Ok(Some(l)) => l,
            Ok(None) => break,
            Err(why) => {
                let msg = format!(
                    "gearlb: {why} (at most {MAX_LINE} bytes, within {}s).\n\n",
                    limit.as_secs()
                );
                let _ = tokio::time::timeout(WRITE_TIMEOUT, write.write_all(msg.as_bytes())).await;
                break;
            }
        };
        let (out, next, quit) = run_line(&line, mode, source, shutdown).await;
        mode = next;
        match tokio::time::timeout(WRITE_TIMEOUT, write.write_all(out.as_bytes())).await {
            Ok(r) => r?,
            Err(_) => return Err(std::io::Error::other("client did not take the answer")),
        }
        if quit || mode == Mode::NonInteractive {
            break;
        }
    }
    let _ = tokio::time::timeout(WRITE_TIMEOUT, write.shutdown()).await;
    Ok(())
}

/// Carry out one line: the text to send back, the mode after it, and whether `quit`
/// ended the connection.
pub async fn run_line<S: Source>(
    line: &str,
    mut mode: Mode,
    source: &S,
    shutdown: &CancellationToken,
) -> (String, Mode, bool) {
    let commands = parse_line(line);
    let mut out = String::new();
    if commands.is_empty() {
        // An empty line: at a prompt, a new prompt; otherwise the usage, so that the
        // user at least knows how to get one (as HAProxy 1.4).
        if mode == Mode::NonInteractive {
            out.push_str(&usage(
                "Unknown command. Please enter one of the following commands only:\n",
            ));
        }
        out.push('\n');
        if mode == Mode::Prompt {
            out.push_str("> ");
        }
        return (out, mode, false);
    }
    // Consistent answers within one line: one snapshot of the status for all of them.
    let mut report: Option<StatusReport> = None;
    for words in commands {
        let answer = match parse_command(&words) {
            Command::Quit => return (out, mode, true),
            Command::Help => usage("The following commands are valid at this level:\n"),
            Command::Prompt(m) => {
                mode = m.unwrap_or(match mode {
                    Mode::NonInteractive | Mode::Interactive => Mode::Prompt,
                    Mode::Prompt => Mode::NonInteractive,
                });
                String::new()
            }
            Command::ShowInfo => {
                let r = report.get_or_insert_with(|| source.report());
                let threads = tokio::runtime::Handle::current().metrics().num_workers();
                info(r, threads, shutdown.is_cancelled())
            }
            Command::ShowStat(filter) => {
                let r = report.get_or_insert_with(|| source.report());
                csv::render_filtered(r, &filter)
            }
            Command::SetServer {
                backend,
                server,
                enable,
            } => {
                // Whatever happens, the next `show stat` must see the status after it.
                report = None;
                set_server(source, &backend, &server, enable).await
            }
            Command::Reply(text) | Command::Unknown(text) => text,
        };
        out.push_str(&no_empty_lines(answer));
        out.push('\n');
        if mode == Mode::Prompt {
            out.push_str("> ");
        }
    }
    (out, mode, false)
}

/// `disable server` / `enable server`: HAProxy's answers (nothing on success).
async fn set_server<S: Source>(source: &S, backend: &str, server: &str, enable: bool) -> String {
    let verb = if enable { "enable" } else { "disable" };
    let proxy_known = csv::proxy_id(backend).is_some()
        || backend
            .strip_prefix('#')
            .and_then(|id| id.parse::<u32>().ok())
            .is_some_and(|id| id == csv::PROXY_ID || id == csv::STATS_PROXY_ID);
    if !proxy_known {
        return "No such backend.\n".into();
    }
    let is_express = backend == csv::PROXY || backend == format!("#{}", csv::PROXY_ID);
    if !is_express {
        // The `stats` proxy has no server.
        return "No such server.\n".into();
    }
    // `#<sid>`: the server's position in the CSV.
    let name = match server.strip_prefix('#').map(str::parse::<usize>) {
        Some(Ok(sid)) => match source.report().backends.get(sid.wrapping_sub(1)) {
            Some(b) => b.name.clone(),
            None => return "No such server.\n".into(),
        },
        Some(Err(_)) => return "No such server.\n".into(),
        None => server.to_string(),
    };
    match source.set_server(&name, enable).await {
        Ok(()) => {
            info!(server = %name, "stats socket: {verb} server");
            String::new()
        }
        Err(AdminError::NoSuchServer) => "No such server.\n".into(),
        Err(AdminError::Refused(why)) => format!("{why}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn lines_split_into_commands_and_words() {
        assert_eq!(parse_line("show stat\n"), vec![words(&["show", "stat"])]);
        assert_eq!(
            parse_line("show info;show stat\r\n"),
            vec![words(&["show", "info"]), words(&["show", "stat"])]
        );
        assert_eq!(
            parse_line("  disable   server\texpress/gear-a ;; "),
            vec![words(&["disable", "server", "express/gear-a"])]
        );
        assert_eq!(
            parse_line(r"set x a\;b c\\d e\ f"),
            vec![words(&["set", "x", "a;b", r"c\d", "e f"])]
        );
        assert!(parse_line("\n").is_empty());
        assert!(parse_line(" ; ;").is_empty());
    }

    #[test]
    fn commands() {
        let p = |s: &str| parse_command(&parse_line(s)[0]);
        assert_eq!(p("help"), Command::Help);
        assert_eq!(p("quit"), Command::Quit);
        assert_eq!(p("prompt"), Command::Prompt(None));
        assert_eq!(p("prompt i"), Command::Prompt(Some(Mode::Interactive)));
        assert_eq!(p("prompt n"), Command::Prompt(Some(Mode::NonInteractive)));
        assert!(matches!(p("prompt x"), Command::Reply(_)));
        assert_eq!(p("show info"), Command::ShowInfo);
        assert_eq!(p("show stat"), Command::ShowStat(Filter::default()));
        assert_eq!(
            p("disable server express/local-gear"),
            Command::SetServer {
                backend: "express".into(),
                server: "local-gear".into(),
                enable: false
            }
        );
        assert_eq!(
            p("enable server express/gear-web1-ns"),
            Command::SetServer {
                backend: "express".into(),
                server: "gear-web1-ns".into(),
                enable: true
            }
        );
        for bad in [
            "disable server",
            "disable server express",
            "enable server express/",
            "enable server /x",
        ] {
            assert_eq!(
                p(bad),
                Command::Reply("Require 'backend/server'.\n".into()),
                "{bad}"
            );
        }
        match p("frobnicate now") {
            Command::Unknown(t) => {
                assert!(t.starts_with(
                    "Unknown command: 'frobnicate'. Please enter one of the following commands only:\n"
                ));
                assert!(t.contains("show stat"));
            }
            other => panic!("{other:?}"),
        }
        match p("show sess") {
            Command::Unknown(t) => {
                assert!(t.starts_with("Unknown command: 'show', but maybe"));
                assert!(t.contains("show info") && !t.contains("disable server"));
            }
            other => panic!("{other:?}"),
        }
        match p("\u{1b}[2Jx") {
            Command::Unknown(t) => assert!(!t.contains('\u{1b}')),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn show_stat_filters() {
        let p = |s: &str| parse_command(&parse_line(s)[0]);
        let all = Filter::default();
        assert_eq!(p("show stat -1 -1 -1"), Command::ShowStat(all.clone()));
        assert_eq!(
            p("show stat domain proxy -1 -1 -1"),
            Command::ShowStat(all.clone())
        );
        assert_eq!(
            p("show stat express 2 -1"),
            Command::ShowStat(Filter {
                iid: Some(csv::PROXY_ID),
                types: csv::TYPE_BACKEND,
                ..all.clone()
            })
        );
        assert_eq!(
            p("show stat 2 4 3 up"),
            Command::ShowStat(Filter {
                iid: Some(2),
                types: csv::TYPE_SERVER,
                sid: Some(3),
                hide_down: true,
                ..all.clone()
            })
        );
        assert_eq!(
            p("show stat no-maint"),
            Command::ShowStat(Filter {
                hide_maint: true,
                ..all.clone()
            })
        );
        // Two words are not a selector (HAProxy needs all three).
        assert_eq!(p("show stat 2 4"), Command::ShowStat(all.clone()));
        assert_eq!(
            p("show stat nosuch 1 1"),
            Command::Reply("No such proxy.\n".into())
        );
        assert!(matches!(p("show stat typed"), Command::Reply(_)));
        assert!(matches!(p("show stat domain dns"), Command::Reply(_)));
        assert_eq!(atoi("12abc"), 12);
        assert_eq!(atoi("-1"), -1);
        assert_eq!(atoi("x"), 0);
        assert_eq!(atoi(&"9".repeat(40)), 999_999_999_999_999_999);
    }

    /// A balancer with servers `local-gear` and `gear-web1-ns`, recording what is
    /// enabled and disabled.
    struct Fake {
        calls: std::sync::Mutex<Vec<(String, bool)>>,
    }

    impl StatusSource for Fake {
        fn report(&self) -> StatusReport {
            let backend = |name: &str| {
                serde_json::json!({
                    "name": name, "addr": "127.0.0.1:1", "gear_dns": null, "state": "up",
                    "in_subset": true, "last_check": null, "tunnels": 0, "sessions": 0,
                    "sessions_max": 0, "requests_total": 0, "errors": 0,
                    "connect_errors": 0, "response_errors": 0, "timeouts": 0,
                    "responses": {"1xx": 0, "2xx": 0, "3xx": 0, "4xx": 0, "5xx": 0},
                    "connections_open": 0, "connections_idle": 0
                })
            };
            serde_json::from_value(serde_json::json!({
                "version": "9.9.9", "pid": 42, "uptime_secs": 3661, "gear_uuid": null,
                "listen": {"proxy": "127.0.0.1:1", "status": "127.0.0.1:2"},
                "frontend": {
                    "connections_current": 2, "connections_max": 2, "connections_total": 7,
                    "connections_refused": 0, "client_timeouts": 0, "requests_current": 0,
                    "requests_total": 9, "no_backend": 0, "connections_limit": 256,
                    "responses": {"1xx": 0, "2xx": 9, "3xx": 0, "4xx": 0, "5xx": 0}
                },
                "backends": [backend("local-gear"), backend("gear-web1-ns")],
            }))
            .unwrap()
        }
        fn healthy(&self) -> bool {
            true
        }
        fn metrics(&self) -> Result<String, std::fmt::Error> {
            Ok(String::new())
        }
    }

    impl Source for Fake {
        async fn set_server(&self, server: &str, enable: bool) -> Result<(), AdminError> {
            match server {
                "local-gear" | "gear-web1-ns" => {
                    self.calls.lock().unwrap().push((server.into(), enable));
                    Ok(())
                }
                "quorum" => Err(AdminError::Refused("gearlb: no quorum.".into())),
                _ => Err(AdminError::NoSuchServer),
            }
        }
    }

    #[tokio::test]
    async fn lines_as_haproxy_answers_them() {
        let fake = Fake {
            calls: Default::default(),
        };
        let stop = CancellationToken::new();
        let run = |line: &'static str, mode: Mode| {
            let (fake, stop) = (&fake, &stop);
            async move { run_line(line, mode, fake, stop).await }
        };
        // Success is an empty answer: just the empty line that ends it.
        let (out, mode, quit) = run(
            "disable server express/gear-web1-ns\n",
            Mode::NonInteractive,
        )
        .await;
        assert_eq!(
            (out.as_str(), mode, quit),
            ("\n", Mode::NonInteractive, false)
        );
        let (out, ..) = run(
            "enable server express/#1;disable server #2/local-gear",
            Mode::NonInteractive,
        )
        .await;
        assert_eq!(out, "\n\n");
        assert_eq!(
            *fake.calls.lock().unwrap(),
            [
                ("gear-web1-ns".to_string(), false),
                ("local-gear".to_string(), true),
                ("local-gear".to_string(), false)
            ]
        );
        for (line, answer) in [
            ("disable server express/nope", "No such server.\n\n"),
            ("disable server express/#9", "No such server.\n\n"),
            ("disable server stats/x", "No such server.\n\n"),
            ("disable server www/x", "No such backend.\n\n"),
            ("enable server express", "Require 'backend/server'.\n\n"),
            ("enable server express/quorum", "gearlb: no quorum.\n\n"),
        ] {
            assert_eq!(run(line, Mode::NonInteractive).await.0, answer, "{line}");
        }
        assert_eq!(fake.calls.lock().unwrap().len(), 3, "errors change nothing");

        // show info then show stat on one line: two blocks, each ended by an empty line.
        let (out, ..) = run("show info;show stat", Mode::NonInteractive).await;
        let (info, rest) = out.split_once("\n\n").unwrap();
        assert!(info.starts_with("Name: gearlb\nVersion: 9.9.9\n"), "{info}");
        assert!(info.contains("\nPid: 42\n") && info.contains("\nUptime: 0d 1h01m01s\n"));
        assert!(info.contains("\nUptime_sec: 3661\n") && info.contains("\nMaxconn: 256\n"));
        assert!(info.contains("\nCurrConns: 2\n") && info.contains("\nCumConns: 7\n"));
        assert!(rest.starts_with("# pxname,svname,"));
        assert!(rest.ends_with(",\n\n"));
        let backend = rest
            .lines()
            .find(|l| l.starts_with("express,BACKEND,"))
            .unwrap();
        assert_eq!(backend.split(',').nth(4), Some("0"), "scur");
        let (out, ..) = run("show stat express 4 2", Mode::NonInteractive).await;
        let rows: Vec<&str> = out.lines().skip(1).filter(|l| !l.is_empty()).collect();
        assert_eq!(rows.len(), 1);
        assert!(rows[0].starts_with("express,gear-web1-ns,"));

        // Prompt mode: each answer followed by a prompt; `prompt` again leaves it.
        let (out, mode, _) = run("prompt", Mode::NonInteractive).await;
        assert_eq!((out.as_str(), mode), ("\n> ", Mode::Prompt));
        let (out, mode, _) = run("\n", Mode::Prompt).await;
        assert_eq!((out.as_str(), mode), ("\n> ", Mode::Prompt));
        let (out, mode, _) = run("help", Mode::Prompt).await;
        assert!(out.starts_with("The following commands are valid at this level:\n"));
        assert!(out.ends_with("\n\n> ") && mode == Mode::Prompt);
        let (_, mode, _) = run("prompt", Mode::Prompt).await;
        assert_eq!(mode, Mode::NonInteractive);
        let (out, _, quit) = run("show info;quit;show stat", Mode::Interactive).await;
        assert!(quit && !out.contains("pxname"), "nothing after quit");
        // An empty line outside a prompt gets the usage.
        let (out, ..) = run("\n", Mode::NonInteractive).await;
        assert!(out.starts_with("Unknown command.") && out.ends_with("\n\n"));
    }

    #[test]
    fn uptime_as_haproxy() {
        assert_eq!(uptime(4), "0d 0h00m04s");
        assert_eq!(uptime(2 * 86400 + 3 * 3600 + 4 * 60 + 5), "2d 3h04m05s");
    }

    #[test]
    fn answers_never_hold_an_empty_line() {
        assert_eq!(no_empty_lines("a\n\n\nb\n".into()), "a\nb\n");
        assert_eq!(no_empty_lines("\n".into()), "");
        assert_eq!(no_empty_lines(String::new()), "");
    }
}
