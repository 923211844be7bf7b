//! The status page for people (`/gearlb-status`, and `/haproxy-status` for old links).
//!
//! Owns the rendering of one balancer's [`StatusReport`] into one self-contained HTML
//! document: inline CSS, inline SVG sparklines, no script, no external resource (the
//! status listener sends a Content-Security-Policy that forbids them anyway). Every value
//! taken from the report goes through [`esc`]. Optional auto-refresh is a
//! `<meta http-equiv="refresh">`.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use crate::report::{BackendReport, ByClass, StatusReport};
use crate::routing::BackendState;

/// Escape text for HTML element content and quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Options of one rendering.
#[derive(Clone, Debug, Default)]
pub struct PageOptions {
    /// Seconds between automatic reloads, if any.
    pub refresh: Option<u32>,
    /// Relative link to the CSV form of this page.
    pub csv_href: String,
}

/// 1234567 → "1,234,567".
fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.1} ms")
    } else if v < 10_000.0 {
        format!("{v:.0} ms")
    } else {
        format!("{:.1} s", v / 1000.0)
    }
}

fn ago(secs: u64) -> String {
    // Keep it short: the largest unit only.
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m", secs / 60),
        3600..=86_399 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

/// The CSS class and label of a backend's state.
fn state_badge(state: BackendState) -> (&'static str, &'static str) {
    match state {
        BackendState::Up => ("up", "up"),
        BackendState::Down => ("down", "down"),
        BackendState::Draining => ("draining", "draining"),
        BackendState::Drained => ("drained", "drained"),
    }
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

fn card(h: &mut String, label: &str, big: &str, small: &str, bad: bool) {
    let _ = write!(
        h,
        "<div class=\"card\"><div class=\"label\">{}</div><div class=\"big{}\">{}</div>\
         <div class=\"small\">{}</div></div>",
        esc(label),
        if bad { " bad" } else { "" },
        esc(big),
        esc(small)
    );
}

fn class_bar(h: &mut String, c: &ByClass) {
    let total = c.c1 + c.c2 + c.c3 + c.c4 + c.c5;
    let _ = write!(
        h,
        "<div class=\"classes\" title=\"1xx {} · 2xx {} · 3xx {} · 4xx {} · 5xx {}\">",
        c.c1, c.c2, c.c3, c.c4, c.c5
    );
    if total > 0 {
        for (class, n) in [
            ("c1", c.c1),
            ("c2", c.c2),
            ("c3", c.c3),
            ("c4", c.c4),
            ("c5", c.c5),
        ] {
            if n > 0 {
                let pct = n as f64 * 100.0 / total as f64;
                let _ = write!(
                    h,
                    "<span class=\"{class}\" style=\"width:{pct:.2}%\"></span>"
                );
            }
        }
    }
    h.push_str("</div>");
}

fn frontend(h: &mut String, r: &StatusReport) {
    let f = &r.frontend;
    h.push_str("<h2>Frontend</h2>\n<section class=\"cards\" id=\"frontend\">");
    let limit = if f.connections_limit > 0 {
        format!(" · limit {}", count(f.connections_limit))
    } else {
        String::new()
    };
    card(
        h,
        "Sessions",
        &count(f.connections_current),
        &format!("max {}{limit}", count(f.connections_max)),
        false,
    );
    card(
        h,
        "Requests/s",
        &count(f.request_rate),
        &format!(
            "max {} · total {}",
            count(f.request_rate_max),
            count(f.requests_total)
        ),
        false,
    );
    card(
        h,
        "In flight",
        &count(f.requests_current),
        &format!("max {}", count(f.requests_max)),
        false,
    );
    let errors = f.no_backend + f.client_timeouts + f.connections_refused;
    card(
        h,
        "Errors",
        &count(errors),
        &format!(
            "503 no backend {} · client timeouts {} · refused {}",
            count(f.no_backend),
            count(f.client_timeouts),
            count(f.connections_refused)
        ),
        errors > 0,
    );
    card(
        h,
        "Bytes out",
        &bytes(f.bytes_sent),
        &format!("in {}", bytes(f.bytes_received)),
        false,
    );
    // Responses by class.
    let c = &f.responses;
    h.push_str("<div class=\"card\"><div class=\"label\">Responses</div>");
    let _ = write!(
        h,
        "<div class=\"big\">{}</div>",
        count(c.c1 + c.c2 + c.c3 + c.c4 + c.c5)
    );
    class_bar(h, c);
    let _ = write!(
        h,
        "<div class=\"legend\"><span><i class=\"c2\"></i>2xx {}</span>\
         <span><i class=\"c3\"></i>3xx {}</span><span><i class=\"c4\"></i>4xx {}</span>\
         <span><i class=\"c5\"></i>5xx {}</span></div></div>",
        count(c.c2),
        count(c.c3),
        count(c.c4),
        count(c.c5)
    );
    h.push_str("</section>\n");
}

/// An inline SVG line of the recent mean response times; gaps where there was no
/// response.
fn sparkline(h: &mut String, b: &BackendReport) {
    const W: f64 = 120.0;
    const H: f64 = 28.0;
    let rt = &b.response_time;
    let pts = &rt.recent_ms;
    let max = pts.iter().flatten().copied().fold(0.0f64, f64::max);
    h.push_str("<div class=\"spark\">");
    if max <= 0.0 && pts.iter().all(Option::is_none) {
        h.push_str("<span class=\"muted\">no traffic yet</span></div>");
        return;
    }
    // At least a minute wide, so the first points are not squeezed into one corner.
    let slots = pts.len().max(12);
    let step = W / (slots.saturating_sub(1).max(1)) as f64;
    // Right-aligned: the newest point is at the right edge.
    let offset = slots - pts.len();
    let y = |v: f64| {
        // Headroom above the highest point, so a flat line does not hug the top.
        let scaled = if max > 0.0 { v / (max * 1.15) } else { 0.0 };
        (H - 3.0) - scaled * (H - 6.0)
    };
    let _ = write!(
        h,
        "<svg width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\" \
         aria-label=\"response time, last {} s\"><title>max {} over the last {} s</title>\
         <line x1=\"0\" y1=\"{:.1}\" x2=\"{W}\" y2=\"{:.1}\" stroke=\"#d8dee4\" stroke-width=\"1\"/>",
        rt.interval_secs * pts.len() as u64,
        esc(&ms(max)),
        rt.interval_secs * pts.len() as u64,
        H - 2.5,
        H - 2.5,
    );
    let mut segment: Vec<(f64, f64)> = Vec::new();
    let mut segments = Vec::new();
    for (i, p) in pts.iter().enumerate() {
        match p {
            Some(v) => segment.push(((offset + i) as f64 * step, y(*v))),
            None => {
                if !segment.is_empty() {
                    segments.push(std::mem::take(&mut segment));
                }
            }
        }
    }
    if !segment.is_empty() {
        segments.push(segment);
    }
    for seg in &segments {
        if seg.len() == 1 {
            let (x, y) = seg[0];
            let _ = write!(
                h,
                "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"1.6\" fill=\"#0969da\"/>"
            );
            continue;
        }
        let line: Vec<String> = seg.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let (x0, _) = seg[0];
        let (x1, _) = seg[seg.len() - 1];
        let _ = write!(
            h,
            "<polygon points=\"{x0:.1},{:.1} {} {x1:.1},{:.1}\" fill=\"#ddf4ff\"/>\
             <polyline points=\"{}\" fill=\"none\" stroke=\"#0969da\" stroke-width=\"1.5\" \
             stroke-linejoin=\"round\"/>",
            H - 2.5,
            line.join(" "),
            H - 2.5,
            line.join(" ")
        );
    }
    if let Some(Some(last)) = pts.last() {
        let x = (offset + pts.len() - 1) as f64 * step;
        let _ = write!(
            h,
            "<circle cx=\"{x:.1}\" cy=\"{:.1}\" r=\"2.2\" fill=\"#0969da\"/>",
            y(*last)
        );
    }
    h.push_str("</svg>");
    let _ = write!(
        h,
        "<span class=\"last\" title=\"mean over the window\">{}</span></div>",
        esc(&rt.recent_mean_ms.map(ms).unwrap_or_else(|| "–".into()))
    );
}

fn backends(h: &mut String, r: &StatusReport) {
    let n = |s: BackendState| r.backends.iter().filter(|b| b.state == s).count();
    let _ = writeln!(
        h,
        "<h2>Backends<span class=\"count\">{} up · {} down · {} draining · {} drained</span></h2>",
        n(BackendState::Up),
        n(BackendState::Down),
        n(BackendState::Draining),
        n(BackendState::Drained)
    );
    h.push_str("<section class=\"panel\" id=\"backends\">");
    if r.backends.is_empty() {
        h.push_str("<p class=\"empty\">no backend configured yet</p></section>\n");
        return;
    }
    h.push_str(
        "<table><thead><tr><th>State</th><th>Backend</th>\
         <th class=\"num\" title=\"requests in flight now / most at once\">Sessions</th>\
         <th class=\"num\">Requests</th><th class=\"num\">Req/s</th>\
         <th class=\"num\">Errors</th><th>Responses</th><th>Last check</th>\
         <th>Response time, 5 min</th></tr></thead><tbody>\n",
    );
    let now = crate::time::unix_secs();
    for b in &r.backends {
        let (class, label) = state_badge(b.state);
        let _ = write!(
            h,
            "<tr class=\"backend st-{class}\" data-backend=\"{}\" data-state=\"{class}\" \
             data-in-subset=\"{}\"><td class=\"state\">",
            esc(&b.name),
            b.in_subset
        );
        let _ = write!(h, "<span class=\"badge {class}\">{label}</span>");
        if !b.in_subset {
            h.push_str("<span class=\"badge out-of-subset\">out of subset</span>");
        }
        let _ = write!(
            h,
            "</td><td class=\"name\" title=\"{}\">{}<div class=\"sub\">{}</div></td>",
            esc(b.gear_dns.as_deref().unwrap_or("")),
            esc(&b.name),
            esc(&b.addr)
        );
        // Sessions count open tunnels: say how many of them are.
        let tunnels = if b.tunnels > 0 {
            format!(
                " <span class=\"muted\" title=\"of which WebSocket tunnels\">({} ws)</span>",
                b.tunnels
            )
        } else {
            String::new()
        };
        let _ = write!(
            h,
            "<td class=\"num\">{}{tunnels} <span class=\"muted\">/ {}</span></td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td>",
            count(b.sessions),
            count(b.sessions_max),
            count(b.requests_total),
            count(b.request_rate)
        );
        let _ = write!(
            h,
            "<td class=\"num{}\" title=\"connect {} · response {} · timeouts {} · redispatched {}\">{}</td><td>",
            if b.errors > 0 { " bad" } else { "" },
            b.connect_errors,
            b.response_errors,
            b.timeouts,
            b.redispatches,
            count(b.errors)
        );
        class_bar(h, &b.responses);
        h.push_str("</td><td><div class=\"check\">");
        match &b.last_check {
            Some(c) => {
                let (mark, class) = if c.ok { ("✓", "ok") } else { ("✗", "fail") };
                let when = if c.at > 0 {
                    format!(" · {} ago", ago(now.saturating_sub(c.at)))
                } else {
                    String::new()
                };
                let _ = write!(
                    h,
                    "<span title=\"{}\"><span class=\"{class}\">{mark}</span> {} · {} ms{}</span>",
                    esc(&c.result),
                    esc(&c.result),
                    c.ms,
                    esc(&when)
                );
            }
            None => h.push_str("<span class=\"muted\">not checked yet</span>"),
        }
        h.push_str("</div></td><td>");
        sparkline(h, b);
        h.push_str("</td></tr>\n");
    }
    h.push_str("</tbody></table></section>\n");
}

fn peers(h: &mut String, r: &StatusReport) {
    h.push_str("<h2>Peers</h2>\n<section class=\"panel\" id=\"peers\">");
    if let Some(sc) = &r.scaler {
        let _ = writeln!(
            h,
            "<p class=\"scaler\">scaler: <b>{}</b>{} · {} of {} known balancers live · quorum {} · auto-scaling {}{}</p>",
            esc(sc.scaler.as_deref().unwrap_or("none")),
            if sc.acting { " (this balancer)" } else { "" },
            sc.live,
            sc.known,
            if sc.quorum { "yes" } else { "<b>no</b>" },
            if sc.enabled { "on" } else { "off" },
            if sc.broker { "" } else { " (no broker configured)" },
        );
    }
    if r.peers.is_empty() {
        h.push_str("<p class=\"empty\">single balancer — no peers yet</p></section>\n");
        return;
    }
    h.push_str(
        "<table><thead><tr><th>Balancer</th><th>Address</th><th>State</th>\
         <th class=\"num\">Last seen</th><th class=\"num\">Sessions</th></tr></thead><tbody>\n",
    );
    for p in &r.peers {
        let _ = writeln!(
            h,
            "<tr><td class=\"name\">{}</td><td class=\"mono\">{}</td><td>{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&p.name),
            esc(&p.addr),
            esc(&p.state),
            esc(&p
                .last_seen_secs
                .map(|s| format!("{} ago", ago(s)))
                .unwrap_or_else(|| "–".into())),
            esc(&p.sessions.map(count).unwrap_or_else(|| "–".into())),
        );
    }
    h.push_str("</tbody></table></section>\n");
}

fn rotations(h: &mut String, r: &StatusReport) {
    h.push_str("<h2>Rotations</h2>\n<section class=\"panel\" id=\"rotations\">");
    if r.rotations.is_empty() {
        h.push_str("<p class=\"empty\">no rotation in progress</p></section>\n");
        return;
    }
    h.push_str(
        "<table><thead><tr><th>Gear</th><th>Action</th><th>State</th>\
         <th class=\"num\">Started</th><th class=\"num\">Balancers done</th></tr></thead><tbody>\n",
    );
    for x in &r.rotations {
        let _ = writeln!(
            h,
            "<tr><td class=\"name\">{}</td><td>rotate {}</td><td>{}</td>\
             <td class=\"num\">{} ago</td><td class=\"num\">{} / {}</td></tr>",
            esc(&x.backend),
            esc(&x.action),
            esc(&x.state),
            esc(&ago(x.age_secs)),
            x.balancers_done,
            x.balancers_total
        );
    }
    h.push_str("</tbody></table></section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            esc("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
    }

    #[test]
    fn formats() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(ms(2.5), "2.5 ms");
        assert_eq!(ms(250.0), "250 ms");
        assert_eq!(ago(5), "5s");
        assert_eq!(ago(125), "2m");
    }
}
