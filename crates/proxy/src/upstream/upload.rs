//! A request body on its way to a backend: framed as its head says, written as the
//! client's bytes arrive, and finished alongside the response when the backend
//! answered early and reads on ([`finish_upload`]).

use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Body;

use super::connection::Conn;
use super::error::SendError;
use super::request::ReqBody;
use crate::h1::{self, ReqFraming};
use crate::wait::{Phase, Wait};

/// A request body on its way to a backend, written as it arrives from the client with
/// the framing of its head (trailer fields of a chunked body included).
#[derive(Debug)]
pub struct Upload {
    body: ReqBody,
    framing: ReqFraming,
    /// Body bytes taken from the client so far.
    taken: u64,
    /// What goes on the wire next, in order (a chunk's size line, its data, its CRLF),
    /// from `out[next]` at byte `at`.
    out: [Bytes; 3],
    next: usize,
    at: usize,
    /// The client's body ended: what is in `out` is the last of it.
    ended: bool,
    trailers: Option<http::HeaderMap>,
    /// What the last [`Upload::poll_send`] waited on, and whether it moved bytes.
    pub(super) waits_on: Phase,
    pub(super) moved: bool,
}

impl Upload {
    pub(super) fn new(body: ReqBody, framing: ReqFraming) -> Self {
        Upload {
            body,
            framing,
            taken: 0,
            out: Default::default(),
            next: 3,
            at: 0,
            ended: false,
            trailers: None,
            waits_on: Phase::Idle,
            moved: false,
        }
    }

    fn queue(&mut self, out: [Bytes; 3]) {
        self.out = out;
        self.next = 0;
        self.at = 0;
    }

    /// Send what can go without waiting: `Ready(Ok)` once the whole body went,
    /// `Pending` while waiting on the client or the backend (both wakers registered).
    pub(super) fn poll_send(
        &mut self,
        conn: &mut Conn,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), SendError>> {
        self.moved = false;
        loop {
            while self.next < self.out.len() {
                let Upload { out, next, at, .. } = self;
                let part = &out[*next];
                if *at >= part.len() {
                    *next += 1;
                    *at = 0;
                    continue;
                }
                let before = *at;
                match conn.poll_write_all(cx, part, at) {
                    Poll::Pending => {
                        self.moved |= self.at > before;
                        self.waits_on = Phase::Server;
                        return Poll::Pending;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                    Poll::Ready(Ok(())) => {
                        self.moved = true;
                        self.next += 1;
                        self.at = 0;
                    }
                }
            }
            if self.ended {
                return Poll::Ready(Ok(()));
            }
            // A body with a length is whole once that much came: its end is not waited
            // for (hyper says it only with the next request head when the response was
            // complete first).
            if matches!(self.framing, ReqFraming::Length(n) if self.taken == n) {
                self.ended = true;
                continue;
            }
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Pending => {
                    self.waits_on = Phase::Client;
                    return Poll::Pending;
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(SendError::ClientBody(e))),
                Poll::Ready(None) => {
                    self.ended = true;
                    match self.last() {
                        Ok(last) => self.queue([last, Bytes::new(), Bytes::new()]),
                        Err(e) => return Poll::Ready(Err(e)),
                    }
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) if data.is_empty() => {}
                    Ok(data) => {
                        self.taken += data.len() as u64;
                        match self.framing {
                            ReqFraming::Length(n) if self.taken > n => {
                                return Poll::Ready(Err(SendError::BodyLength))
                            }
                            ReqFraming::Length(_) => self.queue([data, Bytes::new(), Bytes::new()]),
                            ReqFraming::Chunked => {
                                let line = Bytes::from(format!("{:x}\r\n", data.len()));
                                self.queue([line, data, Bytes::from_static(b"\r\n")]);
                            }
                            ReqFraming::Empty => {}
                        }
                    }
                    // Trailer fields (HTTP/2, or a chunked HTTP/1.1 body): they go in
                    // the last chunk (RFC 9112 §7.1.2); a body sent with a length has
                    // nowhere to carry them.
                    Err(frame) => {
                        if let Ok(t) = frame.into_trailers() {
                            self.trailers = Some(t);
                        }
                    }
                },
            }
        }
    }

    /// The end of the body on the wire.
    fn last(&mut self) -> Result<Bytes, SendError> {
        match self.framing {
            ReqFraming::Length(n) if self.taken != n => Err(SendError::BodyLength),
            ReqFraming::Chunked => Ok(match self.trailers.take() {
                Some(t) => h1::last_chunk(&t),
                None => Bytes::from_static(h1::LAST_CHUNK),
            }),
            _ => Ok(Bytes::new()),
        }
    }

    /// Tell `wait` what the last [`Upload::poll_send`] waits on.
    pub(super) fn note_wait(&self, wait: &Wait) {
        if self.moved {
            wait.enter(self.waits_on);
        } else {
            wait.enter_if_new(self.waits_on);
        }
    }

    /// The body's end was written.
    pub fn is_sent(&self) -> bool {
        self.ended && self.next >= self.out.len()
    }
}

/// The rest of an upload whose response is complete (a backend that answered early and
/// reads on), sent under `wait`'s timeouts (`timeouts.client` for the client's bytes,
/// `timeouts.server` for the backend taking them). The connection when it may carry
/// another request.
pub async fn finish_upload(
    mut conn: Conn,
    mut up: Box<Upload>,
    wait: &Wait,
    keep_alive: bool,
) -> Option<Conn> {
    wait.reset();
    let sending = poll_fn(|cx| {
        let r = up.poll_send(&mut conn, cx);
        if r.is_pending() {
            up.note_wait(wait);
        }
        r
    });
    match crate::wait::watched(wait, sending).await {
        Ok(Ok(())) if keep_alive => Some(conn),
        _ => None,
    }
}
