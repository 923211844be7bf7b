//! The status listener: HAProxy CSV (checked by a strict parser written from HAProxy's
//! management guide), Prometheus metrics (parsed by a text-format parser crate), the JSON
//! report, request and JSON logs, and the HTML page rendered in headless Chromium with
//! two live balancers.

mod support;

use std::collections::HashMap;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gearlb::report::{
    BackendReport, ByClass, FrontendReport, HealthReport, ListenReport, PeerReport,
    ResponseTimeReport, RotationReport, StatusReport,
};
use gearlb::routing::{BackendState, CheckReport};
use support::*;

/// A strict reader of HAProxy's stats CSV, written from the HAProxy Management Guide,
/// section "9.1. CSV format".
mod haproxy_csv {
    use std::collections::HashMap;

    /// The documented fields in their order, with the row types that may have a value
    /// (L listener, F frontend, B backend, S server), and whether the value is numeric.
    pub const FIELDS: &[(&str, &str, bool)] = &[
        ("pxname", "LFBS", false),
        ("svname", "LFBS", false),
        ("qcur", "..BS", true),
        ("qmax", "..BS", true),
        ("scur", "LFBS", true),
        ("smax", "LFBS", true),
        ("slim", "LFBS", true),
        ("stot", "LFBS", true),
        ("bin", "LFBS", true),
        ("bout", "LFBS", true),
        ("dreq", "LFB.", true),
        ("dresp", "LFBS", true),
        ("ereq", "LF..", true),
        ("econ", "..BS", true),
        ("eresp", "..BS", true),
        ("wretr", "..BS", true),
        ("wredis", "..BS", true),
        ("status", "LFBS", false),
        ("weight", "..BS", true),
        ("act", "..BS", true),
        ("bck", "..BS", true),
        ("chkfail", "...S", true),
        ("chkdown", "..BS", true),
        ("lastchg", "..BS", true),
        ("downtime", "..BS", true),
        ("qlimit", "...S", true),
        ("pid", "LFBS", true),
        ("iid", "LFBS", true),
        ("sid", "L..S", true),
        ("throttle", "...S", true),
        ("lbtot", "..BS", true),
        ("tracked", "...S", false),
        ("type", "LFBS", true),
        ("rate", ".FBS", true),
        ("rate_lim", ".F..", true),
        ("rate_max", ".FBS", true),
        ("check_status", "...S", false),
        ("check_code", "...S", true),
        ("check_duration", "...S", true),
        ("hrsp_1xx", ".FBS", true),
        ("hrsp_2xx", ".FBS", true),
        ("hrsp_3xx", ".FBS", true),
        ("hrsp_4xx", ".FBS", true),
        ("hrsp_5xx", ".FBS", true),
        ("hrsp_other", ".FBS", true),
        ("hanafail", "...S", true),
        ("req_rate", ".F..", true),
        ("req_rate_max", ".F..", true),
        // The guide says [.FB.], but HAProxy has filled it for servers too since 2.2
        // ("MINOR: stats: Expose native cum_req metric for a server"; `req_tot` has the
        // capability `STATS_PX_CAP__FBS` in its column table).
        ("req_tot", ".FBS", true),
        ("cli_abrt", "..BS", true),
        ("srv_abrt", "..BS", true),
        ("comp_in", ".FB.", true),
        ("comp_out", ".FB.", true),
        ("comp_byp", ".FB.", true),
        ("comp_rsp", ".FB.", true),
        ("lastsess", "..BS", true),
        ("last_chk", "...S", false),
        ("last_agt", "...S", false),
        ("qtime", "..BS", true),
        ("ctime", "..BS", true),
        ("rtime", "..BS", true),
        ("ttime", "..BS", true),
        ("agent_status", "...S", false),
        ("agent_code", "...S", true),
        ("agent_duration", "...S", true),
        ("check_desc", "...S", false),
        ("agent_desc", "...S", false),
        ("check_rise", "...S", true),
        ("check_fall", "...S", true),
        ("check_health", "...S", true),
        ("agent_rise", "...S", true),
        ("agent_fall", "...S", true),
        ("agent_health", "...S", true),
        ("addr", "L..S", false),
        ("cookie", "..BS", false),
        ("mode", "LFBS", false),
        ("algo", "..B.", false),
    ];

    /// Position of `check_duration`: the columns HAProxy 1.4-era tools read by position
    /// end around there, so a document must have at least these.
    const MIN_COLUMNS: usize = 39;

    const CHECK_STATUSES: &[&str] = &[
        "UNK", "INI", "SOCKERR", "L4OK", "L4TOUT", "L4CON", "L6OK", "L6TOUT", "L6RSP", "L7OK",
        "L7OKC", "L7TOUT", "L7RSP", "L7STS",
    ];

    pub type Row = HashMap<String, String>;

    /// Split one CSV line: `,` separates, `"` quotes a field holding `,` or `"`, a quote
    /// inside is doubled.
    fn split(line: &str) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        let mut cur = String::new();
        let mut chars = line.chars().peekable();
        let mut at_start = true;
        while let Some(c) = chars.next() {
            match c {
                '"' if at_start => {
                    loop {
                        match chars.next() {
                            Some('"') if chars.peek() == Some(&'"') => {
                                chars.next();
                                cur.push('"');
                            }
                            Some('"') => break,
                            Some(c) => cur.push(c),
                            None => return Err(format!("unterminated quote in {line:?}")),
                        }
                    }
                    match chars.peek() {
                        Some(',') | None => {}
                        Some(c) => return Err(format!("{c:?} after a closing quote in {line:?}")),
                    }
                    at_start = false;
                }
                '"' => return Err(format!("stray quote in {line:?}")),
                ',' => {
                    out.push(std::mem::take(&mut cur));
                    at_start = true;
                }
                c => {
                    cur.push(c);
                    at_start = false;
                }
            }
        }
        out.push(cur);
        Ok(out)
    }

    /// Parse a whole `;csv` document; every rule the guide states is checked.
    pub fn parse(text: &str) -> Result<(Vec<String>, Vec<Row>), String> {
        if !text.ends_with('\n') {
            return Err("document does not end with a newline".into());
        }
        let mut lines = text.lines();
        let header = lines.next().ok_or("empty document")?;
        let header = header
            .strip_prefix("# ")
            .ok_or_else(|| format!("header does not start with '# ': {header:?}"))?;
        let mut names: Vec<String> = header.split(',').map(str::to_string).collect();
        if names.pop().as_deref() != Some("") {
            return Err("header line does not end with a comma".into());
        }
        if names.len() < MIN_COLUMNS || names.len() > FIELDS.len() {
            return Err(format!("{} columns in the header", names.len()));
        }
        for (i, (n, (want, _, _))) in names.iter().zip(FIELDS).enumerate() {
            if n != want {
                return Err(format!("column {i} is {n:?}, HAProxy's is {want:?}"));
            }
        }
        let mut rows = Vec::new();
        for (no, line) in lines.enumerate() {
            let mut values = split(line)?;
            if values.pop().as_deref() != Some("") {
                return Err(format!("row {no} does not end with a comma: {line:?}"));
            }
            if values.len() != names.len() {
                return Err(format!(
                    "row {no} has {} columns, the header {}: {line:?}",
                    values.len(),
                    names.len()
                ));
            }
            let row: Row = names.iter().cloned().zip(values).collect();
            let svname = &row["svname"];
            let (kind, want_type) = match svname.as_str() {
                "FRONTEND" => ('F', "0"),
                "BACKEND" => ('B', "1"),
                _ => ('S', "2"),
            };
            if row["type"] != want_type {
                return Err(format!(
                    "{svname}: type {:?}, expected {want_type}",
                    row["type"]
                ));
            }
            for (name, applies, numeric) in &FIELDS[..names.len()] {
                let v = &row[*name];
                if v.is_empty() {
                    continue;
                }
                if !applies.contains(kind) {
                    return Err(format!(
                        "{svname}: {name} = {v:?}, but {name} has no value for {kind} rows"
                    ));
                }
                if *numeric && v.parse::<u64>().is_err() {
                    return Err(format!("{svname}: {name} = {v:?} is not a number"));
                }
            }
            let status = row["status"].as_str();
            let ok = match kind {
                'F' => status == "OPEN",
                'B' => matches!(status, "UP" | "DOWN"),
                _ => matches!(
                    status,
                    "UP" | "DOWN" | "NOLB" | "MAINT" | "DRAIN" | "no check"
                ),
            };
            if !ok {
                return Err(format!(
                    "{svname}: status {status:?} is not valid for a {kind} row"
                ));
            }
            if let Some(cs) = row.get("check_status").filter(|v| !v.is_empty()) {
                let cs = cs.strip_prefix("* ").unwrap_or(cs);
                if !CHECK_STATUSES.contains(&cs) {
                    return Err(format!("{svname}: check_status {cs:?}"));
                }
            }
            rows.push(row);
        }
        // Per proxy: FRONTEND first, then servers, BACKEND last.
        let mut by_proxy: Vec<(&str, Vec<&str>)> = Vec::new();
        for r in &rows {
            match by_proxy.last_mut() {
                Some((p, v)) if *p == r["pxname"] => v.push(&r["svname"]),
                _ => by_proxy.push((&r["pxname"], vec![&r["svname"]])),
            }
        }
        for (p, sv) in by_proxy {
            if sv.first() != Some(&"FRONTEND") || sv.last() != Some(&"BACKEND") {
                return Err(format!(
                    "proxy {p}: rows {sv:?} do not run FRONTEND … BACKEND"
                ));
            }
        }
        Ok((names, rows))
    }

    #[test]
    fn the_parser_rejects_what_haproxy_never_writes() {
        let header = format!(
            "# {},",
            FIELDS.iter().map(|f| f.0).collect::<Vec<_>>().join(",")
        );
        let row = |sv: &str, ty: &str, status: &str, extra: &[(&str, &str)]| {
            let mut v: Vec<String> = FIELDS.iter().map(|_| String::new()).collect();
            let mut set = |k: &str, x: &str| {
                let i = FIELDS.iter().position(|f| f.0 == k).unwrap();
                v[i] = x.to_string();
            };
            set("pxname", "express");
            set("svname", sv);
            set("type", ty);
            set("status", status);
            for (k, x) in extra {
                set(k, x);
            }
            format!("{},", v.join(","))
        };
        let doc = |rows: &[String]| format!("{header}\n{}\n", rows.join("\n"));
        let good = doc(&[
            row("FRONTEND", "0", "OPEN", &[]),
            row("s1", "2", "UP", &[("last_chk", "\"a, \"\"b\"\"\"")]),
            row("BACKEND", "1", "UP", &[]),
        ]);
        let (_, rows) = parse(&good).unwrap();
        assert_eq!(rows[1]["last_chk"], "a, \"b\"");
        let bad = [
            doc(&[
                row("FRONTEND", "0", "UP", &[]),
                row("BACKEND", "1", "UP", &[]),
            ]),
            doc(&[
                row("FRONTEND", "0", "OPEN", &[("qcur", "0")]),
                row("BACKEND", "1", "UP", &[]),
            ]),
            doc(&[
                row("FRONTEND", "0", "OPEN", &[("scur", "x")]),
                row("BACKEND", "1", "UP", &[]),
            ]),
            doc(&[
                row("BACKEND", "1", "UP", &[]),
                row("FRONTEND", "0", "OPEN", &[]),
            ]),
            doc(&[
                row("FRONTEND", "0", "OPEN", &[]),
                row("s", "2", "up", &[]),
                row("BACKEND", "1", "UP", &[]),
            ]),
            good.replace("# pxname,svname", "# svname,pxname"),
            good.replace(",\n", "\n"),
            good.replacen("express,s1,", "express,s1,,", 1),
            good.trim_end().to_string(),
        ];
        for (i, b) in bad.iter().enumerate() {
            assert!(parse(b).is_err(), "bad document {i} accepted:\n{b}");
        }
    }
}

fn config_fast_health(dir: &Path, backends: &[(&str, SocketAddr)]) -> String {
    config_text(
        dir,
        backends,
        "[health]\ninterval = \"200ms\"\ntimeout = \"1s\"\nfall = 2\nrise = 2\n",
    )
}

async fn wait_for(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    assert!(
        eventually(limit, &mut f).await,
        "timed out waiting for {what}"
    );
}

async fn status_json(g: &Gearlb) -> serde_json::Value {
    get(g.status, "/gearlb-status.json", &[])
        .await
        .unwrap()
        .json()
}

fn backend_state(report: &serde_json::Value, name: &str) -> String {
    report["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .map(|b| b["state"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

async fn wait_state(g: &Gearlb, name: &str, state: &str) {
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        if backend_state(&status_json(g).await, name) == state {
            return;
        }
        assert!(Instant::now() < end, "{name} never became {state}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csv_is_haproxy_format_on_every_path() {
    let web1 = TestBackend::start("web1").await;
    let web2 = TestBackend::start("web2").await;
    let dir = workdir();
    let g = Gearlb::start(
        dir.path(),
        &config_fast_health(dir.path(), &[("web1", web1.addr), ("web2", web2.addr)]),
    );
    let c = client();
    for _ in 0..10 {
        let r = send(
            &c,
            http::Request::get(format!("http://{}/", g.proxy))
                .header("cookie", "GEAR=web1")
                .body(full(""))
                .unwrap(),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200);
    }
    let r = get(g.proxy, "/upload-nothing", &[("cookie", "GEAR=web2")])
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    web2.kill();
    wait_state(&g, "web2", "down").await;

    let mut docs = Vec::new();
    for path in [
        "/gearlb-status;csv",
        "/haproxy-status/;csv",
        "/haproxy-status;csv",
        "/haproxy-status/;csv;norefresh",
        "/haproxy-status?stats;csv",
        "/gearlb-status?stats;csv",
        "/haproxy-status/?stats;csv;norefresh",
    ] {
        let got = get(g.status, path, &[]).await.unwrap();
        assert_eq!(got.status, 200, "{path}");
        assert!(
            got.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain"),
            "{path}"
        );
        docs.push(got.text());
    }
    let (names, rows) = haproxy_csv::parse(&docs[0])
        .unwrap_or_else(|e| panic!("not HAProxy CSV: {e}\n{}", docs[0]));
    assert_eq!(
        names.len(),
        haproxy_csv::FIELDS.len(),
        "every documented column up to algo"
    );
    for d in &docs[1..] {
        haproxy_csv::parse(d).unwrap();
    }
    let names: Vec<String> = rows
        .iter()
        .map(|r| format!("{}/{}", r["pxname"], r["svname"]))
        .collect();
    assert_eq!(
        names,
        [
            "stats/FRONTEND",
            "stats/BACKEND",
            "express/FRONTEND",
            "express/web1",
            "express/web2",
            "express/BACKEND"
        ],
        "the old cartridge's `listen stats`, then `listen express`"
    );
    // The platform's functional test: `curl …/haproxy-status/;csv | grep -q '^stats,FRONTEND'`.
    for d in &docs {
        assert!(d.lines().any(|l| l.starts_with("stats,FRONTEND,")), "{d}");
    }
    let stats = |n: &str| {
        rows.iter()
            .find(|r| r["pxname"] == "stats" && r["svname"] == n)
            .unwrap()
    };
    // Its own traffic: the JSON report just fetched (wait_state) and this request.
    let stats_req: u64 = stats("FRONTEND")["req_tot"].parse().unwrap();
    assert!(stats_req >= 2, "status requests counted: {stats_req}");
    assert_eq!(stats("FRONTEND")["status"], "OPEN");
    assert_eq!(stats("FRONTEND")["iid"], "1");
    assert_eq!(stats("BACKEND")["status"], "UP");
    assert!(stats("FRONTEND")["stot"].parse::<u64>().unwrap() >= 1);
    assert!(stats("FRONTEND")["bin"].parse::<u64>().unwrap() > 0);
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|r| r["pxname"] == "express")
        .collect();
    let row = |n: &str| rows.iter().find(|r| r["svname"] == n).unwrap();
    assert_eq!(row("FRONTEND")["iid"], "2");
    assert_eq!(row("FRONTEND")["status"], "OPEN");
    assert_eq!(row("web1")["status"], "UP");
    assert_eq!(row("web2")["status"], "DOWN");
    assert_eq!(row("BACKEND")["status"], "UP");
    assert_eq!(row("web1")["stot"], "10");
    assert_eq!(row("web1")["hrsp_2xx"], "10");
    assert_eq!(row("web2")["stot"], "1");
    assert_eq!(row("BACKEND")["stot"], "11");
    assert_eq!(row("BACKEND")["req_tot"], "11");
    assert_eq!(row("FRONTEND")["req_tot"], "11");
    assert_eq!(row("web1")["check_status"], "L7OK");
    assert_eq!(row("web1")["check_code"], "200");
    assert_eq!(row("web2")["check_status"], "L4CON");
    assert!(row("web2")["chkdown"].parse::<u64>().unwrap() >= 1);
    assert!(row("web2")["chkfail"].parse::<u64>().unwrap() >= 2);
    assert_eq!(row("web1")["addr"], web1.addr.to_string());
    assert_eq!(row("web1")["cookie"], "web1");
    assert_eq!(row("BACKEND")["act"], "1", "one server up");
    assert_eq!(row("FRONTEND")["slim"], "10000");
    // Requests per server, and the backend's own limit and history: web1 stayed up, so
    // the backend as a whole never went down.
    assert_eq!(row("web1")["req_tot"], "10");
    assert_eq!(row("web2")["req_tot"], "1");
    assert_eq!(row("BACKEND")["slim"], "10000");
    assert_eq!(row("BACKEND")["chkdown"], "0");
    assert_eq!(row("BACKEND")["downtime"], "0");
    let uptime: u64 = status_json(&g).await["uptime_secs"].as_u64().unwrap();
    let lastchg: u64 = row("BACKEND")["lastchg"].parse().unwrap();
    // Whole Unix seconds against an elapsed time: one second apart at most.
    assert!(
        lastchg <= uptime + 1,
        "lastchg {lastchg} since start ({uptime}s)"
    );
    let bin: u64 = row("FRONTEND")["bin"].parse().unwrap();
    let bout: u64 = row("FRONTEND")["bout"].parse().unwrap();
    assert!(
        bin > 11 * 16 && bout > 11 * 30,
        "bytes counted: in {bin}, out {bout}"
    );
    let sbin: u64 = row("web1")["bin"].parse().unwrap();
    let sbout: u64 = row("web1")["bout"].parse().unwrap();
    assert!(
        sbin > 10 * 16 && sbout > 10 * 30,
        "server bytes: {sbin}, {sbout}"
    );
    assert!(!row("web1")["rtime"].is_empty() || row("web1")["stot"] == "0");

    // The old scaler reads express/BACKEND scur by position and counts servers as
    // "rows of express minus two".
    let by_position: Vec<Vec<&str>> = docs[1]
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    let express: Vec<&Vec<&str>> = by_position.iter().filter(|r| r[0] == "express").collect();
    assert_eq!(
        express.len() - 2,
        2,
        "gear count as haproxy_ctld computes it"
    );
    let backend = express.iter().find(|r| r[1] == "BACKEND").unwrap();
    assert_eq!(
        backend[4].parse::<u64>().unwrap(),
        0,
        "scur: nothing in flight"
    );
    assert_eq!(backend[17], "UP");

    // In-flight requests show as sessions.
    assert!(
        g.log_text()
            .lines()
            .any(|l| l.contains("backend DOWN") && l.contains("web2")),
        "health changes are logged with the backend's name:\n{}",
        g.log_text()
    );
    let proxy = g.proxy;
    let slow =
        tokio::spawn(async move { get(proxy, "/slow?ms=1500", &[("cookie", "GEAR=web1")]).await });
    let status_addr = g.status;
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let csv = get(status_addr, "/haproxy-status/;csv", &[])
            .await
            .unwrap()
            .text();
        let (_, rows) = haproxy_csv::parse(&csv).unwrap();
        // express's rows: the `stats` proxy has a BACKEND too (this very request).
        let scur = |n: &str| {
            rows.iter()
                .find(|r| r["pxname"] == "express" && r["svname"] == n)
                .unwrap()["scur"]
                .clone()
        };
        if scur("BACKEND") == "1" {
            assert_eq!(scur("web1"), "1");
            break;
        }
        assert!(
            Instant::now() < end,
            "in-flight request never showed as scur"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(slow.await.unwrap().unwrap().status, 200);
}

#[test]
fn csv_of_every_state() {
    let r = sample_report();
    let csv = gearlb::status::csv::render(&r);
    let (_, rows) = haproxy_csv::parse(&csv).unwrap_or_else(|e| panic!("{e}\n{csv}"));
    let status = |n: &str| rows.iter().find(|r| r["svname"] == n).unwrap()["status"].clone();
    assert_eq!(status("gear-web1-ns"), "UP");
    assert_eq!(status("gear-5f2a9c-ns"), "DOWN");
    assert_eq!(status("gear-8d0b7e-ns"), "DRAIN");
    assert_eq!(status("gear-c41e22-ns"), "MAINT");
    let backup = rows.iter().find(|r| r["svname"] == "local-gear").unwrap();
    assert_eq!((backup["act"].as_str(), backup["bck"].as_str()), ("0", "1"));
    let quoted = rows
        .iter()
        .find(|r| r["svname"] == "gear-5f2a9c-ns")
        .unwrap();
    assert_eq!(quoted["last_chk"], "connect: refused, \"twice\"");
}

fn metric_names(text: &str) -> HashMap<String, String> {
    let exp = openmetrics_parser::openmetrics::parse_openmetrics(text)
        .unwrap_or_else(|e| panic!("not OpenMetrics text ({e:?}):\n{text}"));
    exp.families
        .values()
        .map(|f| (f.family_name.clone(), f.family_type.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_and_count() {
    let web1 = TestBackend::start("web1").await;
    let web2 = TestBackend::start("web2").await;
    let dir = workdir();
    let g = Gearlb::start(
        dir.path(),
        &config_fast_health(dir.path(), &[("web1", web1.addr), ("web2", web2.addr)]),
    );
    for _ in 0..5 {
        let r = get(g.proxy, "/slow?ms=3", &[("cookie", "GEAR=web1")])
            .await
            .unwrap();
        assert_eq!(r.status, 200);
    }
    web2.kill();
    wait_state(&g, "web2", "down").await;

    let got = get(
        g.status,
        "/metrics",
        &[("accept", "application/openmetrics-text; version=1.0.0")],
    )
    .await
    .unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(
        got.headers["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let text = got.text();
    let types = metric_names(&text);
    for (name, kind) in [
        ("gearlb_start_time_seconds", "gauge"),
        ("gearlb_frontend_connections", "gauge"),
        ("gearlb_frontend_connections_accepted", "counter"),
        ("gearlb_frontend_requests", "counter"),
        ("gearlb_frontend_requests_in_flight", "gauge"),
        ("gearlb_frontend_responses", "counter"),
        ("gearlb_frontend_received_bytes", "counter"),
        ("gearlb_backend_requests", "counter"),
        ("gearlb_backend_responses", "counter"),
        ("gearlb_backend_errors", "counter"),
        ("gearlb_backend_requests_in_flight", "gauge"),
        ("gearlb_backend_connections_opened", "counter"),
        ("gearlb_backend_state", "gauge"),
        ("gearlb_backend_in_subset", "gauge"),
        ("gearlb_backend_health_checks", "counter"),
        ("gearlb_backend_response_head_seconds", "histogram"),
    ] {
        assert_eq!(
            types.get(name).map(String::as_str),
            Some(kind),
            "{name} in\n{text}"
        );
    }
    let exp = openmetrics_parser::openmetrics::parse_openmetrics(&text).unwrap();
    let value = |family: &str, labels: &[(&str, &str)]| -> f64 {
        use openmetrics_parser::OpenMetricsValue as V;
        let f = &exp.families[family];
        let s = f
            .iter_samples()
            .find(|s| {
                let ls = s.get_labelset().unwrap();
                labels
                    .iter()
                    .all(|(k, v)| ls.get_label_value(k) == Some(*v))
            })
            .unwrap_or_else(|| panic!("no {family}{labels:?}"));
        match &s.value {
            V::Counter(c) => c.value.as_f64(),
            V::Gauge(n) => n.as_f64(),
            V::Histogram(h) => h.count.unwrap_or(0) as f64,
            other => panic!("{family}: {other:?}"),
        }
    };
    assert_eq!(
        value("gearlb_backend_requests", &[("backend", "web1")]),
        5.0
    );
    assert_eq!(
        value(
            "gearlb_backend_responses",
            &[("backend", "web1"), ("class", "2xx")]
        ),
        5.0
    );
    // One after the other, the five requests share one pooled backend connection.
    assert_eq!(
        value("gearlb_backend_connections_opened", &[("backend", "web1")]),
        1.0
    );
    assert_eq!(value("gearlb_frontend_responses", &[("class", "2xx")]), 5.0);
    assert_eq!(
        value(
            "gearlb_backend_state",
            &[("backend", "web1"), ("state", "up")]
        ),
        1.0
    );
    assert_eq!(
        value(
            "gearlb_backend_state",
            &[("backend", "web2"), ("state", "down")]
        ),
        1.0
    );
    assert_eq!(
        value(
            "gearlb_backend_state",
            &[("backend", "web2"), ("state", "up")]
        ),
        0.0
    );
    assert!(
        value(
            "gearlb_backend_health_checks",
            &[("backend", "web2"), ("result", "fail")]
        ) >= 2.0
    );
    assert!(
        value(
            "gearlb_backend_health_checks",
            &[("backend", "web1"), ("result", "ok")]
        ) >= 1.0
    );
    assert_eq!(
        value(
            "gearlb_backend_response_head_seconds",
            &[("backend", "web1")]
        ),
        5.0
    );
    // The 3 ms responses are above the 2.5 ms bucket's bound.
    let hist = exp.families["gearlb_backend_response_head_seconds"]
        .iter_samples()
        .find(|s| s.get_labelset().unwrap().get_label_value("backend") == Some("web1"))
        .map(|s| s.value.clone())
        .unwrap();
    let openmetrics_parser::OpenMetricsValue::Histogram(h) = hist else {
        panic!("not a histogram")
    };
    let le = |b: f64| {
        h.buckets
            .iter()
            .find(|x| x.upper_bound == b)
            .unwrap()
            .count
            .as_f64()
    };
    assert_eq!(le(0.0025), 0.0);
    assert_eq!(le(f64::INFINITY), 5.0);
    assert!(h.sum.unwrap().as_f64() >= 0.015);
    assert!(!text.contains("placeholder"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_report_has_documented_fields_and_routes_are_read_only() {
    let web1 = TestBackend::start("web1").await;
    let dir = workdir();
    let g = Gearlb::start(
        dir.path(),
        &config_fast_health(dir.path(), &[("web1", web1.addr)]),
    );
    assert_eq!(get(g.proxy, "/", &[]).await.unwrap().status, 200);
    let v = status_json(&g).await;
    for k in [
        "version",
        "pid",
        "uptime_secs",
        "gear_uuid",
        "gear_dns",
        "listen",
        "frontend",
        "backends",
        "health",
        "peers",
        "rotations",
        "availability",
        "status_listener",
    ] {
        assert!(v.get(k).is_some(), "{k} missing: {v}");
    }
    for k in [
        "available",
        "down_transitions",
        "last_change_secs",
        "downtime_secs",
    ] {
        assert!(
            v["availability"].get(k).is_some(),
            "availability.{k} missing"
        );
    }
    assert_eq!(v["availability"]["available"], true);
    assert!(v["status_listener"]["requests_total"].as_u64().unwrap() >= 1);
    for k in [
        "connections_current",
        "connections_max",
        "connections_total",
        "connections_refused",
        "client_timeouts",
        "requests_current",
        "requests_total",
        "responses",
        "no_backend",
        "connections_limit",
        "requests_max",
        "bytes_received",
        "bytes_sent",
        "connection_rate",
        "connection_rate_max",
        "request_rate",
        "request_rate_max",
    ] {
        assert!(v["frontend"].get(k).is_some(), "frontend.{k} missing");
    }
    let b = &v["backends"][0];
    for k in [
        "name",
        "addr",
        "gear_dns",
        "state",
        "in_subset",
        "last_check",
        "tunnels",
        "sessions",
        "sessions_max",
        "requests_total",
        "errors",
        "connect_errors",
        "response_errors",
        "timeouts",
        "responses",
        "connections_open",
        "connections_idle",
        "cookie",
        "request_rate",
        "request_rate_max",
        "redispatches",
        "bytes_sent",
        "bytes_received",
        "checks_ok",
        "checks_failed",
        "down_transitions",
        "last_change_secs",
        "downtime_secs",
        "response_time",
    ] {
        assert!(b.get(k).is_some(), "backends[].{k} missing");
    }
    assert_eq!(v["peers"], serde_json::json!([]));
    assert_eq!(v["rotations"], serde_json::json!([]));
    assert_eq!(b["response_time"]["responses"], 1);
    // An old report (without the new fields) still reads.
    let mut old = v.clone();
    for k in [
        "gear_dns",
        "health",
        "peers",
        "rotations",
        "availability",
        "status_listener",
    ] {
        old.as_object_mut().unwrap().remove(k);
    }
    old["backends"][0]
        .as_object_mut()
        .unwrap()
        .remove("response_time");
    old["frontend"]
        .as_object_mut()
        .unwrap()
        .remove("bytes_sent");
    serde_json::from_value::<StatusReport>(old).unwrap();

    // Only GET/HEAD, nothing that changes state, and the HTML routes answer.
    let c = client();
    for m in ["POST", "PUT", "DELETE"] {
        let req = http::Request::builder()
            .method(m)
            .uri(format!("http://{}/gearlb-status", g.status))
            .body(full(""))
            .unwrap();
        assert_eq!(send(&c, req).await.unwrap().status, 405, "{m}");
    }
    for p in [
        "/gearlb-status",
        "/haproxy-status",
        "/haproxy-status/",
        "/gearlb-status?refresh=5",
    ] {
        let got = get(g.status, p, &[]).await.unwrap();
        assert_eq!(got.status, 200, "{p}");
        assert_eq!(got.headers["content-type"], "text/html; charset=utf-8");
        assert!(got.headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("default-src 'none'"));
        let html = got.text();
        assert!(html.contains("web1"), "{p}");
        assert_eq!(
            html.contains("http-equiv=\"refresh\" content=\"5\""),
            p.contains("refresh=5")
        );
    }
    assert_eq!(
        get(g.status, "/gearlb-status/x", &[]).await.unwrap().status,
        404
    );
    assert_eq!(
        get(g.status, "/metrics;csv", &[]).await.unwrap().status,
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_logs_are_off_by_default_and_on_by_flag_or_config() {
    let web1 = TestBackend::start("web1").await;
    let request_lines = |g: &Gearlb| {
        g.log_text()
            .lines()
            .filter(|l| l.contains(" request ") || l.ends_with(" request"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };

    let dir = workdir();
    let g = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("web1", web1.addr)], ""),
    );
    assert_eq!(get(g.proxy, "/quiet", &[]).await.unwrap().status, 200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        request_lines(&g).is_empty(),
        "off by default:\n{}",
        g.log_text()
    );
    drop(g);

    let dir = workdir();
    let g = Gearlb::start_with(
        dir.path(),
        &config_text(dir.path(), &[("web1", web1.addr)], ""),
        &["--log-requests"],
        &[],
    );
    assert_eq!(get(g.proxy, "/by-flag?x=1", &[]).await.unwrap().status, 200);
    wait_for(Duration::from_secs(5), "a request line", || {
        g.log_text().contains("path=/by-flag")
    })
    .await;
    let line = request_lines(&g)
        .into_iter()
        .find(|l| l.contains("/by-flag"))
        .unwrap();
    for part in [
        "INFO",
        "method=GET",
        "status=200",
        "backend=web1",
        "ms=",
        "client=127.0.0.1:",
    ] {
        assert!(line.contains(part), "{part} missing in {line}");
    }
    drop(g);

    let dir = workdir();
    let g = Gearlb::start_with(
        dir.path(),
        &config_text(
            dir.path(),
            &[("web1", web1.addr)],
            "[log]\nrequests = true\n",
        ),
        &["--log-format", "json"],
        &[],
    );
    assert_eq!(get(g.proxy, "/by-config", &[]).await.unwrap().status, 200);
    wait_for(Duration::from_secs(5), "a JSON request line", || {
        g.log_text().contains("/by-config")
    })
    .await;
    let text = g.log_text();
    let mut saw_request = false;
    for l in text.lines().filter(|l| l.starts_with('{')) {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert!(v["level"].is_string() && v["timestamp"].is_string(), "{l}");
        if v["fields"]["message"] == "request" {
            assert_eq!(v["level"], "INFO");
            assert_eq!(v["fields"]["path"], "/by-config");
            assert_eq!(v["fields"]["backend"], "web1");
            assert_eq!(v["fields"]["status"], 200);
            saw_request = true;
        }
    }
    assert!(saw_request, "no JSON request line:\n{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("backend added") && l.contains("web1")),
        "state changes are logged with names:\n{text}"
    );
}

/// A report with every state, for rendering without a live balancer.
fn sample_report() -> StatusReport {
    let b = |name: &str, state: BackendState, in_subset: bool, check: Option<(&str, bool)>| {
        let recent: Vec<Option<f64>> = (0..60)
            .map(|i: i32| match state {
                BackendState::Up => {
                    Some(8.0 + 6.0 * ((i as f64) / 5.0).sin().abs() + (i % 7) as f64)
                }
                BackendState::Down if i < 40 => Some(30.0 + (i % 5) as f64 * 9.0),
                BackendState::Draining => (i % 3 != 0).then_some(15.0 + (i % 4) as f64),
                _ => None,
            })
            .collect();
        BackendReport {
            name: name.into(),
            addr: format!("node{}.example.com:35561", name.len()),
            gear_dns: name
                .strip_prefix("gear-")
                .map(|g| format!("{g}.apps.example.com")),
            state,
            in_subset,
            last_check: check.map(|(result, ok)| CheckReport {
                ok,
                result: result.into(),
                ms: 3,
                at: gearlb::stats::unix_now() - 1,
                version: None,
            }),
            tunnels: 0,
            sessions: 3,
            sessions_max: 17,
            requests_total: 123_456,
            errors: if state == BackendState::Down { 12 } else { 0 },
            connect_errors: 0,
            response_errors: 0,
            timeouts: 0,
            responses: ByClass {
                c1: 0,
                c2: 110_000,
                c3: 9_000,
                c4: 4_000,
                c5: 456,
            },
            connections_open: 4,
            connections_idle: 2,
            cookie: name.trim_start_matches("gear-").into(),
            request_rate: 42,
            request_rate_max: 97,
            redispatches: 0,
            bytes_sent: 1 << 20,
            bytes_received: 5 << 20,
            checks_ok: 100,
            checks_failed: 2,
            down_transitions: 1,
            last_change_secs: 30,
            downtime_secs: 4,
            response_time: ResponseTimeReport {
                responses: 123_456,
                mean_ms: Some(12.5),
                interval_secs: 5,
                recent_mean_ms: Some(12.0),
                recent_responses: 600,
                recent_ms: recent,
            },
            backup: false,
            queued: 0,
            max_connections: None,
            version: None,
        }
    };
    StatusReport {
        version: "0.1.0".into(),
        pid: 4242,
        uptime_secs: 3725,
        gear_uuid: Some("5256ab".into()),
        listen: ListenReport {
            mode: Default::default(),
            proxy: "127.0.0.1:8080".into(),
            status: "127.0.0.1:8081".into(),
        },
        frontend: FrontendReport {
            connections_current: 12,
            connections_max: 80,
            connections_total: 99_000,
            connections_refused: 0,
            client_timeouts: 3,
            requests_current: 9,
            requests_total: 370_000,
            responses: ByClass {
                c1: 0,
                c2: 330_000,
                c3: 27_000,
                c4: 12_000,
                c5: 1_000,
            },
            no_backend: 2,
            connections_limit: 10_000,
            requests_max: 40,
            bytes_received: 42 << 20,
            bytes_sent: 900 << 20,
            connection_rate: 30,
            connection_rate_max: 120,
            request_rate: 126,
            request_rate_max: 300,
        },
        backends: vec![
            b("gear-web1-ns", BackendState::Up, true, Some(("200", true))),
            b(
                "gear-5f2a9c-ns",
                BackendState::Down,
                true,
                Some(("connect: refused, \"twice\"", false)),
            ),
            b(
                "gear-8d0b7e-ns",
                BackendState::Draining,
                true,
                Some(("200", true)),
            ),
            b("gear-c41e22-ns", BackendState::Drained, true, None),
            b(
                "local-gear",
                BackendState::Up,
                false,
                Some(("<b>302</b>", true)),
            ),
        ],
        gear_dns: Some("myapp-ns.apps.example.com".into()),
        health: Some(HealthReport {
            enabled: true,
            uri: "/".into(),
            interval_ms: 2000,
            timeout_ms: 2000,
            fall: 2,
            rise: 3,
        }),
        peers: vec![],
        rotations: vec![],
        scaler: None,
        availability: None,
        status_listener: None,
        services: vec![],
        routing_spi: None,
    }
}

#[test]
fn html_escapes_every_value_and_fills_peers_and_rotations() {
    let mut r = sample_report();
    let html = gearlb::status::html::render(&r, &Default::default());
    assert!(html.contains("&lt;b&gt;302&lt;/b&gt;"));
    assert!(!html.contains("<b>302"));
    assert!(html.contains("single balancer — no peers yet"));
    assert!(html.contains("no rotation in progress"));
    assert!(!html.contains("<script"));
    assert!(!html.contains("http-equiv=\"refresh\""));
    r.peers.push(PeerReport {
        name: "<img src=x onerror=alert(1)>".into(),
        addr: "10.0.0.2:7946".into(),
        state: "alive".into(),
        last_seen_secs: Some(1),
        sessions: Some(7),
    });
    r.rotations.push(RotationReport {
        backend: "gear-8d0b7e-ns".into(),
        action: "out".into(),
        state: "draining".into(),
        age_secs: 12,
        balancers_done: 1,
        balancers_total: 2,
    });
    let html = gearlb::status::html::render(&r, &Default::default());
    assert!(!html.contains("single balancer"));
    assert!(!html.contains("no rotation in progress"));
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(!html.contains("<img"));
    assert!(html.contains("rotate out"));
}

// ---- Headless Chromium -------------------------------------------------------------

fn chromium() -> PathBuf {
    for p in [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ] {
        if Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    panic!(
        "headless Chromium is required to test the status page and was not found at \
         /usr/bin/chromium: install the Debian package `chromium` (.ci/run does)"
    );
}

/// Run Chromium headless with `args` then `url`; its stdout. Bounded in time.
fn run_chromium(profile: &Path, args: &[String], url: &str) -> String {
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-default-apps",
            "--disable-domain-reliability",
            "--disable-client-side-phishing-detection",
            "--no-first-run",
            "--no-default-browser-check",
            "--no-pings",
            "--hide-scrollbars",
            "--mute-audio",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start chromium: {e}"));
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let end = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium did not finish within 120 s: {}",
                err.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    assert!(status.success(), "chromium failed ({status}):\n{err}");
    out
}

/// (name, state, in subset) of every backend row in a dumped DOM.
fn dom_backends(dom: &str) -> Vec<(String, String, bool)> {
    let attr = |tag: &str, name: &str| -> String {
        let key = format!("{name}=\"");
        let start = tag.find(&key).map(|i| i + key.len()).unwrap_or(tag.len());
        tag[start..].split('"').next().unwrap_or("").to_string()
    };
    dom.split("<tr ")
        .skip(1)
        .filter(|t| t.starts_with("class=\"backend "))
        .map(|t| {
            let tag = t.split('>').next().unwrap_or("");
            let row = t.split("</tr>").next().unwrap_or("");
            let state = attr(tag, "data-state");
            // The state is also what a person reads in the row's badge.
            assert!(
                row.contains(&format!("<span class=\"badge {state}\">{state}</span>")),
                "row without a visible {state} badge: {row}"
            );
            (
                attr(tag, "data-backend"),
                state,
                attr(tag, "data-in-subset") == "true",
            )
        })
        .collect()
}

fn target_dir() -> PathBuf {
    // CARGO_TARGET_TMPDIR is <target>/tmp.
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("target"))
}

fn screenshot(profile: &Path, url: &str, name: &str) -> PathBuf {
    let path = target_dir().join(name);
    let _ = std::fs::remove_file(&path);
    run_chromium(
        profile,
        &[
            format!("--screenshot={}", path.display()),
            "--window-size=1280,900".into(),
        ],
        url,
    );
    let png =
        std::fs::read(&path).unwrap_or_else(|e| panic!("no screenshot {}: {e}", path.display()));
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "screenshot looks empty"
    );
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_in_chromium_with_two_balancers() {
    let chromium_bin = chromium(); // fail early and clearly when it is missing
    assert!(chromium_bin.exists());
    let web1 = TestBackend::start("web1").await;
    let web2 = TestBackend::start("web2").await;
    let web3 = TestBackend::start("web3").await;
    let (da, db) = (workdir(), workdir());
    // Two balancers of one application that gossip with each other.
    let gossip = |id: &str| {
        format!(
            "[cluster]\nnode_id = \"{id}\"\nid = \"app1\"\nlisten = \"127.0.0.1:0\"\nsecret = \"{SECRET}\"\ngossip_interval = \"100ms\"\n"
        )
    };
    let a = Gearlb::start_with(
        da.path(),
        &(config_fast_health(da.path(), &[("web1", web1.addr), ("web2", web2.addr)])
            + &gossip("lbA")),
        &[],
        &[("OPENSHIFT_GEAR_DNS", "myapp-ns.apps.example.com")],
    );
    let b = Gearlb::start_with(
        db.path(),
        &(config_fast_health(db.path(), &[("web1", web1.addr), ("web3", web3.addr)])
            + &gossip("lbB")),
        &[],
        &[("OPENSHIFT_GEAR_DNS", "5256ab-ns.apps.example.com")],
    );
    let list = peer_list(&[("lbA", &a), ("lbB", &b)]);
    for g in [&a, &b] {
        assert_eq!(g.ctl(&["set-peers", &list]).0, 0);
    }
    let both = vec!["lbA".to_string(), "lbB".to_string()];
    wait_for(
        Duration::from_secs(8),
        "the two balancers to see each other",
        || a.live() == both && b.live() == both,
    )
    .await;

    // Traffic on both, over two sparkline intervals, with a gear dying in between.
    let traffic = |secs: u64| {
        let (pa, pb) = (a.proxy, b.proxy);
        async move {
            let end = Instant::now() + Duration::from_secs(secs);
            let mut i = 0u64;
            while Instant::now() < end {
                let ms = 2 + (i * 7) % 25;
                let _ = get(pa, &format!("/slow?ms={ms}"), &[]).await;
                let _ = get(pb, &format!("/slow?ms={}", ms / 2), &[]).await;
                i += 1;
            }
        }
    };
    traffic(5).await;
    web2.kill();
    wait_state(&a, "web2", "down").await;
    traffic(6).await;

    let profile = tempfile::tempdir().unwrap();
    let profile_path = profile.path().to_path_buf();
    let (url_a, url_b) = (
        format!("http://{}/gearlb-status", a.status),
        format!("http://{}/haproxy-status/", b.status),
    );
    let (dom_a, dom_b, shot) = tokio::task::spawn_blocking(move || {
        let dom_a = run_chromium(&profile_path, &["--dump-dom".into()], &url_a);
        let dom_b = run_chromium(&profile_path, &["--dump-dom".into()], &url_b);
        let shot = screenshot(&profile_path, &url_a, "status-page.png");
        (dom_a, dom_b, shot)
    })
    .await
    .unwrap();

    assert_eq!(
        dom_backends(&dom_a),
        [
            ("web1".to_string(), "up".to_string(), true),
            ("web2".into(), "down".into(), true)
        ],
        "balancer A:\n{dom_a}"
    );
    assert_eq!(
        dom_backends(&dom_b),
        [
            ("web1".to_string(), "up".to_string(), true),
            ("web3".into(), "up".into(), true)
        ],
        "balancer B:\n{dom_b}"
    );
    assert!(dom_a.contains("myapp-ns.apps.example.com"));
    assert!(dom_b.contains("5256ab-ns.apps.example.com"));
    for (dom, peer) in [(&dom_a, "lbB"), (&dom_b, "lbA")] {
        assert!(
            dom.contains(peer) && dom.contains("alive"),
            "the live peer is shown:\n{dom}"
        );
        assert!(
            dom.contains("scaler: <b>lbA</b>"),
            "who the scaler is:\n{dom}"
        );
        assert!(
            dom.contains("2 of 2 known balancers live"),
            "quorum line:\n{dom}"
        );
        assert!(dom.contains("no rotation in progress"));
        assert!(dom.contains("<svg"), "a sparkline is drawn");
    }
    assert!(
        dom_a.contains("connect"),
        "the failed check's reason is shown"
    );
    println!("screenshot of balancer A: {}", shot.display());

    // Every state, from a report, rendered the same way.
    let html = gearlb::status::html::render(&sample_report(), &Default::default());
    let file = target_dir().join("status-page-states.html");
    std::fs::write(&file, html).unwrap();
    let profile_path = profile.path().to_path_buf();
    let (dom, shot) = tokio::task::spawn_blocking(move || {
        let url = format!("file://{}", file.display());
        let dom = run_chromium(&profile_path, &["--dump-dom".into()], &url);
        (
            dom,
            screenshot(&profile_path, &url, "status-page-states.png"),
        )
    })
    .await
    .unwrap();
    let rows = dom_backends(&dom);
    let states: Vec<(&str, &str, bool)> = rows
        .iter()
        .map(|(n, s, i)| (n.as_str(), s.as_str(), *i))
        .collect();
    assert_eq!(
        states,
        [
            ("gear-web1-ns", "up", true),
            ("gear-5f2a9c-ns", "down", true),
            ("gear-8d0b7e-ns", "draining", true),
            ("gear-c41e22-ns", "drained", true),
            ("local-gear", "up", false),
        ]
    );
    assert!(dom.contains("<span class=\"badge out-of-subset\">out of subset</span>"));
    println!("screenshot of every state: {}", shot.display());
}

/// `promtool check metrics` (Debian's `prometheus` package) on a live cluster's
/// `/metrics` as curl and promtool read it (the text format), every family present; and
/// OpenMetrics to a scraper that asks for it as Prometheus does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_pass_promtool_and_follow_the_scrapers_accept() {
    let promtool = std::path::Path::new("/usr/bin/promtool");
    assert!(
        promtool.exists(),
        "this test needs promtool: apt-get install prometheus (.ci/run does)"
    );
    let web1 = TestBackend::start("web1").await;
    let web2 = TestBackend::start("web2").await;
    let (_dirs, lbs) = cluster_of(2, &[&web1, &web2], "").await;
    for _ in 0..10 {
        assert_eq!(get(lbs[0].proxy, "/", &[]).await.unwrap().status, 200);
    }
    for op in ["rotate-out", "rotate-in"] {
        let (code, out, err) = lbs[0].ctl(&[op, "web1-ns"]);
        assert_eq!(code, 0, "{out}{err}");
    }
    let got = get(lbs[0].status, "/metrics", &[]).await.unwrap();
    assert_eq!(
        got.headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = got.text();
    for family in [
        "gearlb_frontend_requests_total",
        "gearlb_backend_response_head_seconds_bucket",
        "gearlb_gossip_frames_sent_total",
        "gearlb_gossip_bytes_sent_total",
        "gearlb_gossip_bytes_received_total",
        "gearlb_rotations_total",
        "gearlb_rotation_duration_seconds_total",
        "gearlb_scaler_acting",
    ] {
        assert!(text.contains(family), "{family} missing:\n{text}");
    }
    assert!(!text.contains("# EOF"));
    let mut check = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        check
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = check.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool: {said}"
    );

    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let got = get(lbs[0].status, "/metrics", &[("accept", prometheus)])
        .await
        .unwrap();
    assert_eq!(
        got.headers["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let types = metric_names(&got.text());
    assert_eq!(types["gearlb_rotation_duration_seconds"], "counter");
    assert_eq!(types["gearlb_frontend_requests"], "counter");
}
