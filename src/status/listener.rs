//! The status listener's HTTP server: accepting connections, routing GET and HEAD
//! requests to the JSON report, the HTML page, the CSV or the metrics, and counting its
//! own traffic.

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

use super::csv;
use super::html;
use super::source::{ListenerStats, StatusSource};
use crate::proxy::io::Counted;
use crate::services::api;

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
    Csv(csv::Filter),
}

/// Which page a path and query name: one of [`PAGE_PATHS`], optionally followed by
/// HAProxy's `;`-options (`;csv`, `;up`, `;no-maint`; `;norefresh` and others are
/// ignored as HAProxy does). As HAProxy looks for them anywhere after its stats URI, the
/// options may also follow the query (`?stats;csv`).
fn page(path: &str, query: Option<&str>) -> Option<Page> {
    let (base, options) = path.split_once(';').unwrap_or((path, ""));
    if !PAGE_PATHS.contains(&base) {
        return None;
    }
    let in_query = query.and_then(|q| q.split_once(';')).map_or("", |(_, o)| o);
    let options = || options.split(';').chain(in_query.split(';'));
    if !options().any(|o| o == "csv") {
        return Some(Page::Html);
    }
    Some(Page::Csv(csv::Filter {
        hide_down: options().any(|o| o == "up"),
        hide_maint: options().any(|o| o == "no-maint"),
        ..csv::Filter::default()
    }))
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

/// Serve status requests until `shutdown`, counting them in `counters`.
pub async fn serve<S: StatusSource>(
    listener: TcpListener,
    source: Arc<S>,
    counters: Arc<ListenerStats>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    // The listener's rates, once a second (a few atomics; no other task needed).
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = tokio::time::Instant::now();
    loop {
        let (stream, _) = tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {
                let now = tokio::time::Instant::now();
                let r = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
                counters.connection_rate.update(r(&counters.connections_total), now - last);
                counters.request_rate.update(r(&counters.requests_total), now - last);
                last = now;
                continue;
            }
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
        let counters = counters.clone();
        counters.connection_opened();
        tracker.spawn(async move {
            let c = counters.clone();
            let svc = service_fn(move |req| {
                let source = source.clone();
                let c = c.clone();
                async move {
                    c.request_started();
                    let r = if req.method() == Method::POST && api::is_api_path(req.uri().path()) {
                        register(&*source, req).await
                    } else if req.uri().path() == crate::spi::TABLE_PATH {
                        spi_table(&*source, &req).await
                    } else {
                        route(&*source, &req)
                    };
                    c.response(r.status().as_u16());
                    c.requests_current
                        .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                    Ok::<_, Infallible>(r)
                }
            });
            let io = Counted::new(stream, counters.traffic.clone());
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(io), svc);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => if let Err(e) = r { debug!(error = %e, "status connection error") },
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
                }
            }
            counters.connection_closed();
        });
    }
}

/// A router's table, for a peer router that starts without one (see
/// `crate::spi::serve_table`): authenticated and sealed with the cluster's secret.
async fn spi_table<S: StatusSource>(source: &S, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let Some((spi, secret)) = source.spi() else {
        return text(StatusCode::NOT_FOUND, "not found\n");
    };
    if req.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
    }
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    let (status, body) = crate::spi::serve_table(&spi, secret.as_deref(), auth).await;
    with_type(
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        Bytes::from(body),
        if status == 200 {
            "application/octet-stream"
        } else {
            "text/plain; charset=utf-8"
        },
    )
}

/// Registration over HTTP (see [`crate::services::api`]): the body read up to its
/// limit, then handed over.
async fn register<S: StatusSource>(source: &S, req: Request<Incoming>) -> Response<Full<Bytes>> {
    use http_body_util::BodyExt;
    let Some(services) = source.services() else {
        return text(StatusCode::NOT_FOUND, "not found\n");
    };
    let path = req.uri().path().to_string();
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes().to_vec());
    let body = http_body_util::Limited::new(req.into_body(), api::MAX_BODY);
    let body = match tokio::time::timeout(Duration::from_secs(10), body.collect()).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(_)) => return text(StatusCode::PAYLOAD_TOO_LARGE, "body too large or broken\n"),
        Err(_) => return text(StatusCode::REQUEST_TIMEOUT, "body not received in time\n"),
    };
    let (status, message) = api::handle(&services, &path, auth.as_deref(), &body).await;
    let mut r = with_type(
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        Bytes::from(message),
        "text/plain; charset=utf-8",
    );
    if status == 401 {
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    r
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
        path if path.starts_with("/health/") => match source.service_healthy(&path[8..]) {
            Some(true) => text(StatusCode::OK, "1\n"),
            Some(false) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "no backend of this service is available\n",
            ),
            None => text(StatusCode::NOT_FOUND, "no such service\n"),
        },
        "/gearlb-status.json" => match serde_json::to_vec_pretty(&source.report()) {
            Ok(body) => with_type(StatusCode::OK, body.into(), "application/json"),
            Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "report failed\n"),
        },
        "/metrics" => match source.metrics() {
            Ok(body) => {
                use crate::metrics::{negotiate, to_text_004, Format};
                let accept = req
                    .headers()
                    .get(header::ACCEPT)
                    .and_then(|v| v.to_str().ok());
                match negotiate(accept) {
                    Format::OpenMetrics => {
                        with_type(StatusCode::OK, body.into(), crate::metrics::CONTENT_TYPE)
                    }
                    Format::Text => with_type(
                        StatusCode::OK,
                        to_text_004(&body).into(),
                        crate::metrics::TEXT_CONTENT_TYPE,
                    ),
                }
            }
            Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "metrics failed\n"),
        },
        path => match page(path, req.uri().query()) {
            Some(Page::Csv(filter)) => with_type(
                StatusCode::OK,
                csv::render_filtered(&source.report(), &filter).into(),
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
            assert!(matches!(page(p, None), Some(Page::Html)), "{p}");
            assert!(
                matches!(page(p, Some("refresh=5")), Some(Page::Html)),
                "{p}"
            );
            assert!(matches!(page(p, Some("csv")), Some(Page::Html)), "{p}?csv");
        }
        for (p, q) in [
            ("/gearlb-status;csv", None),
            ("/haproxy-status/;csv", None),
            ("/haproxy-status;csv", None),
            ("/;csv", None),
            ("/haproxy-status/;csv;norefresh", None),
            ("/haproxy-status/;norefresh;csv", None),
            ("/haproxy-status", Some("stats;csv")),
            ("/haproxy-status/", Some("stats;csv;norefresh")),
            ("/gearlb-status", Some("stats;csv")),
            ("/", Some(";csv")),
        ] {
            assert!(matches!(page(p, q), Some(Page::Csv(_))), "{p}?{q:?}");
        }
        for p in [
            "/gearlb-statusx",
            "/haproxy-status/x",
            "/metrics;csv",
            ";csv",
        ] {
            assert!(page(p, None).is_none(), "{p}");
            assert!(page(p, Some("stats;csv")).is_none(), "{p}");
        }
        match page("/haproxy-status/;csv;up", Some("x;no-maint")) {
            Some(Page::Csv(f)) => assert!(f.hide_down && f.hide_maint),
            _ => panic!("not the CSV"),
        }
        match page("/haproxy-status/;csv", None) {
            Some(Page::Csv(f)) => assert_eq!(f, csv::Filter::default()),
            _ => panic!("not the CSV"),
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
