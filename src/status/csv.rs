//! The HAProxy-compatible CSV (`/gearlb-status;csv`, `/haproxy-status/;csv`, and `show
//! stat` on the stats socket).
//!
//! Owns the column list (HAProxy management guide, "9.1. CSV format", fields 0 to 76 in
//! their documented order: everything HAProxy 1.4/1.5-era parsers read by position, and
//! the later columns up to `algo`), the row filter of `show stat` and the mapping of a
//! [`StatusReport`] onto rows, as the old cartridge's two proxies: `stats` (its `listen
//! stats`, here the status listener's own traffic: a `FRONTEND` and a `BACKEND` row) and
//! `express` (its `listen express`: a `FRONTEND` row, one row per server, and a `BACKEND`
//! row), in that order and with those proxy ids (1 and 2) as HAProxy numbers them. As
//! HAProxy does, a field that has no value for a row type (or that gearlb does not
//! measure) is left empty, the header line starts with `# `, and every line ends with a
//! comma.

use std::fmt::Display;

use crate::report::{BackendReport, FrontendReport, StatusReport};
use crate::routing::{BackendState, CheckReport};

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

/// The proxy name of the old cartridge's balancer (`listen express`).
pub const PROXY: &str = "express";
/// The proxy name of the old cartridge's status page (`listen stats`).
pub const STATS_PROXY: &str = "stats";

/// HAProxy's `pid` (process number, 1 for the only process).
const PROCESS_NUM: u32 = 1;
/// HAProxy's `iid` of each proxy: numbered in configuration order, and the old
/// cartridge's configuration declares `listen stats` before `listen express`.
pub const STATS_PROXY_ID: u32 = 1;
pub const PROXY_ID: u32 = 2;

/// The `iid` of a proxy name.
pub fn proxy_id(name: &str) -> Option<u32> {
    match name {
        STATS_PROXY => Some(STATS_PROXY_ID),
        PROXY => Some(PROXY_ID),
        _ => None,
    }
}

/// Row types of [`Filter::types`], as HAProxy's `show stat <iid> <type> <sid>`.
pub const TYPE_FRONTEND: u32 = 1;
pub const TYPE_BACKEND: u32 = 2;
pub const TYPE_SERVER: u32 = 4;

/// Which rows a document holds: HAProxy's `show stat [<iid> <type> <sid>] [up|no-maint]`
/// and the HTTP page's `;up` and `;no-maint`. The header line is always there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    /// Only this proxy (`iid`); `None`: every proxy.
    pub iid: Option<u32>,
    /// Row types, [`TYPE_FRONTEND`] | [`TYPE_BACKEND`] | [`TYPE_SERVER`].
    pub types: u32,
    /// Only this server (`sid`); `None`: every server.
    pub sid: Option<u32>,
    /// Leave out servers that are down or in maintenance (`up`).
    pub hide_down: bool,
    /// Leave out servers in maintenance (`no-maint`).
    pub hide_maint: bool,
}

impl Default for Filter {
    fn default() -> Self {
        Filter {
            iid: None,
            types: TYPE_FRONTEND | TYPE_BACKEND | TYPE_SERVER,
            sid: None,
            hide_down: false,
            hide_maint: false,
        }
    }
}

impl Filter {
    fn shows(&self, iid: u32, row_type: u32) -> bool {
        self.iid.is_none_or(|i| i == iid) && self.types & row_type != 0
    }

    fn shows_server(&self, sid: u32, state: BackendState) -> bool {
        let maint = state == BackendState::Drained;
        self.shows(PROXY_ID, TYPE_SERVER)
            && self.sid.is_none_or(|s| s == sid)
            && !(self.hide_maint && maint)
            && !(self.hide_down && (maint || state == BackendState::Down))
    }
}

/// One CSV line being filled, column by column.
struct Row(Vec<String>);

impl Row {
    fn new(pxname: &str, iid: u32, svname: &str) -> Row {
        let mut r = Row(vec![String::new(); COLUMNS.len()]);
        r.set("pxname", pxname);
        r.set("svname", svname);
        r.set("pid", PROCESS_NUM);
        r.set("iid", iid);
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

fn fill_responses(row: &mut Row, r: &crate::report::ByClass) {
    row.set("hrsp_1xx", r.c1);
    row.set("hrsp_2xx", r.c2);
    row.set("hrsp_3xx", r.c3);
    row.set("hrsp_4xx", r.c4);
    row.set("hrsp_5xx", r.c5);
    row.set("hrsp_other", 0);
}

fn server_row(report: &StatusReport, index: usize, b: &BackendReport) -> Row {
    let mut row = Row::new(PROXY, PROXY_ID, &b.name);
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
    // HAProxy has counted requests per server since 2.2 (the guide still says [.FB.]).
    row.set("req_tot", b.requests_total);
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
    let mut row = Row::new(PROXY, PROXY_ID, "BACKEND");
    let scur = sum(|b| b.sessions);
    row.set("qcur", 0);
    row.set("qmax", 0);
    row.set("scur", scur);
    // Requests in flight at once on the whole balancer: what reaches this backend.
    row.set("smax", report.frontend.requests_max.max(scur));
    // HAProxy's fullconn, which for a `listen` section without one is its maxconn.
    row.set("slim", report.frontend.connections_limit);
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
    // Of the backend as a whole (no backend available), not the sum of the servers'.
    if let Some(a) = &report.availability {
        row.set("chkdown", a.down_transitions);
        row.set("lastchg", a.last_change_secs);
        row.set("downtime", a.downtime_secs);
    }
    row.set("lbtot", sum(|b| b.requests_total));
    row.set("type", 1);
    let rate = sum(|b| b.request_rate);
    row.set("rate", rate);
    row.set("rate_max", report.frontend.request_rate_max.max(rate));
    let mut by_class = crate::report::ByClass::default();
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

fn frontend_row(pxname: &str, iid: u32, f: &FrontendReport) -> Row {
    let mut row = Row::new(pxname, iid, "FRONTEND");
    row.set("scur", f.connections_current);
    row.set("smax", f.connections_max.max(f.connections_current));
    // 0: no limit (the status listener), left empty.
    if f.connections_limit > 0 {
        row.set("slim", f.connections_limit);
    }
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

/// The `stats` proxy's `BACKEND`: it has no server (the status page answers every
/// request itself, as HAProxy's stats applet does), so it takes every connection and
/// request of its frontend; UP, as HAProxy reports a backend without servers.
fn stats_backend_row(report: &StatusReport, f: &FrontendReport) -> Row {
    let mut row = Row::new(STATS_PROXY, STATS_PROXY_ID, "BACKEND");
    row.set("qcur", 0);
    row.set("qmax", 0);
    row.set("scur", f.connections_current);
    row.set("smax", f.connections_max.max(f.connections_current));
    row.set("stot", f.connections_total);
    row.set("bin", f.bytes_received);
    row.set("bout", f.bytes_sent);
    for c in ["dreq", "dresp", "econ", "eresp", "wretr", "wredis"] {
        row.set(c, 0);
    }
    row.set("status", "UP");
    for c in ["weight", "act", "bck", "chkdown", "lbtot"] {
        row.set(c, 0);
    }
    row.set("lastchg", report.uptime_secs);
    row.set("type", 1);
    row.set("rate", f.connection_rate);
    row.set("rate_max", f.connection_rate_max.max(f.connection_rate));
    fill_responses(&mut row, &f.responses);
    row.set("req_tot", f.requests_total);
    for c in ["comp_in", "comp_out", "comp_byp", "comp_rsp"] {
        row.set(c, 0);
    }
    row
}

/// The whole CSV document.
pub fn render(report: &StatusReport) -> String {
    render_filtered(report, &Filter::default())
}

/// The CSV document with only the rows `filter` selects.
pub fn render_filtered(report: &StatusReport, filter: &Filter) -> String {
    let mut out = String::with_capacity(512 * (report.backends.len() + 5));
    out.push_str("# ");
    for c in COLUMNS {
        out.push_str(c);
        out.push(',');
    }
    out.push('\n');
    if let Some(f) = &report.status_listener {
        if filter.shows(STATS_PROXY_ID, TYPE_FRONTEND) {
            frontend_row(STATS_PROXY, STATS_PROXY_ID, f).write(&mut out);
        }
        if filter.shows(STATS_PROXY_ID, TYPE_BACKEND) {
            stats_backend_row(report, f).write(&mut out);
        }
    }
    if filter.shows(PROXY_ID, TYPE_FRONTEND) {
        frontend_row(PROXY, PROXY_ID, &report.frontend).write(&mut out);
    }
    for (i, b) in report.backends.iter().enumerate() {
        if filter.shows_server(i as u32 + 1, b.state) {
            server_row(report, i, b).write(&mut out);
        }
    }
    if filter.shows(PROXY_ID, TYPE_BACKEND) {
        backend_row(report).write(&mut out);
    }
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

    /// A report with two servers (one up, one in maintenance), the status listener's
    /// counters and the availability history.
    fn report() -> StatusReport {
        let backend = |name: &str, state: &str, requests: u64| {
            serde_json::json!({
                "name": name, "addr": "127.0.0.1:1", "gear_dns": null, "state": state,
                "in_subset": true, "last_check": null, "tunnels": 0, "sessions": 0,
                "sessions_max": 0, "requests_total": requests, "errors": 0,
                "connect_errors": 0, "response_errors": 0, "timeouts": 0,
                "responses": {"1xx": 0, "2xx": requests, "3xx": 0, "4xx": 0, "5xx": 0},
                "connections_open": 0, "connections_idle": 0
            })
        };
        let frontend = |conns: u64, reqs: u64, limit: u64| {
            serde_json::json!({
                "connections_current": 1, "connections_max": 2, "connections_total": conns,
                "connections_refused": 0, "client_timeouts": 0, "requests_current": 0,
                "requests_total": reqs, "no_backend": 0, "connections_limit": limit,
                "responses": {"1xx": 0, "2xx": reqs, "3xx": 0, "4xx": 0, "5xx": 0},
                "bytes_received": 100, "bytes_sent": 2000
            })
        };
        serde_json::from_value(serde_json::json!({
            "version": "0", "pid": 1, "uptime_secs": 77, "gear_uuid": null,
            "listen": {"proxy": "127.0.0.1:1", "status": "127.0.0.1:2"},
            "frontend": frontend(40, 50, 10000),
            "backends": [backend("web1", "up", 30), backend("web2", "drained", 20)],
            "availability": {"available": true, "down_transitions": 3,
                             "last_change_secs": 12, "downtime_secs": 45},
            "status_listener": frontend(4, 5, 0),
        }))
        .unwrap()
    }

    /// (pxname, svname) of every row, and one row's fields by column name.
    fn rows(csv: &str) -> Vec<Vec<String>> {
        csv.lines()
            .skip(1)
            .map(|l| l.split(',').map(str::to_string).collect())
            .collect()
    }

    fn col(row: &[String], name: &str) -> String {
        row[COLUMNS.iter().position(|c| *c == name).unwrap()].clone()
    }

    #[test]
    fn stats_proxy_rows_and_backend_history() {
        let csv = render(&report());
        assert!(csv.starts_with("# pxname,svname,"));
        let rows = rows(&csv);
        let names: Vec<(String, String)> =
            rows.iter().map(|r| (r[0].clone(), r[1].clone())).collect();
        let want = [
            ("stats", "FRONTEND"),
            ("stats", "BACKEND"),
            ("express", "FRONTEND"),
            ("express", "web1"),
            ("express", "web2"),
            ("express", "BACKEND"),
        ];
        assert_eq!(
            names,
            want.map(|(p, s)| (p.to_string(), s.to_string())).to_vec()
        );
        let (sf, sb, ef, web1, web2, eb) =
            (&rows[0], &rows[1], &rows[2], &rows[3], &rows[4], &rows[5]);
        assert_eq!(
            [
                col(sf, "iid"),
                col(sb, "iid"),
                col(ef, "iid"),
                col(eb, "iid")
            ],
            ["1", "1", "2", "2"]
        );
        // The status listener's own traffic; it has no connection limit.
        assert_eq!(
            [
                col(sf, "stot"),
                col(sf, "req_tot"),
                col(sf, "hrsp_2xx"),
                col(sf, "slim")
            ],
            ["4", "5", "5", ""]
        );
        assert_eq!(
            [
                col(sb, "stot"),
                col(sb, "req_tot"),
                col(sb, "status"),
                col(sb, "lastchg")
            ],
            ["4", "5", "UP", "77"]
        );
        assert_eq!(
            col(sb, "downtime"),
            "",
            "no server: no downtime, as HAProxy"
        );
        // Servers count their requests; the backend has a limit and its own history.
        assert_eq!([col(web1, "req_tot"), col(web2, "req_tot")], ["30", "20"]);
        assert_eq!(col(web2, "status"), "MAINT");
        assert_eq!(
            [
                col(eb, "slim"),
                col(eb, "chkdown"),
                col(eb, "lastchg"),
                col(eb, "downtime"),
                col(eb, "req_tot")
            ],
            ["10000", "3", "12", "45", "50"]
        );
        assert_eq!(col(ef, "slim"), "10000");
        assert_eq!(col(ef, "req_tot"), "50");
    }

    #[test]
    fn filters_select_rows() {
        let r = report();
        let svnames = |f: Filter| -> Vec<String> {
            rows(&render_filtered(&r, &f))
                .iter()
                .map(|r| format!("{}/{}", r[0], r[1]))
                .collect()
        };
        assert_eq!(svnames(Filter::default()).len(), 6);
        let express = Filter {
            iid: Some(PROXY_ID),
            ..Filter::default()
        };
        assert_eq!(
            svnames(express.clone()),
            [
                "express/FRONTEND",
                "express/web1",
                "express/web2",
                "express/BACKEND"
            ]
        );
        assert_eq!(
            svnames(Filter {
                types: TYPE_BACKEND,
                ..Filter::default()
            }),
            ["stats/BACKEND", "express/BACKEND"]
        );
        assert_eq!(
            svnames(Filter {
                types: TYPE_SERVER,
                sid: Some(2),
                ..express.clone()
            }),
            ["express/web2"]
        );
        assert_eq!(
            svnames(Filter {
                types: TYPE_SERVER,
                hide_maint: true,
                ..express.clone()
            }),
            ["express/web1"]
        );
        assert!(svnames(Filter {
            iid: Some(9),
            ..Filter::default()
        })
        .is_empty());
        assert_eq!(proxy_id("stats"), Some(1));
        assert_eq!(proxy_id("express"), Some(2));
        assert_eq!(proxy_id("web"), None);
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
