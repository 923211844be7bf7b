//! The active check: `GET <uri>` on a connection kept between checks, its status
//! matched against `expect` ([`HttpChecker`]), or for TCP backends the TLS hello or
//! connect check of `layer6`, behind the [`Checker`] interface the check loops run.

use std::future::Future;

use http::{header, HeaderValue, Request};
use http_body_util::BodyExt;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::time::Instant;

use crate::router::Target;
use crate::upstream::ReqBody;
use gearlb_core::routing::CheckReport;

use gearlb_core::health::HealthSettings;

/// Runs one check against a backend.
pub trait Checker: Send + Sync + 'static {
    /// What one backend's check loop keeps between two checks (a connection).
    type Conn: Default + Send + 'static;

    fn check(
        &self,
        conn: &mut Self::Conn,
        backend: &Target,
        settings: &HealthSettings,
    ) -> impl Future<Output = CheckReport> + Send;
}

/// The real check: `GET <uri>`, status matched against `expect`, on a keep-alive
/// connection kept from one check to the next (as Envoy's HTTP checks do: no connection
/// set-up, no `TIME_WAIT` socket per check; with 1000 gears checked every 2 s that was
/// 500 connections a second). A kept connection that fails in any way, or that the gear
/// closed meanwhile, is replaced by a new one within the same check: only a failure on a
/// new connection counts. After a failed check the connection is dropped, so every
/// failure streak is confirmed on new connections. Refused or unreachable listeners are
/// also seen by the request path, which ejects a gear on connect errors.
pub struct HttpChecker;

/// The connection an [`HttpChecker`] keeps for one backend.
pub type CheckConn = Option<SendRequest<ReqBody>>;

/// The most of a check response's body that is read to keep its connection; a larger
/// body is not read, and its connection is closed.
const CHECK_BODY_KEEP: usize = 64 * 1024;

use gearlb_core::time::unix_secs;

impl Checker for HttpChecker {
    type Conn = CheckConn;

    async fn check(
        &self,
        conn: &mut CheckConn,
        backend: &Target,
        s: &HealthSettings,
    ) -> CheckReport {
        if let Some(kind) = s.tcp {
            *conn = None;
            return super::layer6::check(kind, backend, s.port, s.timeout).await;
        }
        let started = Instant::now();
        // A backend with a connection limit is checked within it: on a free slot, on
        // a connection not kept. With every slot taken it is serving at its limit, and
        // the live traffic's failures say whether it is healthy: the check is skipped.
        let _slot = match &backend.slots {
            None => None,
            Some(slots) => match slots.clone().try_acquire_owned() {
                Ok(slot) => Some(slot),
                Err(_) => {
                    *conn = None;
                    return CheckReport {
                        ok: true,
                        result: "busy at max_connections: not checked".into(),
                        ms: 0,
                        at: unix_secs(),
                        version: None,
                    };
                }
            },
        };
        let result = tokio::time::timeout(s.timeout, http_check(conn, backend, s)).await;
        let mut version = None;
        let (ok, result) = match result {
            Err(_) => (false, format!("timed out after {:?}", s.timeout)),
            Ok(Err(e)) => (false, e),
            Ok(Ok((status, announced))) => {
                version = announced;
                let code = status.to_string();
                (s.expect.is_match(&code), code)
            }
        };
        if !ok || backend.slots.is_some() {
            *conn = None;
        }
        CheckReport {
            ok,
            result,
            ms: started.elapsed().as_millis() as u64,
            at: unix_secs(),
            version,
        }
    }
}

fn check_request(backend: &Target, uri: &str) -> Result<Request<ReqBody>, String> {
    let host = backend
        .spec
        .gear_dns
        .clone()
        .unwrap_or_else(|| backend.spec.addr.to_string());
    let mut req = Request::get(uri)
        .body(ReqBody::Empty)
        .map_err(|e| format!("request: {e}"))?;
    let h = req.headers_mut();
    h.insert(
        header::HOST,
        HeaderValue::from_str(&host).map_err(|_| format!("bad host {host:?}"))?,
    );
    h.insert(
        header::USER_AGENT,
        HeaderValue::from_static("gearlb-health-check"),
    );
    Ok(req)
}

async fn check_connect(
    backend: &Target,
    port: Option<u16>,
) -> Result<SendRequest<ReqBody>, String> {
    let addr = match port {
        Some(p) => backend.spec.addr.with_port(p),
        None => backend.spec.addr.clone(),
    };
    let stream = backend
        .pool
        .resolver()
        .dial(&addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake::<_, ReqBody>(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// One check: on the kept connection if there is a usable one, else (or if it fails)
/// on a new one. The connection is kept again when the response was read to the end.
async fn http_check(
    conn: &mut CheckConn,
    backend: &Target,
    s: &HealthSettings,
) -> Result<(u16, Option<String>), String> {
    let uri = s.uri.as_str();
    if let Some(mut sender) = conn.take().filter(|s| !s.is_closed()) {
        if sender.ready().await.is_ok() {
            if let Ok(resp) = sender.send_request(check_request(backend, uri)?).await {
                return Ok(finish(conn, sender, resp).await);
            }
        }
        // Closed or broken while kept: that says nothing of the gear; ask anew.
    }
    let mut sender = check_connect(backend, s.port).await?;
    let resp = sender
        .send_request(check_request(backend, uri)?)
        .await
        .map_err(|e| format!("request failed: {e}"))?;
    Ok(finish(conn, sender, resp).await)
}

/// The response's status; its body is read (up to [`CHECK_BODY_KEEP`]) so that the
/// connection can be kept for the next check.
async fn finish(
    conn: &mut CheckConn,
    sender: SendRequest<ReqBody>,
    resp: hyper::Response<hyper::body::Incoming>,
) -> (u16, Option<String>) {
    let status = resp.status().as_u16();
    // A gear that cannot register says its version here (`routing::versions`).
    let version = resp
        .headers()
        .get(VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().chars().take(128).collect::<String>());
    let mut body = resp.into_body();
    let mut read = 0usize;
    while read <= CHECK_BODY_KEEP {
        match body.frame().await {
            None => {
                *conn = Some(sender);
                break;
            }
            Some(Ok(f)) => read += f.data_ref().map_or(0, |d| d.len()),
            Some(Err(_)) => break,
        }
    }
    (status, version)
}

/// The response header in which a backend announces its version on a health check.
pub const VERSION_HEADER: &str = "x-gearlb-version";
