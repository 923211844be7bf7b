//! Response bodies sent to clients.
//!
//! Owns [`ProxyBody`]: a backend's body streamed through frame by frame (never
//! buffered), or a short text the balancer writes itself. A backend body holds the
//! backend connection and the request's in-flight count until its last frame: then the
//! connection returns to its backend's pool; a body dropped half-read closes it instead.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::upstream::Sender;
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

    pub(super) fn upstream(inner: Incoming, sender: Option<Sender>, flight: InFlight) -> Self {
        ProxyBody {
            kind: BodyKind::Upstream(UpstreamBody {
                inner,
                sender,
                flight,
                done: false,
            }),
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
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match &mut self.get_mut().kind {
            BodyKind::Text(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            BodyKind::Upstream(u) => {
                let r = Pin::new(&mut u.inner).poll_frame(cx);
                if let Poll::Ready(None) = r {
                    u.done = true;
                }
                r
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            BodyKind::Text(b) => b.is_none(),
            BodyKind::Upstream(u) => u.done || u.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            BodyKind::Text(Some(b)) => SizeHint::with_exact(b.len() as u64),
            BodyKind::Text(None) => SizeHint::with_exact(0),
            BodyKind::Upstream(u) => u.inner.size_hint(),
        }
    }
}

/// A backend's response body. Holds the backend connection and the in-flight count
/// until the body is finished; then the connection goes back to the pool.
struct UpstreamBody {
    inner: Incoming,
    sender: Option<Sender>,
    flight: InFlight,
    /// The body was read to its end (hyper's `is_end_stream` stays false after a
    /// chunked body ends, so this is tracked here).
    done: bool,
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take() {
            if self.done || self.inner.is_end_stream() {
                self.flight.backend().pool.checkin(sender);
            }
        }
    }
}
