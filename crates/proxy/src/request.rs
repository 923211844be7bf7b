//! One request, from hyper's hand-over to the response it gets: the balancer's own
//! upgrade protocol, refusals, the sticky cookie, the request head rewritten and encoded
//! once, then the choice of backend with its retries (each attempt in [`super::attempt`])
//! and the response made from the answer ([`super::respond`]), or an error's.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::{header, Method, Request, Response, StatusCode};
use http_body::Body as _;
use hyper::body::Incoming;
use tokio::time::Instant;
use tracing::{debug, info};

use super::attempt::{idempotent, Replay};
use super::body::ProxyBody;
use super::dispatch::{dispatch, scope, secure, service_for, sticky_pin, Dispatch, Dispatched};
use super::error::{error_response, ForwardError};
use super::forward;
use super::h1;
use super::respond::{endpoint_upgrade, respond, Exchanged, ForClient};
use super::shared::Settings;
use super::upstream::{self, Outgoing, ReqBody};
use super::wait::Wait;
use crate::router::Target;
use crate::session::{ConnState, FrontendRequest};

/// What a request line in the log needs, taken before the request is consumed.
pub(super) struct LogLine {
    started: Instant,
    method: Method,
    path: String,
}

impl LogLine {
    /// Only a wanted log line costs a clock read and a copy of the path.
    pub(super) fn wanted(settings: &Settings, method: &Method, path: &str) -> Option<LogLine> {
        (settings.log_requests || tracing::enabled!(tracing::Level::DEBUG)).then(|| LogLine {
            started: Instant::now(),
            method: method.clone(),
            path: path.to_string(),
        })
    }
}

pub(super) async fn handle(
    frontend: FrontendRequest,
    req: Request<Incoming>,
    wait: Arc<Wait>,
) -> Response<ProxyBody> {
    let conn = &frontend.0;
    let settings = conn.ctx.settings.load_full();
    let log = LogLine::wanted(&settings, req.method(), req.uri().path());
    let http1 = req.version() != http::Version::HTTP_2;
    let http10 = req.version() == http::Version::HTTP_10;
    let head = req.method() == Method::HEAD;
    let (mut resp, backend) = match forward(conn, &settings, req, &wait).await {
        Ok((resp, backend)) => (resp, backend),
        Err((e, backend)) => (failed(conn, &e, &backend), backend),
    };
    let status = resp.status();
    // A chunked body whose end is unsure: nothing after it on this connection is
    // trusted to be framed as the client meant (see `upstream::BodyNotes`).
    let unsure = http1
        && status != StatusCode::SWITCHING_PROTOCOLS
        && conn.unsure_end.load(Ordering::Acquire);
    // A body of unknown length to an HTTP/1.0 client, which has no chunked coding, ends
    // with the connection: said in the head (hyper would write `keep-alive` there).
    let ends_with_close =
        http10 && !h1::bodiless(head, status) && resp.body().size_hint().exact().is_none();
    if unsure || ends_with_close {
        resp.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    // The response body says what it waits on once it is polled.
    wait.idle();
    answered(conn, &settings, resp.status().as_u16(), &backend, log);
    let (parts, body) = resp.into_parts();
    Response::from_parts(parts, body.with_frontend(frontend))
}

/// The response for a request that got no backend's answer.
pub(super) fn failed(
    conn: &ConnState,
    e: &ForwardError,
    backend: &Option<Arc<Target>>,
) -> Response<ProxyBody> {
    if let ForwardError::NoBackend = e {
        conn.ctx.stats.no_backend.fetch_add(1, Ordering::Relaxed);
    } else {
        debug!(backend = %backend_name(backend), error = %e, "forwarding failed");
    }
    error_response(e)
}

/// A request was answered with `status`: counted, and logged when wanted.
pub(super) fn answered(
    conn: &ConnState,
    settings: &Settings,
    status: u16,
    backend: &Option<Arc<Target>>,
    log: Option<LogLine>,
) {
    let ctx = &conn.ctx;
    if status == 101 && conn.own.load(Ordering::Relaxed) {
        // A peer's gossip upgrade: neither a client request nor a client response.
        ctx.stats.requests_total.fetch_sub(1, Ordering::Relaxed);
    } else {
        ctx.stats.response(status);
    }
    if let Some(LogLine {
        started,
        method,
        path,
    }) = log
    {
        let ms = started.elapsed().as_millis() as u64;
        let client = &conn.client.peer;
        let backend = backend_name(backend);
        if settings.log_requests {
            info!(%client, %method, %path, status, %backend, ms, "request");
        } else {
            debug!(%client, %method, %path, status, %backend, ms, "request");
        }
    }
}

fn backend_name(b: &Option<Arc<Target>>) -> &str {
    b.as_ref().map_or("-", |b| b.name())
}

type ForwardResult =
    Result<(Response<ProxyBody>, Option<Arc<Target>>), (ForwardError, Option<Arc<Target>>)>;

async fn forward(
    conn: &Arc<ConnState>,
    settings: &Settings,
    mut req: Request<Incoming>,
    wait: &Arc<Wait>,
) -> ForwardResult {
    let ctx = &conn.ctx;
    let http1 = req.version() != http::Version::HTTP_2;
    if http1 && conn.after_unsure_end().await {
        return Err((
            ForwardError::Refused(
                StatusCode::BAD_REQUEST,
                "a request behind a chunked body whose end was unsure, on the same connection",
            ),
            None,
        ));
    }
    // An `Upgrade` in an HTTP/1.0 request is ignored (RFC 9110 §7.8).
    let has_upgrade =
        req.version() == http::Version::HTTP_11 && req.headers().contains_key(header::UPGRADE);
    if has_upgrade {
        if let Some(why) = forward::upgrade_problem(req.headers()) {
            return Err((ForwardError::Refused(StatusCode::BAD_REQUEST, why), None));
        }
    }
    if let Some(ep) = &ctx.endpoint {
        match forward::own_protocol(
            req.headers(),
            has_upgrade,
            ep.protocols(),
            ep.credential_header(),
        ) {
            forward::Own::Not => {}
            forward::Own::Upgrade(p) => return Ok((endpoint_upgrade(ep, p, conn, req), None)),
            forward::Own::Refused(why) => {
                return Err((ForwardError::Refused(StatusCode::BAD_REQUEST, why), None))
            }
        }
    }
    // A connection in the room kept for the balancer's own protocol, or on a TCP port
    // (TLS to the gears), is HTTP only for that protocol.
    if conn.reserved {
        return Err((
            ForwardError::Refused(
                StatusCode::SERVICE_UNAVAILABLE,
                "every client connection place is taken (limits.max_connections)",
            ),
            None,
        ));
    }
    if settings.mode == gearlb_core::config::Mode::Tcp {
        return Err((
            ForwardError::Refused(
                StatusCode::BAD_REQUEST,
                "this port forwards TLS to the gears: HTTP is not served here",
            ),
            None,
        ));
    }
    // An upgrade only to protocols a gear may be offered (never h2c).
    let upgrade = has_upgrade && forward::upgrade_offer(req.headers()).is_some();
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    // From here on, a chunked body left before its end tells the connection (an error
    // answered without reading it, a gear that refused it early).
    let body = ReqBody::client(
        body,
        http1.then(|| conn.clone() as Arc<dyn upstream::BodyNotes>),
    );
    if let Some((status, why)) = forward::request_problem(&parts) {
        return Err((ForwardError::Refused(status, why), None));
    }
    // Which service: a lookup only where the listener has several.
    let host = parts
        .uri
        .authority()
        .map(|a| a.as_str())
        .or_else(|| {
            parts
                .headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
        })
        .unwrap_or_default();
    let service = service_for(ctx, host, parts.uri.path()).map_err(|e| (e, None))?;
    let (router, settings, ejections) = scope(ctx, &service, settings);

    // Sticky cookie: taken out of the request whatever it says, from every `Cookie`
    // field (HTTP/2 clients split them).
    let sticky = settings.sticky.as_ref();
    let cookie = sticky.and_then(|s| s.take(&mut parts.headers));
    let client_version = parts.version;
    if client_version == http::Version::HTTP_2 {
        forward::join_cookies(&mut parts.headers);
    }
    let forwarded_proto = parts.headers.get("x-forwarded-proto");
    let secure = secure(conn, forwarded_proto.map(|v| v.as_bytes()));
    forward::prepare_request(
        &mut parts,
        &conn.client,
        conn.client.trusted,
        settings.forwarded_headers,
    );
    // What a `101` may switch to: the protocols the backend was asked for.
    let asked_upgrade = client_upgrade
        .as_ref()
        .and_then(|_| parts.headers.get(header::UPGRADE).cloned());

    let (now, pinned) = sticky_pin(sticky, cookie, router);

    // The head is the same whichever backend gets it: encoded once, replayed as is.
    let empty = body.is_end_stream();
    let framing = h1::request_framing(&mut parts.headers, empty, body.size_hint().exact());
    let mut head = bytes::BytesMut::new();
    h1::encode_request_head(&parts, framing, &mut head);
    let head = head.freeze();
    let replay = (idempotent(&parts.method) && empty).then(|| {
        Replay(Outgoing {
            head: head.clone(),
            method: parts.method.clone(),
            framing,
            body: ReqBody::Empty,
        })
    });
    let req = Outgoing {
        head,
        method: parts.method,
        framing,
        body,
    };
    // Interim responses (103 Early Hints, …) go on to HTTP/1.1 clients (RFC 9110
    // §15.2). Not to HTTP/1.0 ones, which must not get them, nor HTTP/2 ones: hyper's
    // HTTP/2 server has no way to send them.
    let push = |h: &h1::Head| conn.push_interim(h);
    let interim: upstream::Interim<'_> =
        (client_version == http::Version::HTTP_11).then_some(&push);
    let d = Dispatch {
        conn,
        settings,
        router,
        ejections,
        pinned: pinned.clone(),
        replay: replay.as_ref(),
        wait,
        interim,
    };
    let answered = dispatch(&d, req).await?;
    let codings = answered.usable(asked_upgrade.as_ref(), client_version)?;
    let insert_cookie = answered.cookie_to_set(sticky, pinned.as_ref());
    let Dispatched {
        head,
        upload,
        conn: up,
        backend,
        flight,
    } = answered;
    let last = Some(backend);
    let exchanged = Exchanged {
        conn: up,
        upload,
        wait: wait.clone(),
        flight,
    };
    let client = ForClient {
        insert_cookie,
        secure,
        now,
        upgrade: client_upgrade,
        codings,
    };
    let resp = respond(conn, settings, head, exchanged, client);
    Ok((resp, last))
}
