//! The status listener: a small HTTP server, separate from the proxy listener, that
//! reports on the balancer and never forwards application traffic.
//!
//! Owns the routes (only GET and HEAD; it exposes no control operation):
//! - `/health`: 200 while at least one backend is selectable, else 503 (for the router
//!   in front);
//! - `/gearlb-status.json`: the [`StatusReport`];
//! - `/gearlb-status`, `/haproxy-status`, `/haproxy-status/` and `/` (what the old
//!   cartridge's stats URI was): the HTML page ([`html`]), `?refresh=N` to reload every N
//!   seconds;
//! - the same paths with `;csv` (HAProxy's suffix, e.g. `/haproxy-status/;csv`, also
//!   with `;norefresh`): the HAProxy CSV ([`csv`]);
//! - `/metrics`: Prometheus metrics ([`crate::metrics`]).
//!
//! Everything else is 404.

pub mod csv;
pub mod html;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;

use crate::stats::StatusReport;

/// What the status listener needs from the application.
pub trait StatusSource: Send + Sync + 'static {
    fn report(&self) -> StatusReport;
    /// True while at least one backend can take a request.
    fn healthy(&self) -> bool;
    /// The Prometheus exposition ([`crate::metrics::Metrics::encode`]).
    fn metrics(&self) -> Result<String, std::fmt::Error>;
}

/// The paths of the HTML page; with `;csv` they serve the CSV.
const PAGE_PATHS: [&str; 5] = [
    "/gearlb-status",
    "/haproxy-status",
    "/haproxy-status/",
    "/gearlb-status/",
    "/",
];

enum Page {
    Html,
    Csv,
}

/// Which page a path names: one of [`PAGE_PATHS`], optionally followed by HAProxy's
/// `;`-options (`;csv`, `;norefresh`; others are ignored as HAProxy does).
fn page(path: &str) -> Option<Page> {
    let (base, options) = path.split_once(';').unwrap_or((path, ""));
    if !PAGE_PATHS.contains(&base) {
        return None;
    }
    if options.split(';').any(|o| o == "csv") {
        Some(Page::Csv)
    } else {
        Some(Page::Html)
    }
}

/// `refresh=N` from a query string, when N is a number of seconds from 1 to 3600.
fn refresh(query: Option<&str>) -> Option<u32> {
    query?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "refresh")
        .and_then(|(_, v)| v.parse::<u32>().ok())
        .filter(|n| (1..=3600).contains(n))
}

/// Serve status requests until `shutdown`.
pub async fn serve<S: StatusSource>(
    listener: TcpListener,
    source: Arc<S>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let (stream, _) = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let source = source.clone();
        let shutdown = shutdown.clone();
        tracker.spawn(async move {
            let svc = service_fn(move |req| {
                let source = source.clone();
                async move { Ok::<_, Infallible>(route(&*source, &req)) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => if let Err(e) = r { debug!(error = %e, "status connection error") },
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
                }
            }
        });
    }
}

fn route<S: StatusSource>(source: &S, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    }
    match req.uri().path() {
        "/health" => {
            if source.healthy() {
                text(StatusCode::OK, "1\n")
            } else {
                text(StatusCode::SERVICE_UNAVAILABLE, "no backend available\n")
            }
        }
        "/gearlb-status.json" => match serde_json::to_vec_pretty(&source.report()) {
            Ok(body) => with_type(StatusCode::OK, body.into(), "application/json"),
            Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "report failed\n"),
        },
        "/metrics" => match source.metrics() {
            Ok(body) => with_type(StatusCode::OK, body.into(), crate::metrics::CONTENT_TYPE),
            Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "metrics failed\n"),
        },
        path => match page(path) {
            Some(Page::Csv) => with_type(
                StatusCode::OK,
                csv::render(&source.report()).into(),
                "text/plain; charset=utf-8",
            ),
            Some(Page::Html) => {
                let base = path.split(';').next().unwrap_or(path);
                // Relative to the page, so it also works behind a path-mapping front end.
                let last = base.rsplit('/').next().unwrap_or("");
                let opts = html::PageOptions {
                    refresh: refresh(req.uri().query()),
                    csv_href: format!("{}{last};csv", if last.is_empty() { "./" } else { "" }),
                };
                let mut r = with_type(
                    StatusCode::OK,
                    html::render(&source.report(), &opts).into(),
                    "text/html; charset=utf-8",
                );
                r.headers_mut().insert(
                    header::CONTENT_SECURITY_POLICY,
                    HeaderValue::from_static(
                        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'",
                    ),
                );
                r
            }
            None => text(StatusCode::NOT_FOUND, "not found\n"),
        },
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    with_type(
        status,
        Bytes::from_static(body.as_bytes()),
        "text/plain; charset=utf-8",
    )
}

fn with_type(status: StatusCode, body: Bytes, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_paths() {
        for p in ["/gearlb-status", "/haproxy-status", "/haproxy-status/", "/"] {
            assert!(matches!(page(p), Some(Page::Html)), "{p}");
        }
        for p in [
            "/gearlb-status;csv",
            "/haproxy-status/;csv",
            "/haproxy-status;csv",
            "/;csv",
            "/haproxy-status/;csv;norefresh",
            "/haproxy-status/;norefresh;csv",
        ] {
            assert!(matches!(page(p), Some(Page::Csv)), "{p}");
        }
        for p in [
            "/gearlb-statusx",
            "/haproxy-status/x",
            "/metrics;csv",
            ";csv",
        ] {
            assert!(page(p).is_none(), "{p}");
        }
    }

    #[test]
    fn refresh_is_bounded() {
        assert_eq!(refresh(Some("refresh=5")), Some(5));
        assert_eq!(refresh(Some("a=1&refresh=30")), Some(30));
        for q in [
            "refresh=0",
            "refresh=9999",
            "refresh=-1",
            "refresh=x",
            "refresh",
            "",
        ] {
            assert_eq!(refresh(Some(q)), None, "{q}");
        }
        assert_eq!(refresh(None), None);
    }
}
