//! The page's chart: an inline SVG sparkline of a backend's recent response times.

use std::fmt::Write as _;

use super::format::{esc, ms};
use crate::report::BackendReport;

/// An inline SVG line of the recent mean response times; gaps where there was no
/// response.
pub(super) fn sparkline(h: &mut String, b: &BackendReport) {
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
