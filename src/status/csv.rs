//! The HAProxy-compatible CSV (`/gearlb-status;csv`, `/haproxy-status/;csv`).
//!
//! Owns the column list (HAProxy management guide, "9.1. CSV format", fields 0 to 76 in
//! their documented order: everything HAProxy 1.4/1.5-era parsers read by position, and
//! the later columns up to `algo`) and the mapping of a [`StatusReport`] onto rows: one
//! proxy named `express` with a `FRONTEND` row, one row per server, and a `BACKEND` row,
//! as the old cartridge's `listen express`. As HAProxy does, a field that has no value
//! for a row type (or that gearlb does not measure) is left empty, the header line starts
//! with `# `, and every line ends with a comma.

use std::fmt::Display;

use crate::routing::{BackendState, CheckReport};
use crate::stats::{BackendReport, StatusReport};

/// Column names in HAProxy's order.
pub const COLUMNS: [&str; 77] = [
    "pxname",
    "svname",
    "qcur",
    "qmax",
    "scur",
    "smax",
    "slim",
    "stot",
    "bin",
    "bout",
    "dreq",
    "dresp",
    "ereq",
    "econ",
    "eresp",
    "wretr",
    "wredis",
    "status",
    "weight",
    "act",
    "bck",
    "chkfail",
    "chkdown",
    "lastchg",
    "downtime",
    "qlimit",
    "pid",
    "iid",
    "sid",
    "throttle",
    "lbtot",
    "tracked",
    "type",
    "rate",
    "rate_lim",
    "rate_max",
    "check_status",
    "check_code",
    "check_duration",
    "hrsp_1xx",
    "hrsp_2xx",
    "hrsp_3xx",
    "hrsp_4xx",
    "hrsp_5xx",
    "hrsp_other",
    "hanafail",
    "req_rate",
    "req_rate_max",
    "req_tot",
    "cli_abrt",
    "srv_abrt",
    "comp_in",
    "comp_out",
    "comp_byp",
    "comp_rsp",
    "lastsess",
    "last_chk",
    "last_agt",
    "qtime",
    "ctime",
    "rtime",
    "ttime",
    "agent_status",
    "agent_code",
    "agent_duration",
    "check_desc",
    "agent_desc",
    "check_rise",
    "check_fall",
    "check_health",
    "agent_rise",
    "agent_fall",
    "agent_health",
    "addr",
    "cookie",
    "mode",
    "algo",
];

/// The proxy name of the old cartridge (`listen express`).
pub const PROXY: &str = "express";

/// HAProxy's `pid` (process number, 1 for the only process) and `iid` (proxy id).
const PROCESS_NUM: u32 = 1;
const PROXY_ID: u32 = 1;

/// One CSV line being filled, column by column.
struct Row(Vec<String>);

impl Row {
    fn new(svname: &str) -> Row {
        let mut r = Row(vec![String::new(); COLUMNS.len()]);
        r.set("pxname", PROXY);
        r.set("svname", svname);
        r.set("pid", PROCESS_NUM);
        r.set("iid", PROXY_ID);
        r.set("mode", "http");
        r
    }

    fn set(&mut self, column: &str, value: impl Display) {
        match COLUMNS.iter().position(|c| *c == column) {
            Some(i) => self.0[i] = value.to_string(),
            None => debug_assert!(false, "unknown CSV column {column}"),
        }
    }

    fn set_opt(&mut self, column: &str, value: Option<impl Display>) {
        if let Some(v) = value {
            self.set(column, v);
        }
    }

    fn write(&self, out: &mut String) {
        for v in &self.0 {
            out.push_str(&field(v));
            out.push(',');
        }
        out.push('\n');
    }
}

/// A CSV field: quoted (quotes doubled) only when it holds a comma or a quote, as
/// HAProxy does; line breaks, which no parser of this format expects, become spaces.
fn field(v: &str) -> String {
    let v: String = v
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    if v.contains(',') || v.contains('"') {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v
    }
}

/// HAProxy's `status` of a server.
pub fn server_status(state: BackendState) -> &'static str {
    match state {
        BackendState::Up => "UP",
        BackendState::Down => "DOWN",
        BackendState::Draining => "DRAIN",
        BackendState::Drained => "MAINT",
    }
}

/// HAProxy's `check_status`, `check_code` and `check_desc` of a check result.
pub fn check_status(c: &CheckReport) -> (&'static str, Option<u16>, &'static str) {
    if let Ok(code) = c.result.parse::<u16>() {
        return if c.ok {
            ("L7OK", Some(code), "Layer7 check passed")
        } else {
            ("L7STS", Some(code), "Layer7 wrong status")
        };
    }
    if c.result.starts_with("connect") {
        ("L4CON", None, "Layer4 connection problem")
    } else if c.result.starts_with("timed out") {
        ("L7TOUT", None, "Layer7 timeout")
    } else {
        ("L7RSP", None, "Layer7 invalid response")
    }
}

fn fill_responses(row: &mut Row, r: &crate::stats::ByClass) {
    row.set("hrsp_1xx", r.c1);
    row.set("hrsp_2xx", r.c2);
    row.set("hrsp_3xx", r.c3);
    row.set("hrsp_4xx", r.c4);
    row.set("hrsp_5xx", r.c5);
    row.set("hrsp_other", 0);
}

fn server_row(report: &StatusReport, index: usize, b: &BackendReport) -> Row {
    let mut row = Row::new(&b.name);
    row.set("qcur", 0); // gearlb never queues a request
    row.set("qmax", 0);
    row.set("scur", b.sessions);
    row.set("smax", b.sessions_max.max(b.sessions));
    row.set("stot", b.requests_total);
    row.set("bin", b.bytes_sent);
    row.set("bout", b.bytes_received);
    row.set("dresp", 0);
    row.set("econ", b.connect_errors);
    row.set("eresp", b.response_errors + b.timeouts);
    row.set("wretr", 0); // a failed server is never retried, another one is
    row.set("wredis", b.redispatches);
    row.set("status", server_status(b.state));
    row.set(
        "weight",
        if b.state == BackendState::Draining {
            0
        } else {
            1
        },
    );
    // Backends outside this balancer's subset are its backups.
    row.set("act", u8::from(b.in_subset));
    row.set("bck", u8::from(!b.in_subset));
    row.set("chkfail", b.checks_failed);
    row.set("chkdown", b.down_transitions);
    row.set("lastchg", b.last_change_secs);
    row.set("downtime", b.downtime_secs);
    row.set("sid", index + 1);
    row.set("lbtot", b.requests_total);
    row.set("type", 2);
    row.set("rate", b.request_rate);
    row.set("rate_max", b.request_rate_max.max(b.request_rate));
    if let Some(c) = &b.last_check {
        let (status, code, desc) = check_status(c);
        row.set("check_status", status);
        row.set_opt("check_code", code);
        row.set("check_duration", c.ms);
        row.set("last_chk", &c.result);
        row.set("check_desc", desc);
    }
    fill_responses(&mut row, &b.responses);
    row.set("qtime", 0);
    row.set_opt(
        "rtime",
        b.response_time
            .recent_mean_ms
            .or(b.response_time.mean_ms)
            .map(|ms| ms.round() as u64),
    );
    if let Some(h) = report.health.as_ref().filter(|h| h.enabled) {
        row.set("check_rise", h.rise);
        row.set("check_fall", h.fall);
    }
    row.set("addr", &b.addr);
    row.set("cookie", &b.cookie);
    row
}

fn backend_row(report: &StatusReport) -> Row {
    let bs = &report.backends;
    let sum = |f: fn(&BackendReport) -> u64| bs.iter().map(f).sum::<u64>();
    let usable = |b: &&BackendReport| b.state == BackendState::Up;
    let active = bs.iter().filter(usable).filter(|b| b.in_subset).count();
    let backup = bs.iter().filter(usable).filter(|b| !b.in_subset).count();
    let mut row = Row::new("BACKEND");
    let scur = sum(|b| b.sessions);
    row.set("qcur", 0);
    row.set("qmax", 0);
    row.set("scur", scur);
    // Requests in flight at once on the whole balancer: what reaches this backend.
    row.set("smax", report.frontend.requests_max.max(scur));
    row.set("stot", sum(|b| b.requests_total));
    row.set("bin", sum(|b| b.bytes_sent));
    row.set("bout", sum(|b| b.bytes_received));
    row.set("dreq", 0);
    row.set("dresp", 0);
    row.set("econ", sum(|b| b.connect_errors));
    row.set("eresp", sum(|b| b.response_errors + b.timeouts));
    row.set("wretr", 0);
    row.set("wredis", sum(|b| b.redispatches));
    row.set("status", if active + backup > 0 { "UP" } else { "DOWN" });
    row.set("weight", active);
    row.set("act", active);
    row.set("bck", backup);
    row.set("lbtot", sum(|b| b.requests_total));
    row.set("type", 1);
    let rate = sum(|b| b.request_rate);
    row.set("rate", rate);
    row.set("rate_max", report.frontend.request_rate_max.max(rate));
    let mut by_class = crate::stats::ByClass::default();
    for b in bs {
        by_class.c1 += b.responses.c1;
        by_class.c2 += b.responses.c2;
        by_class.c3 += b.responses.c3;
        by_class.c4 += b.responses.c4;
        by_class.c5 += b.responses.c5;
    }
    fill_responses(&mut row, &by_class);
    row.set("req_tot", sum(|b| b.requests_total));
    for c in ["comp_in", "comp_out", "comp_byp", "comp_rsp"] {
        row.set(c, 0);
    }
    row.set("qtime", 0);
    let (n, total) = bs.iter().fold((0u64, 0f64), |(n, t), b| {
        let rt = &b.response_time;
        match rt.recent_mean_ms {
            Some(m) => (n + rt.recent_responses, t + m * rt.recent_responses as f64),
            None => (n, t),
        }
    });
    row.set_opt("rtime", (n > 0).then(|| (total / n as f64).round() as u64));
    row.set("algo", "leastconn");
    row
}

fn frontend_row(report: &StatusReport) -> Row {
    let f = &report.frontend;
    let mut row = Row::new("FRONTEND");
    row.set("scur", f.connections_current);
    row.set("smax", f.connections_max.max(f.connections_current));
    row.set("slim", f.connections_limit);
    row.set("stot", f.connections_total);
    row.set("bin", f.bytes_received);
    row.set("bout", f.bytes_sent);
    row.set("dreq", 0);
    row.set("dresp", 0);
    row.set("ereq", f.client_timeouts);
    row.set("status", "OPEN");
    row.set("type", 0);
    row.set("rate", f.connection_rate);
    row.set("rate_max", f.connection_rate_max.max(f.connection_rate));
    fill_responses(&mut row, &f.responses);
    row.set("req_rate", f.request_rate);
    row.set("req_rate_max", f.request_rate_max.max(f.request_rate));
    row.set("req_tot", f.requests_total);
    for c in ["comp_in", "comp_out", "comp_byp", "comp_rsp"] {
        row.set(c, 0);
    }
    row
}

/// The whole CSV document.
pub fn render(report: &StatusReport) -> String {
    let mut out = String::with_capacity(512 * (report.backends.len() + 3));
    out.push_str("# ");
    for c in COLUMNS {
        out.push_str(c);
        out.push(',');
    }
    out.push('\n');
    frontend_row(report).write(&mut out);
    for (i, b) in report.backends.iter().enumerate() {
        server_row(report, i, b).write(&mut out);
    }
    backend_row(report).write(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_as_haproxy() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("two\nlines"), "two lines");
    }

    #[test]
    fn columns_are_unique() {
        let mut c = COLUMNS.to_vec();
        c.sort();
        c.dedup();
        assert_eq!(c.len(), COLUMNS.len());
    }

    #[test]
    fn check_statuses() {
        let c = |ok: bool, result: &str| CheckReport {
            ok,
            result: result.into(),
            ms: 1,
            at: 0,
        };
        assert_eq!(check_status(&c(true, "200")).0, "L7OK");
        assert_eq!(
            check_status(&c(false, "503")),
            ("L7STS", Some(503), "Layer7 wrong status")
        );
        assert_eq!(check_status(&c(false, "connect: refused")).0, "L4CON");
        assert_eq!(check_status(&c(false, "timed out after 2s")).0, "L7TOUT");
        assert_eq!(check_status(&c(false, "handshake: eof")).0, "L7RSP");
    }
}
