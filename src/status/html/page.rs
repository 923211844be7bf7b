//! The page layout: the document's head (auto-refresh, inline CSS), header, navigation
//! and footer around the sections, in one self-contained HTML document.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use super::format::esc;
use super::sections::{backends, frontend, peers, rotations, service};
use crate::report::StatusReport;

/// Options of one rendering.
#[derive(Clone, Debug, Default)]
pub struct PageOptions {
    /// Seconds between automatic reloads, if any.
    pub refresh: Option<u32>,
    /// Relative link to the CSV form of this page.
    pub csv_href: String,
}

const CSS: &str = r#"
:root{--fg:#1f2328;--muted:#656d76;--line:#d8dee4;--bg:#f6f8fa;--card:#fff;
--up:#1a7f37;--up-bg:#dafbe1;--down:#cf222e;--down-bg:#ffebe9;--draining:#9a6700;--draining-bg:#fff8c5;
--drained:#57606a;--drained-bg:#eaeef2;--subset:#0969da;--subset-bg:#ddf4ff}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,"Noto Sans","DejaVu Sans",sans-serif}
main,header.top{max-width:1320px;margin:0 auto;padding:0 20px}
header.top{display:flex;flex-wrap:wrap;align-items:baseline;gap:6px 18px;padding-top:18px;padding-bottom:14px}
.brand{font-size:20px;font-weight:650;letter-spacing:-.01em}
.brand .logo{color:var(--subset)}
.brand .where{font-weight:500;color:var(--fg)}
.meta,.nav{color:var(--muted);font-size:13px}
.nav{margin-left:auto}
a{color:var(--subset);text-decoration:none}a:hover{text-decoration:underline}
.nav a.on{color:var(--fg);font-weight:600}
.mono,code{font-family:ui-monospace,SFMono-Regular,"SF Mono",Menlo,Consolas,"DejaVu Sans Mono",monospace;font-size:12.5px}
h2{font-size:13px;font-weight:650;text-transform:uppercase;letter-spacing:.06em;color:var(--muted);margin:22px 0 8px}
h2 .count{font-weight:500;text-transform:none;letter-spacing:0;margin-left:6px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(170px,1fr));gap:10px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 14px}
.card .label{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.05em}
.card .big{font-size:26px;font-weight:600;font-variant-numeric:tabular-nums;line-height:1.25}
.card .small{font-size:12px;color:var(--muted);font-variant-numeric:tabular-nums}
.card .big.bad{color:var(--down)}
.panel{background:var(--card);border:1px solid var(--line);border-radius:8px;overflow-x:auto}
table{border-collapse:collapse;width:100%}
th{font-size:11.5px;font-weight:600;color:var(--muted);text-transform:uppercase;letter-spacing:.04em;text-align:left;padding:7px 9px;background:#f6f8fa;border-bottom:1px solid var(--line);white-space:nowrap}
th.num{text-align:right}
td{padding:6px 9px;border-bottom:1px solid #eaeef2;vertical-align:middle}
tbody tr:last-child td{border-bottom:0}
tbody tr:hover td{background:#f6f8fa}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.name{font-weight:600;white-space:nowrap}
td.name .sub{font-weight:400;color:var(--muted);font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;font-size:11.5px}
td.state{white-space:nowrap}
td.state .badge{display:block;width:fit-content;margin:2px 0}
tr.st-up td:first-child{box-shadow:inset 3px 0 var(--up)}
tr.st-down td:first-child{box-shadow:inset 3px 0 var(--down)}
tr.st-draining td:first-child{box-shadow:inset 3px 0 var(--draining)}
tr.st-drained td:first-child{box-shadow:inset 3px 0 var(--drained)}
.badge{display:inline-block;font-size:11.5px;font-weight:650;text-transform:uppercase;letter-spacing:.04em;padding:1px 8px;border-radius:999px;white-space:nowrap}
.badge.up{color:var(--up);background:var(--up-bg)}
.badge.down{color:var(--down);background:var(--down-bg)}
.badge.draining{color:var(--draining);background:var(--draining-bg)}
.badge.drained{color:var(--drained);background:var(--drained-bg)}
.badge.out-of-subset{color:var(--subset);background:var(--subset-bg)}
.muted{color:var(--muted)}
.bad{color:var(--down)}
.check{max-width:210px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.check .ok{color:var(--up);font-weight:700}
.check .fail{color:var(--down);font-weight:700}
.classes{display:flex;width:110px;height:8px;border-radius:4px;overflow:hidden;background:#eaeef2}
.classes span{display:block;height:100%}
.c1{background:#8c959f}.c2{background:#2da44e}.c3{background:#54aeff}.c4{background:#d4a72c}.c5{background:#cf222e}
.legend{font-size:11.5px;color:var(--muted);line-height:1.6}
.legend span{white-space:nowrap;margin-right:8px}
.legend i{display:inline-block;width:8px;height:8px;border-radius:2px;margin-right:3px}
.card .classes{width:100%;margin:5px 0 3px}
.spark{display:flex;align-items:center;gap:8px;white-space:nowrap}
.spark svg{display:block}
.spark .last{font-variant-numeric:tabular-nums;font-size:12.5px;min-width:58px;color:var(--muted)}
.empty{margin:0;padding:12px 16px;color:var(--muted);font-style:italic}
.scaler{margin:0;padding:12px 16px 4px}
footer{max-width:1320px;margin:18px auto 28px;padding:0 20px;color:var(--muted);font-size:12px}
"#;

/// The whole page.
pub fn render(r: &StatusReport, opts: &PageOptions) -> String {
    let mut h = String::with_capacity(16 * 1024 + r.backends.len() * 2048);
    let where_ = r
        .gear_dns
        .clone()
        .or_else(|| r.gear_uuid.clone())
        .unwrap_or_else(|| r.listen.proxy.clone());
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n");
    h.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    if let Some(n) = opts.refresh {
        let _ = writeln!(h, "<meta http-equiv=\"refresh\" content=\"{n}\">");
    }
    let _ = writeln!(h, "<title>gearlb status · {}</title>", esc(&where_));
    let _ = writeln!(h, "<style>{CSS}</style></head><body>");

    // Header: who this balancer is, and links.
    let _ = write!(
        h,
        "<header class=\"top\"><div class=\"brand\"><span class=\"logo\">gearlb</span> \
         <span class=\"where\" id=\"balancer\">{}</span></div>",
        esc(&where_)
    );
    let _ = write!(
        h,
        "<div class=\"meta\">v{} · pid {} · up {} · proxy <span class=\"mono\">{}</span> · \
         status <span class=\"mono\">{}</span></div>",
        esc(&r.version),
        r.pid,
        esc(&humantime::format_duration(Duration::from_secs(r.uptime_secs)).to_string()),
        esc(&r.listen.proxy),
        esc(&r.listen.status),
    );
    h.push_str("<div class=\"nav\">refresh ");
    for (label, n) in [("off", None), ("5s", Some(5)), ("30s", Some(30))] {
        let href = match n {
            Some(n) => format!("?refresh={n}"),
            None => "?".to_string(),
        };
        let class = if opts.refresh == n {
            " class=\"on\""
        } else {
            ""
        };
        let _ = write!(h, "<a{class} href=\"{}\">{label}</a> ", esc(&href));
    }
    let _ = write!(
        h,
        "· <a href=\"{}\">CSV</a> · <a href=\"/gearlb-status.json\">JSON</a> · \
         <a href=\"/metrics\">metrics</a></div></header>\n<main>\n",
        esc(&opts.csv_href)
    );

    frontend(&mut h, r);
    backends(&mut h, r);
    for svc in &r.services {
        service(&mut h, svc);
    }
    peers(&mut h, r);
    rotations(&mut h, r);

    h.push_str("</main>\n<footer>");
    if let Some(hc) = &r.health {
        if hc.enabled {
            let _ = write!(
                h,
                "Health checks: GET <code>{}</code> every {} ms (timeout {} ms), down after {} \
                 failures, up after {} passes. ",
                esc(&hc.uri),
                hc.interval_ms,
                hc.timeout_ms,
                hc.fall,
                hc.rise
            );
        } else {
            h.push_str("Health checks are off. ");
        }
    }
    let _ = write!(
        h,
        "Generated {} UTC by gearlb {}.</footer>\n</body></html>\n",
        esc(humantime::format_rfc3339_seconds(SystemTime::now())
            .to_string()
            .replace('T', " ")
            .trim_end_matches('Z')),
        esc(&r.version)
    );
    h
}
