//! A request ready for a backend: its head encoded once for the wire, and its body.
//!
//! The head is the same bytes whichever backend gets it (a retry sends the very same
//! request); the body is the client's, streamed as it arrives (see [`super::upload`]).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::Request;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::h1::{self, ReqFraming};

/// Told what a client's HTTP/1 request body had that its connection must know.
pub trait BodyNotes: Send + Sync {
    /// The body ended with a trailer section. hyper's decoder reads trailer lines up to
    /// the first empty CRLF line, a bare LF inside them included: the head of a request
    /// pipelined behind may have been taken in as trailers, where a front end that ends
    /// lines at LF saw a request of its own. Nothing more on that connection can be
    /// trusted to be framed as the client meant.
    fn trailer_section(&self);
}

/// Body of a request sent to a backend.
pub enum ReqBody {
    /// The client's body, streamed as it arrives; from an HTTP/1 client, with whom to
    /// tell of a trailer section ([`BodyNotes`]).
    Incoming(Incoming, Option<Arc<dyn BodyNotes>>),
    /// No body (requests rebuilt for a retry, health checks).
    Empty,
    /// A body fed by a unit test.
    #[cfg(test)]
    Test(http_body_util::channel::Channel<Bytes, hyper::Error>),
}

impl std::fmt::Debug for ReqBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReqBody::Incoming(b, notes) => f
                .debug_tuple("Incoming")
                .field(b)
                .field(&notes.is_some())
                .finish(),
            ReqBody::Empty => f.write_str("Empty"),
            #[cfg(test)]
            ReqBody::Test(b) => f.debug_tuple("Test").field(b).finish(),
        }
    }
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ReqBody::Incoming(b, notes) => {
                let frame = Pin::new(b).poll_frame(cx);
                if let (Poll::Ready(Some(Ok(f))), Some(n)) = (&frame, notes) {
                    if f.is_trailers() {
                        n.trailer_section();
                    }
                }
                frame
            }
            ReqBody::Empty => Poll::Ready(None),
            #[cfg(test)]
            ReqBody::Test(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReqBody::Incoming(b, _) => b.is_end_stream(),
            ReqBody::Empty => true,
            #[cfg(test)]
            ReqBody::Test(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ReqBody::Incoming(b, _) => b.size_hint(),
            ReqBody::Empty => SizeHint::with_exact(0),
            #[cfg(test)]
            ReqBody::Test(_) => SizeHint::default(),
        }
    }
}

/// A request ready for the wire. The head is encoded once (see [`h1`]) and is the same
/// whichever backend gets it, so that a retry sends the very same bytes.
#[derive(Debug)]
pub struct Outgoing {
    pub head: Bytes,
    /// The request's method: a response to `HEAD` has no body.
    pub method: http::Method,
    pub framing: ReqFraming,
    pub body: ReqBody,
}

/// `req` made ready for the wire (tests, and callers without a retry to prepare).
pub fn outgoing(req: Request<ReqBody>) -> Outgoing {
    let (mut parts, body) = req.into_parts();
    let framing = h1::request_framing(
        &mut parts.headers,
        body.is_end_stream(),
        body.size_hint().exact(),
    );
    let mut head = BytesMut::new();
    h1::encode_request_head(&parts, framing, &mut head);
    Outgoing {
        head: head.freeze(),
        method: parts.method,
        framing,
        body,
    }
}
