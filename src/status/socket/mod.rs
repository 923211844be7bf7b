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

mod command;
mod exec;
mod info;
mod listener;
#[cfg(test)]
mod tests;

pub use command::{parse_command, parse_line, Command, Mode};
pub use exec::{run_line, AdminError, Source};
pub use info::info;
pub use listener::{serve, LINE_TIMEOUT, MAX_CLIENTS, MAX_LINE, PROMPT_TIMEOUT, WRITE_TIMEOUT};
