//! Tests of the CSV: quoting, columns, rows, filters and check statuses.

use super::fields::*;
use super::filter::Filter;
use super::render::*;
use super::row::field;
use crate::report::StatusReport;
use crate::routing::CheckReport;

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
    let names: Vec<(String, String)> = rows.iter().map(|r| (r[0].clone(), r[1].clone())).collect();
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
    let (sf, sb, ef, web1, web2, eb) = (&rows[0], &rows[1], &rows[2], &rows[3], &rows[4], &rows[5]);
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
        version: None,
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
