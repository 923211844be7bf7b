//! A request on the byte path, from its head's bytes to its response head's: the
//! service routed to, the head rewritten as bytes ([`forward::head`]) and sent with the
//! body read whole behind it (framed by its length, as it came), the backend's
//! answer ([`super::dispatch`], the same attempts and retries as hyper's requests), and
//! the client's head written from the answer's bytes ([`h1::write_reply`]), with the
//! body that follows it. No `HeaderMap` is built on the way but for a local answer (an
//! error's, a `502`).
//!
//! The connection that reads the heads and writes what this returns is
//! `downstream::lane`; which requests come here is [`forward::head::read`]'s rule.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::{header, Method};

use super::attempt::{idempotent, Replay};
use super::body::ProxyBody;
use super::dispatch::{dispatch, scope, secure, service_for, sticky_pin, Dispatch, Dispatched};
use super::error::ForwardError;
use super::forward::head::{write_upstream, ClientHead, Rewrite};
use super::h1;
use super::h1::{Framing, Reply, ReqFraming};
use super::request::{answered, failed, LogLine};
use super::session::ConnState;
use super::shared::Settings;
use super::upstream::{Outgoing, ReqBody, UpBody};
use super::wait::Wait;
use gearlb_core::routing::sticky::Sticky;
use tokio_util::sync::CancellationToken;

/// The client's response: its head's bytes, how the body follows, the body, and
/// whether the connection closes after it.
pub(crate) struct Answer {
    pub(crate) head: BytesMut,
    pub(crate) framing: Framing,
    pub(crate) body: ProxyBody,
    /// The backend's head, for the trailer fields its `Trailer` field declared.
    pub(crate) trailers_from: Option<h1::Head>,
    pub(crate) close: bool,
}

/// Answer the request whose head is `h` (taken by [`forward::head::read`]).
pub(crate) async fn serve(
    conn: &Arc<ConnState>,
    h: &ClientHead<'_, '_>,
    wait: &Arc<Wait>,
    stop: &CancellationToken,
) -> Answer {
    let settings = conn.ctx.settings.load_full();
    let log = LogLine::wanted(&settings, &h.method, h.path());
    let head_request = h.method == Method::HEAD;
    let answer = match forward(conn, &settings, h, wait, stop).await {
        Ok(a) => a,
        Err((e, backend)) => {
            wait.idle();
            let resp = failed(conn, &e, &backend);
            let status = resp.status().as_u16();
            answered(conn, &settings, status, &backend, log);
            return local(resp, head_request, h.close || stop.is_cancelled());
        }
    };
    wait.idle();
    answered(conn, &settings, answer.1, &answer.2, log);
    answer.0
}

type Forwarded = (Answer, u16, Option<Arc<super::router::Target>>);
type Failure = (ForwardError, Option<Arc<super::router::Target>>);

async fn forward(
    conn: &Arc<ConnState>,
    settings: &Settings,
    h: &ClientHead<'_, '_>,
    wait: &Arc<Wait>,
    stop: &CancellationToken,
) -> Result<Forwarded, Failure> {
    let ctx = &conn.ctx;
    let service = service_for(ctx, h.host, h.path()).map_err(|e| (e, None))?;
    let (router, settings, ejections) = scope(ctx, &service, settings);
    let sticky = settings.sticky.as_ref();
    let secure = secure(conn, h.value("x-forwarded-proto"));
    let mut out = BytesMut::with_capacity(h.len + 256);
    let rewrite = Rewrite {
        client: &conn.client,
        trust_forwarded: conn.client.trusted,
        set: settings.forwarded_headers,
        sticky,
    };
    let cookie = write_upstream(h, &rewrite, &mut out);
    let head = out.freeze();

    let (now, pinned) = sticky_pin(sticky, cookie, router);
    // A body came whole with its head: framed by its length, as hyper's path frames a
    // body whose length is known (`Content-Length: 0` included).
    let framing = h
        .length
        .map_or(ReqFraming::Empty, |n| ReqFraming::Length(n as u64));
    let body = (!h.body.is_empty()).then(|| Bytes::copy_from_slice(h.body));
    let outgoing = || Outgoing {
        head: head.clone(),
        method: h.method.clone(),
        framing,
        body: body.clone().map_or(ReqBody::Empty, ReqBody::Whole),
    };
    // Sent again on another gear only without a body, as on hyper's path.
    let replay = (idempotent(&h.method) && body.is_none()).then(|| Replay(outgoing()));
    let push = |hd: &h1::Head| conn.push_interim(hd);
    let d = Dispatch {
        conn,
        settings,
        router,
        ejections,
        pinned: pinned.clone(),
        replay: replay.as_ref(),
        wait,
        interim: Some(&push),
    };
    let answered = dispatch(&d, outgoing()).await?;
    let codings = answered.usable(None, http::Version::HTTP_11)?;
    let insert = answered.cookie_to_set(sticky, pinned.as_ref());
    let Dispatched {
        head,
        upload,
        conn: up,
        backend,
        flight,
    } = answered;
    let last = Some(backend.clone());
    backend.stats.response(head.status.as_u16());
    let set_cookie = insert.map(|sticky| h1::SetCookie {
        sticky,
        value: &backend.sticky,
        secure,
        now,
    });
    let reply = Reply {
        head_request: h.method == Method::HEAD,
        codings: codings.as_ref().map(|c| c.as_bytes()),
        strip_cookie: sticky.map(Sticky::name),
        set_cookie,
        // At the stop, the request in flight is answered and the connection closes.
        close: h.close || stop.is_cancelled(),
    };
    let mut bytes = BytesMut::with_capacity(head.raw_len() + 160);
    let framing = h1::write_reply(&head, &reply, &mut bytes);
    let status = head.status.as_u16();
    let body = UpBody::new(up, &head, upload, Some(wait.clone()));
    let trailers_from = (framing == Framing::Chunked && head.has_trailer()).then_some(head);
    let answer = Answer {
        head: bytes,
        framing,
        body: ProxyBody::upstream(body, flight),
        trailers_from,
        close: reply.close,
    };
    Ok((answer, status, last))
}

/// A `400` for a request refused from its head's bytes and what came with them
/// ([`forward::framing::refused_head`](super::forward::framing::refused_head)),
/// counted and logged as any refused request; the connection closes after it.
pub(crate) fn refuse(conn: &ConnState, method: &Method, path: &str, why: &'static str) -> Answer {
    let settings = conn.ctx.settings.load();
    let log = LogLine::wanted(&settings, method, path);
    let e = ForwardError::Refused(http::StatusCode::BAD_REQUEST, why);
    let resp = failed(conn, &e, &None);
    answered(conn, &settings, 400, &None, log);
    local(resp, false, true)
}

/// A response the balancer makes itself, written as hyper would.
fn local(resp: http::Response<ProxyBody>, head_request: bool, close: bool) -> Answer {
    let (parts, body) = resp.into_parts();
    let close = close
        || parts
            .headers
            .get(header::CONNECTION)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
    let len = http_body::Body::size_hint(&body).exact().unwrap_or(0);
    let mut out = BytesMut::new();
    h1::write_local(parts.status, &parts.headers, len, close, &mut out);
    Answer {
        head: out,
        framing: if head_request {
            Framing::Empty
        } else {
            Framing::Length(len)
        },
        body,
        trailers_from: None,
        close,
    }
}
