//! The response a client gets from a backend's answer: whether it can go as it is,
//! headers cleaned, the sticky cookie inserted, an upgrade wired into a tunnel; and the
//! answer to a request for the balancer's own upgrade protocol.

use std::sync::Arc;

use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use tracing::debug;

use super::body::ProxyBody;
use super::forward;
use super::h1;
use super::shared::{InFlight, Settings};
use super::tunnel;
use super::upgrade::UpgradeEndpoint;
use super::upstream::{self, Conn, UpBody};
use super::wait::Wait;
use crate::session::ConnState;
use gearlb_core::routing::sticky::Sticky;

/// Whether a backend's response head can go to the client as it is; `Ok` carries the
/// transfer codings other than `chunked` it applied to its body, which an HTTP/1.1
/// client gets as they are (hyper adds the chunked framing: RFC 9112 §6.1).
///
/// - A `101` must answer an upgrade request, switching to a protocol it listed (see
///   [`forward::switch_allowed`]).
/// - A body with other transfer codings cannot go to an HTTP/1.0 client (RFC 9112 §6.1:
///   no Transfer-Encoding to it) nor an HTTP/2 one (RFC 9113 §8.2.2: no
///   Transfer-Encoding at all) without being decoded, which the balancer does not do;
///   nor can one where `chunked` is not applied exactly once, last.
pub(super) fn usable(
    head: &h1::Head,
    asked_upgrade: Option<&HeaderValue>,
    client: http::Version,
) -> Result<Option<HeaderValue>, &'static str> {
    if head.status == StatusCode::SWITCHING_PROTOCOLS {
        forward::switch_allowed(asked_upgrade, &head.headers())?;
        return Ok(None);
    }
    if head.body == h1::BodyLen::Empty {
        return Ok(None);
    }
    match forward::transfer_codings(head.transfer_encodings())? {
        Some(_) if client != http::Version::HTTP_11 => {
            Err("transfer coding the client's protocol cannot carry")
        }
        codings => Ok(codings),
    }
}

/// What an exchange leaves for the response body: the backend connection, the rest of
/// an upload the backend answered early, the exchange's wait, and the request's count
/// on the backend.
pub(super) struct Exchanged {
    pub(super) conn: Conn,
    pub(super) upload: Option<Box<upstream::Upload>>,
    pub(super) wait: Arc<Wait>,
    pub(super) flight: InFlight,
}

/// What the client's response needs from its request.
pub(super) struct ForClient<'a> {
    /// The sticky cookie to set: when the request was not already pinned to this
    /// backend.
    pub(super) insert_cookie: Option<&'a Sticky>,
    /// The client's connection is HTTPS (the cookie is `Secure`).
    pub(super) secure: bool,
    /// Unix seconds, for sealed cookies (0 when they are not sealed).
    pub(super) now: u64,
    /// The client's side of an upgrade it offered.
    pub(super) upgrade: Option<hyper::upgrade::OnUpgrade>,
    /// The `Transfer-Encoding` the client gets, when the backend's is passed on.
    pub(super) codings: Option<HeaderValue>,
}

/// Turn a backend's response into the client's: headers cleaned, sticky cookie
/// inserted when the client had none for this backend, upgrades wired into a tunnel.
///
/// An upgraded connection stays one session on the backend from its request to the
/// tunnel's close, as HAProxy counts it: the request's in-flight count goes to the
/// tunnel (not to the `101`'s empty body), and the client connection's session with it.
pub(super) fn respond(
    conn: &Arc<ConnState>,
    settings: &Settings,
    head: h1::Head,
    up: Exchanged,
    client: ForClient<'_>,
) -> Response<ProxyBody> {
    let ForClient {
        insert_cookie,
        secure,
        now,
        upgrade: client_upgrade,
        codings,
    } = client;
    let flight = up.flight;
    let backend = flight.backend().clone();
    backend.stats.response(head.status.as_u16());
    let switching = head.status == StatusCode::SWITCHING_PROTOCOLS;
    let mut body = UpBody::new(up.conn, &head, up.upload, Some(up.wait));
    let mut flight = Some(flight);
    if switching {
        // The backend connection now belongs to the tunnel, not the pool.
        let up = body.take_conn().and_then(Conn::into_upgraded);
        if let (Some(client), Some(up), Some(flight)) = (client_upgrade, up, flight.take()) {
            tokio::spawn(tunnel::run(
                client,
                up,
                flight,
                conn.clone(),
                settings.timeouts.tunnel,
                conn.ctx.stopping.clone(),
                backend.pool.kill_token(),
            ));
        }
    }
    let mut parts = head.to_parts();
    // The balancer's own version, whatever the backend's (RFC 9110 §6.2); hyper writes
    // HTTP/1.0 to an HTTP/1.0 client all the same.
    parts.version = http::Version::HTTP_11;
    forward::prepare_response(&mut parts, switching);
    if let Some(codings) = codings {
        parts.headers.insert(header::TRANSFER_ENCODING, codings);
    }
    if let Some(sticky) = settings.sticky.as_ref() {
        sticky.strip_set_cookie(&mut parts.headers);
    }
    if let Some(sticky) = insert_cookie {
        if let Some(v) = sticky.set_cookie(&backend.sticky, secure, now) {
            parts.headers.append(header::SET_COOKIE, v);
            // nocache: a shared cache must not hand one client's cookie to everyone.
            if !parts.headers.contains_key(header::CACHE_CONTROL) {
                parts
                    .headers
                    .insert(header::CACHE_CONTROL, HeaderValue::from_static("private"));
            }
        }
    }
    let body = match flight {
        Some(flight) => ProxyBody::upstream(body, flight),
        None => ProxyBody::empty(),
    };
    Response::from_parts(parts, body)
}

/// Answer a request for the balancer's own upgrade `protocol`: `101` and hand the
/// connection to `ep` once hyper lets go of it, or `403` when its credentials are bad.
pub(super) fn endpoint_upgrade(
    ep: &Arc<dyn UpgradeEndpoint>,
    protocol: &'static str,
    conn: &Arc<ConnState>,
    mut req: Request<Incoming>,
) -> Response<ProxyBody> {
    let peer = conn.client.peer;
    let admission = if req.version() == http::Version::HTTP_11 {
        ep.admit(protocol, req.headers())
    } else {
        None
    };
    let Some(admission) = admission else {
        let mut resp = Response::new(ProxyBody::text("403 Forbidden\n"));
        *resp.status_mut() = StatusCode::FORBIDDEN;
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return resp;
    };
    // From here on the connection is the balancer's own: not client traffic.
    conn.own.store(true, std::sync::atomic::Ordering::Relaxed);
    let on = hyper::upgrade::on(&mut req);
    let ep = ep.clone();
    let conn = conn.clone();
    let session = admission.session;
    tokio::spawn(async move {
        match on.await {
            Ok(io) => {
                // No longer a client session: not in the connection count or limit, and
                // not waited for by the graceful stop.
                conn.end_session();
                drop(conn);
                ep.accept(io, peer, session)
            }
            Err(e) => debug!(error = %e, "upgrade to {protocol} did not complete"),
        }
    });
    let mut resp = Response::new(ProxyBody::text(""));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static(protocol));
    for (name, value) in admission.headers {
        h.append(name, value);
    }
    resp
}
