//! Carrying out the stats socket's commands: what the socket needs from the
//! application ([`Source`]), running one line against it ([`run_line`]: `show stat`,
//! `show info`, `prompt`, `disable`/`enable server`) and shaping the answers.

use std::future::Future;

use tokio_util::sync::CancellationToken;
use tracing::info;

use super::command::{parse_command, parse_line, usage, Command, Mode};
use super::info::info;
use crate::report::StatusReport;
use crate::status::csv;
use crate::status::source::StatusSource;

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

/// Remove empty lines from an answer: the empty line marks its end.
pub(super) fn no_empty_lines(mut s: String) -> String {
    while s.contains("\n\n") {
        s = s.replace("\n\n", "\n");
    }
    if s == "\n" {
        s.clear();
    }
    s
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
