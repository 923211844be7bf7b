//! Response bodies sent to clients.
//!
//! Owns [`ProxyBody`]: a backend's body streamed through frame by frame (never
//! buffered), or a short text the balancer writes itself. A backend body holds the
//! backend connection and the request's in-flight count until its last byte: then the
//! connection returns to its backend's pool at once; a body dropped half-read closes it
//! instead.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::upstream::{SendError, UpBody};
use super::{FrontendRequest, InFlight};

/// Response body sent to clients: a backend's body streamed through, or a short text
/// written by the balancer.
pub struct ProxyBody {
    kind: BodyKind,
    _frontend: Option<FrontendRequest>,
}

enum BodyKind {
    Text(Option<Bytes>),
    Upstream(UpstreamBody),
}

impl ProxyBody {
    pub fn text(s: &'static str) -> Self {
        ProxyBody {
            kind: BodyKind::Text(Some(Bytes::from_static(s.as_bytes()))),
            _frontend: None,
        }
    }

    /// No body (the `101` of an upgrade, whose connection went to its tunnel).
    pub fn empty() -> Self {
        ProxyBody {
            kind: BodyKind::Text(None),
            _frontend: None,
        }
    }

    pub(super) fn upstream(body: UpBody, flight: InFlight) -> Self {
        let mut u = UpstreamBody { body, flight };
        // A body-less response frees its connection before the client is answered.
        u.return_if_done();
        ProxyBody {
            kind: BodyKind::Upstream(u),
            _frontend: None,
        }
    }

    pub(super) fn with_frontend(mut self, f: FrontendRequest) -> Self {
        self._frontend = Some(f);
        self
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = SendError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, SendError>>> {
        match &mut self.get_mut().kind {
            BodyKind::Text(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            BodyKind::Upstream(u) => {
                let r = u.body.poll_data(cx);
                if r.is_ready() {
                    u.return_if_done();
                }
                r.map(|o| o.map(|r| r.map(Frame::data)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            BodyKind::Text(b) => b.is_none(),
            BodyKind::Upstream(u) => u.body.is_done(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            BodyKind::Text(Some(b)) => SizeHint::with_exact(b.len() as u64),
            BodyKind::Text(None) => SizeHint::with_exact(0),
            BodyKind::Upstream(u) => u.body.size_hint(),
        }
    }
}

/// A backend's response body and the request's in-flight count on the backend.
struct UpstreamBody {
    body: UpBody,
    flight: InFlight,
}

impl UpstreamBody {
    /// Once the body was read to its end, its connection goes back to the pool (the
    /// client may still be waiting for the last bytes: they are out of the socket).
    fn return_if_done(&mut self) {
        if let Some(conn) = self.body.take_reusable() {
            self.flight.backend().pool.checkin(conn);
        }
    }
}
