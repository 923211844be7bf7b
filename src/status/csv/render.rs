//! The CSV document: a [`StatusReport`] mapped onto rows as the old cartridge's two
//! proxies (`stats`: `FRONTEND`, `BACKEND`; `express`: `FRONTEND`, one row per server,
//! `BACKEND`), in that order, then one proxy per other service (its listener's
//! `FRONTEND` when it has one, its servers, its `BACKEND`; `iid` 3 and on, in name
//! order), with the rows a [`Filter`] selects.

use super::fields::{
    check_status, server_status, COLUMNS, PROXY, PROXY_ID, STATS_PROXY, STATS_PROXY_ID,
    TYPE_BACKEND, TYPE_FRONTEND, TYPE_SERVER,
};
use super::filter::Filter;
use super::row::Row;
use crate::report::{BackendReport, FrontendReport, StatusReport};
use crate::routing::BackendState;

fn fill_responses(row: &mut Row, r: &crate::report::ByClass) {
    row.set("hrsp_1xx", r.c1);
    row.set("hrsp_2xx", r.c2);
    row.set("hrsp_3xx", r.c3);
    row.set("hrsp_4xx", r.c4);
    row.set("hrsp_5xx", r.c5);
    row.set("hrsp_other", 0);
}

/// A TCP proxy's row as HAProxy 1.4/1.5 wrote it (what the old cartridge's tools
/// read): `mode` tcp; no HTTP responses (`hrsp_*` empty); requests 0 on the `FRONTEND`
/// and empty elsewhere; no response time; no `check_code` or `last_chk` for a layer 4
/// or 6 check. Sessions (`scur`, `stot`) are connections.
fn tcp_shape(row: &mut Row, row_type: u32) {
    row.set("mode", "tcp");
    for c in [
        "hrsp_1xx",
        "hrsp_2xx",
        "hrsp_3xx",
        "hrsp_4xx",
        "hrsp_5xx",
        "hrsp_other",
        "check_code",
        "last_chk",
        "rtime",
    ] {
        row.clear(c);
    }
    for c in ["req_rate", "req_rate_max", "req_tot"] {
        if row_type == TYPE_FRONTEND {
            row.set(c, 0);
        } else {
            row.clear(c);
        }
    }
    if row_type != TYPE_FRONTEND {
        row.set("rtime", 0);
    }
}

/// One proxy's part of the report: the default service (`express`) or another.
struct Section<'a> {
    pxname: &'a str,
    iid: u32,
    /// A TCP proxy (see [`tcp_shape`]).
    tcp: bool,
    backends: &'a [BackendReport],
    /// Its frontend's traffic (the balancer's, or the service's own listener's).
    frontend: &'a FrontendReport,
    availability: Option<&'a crate::stats::availability::AvailabilityReport>,
    health: Option<&'a crate::report::HealthReport>,
}

fn server_row(px: &Section, index: usize, b: &BackendReport) -> Row {
    let mut row = Row::new(px.pxname, px.iid, &b.name);
    row.set("qcur", b.queued);
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
    // Backends outside this balancer's subset are its backups, as a service's are.
    let backup = !b.in_subset || b.backup;
    row.set("act", u8::from(!backup));
    row.set("bck", u8::from(backup));
    if let Some(m) = b.max_connections {
        row.set("slim", m);
    }
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
    if let Some(h) = px.health.filter(|h| h.enabled) {
        row.set("check_rise", h.rise);
        row.set("check_fall", h.fall);
    }
    row.set("addr", &b.addr);
    row.set("cookie", &b.cookie);
    row
}

fn backend_row(px: &Section) -> Row {
    let bs = px.backends;
    let sum = |f: fn(&BackendReport) -> u64| bs.iter().map(f).sum::<u64>();
    let usable = |b: &&BackendReport| b.state == BackendState::Up;
    let active = bs
        .iter()
        .filter(usable)
        .filter(|b| b.in_subset && !b.backup)
        .count();
    let backup = bs
        .iter()
        .filter(usable)
        .filter(|b| !b.in_subset || b.backup)
        .count();
    let mut row = Row::new(px.pxname, px.iid, "BACKEND");
    let scur = sum(|b| b.sessions);
    row.set("qcur", sum(|b| b.queued));
    row.set("qmax", 0);
    row.set("scur", scur);
    // Requests in flight at once on the whole balancer: what reaches this backend.
    row.set("smax", px.frontend.requests_max.max(scur));
    // HAProxy's fullconn, which for a `listen` section without one is its maxconn.
    row.set("slim", px.frontend.connections_limit);
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
    if let Some(a) = px.availability {
        row.set("chkdown", a.down_transitions);
        row.set("lastchg", a.last_change_secs);
        row.set("downtime", a.downtime_secs);
    }
    row.set("lbtot", sum(|b| b.requests_total));
    row.set("type", 1);
    let rate = sum(|b| b.request_rate);
    row.set("rate", rate);
    row.set("rate_max", px.frontend.request_rate_max.max(rate));
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
    let main = Section {
        pxname: PROXY,
        iid: PROXY_ID,
        tcp: report.listen.mode == crate::config::Mode::Tcp,
        backends: &report.backends,
        frontend: &report.frontend,
        availability: report.availability.as_ref(),
        health: report.health.as_ref(),
    };
    section(&main, true, filter, &mut out);
    let none = FrontendReport::default();
    for (k, svc) in report.services.iter().enumerate() {
        let px = Section {
            pxname: &svc.name,
            iid: PROXY_ID + 1 + k as u32,
            tcp: svc.mode == crate::config::Mode::Tcp,
            backends: &svc.backends,
            frontend: svc.frontend.as_ref().unwrap_or(&none),
            availability: svc.availability.as_ref(),
            health: report.health.as_ref(),
        };
        section(&px, svc.frontend.is_some(), filter, &mut out);
    }
    out
}

/// One proxy's rows: its `FRONTEND` (when it has a listener of its own), servers and
/// `BACKEND`.
fn section(px: &Section, frontend: bool, filter: &Filter, out: &mut String) {
    let mut shape = |mut row: Row, row_type: u32| {
        if px.tcp {
            tcp_shape(&mut row, row_type);
        }
        row.write(out)
    };
    if frontend && filter.shows(px.iid, TYPE_FRONTEND) {
        shape(frontend_row(px.pxname, px.iid, px.frontend), TYPE_FRONTEND);
    }
    for (i, b) in px.backends.iter().enumerate() {
        if filter.shows_server(px.iid, i as u32 + 1, b.state) {
            shape(server_row(px, i, b), TYPE_SERVER);
        }
    }
    if filter.shows(px.iid, TYPE_BACKEND) {
        shape(backend_row(px), TYPE_BACKEND);
    }
}
