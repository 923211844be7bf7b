//! The status listener: a small HTTP server, separate from the proxy listener, that
//! reports on the balancer and never forwards application traffic.
//!
//! Routes: `GET /health` (200 while at least one backend is selectable, else 503; for the
//! router in front), `GET /gearlb-status.json` (the [`StatusReport`]). Everything else is
//! 404; only GET and HEAD are answered. It exposes no control operation.

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
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
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
    r
}
