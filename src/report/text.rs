//! The report as text, for `gearlb ctl status`.

use super::types::StatusReport;

impl StatusReport {
    /// Human-readable text for `gearlb ctl status`.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let f = &self.frontend;
        out.push_str(&format!(
            "gearlb {} pid {} up {}s  proxy {}  status {}\n",
            self.version, self.pid, self.uptime_secs, self.listen.proxy, self.listen.status
        ));
        out.push_str(&format!(
            "frontend: {} conns (max {}, total {}, refused {}), {} requests in flight, {} total; 2xx {} 3xx {} 4xx {} 5xx {}; no backend {}\n",
            f.connections_current,
            f.connections_max,
            f.connections_total,
            f.connections_refused,
            f.requests_current,
            f.requests_total,
            f.responses.c2,
            f.responses.c3,
            f.responses.c4,
            f.responses.c5,
            f.no_backend
        ));
        if self.backends.is_empty() {
            out.push_str("backends: none\n");
            return out;
        }
        let w = self
            .backends
            .iter()
            .map(|b| b.name.len())
            .max()
            .unwrap_or(4)
            .max(4);
        out.push_str(&format!(
            "{:<w$}  {:<22}  {:<8}  {:>8}  {:>10}  {:>7}  {:>6}  CHECK\n",
            "NAME", "ADDRESS", "STATE", "SESSIONS", "REQUESTS", "ERRORS", "CONNS"
        ));
        for b in &self.backends {
            let state = serde_json::to_value(b.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            let check = match &b.last_check {
                Some(c) => format!(
                    "{} {} ({} ms)",
                    if c.ok { "ok" } else { "FAIL" },
                    c.result,
                    c.ms
                ),
                None => "-".into(),
            };
            out.push_str(&format!(
                "{:<w$}  {:<22}  {:<8}  {:>8}  {:>10}  {:>7}  {:>6}  {}\n",
                b.name,
                b.addr,
                state,
                b.sessions,
                b.requests_total,
                b.errors,
                b.connections_open,
                check
            ));
        }
        out
    }
}
