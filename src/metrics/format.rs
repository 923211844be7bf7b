//! Exposition formats: the content types, choosing OpenMetrics or the classic text
//! format 0.0.4 from a scraper's `Accept` ([`negotiate`]), and turning the encoded
//! OpenMetrics text into the text format ([`to_text_004`]).

/// Content type of [`Metrics::encode`](super::Metrics::encode)'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the classic text format ([`to_text_004`]).
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The exposition formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    /// Prometheus text format 0.0.4.
    Text,
}

/// The format a scraper's `Accept` header asks for: OpenMetrics when it weighs
/// `application/openmetrics-text` at least as high as `text/plain` (and above 0), the
/// text format otherwise, and without the header (as Prometheus's Go client does).
pub fn negotiate(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Text;
    };
    let (mut om, mut text, mut any) = (0.0f32, 0.0f32, 0.0f32);
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .and_then(|(_, v)| v.trim().parse::<f32>().ok())
            .unwrap_or(1.0)
            .clamp(0.0, 1.0);
        let slot = match media.as_str() {
            "application/openmetrics-text" => &mut om,
            "text/plain" | "text/*" => &mut text,
            "*/*" => &mut any,
            _ => continue,
        };
        *slot = slot.max(q);
    }
    let text = text.max(any);
    if om > 0.0 && om >= text {
        Format::OpenMetrics
    } else {
        Format::Text
    }
}

/// OpenMetrics text as the classic text format 0.0.4: a counter's `HELP`/`TYPE` name
/// its `_total` samples, `_created` samples and `UNIT` lines go, `info` and `stateset`
/// become gauges, `unknown` untyped, and there is no `# EOF`.
pub fn to_text_004(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<(&str, &str)> = None;
    let mut counter = false;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = rest.split_once(' ').or(Some((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            counter = kind == "counter";
            let (name_out, kind_out) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "stateset" => (name.to_string(), "gauge"),
                "gaugehistogram" => (name.to_string(), "histogram"),
                "unknown" => (name.to_string(), "untyped"),
                k => (name.to_string(), k),
            };
            if let Some((_, h_text)) = help.take().filter(|(n, _)| *n == name) {
                // OpenMetrics escapes `"` in HELP; the text format does not.
                out.push_str(&format!(
                    "# HELP {name_out} {}\n",
                    h_text.replace("\\\"", "\"")
                ));
            }
            out.push_str(&format!("# TYPE {name_out} {kind_out}\n"));
            continue;
        }
        if line.starts_with('#') {
            continue; // # UNIT, # EOF
        }
        let sample = line.split(['{', ' ']).next().unwrap_or("");
        if counter && sample.ends_with("_created") {
            continue;
        }
        // Exemplars (` # {…} v`) are OpenMetrics only.
        let line = line.split_once(" # ").map_or(line, |(l, _)| l);
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_is_negotiated_as_scrapers_expect() {
        // Prometheus 2.x's scrape header.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(
            negotiate(Some("application/openmetrics-text; version=1.0.0")),
            Format::OpenMetrics
        );
        for text in [
            None,
            Some("*/*"),
            Some("text/plain; version=0.0.4"),
            Some("text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5"),
            Some("application/openmetrics-text;q=0"),
            Some("application/json"),
            Some(""),
            Some(";;,,q=x"),
        ] {
            assert_eq!(negotiate(text), Format::Text, "{text:?}");
        }
    }

    #[test]
    fn openmetrics_to_the_text_format() {
        let om = "# HELP a_requests Requests \\\"served\\\".\n# TYPE a_requests counter\na_requests_total{code=\"200\"} 3\na_requests_created 1.7e9\n# HELP a_up Up.\n# TYPE a_up gauge\n# UNIT a_up ratio\na_up 1\n# HELP a_build Build.\n# TYPE a_build info\na_build_info{version=\"1\"} 1\n# HELP a_t Time.\n# TYPE a_t histogram\na_t_bucket{le=\"+Inf\"} 2 # {trace=\"x\"} 0.5\na_t_sum 0.7\na_t_count 2\n# EOF\n";
        let text = to_text_004(om);
        assert_eq!(
            text,
            "# HELP a_requests_total Requests \"served\".\n# TYPE a_requests_total counter\na_requests_total{code=\"200\"} 3\n# HELP a_up Up.\n# TYPE a_up gauge\na_up 1\n# HELP a_build_info Build.\n# TYPE a_build_info gauge\na_build_info{version=\"1\"} 1\n# HELP a_t Time.\n# TYPE a_t histogram\na_t_bucket{le=\"+Inf\"} 2\na_t_sum 0.7\na_t_count 2\n"
        );
    }
}
