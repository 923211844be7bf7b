//! The CSV's fields: HAProxy's column list in its documented order, the two proxies'
//! names and ids (`stats` 1, `express` 2), the row types, and HAProxy's values for a
//! server's `status` and a check's `check_status`.

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
pub(super) const PROCESS_NUM: u32 = 1;
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

/// Row types of [`Filter::types`](super::Filter::types), as HAProxy's `show stat <iid> <type> <sid>`.
pub const TYPE_FRONTEND: u32 = 1;
pub const TYPE_BACKEND: u32 = 2;
pub const TYPE_SERVER: u32 = 4;

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
    // TCP backends' checks (`proxy::health`'s layer 4 and 6 results).
    for (prefix, status, desc) in [
        ("L6OK", "L6OK", "Layer6 check passed"),
        ("L6RSP", "L6RSP", "Layer6 invalid response"),
        ("L6TOUT", "L6TOUT", "Layer6 timeout"),
        ("L4OK", "L4OK", "Layer4 check passed"),
        ("L4CON", "L4CON", "Layer4 connection problem"),
    ] {
        if c.result.starts_with(prefix) {
            return (status, None, desc);
        }
    }
    if c.result.starts_with("connect") {
        ("L4CON", None, "Layer4 connection problem")
    } else if c.result.starts_with("timed out") {
        ("L7TOUT", None, "Layer7 timeout")
    } else {
        ("L7RSP", None, "Layer7 invalid response")
    }
}
