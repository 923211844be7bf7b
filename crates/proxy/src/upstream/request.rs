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

/// Told what a client's HTTP/1 request body did that its connection must know.
pub trait BodyNotes: Send + Sync {
    /// The end of a chunked body is not known to be where the client meant it: the body
    /// ended with a trailer section, or was left before its end (hyper then reads the
    /// rest itself, trailer section included). hyper's decoder reads trailer lines up to
    /// the first empty CRLF line, a bare LF inside them included: the head of a request
    /// pipelined behind may have been taken in as trailers, where a front end that ends
    /// lines at LF saw a request of its own. Nothing more on that connection can be
    /// trusted to be framed as the client meant.
    fn unsure_end(&self);
}

/// A client's request body as hyper's server reads it. A chunked one from an HTTP/1
/// client tells its connection ([`BodyNotes`]) when its end is unsure: a trailer
/// section came, or it is dropped before its end.
pub struct ClientBody {
    body: Incoming,
    notes: Option<Arc<dyn BodyNotes>>,
    ended: bool,
}

impl ClientBody {
    /// `notes`: the connection, for an HTTP/1 client (taken for a chunked body only: a
    /// body with a length has no trailer section, and HTTP/2 frames its own end).
    pub fn new(body: Incoming, notes: Option<Arc<dyn BodyNotes>>) -> Self {
        let chunked = !body.is_end_stream() && body.size_hint().exact().is_none();
        ClientBody {
            notes: notes.filter(|_| chunked),
            body,
            ended: false,
        }
    }
}

impl Drop for ClientBody {
    fn drop(&mut self) {
        if let (false, Some(n)) = (self.ended, &self.notes) {
            n.unsure_end();
        }
    }
}

/// Body of a request sent to a backend.
pub enum ReqBody {
    /// The client's body, streamed as it arrives.
    Incoming(ClientBody),
    /// No body (requests rebuilt for a retry, health checks).
    Empty,
    /// A body read whole with its head (the byte path's `Content-Length` bodies):
    /// given as one data frame, then the end.
    Whole(Bytes),
    /// A body fed by a unit test.
    #[cfg(test)]
    Test(http_body_util::channel::Channel<Bytes, hyper::Error>),
}

impl ReqBody {
    /// The client's `body`; see [`ClientBody::new`] for `notes`.
    pub fn client(body: Incoming, notes: Option<Arc<dyn BodyNotes>>) -> Self {
        ReqBody::Incoming(ClientBody::new(body, notes))
    }
}

impl std::fmt::Debug for ReqBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReqBody::Incoming(b) => f
                .debug_struct("Incoming")
                .field("body", &b.body)
                .field("notes", &b.notes.is_some())
                .field("ended", &b.ended)
                .finish(),
            ReqBody::Empty => f.write_str("Empty"),
            ReqBody::Whole(b) => f.debug_tuple("Whole").field(&b.len()).finish(),
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
            ReqBody::Incoming(b) => {
                let frame = Pin::new(&mut b.body).poll_frame(cx);
                match (&frame, &b.notes) {
                    (Poll::Ready(None), _) => b.ended = true,
                    (Poll::Ready(Some(Ok(f))), Some(n)) if f.is_trailers() => n.unsure_end(),
                    _ => {}
                }
                frame
            }
            ReqBody::Empty => Poll::Ready(None),
            ReqBody::Whole(b) if b.is_empty() => Poll::Ready(None),
            ReqBody::Whole(b) => Poll::Ready(Some(Ok(Frame::data(std::mem::take(b))))),
            #[cfg(test)]
            ReqBody::Test(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReqBody::Incoming(b) => b.body.is_end_stream(),
            ReqBody::Empty => true,
            ReqBody::Whole(b) => b.is_empty(),
            #[cfg(test)]
            ReqBody::Test(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ReqBody::Incoming(b) => b.body.size_hint(),
            ReqBody::Empty => SizeHint::with_exact(0),
            ReqBody::Whole(b) => SizeHint::with_exact(b.len() as u64),
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
