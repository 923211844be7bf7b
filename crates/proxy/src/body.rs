//! Response bodies sent to clients.
//!
//! Owns [`ProxyBody`]: a backend's body streamed through frame by frame (trailer fields
//! included; never buffered beyond one read and one frame, and read in small steps
//! while the client's socket is full, see [`upstream::UpBody`]), or a short text the
//! balancer writes itself. A backend body holds the backend connection and the
//! request's in-flight count on the backend until its last byte is read from the
//! backend: then the connection returns to its backend's pool and the count is let go
//! at once; a body dropped half-read closes the connection instead.
//!
//! A backend that answered before it had the whole request body, and reads on (full
//! duplex), gets the rest alongside the response; if the response ends first, the rest
//! goes on in a task of its own ([`upstream::finish_upload`]) that keeps the request
//! counted on the client connection and the backend until it is done.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::upstream::{self, SendError, UpBody};
use super::wait::Wait;
use super::{session::FrontendRequest, shared::InFlight};

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
        let mut u = UpstreamBody {
            body,
            cut: None,
            flight: Some(flight),
        };
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
        let this = self.get_mut();
        match &mut this.kind {
            BodyKind::Text(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            BodyKind::Upstream(u) => {
                if let Some(f) = &this._frontend {
                    u.body
                        .set_backlogged(f.0.backlogged.load(std::sync::atomic::Ordering::Relaxed));
                }
                let r = match u.cut.take() {
                    Some(e) => Poll::Ready(Some(Err(*e))),
                    None => u.body.poll_frame(cx),
                };
                match r {
                    Poll::Ready(Some(Err(e))) => {
                        // The client gets what came before the failure, then the cut:
                        // once what hyper was given is written out.
                        if let Some(f) = &this._frontend {
                            if !f.0.flushed_or_wait(cx) {
                                u.body.wait_on_client();
                                u.cut = Some(Box::new(e));
                                return Poll::Pending;
                            }
                        }
                        u.failed(&e);
                        Poll::Ready(Some(Err(e)))
                    }
                    Poll::Ready(r) => {
                        u.return_if_done();
                        Poll::Ready(r)
                    }
                    Poll::Pending => Poll::Pending,
                }
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
    /// The body failed; said once the client has what came before.
    cut: Option<Box<SendError>>,
    /// Taken by the end of an upload that outlives the response.
    flight: Option<InFlight>,
}

impl UpstreamBody {
    /// Once the body was read to its end, its connection goes back to the pool (the
    /// client may still be waiting for the last bytes: they are out of the socket), and
    /// the request leaves its backend's in-flight count (`scur`, least-outstanding
    /// selection, the backend's connection slots) unless an upload goes on: the gear's
    /// part is over before the client has the last bytes, on the byte path as on
    /// hyper's (which drops a body at its end, before the last write).
    fn return_if_done(&mut self) {
        if let (Some(conn), Some(f)) = (self.body.take_reusable(), &self.flight) {
            f.backend().pool.checkin(conn);
        }
        if self.body.is_done() && !self.body.upload_goes_on() {
            self.flight = None;
        }
    }

    /// The body failed: a backend that went silent for `timeouts.server` counts.
    fn failed(&self, e: &SendError) {
        if let (SendError::Timeout(super::wait::Phase::Server), Some(f)) = (e, &self.flight) {
            let stats = &f.backend().stats;
            stats
                .timeouts
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Drop for ProxyBody {
    /// A response complete while its backend still takes the request body: the rest of
    /// the upload goes on in a task of its own, holding the request's counts on the
    /// client connection (which must not look idle: its next request comes after the
    /// body) and on the backend.
    fn drop(&mut self) {
        let BodyKind::Upstream(u) = &mut self.kind else {
            return;
        };
        let Some((conn, upload, keep_alive)) = u.body.take_unfinished_upload() else {
            return;
        };
        let (Some(flight), Ok(rt)) = (u.flight.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let frontend = self._frontend.take();
        let wait = frontend.as_ref().map(|f| {
            let w = &f.0.wait;
            Wait::new(f.0.ctx.clock, w.client(), w.server())
        });
        let Some(wait) = wait else { return };
        rt.spawn(async move {
            if let Some(conn) = upstream::finish_upload(conn, upload, &wait, keep_alive).await {
                flight.backend().pool.checkin(conn);
            }
            drop(flight);
            drop(frontend);
        });
    }
}
