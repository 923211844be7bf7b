//! The page's sections: the frontend's summary cards and response-class bar, the
//! backends' table, the peer balancers and the rotations.

use std::fmt::Write as _;

use super::chart::sparkline;
use super::format::{ago, bytes, count, esc, state_badge};
use crate::report::{ByClass, StatusReport};
use crate::routing::BackendState;

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

pub(super) fn frontend(h: &mut String, r: &StatusReport) {
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

pub(super) fn backends(h: &mut String, r: &StatusReport) {
    backend_table(h, "Backends", "backends", &r.backends);
}

/// A service beside the default one: its routes and where they came from, then its
/// backends.
pub(super) fn service(h: &mut String, svc: &crate::report::ServiceStatus) {
    let title = format!("Service {}", esc(&svc.name));
    backend_table(
        h,
        &title,
        &format!("service-{}", esc(&svc.name)),
        &svc.backends,
    );
    let listen = svc
        .listen
        .as_deref()
        .map(|l| format!(" · listener {}", esc(l)))
        .unwrap_or_default();
    let _ = writeln!(
        h,
        "<p class=\"routes\">hosts {} · paths {}{listen} · from {}</p>",
        esc(&svc.hosts.join(", ")),
        esc(&svc.paths.join(", ")),
        esc(&svc.origin)
    );
    if let Some(v) = &svc.versions {
        let groups: Vec<String> = v
            .groups
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let mark = if v.active == Some(i) {
                    " <b>active</b>"
                } else if v.canary == Some(i) {
                    " canary"
                } else {
                    ""
                };
                format!("{}{mark}", esc(&g.join(", ")))
            })
            .collect();
        let _ = writeln!(
            h,
            "<p class=\"routes\">versions: {}</p>",
            groups.join(" &lt; ")
        );
    }
}

fn backend_table(h: &mut String, title: &str, id: &str, list: &[crate::report::BackendReport]) {
    let n = |s: BackendState| list.iter().filter(|b| b.state == s).count();
    let _ = writeln!(
        h,
        "<h2>{title}<span class=\"count\">{} up · {} down · {} draining · {} drained</span></h2>",
        n(BackendState::Up),
        n(BackendState::Down),
        n(BackendState::Draining),
        n(BackendState::Drained)
    );
    let _ = write!(h, "<section class=\"panel\" id=\"{id}\">");
    if list.is_empty() {
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
    for b in list {
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

pub(super) fn peers(h: &mut String, r: &StatusReport) {
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

pub(super) fn rotations(h: &mut String, r: &StatusReport) {
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
