//! The stats socket's commands: parsing a line into commands and words (HAProxy's
//! quoting), each command into a [`Command`] (with `show stat`'s filters), the usage
//! text and HAProxy's answers to what it does not understand.

use crate::status::csv::{self, Filter};

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

pub(super) fn usage(first_line: &str) -> String {
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
pub(super) fn atoi(s: &str) -> i64 {
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
