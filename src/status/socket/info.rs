//! `show info`: HAProxy's `Name: value` process information, from the status report.

use crate::report::StatusReport;

/// HAProxy's `Uptime`: `0d 0h00m04s`.
pub(super) fn uptime(secs: u64) -> String {
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
    let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
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
