//! A backend's response body, read from its connection as the client takes it (the
//! rest of an early-answered upload going on alongside), and the connection handed
//! back for the pool once both are done.
//!
//! What a client has not taken yet waits in bounded buffers, and the rest in the
//! backend's socket, which is read only when the last read was handed on. Reads grow up
//! to 512 KiB while the client takes what it is sent, each handed to hyper whole (large
//! writes move large bodies fastest); once the client's socket is full (`backlogged`:
//! it reads slower than it is sent to) they fall to 8 KiB, a large read's buffer is
//! given back, and what is left of the last one goes to hyper in frames of at most
//! [`FRAME_MAX`] (hyper asks for the next frame once it holds less than its 32 KiB
//! write buffer). A client that stops reading costs the balancer at most one read and
//! what hyper held when it stopped (issue 34).

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

use super::connection::Conn;
use super::error::SendError;
use super::upload::Upload;
use crate::h1::{self, BodyLen, Head};
use crate::wait::{Phase, Wait};

/// The most of a body handed to a backlogged client's connection at once (what hyper
/// copies into its write buffer); a client that keeps up is handed each read whole.
pub const FRAME_MAX: usize = 64 * 1024;

/// How much of a response body is left.
#[derive(Debug)]
enum Left {
    Length(u64),
    Chunked(h1::Chunked),
    Close,
    Done,
}

/// A backend's response body, read from its connection as the client takes it, and
/// the rest of the request body when the backend answered early (sent alongside). Once
/// both are done, [`UpBody::take_reusable`] gives the connection back for the pool.
#[derive(Debug)]
pub struct UpBody {
    conn: Option<Conn>,
    left: Left,
    keep_alive: bool,
    upload: Option<Box<Upload>>,
    /// The backend stopped taking the upload: its connection is not used again.
    upload_broken: bool,
    /// Where the exchange waits, for the timeouts: on the backend while a read waits,
    /// on the client once data was handed on and not asked for again.
    wait: Option<Arc<Wait>>,
    /// Trailer fields of a chunked body, handed on after its data (boxed: rare, and
    /// every response body carries this).
    trailers: Option<Box<http::HeaderMap>>,
    /// The body failed (cut, malformed, timed out): reported at the next poll, once
    /// what was handed on before went out (see [`UpBody::poll_frame`]).
    failed: Option<Box<SendError>>,
    /// Whether that delay was taken already.
    delayed: bool,
    /// The client's socket was full when this body was last asked for more.
    backlogged: bool,
}

impl UpBody {
    pub fn new(
        conn: Conn,
        head: &Head,
        upload: Option<Box<Upload>>,
        wait: Option<Arc<Wait>>,
    ) -> Self {
        let left = match head.body {
            BodyLen::Empty => Left::Done,
            BodyLen::Length(n) => Left::Length(n),
            BodyLen::Chunked => Left::Chunked(h1::Chunked::default()),
            BodyLen::Close => Left::Close,
        };
        UpBody {
            conn: Some(conn),
            left,
            keep_alive: head.keep_alive,
            upload,
            upload_broken: false,
            wait,
            trailers: None,
            failed: None,
            delayed: false,
            backlogged: false,
        }
    }

    /// Whether the client's socket was full (it reads slower than it is sent to) when
    /// the next frame is asked for: the backend is then read in small steps.
    pub fn set_backlogged(&mut self, backlogged: bool) {
        self.backlogged = backlogged;
    }

    /// The whole body was read and handed on.
    pub fn is_done(&self) -> bool {
        matches!(self.left, Left::Done) && self.trailers.is_none()
    }

    /// The connection, when the body was read to its end, the request was sent in full,
    /// and the connection may carry another request.
    pub fn take_reusable(&mut self) -> Option<Conn> {
        if self.is_done() && self.keep_alive && self.upload.is_none() && !self.upload_broken {
            self.conn.take().filter(|c| c.buf.is_empty())
        } else {
            None
        }
    }

    /// The response is complete while the backend still takes the request body: the
    /// rest of the upload goes on after it ([`UpBody::take_unfinished_upload`]).
    pub fn upload_goes_on(&self) -> bool {
        self.upload.is_some() && self.conn.is_some() && !self.upload_broken
    }

    /// The connection and the rest of the upload, once the response is complete while
    /// the backend still takes the request body (see [`finish_upload`](super::finish_upload)); and whether
    /// the connection may carry another request after it.
    pub fn take_unfinished_upload(&mut self) -> Option<(Conn, Box<Upload>, bool)> {
        if !self.is_done() || self.upload_broken {
            return None;
        }
        let up = self.upload.take()?;
        let conn = self.conn.take()?;
        Some((conn, up, self.keep_alive))
    }

    /// The connection whatever its state (a `101` response hands it to a tunnel).
    pub fn take_conn(&mut self) -> Option<Conn> {
        self.left = Left::Done;
        self.keep_alive = false;
        self.upload = None;
        self.conn.take()
    }

    /// What is awaited now is the client taking what it was given.
    pub fn wait_on_client(&self) {
        if let Some(w) = &self.wait {
            w.enter(Phase::Client);
        }
    }

    /// Data was handed on: until asked for more, the client is what is awaited.
    fn handed(&self) {
        if let Some(w) = &self.wait {
            if matches!(self.left, Left::Done) {
                w.idle();
            } else {
                w.enter(Phase::Client);
            }
        }
    }

    /// The next frame of the body. A failure (the backend cut the body short, framed it
    /// badly, or went silent) is reported one poll late: hyper drops a response whose
    /// body fails with what it has not written yet (its head, the last data), so the
    /// client would get nothing at all; the delay lets it write them first, and the
    /// client gets the body as far as it went, then a cut (RFC 9112 §8: an incomplete
    /// message, which a client can tell).
    pub fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, SendError>>> {
        if let Some(e) = self.failed.take() {
            return Poll::Ready(Some(Err(*e)));
        }
        match self.poll_next(cx) {
            Poll::Ready(Some(Err(e))) if !self.delayed => {
                self.delayed = true;
                self.failed = Some(Box::new(e));
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            r => r,
        }
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, SendError>>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(None);
        };
        if let Some(p) = self.wait.as_ref().and_then(|w| w.expired()) {
            return Poll::Ready(Some(Err(SendError::Timeout(p))));
        }
        // The rest of the request body goes on alongside.
        let mut upload_waits_on_client = false;
        let mut upload_moved = false;
        if let Some(up) = self.upload.as_mut() {
            match up.poll_send(conn, cx) {
                Poll::Ready(Ok(())) => self.upload = None,
                Poll::Ready(Err(e @ (SendError::ClientBody(_) | SendError::BodyLength))) => {
                    return Poll::Ready(Some(Err(e)))
                }
                // The backend stopped taking it: its answer still goes on.
                Poll::Ready(Err(_)) => {
                    self.upload = None;
                    self.upload_broken = true;
                }
                Poll::Pending => {
                    upload_waits_on_client = up.waits_on == Phase::Client;
                    upload_moved = up.moved;
                }
            }
        }
        let cap = if self.backlogged {
            FRAME_MAX
        } else {
            usize::MAX
        };
        loop {
            match &mut self.left {
                Left::Done => {
                    if let Some(t) = self.trailers.take() {
                        return Poll::Ready(Some(Ok(Frame::trailers(*t))));
                    }
                    return Poll::Ready(None);
                }
                Left::Length(left) => {
                    if !conn.buf.is_empty() {
                        let n = (conn.buf.len().min(cap) as u64).min(*left) as usize;
                        *left -= n as u64;
                        let data = conn.buf.split_to(n).freeze();
                        if *left == 0 {
                            self.left = Left::Done;
                        }
                        self.handed();
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
                Left::Chunked(c) => match c.decode_at_most(&mut conn.buf, cap) {
                    Ok(h1::Step::Data(d)) => {
                        self.handed();
                        return Poll::Ready(Some(Ok(Frame::data(d))));
                    }
                    Ok(h1::Step::End) => {
                        self.trailers = c.take_trailers().map(Box::new);
                        self.left = Left::Done;
                        continue;
                    }
                    Ok(h1::Step::More) => {}
                    Err(e) => return Poll::Ready(Some(Err(e.into()))),
                },
                Left::Close => {
                    if !conn.buf.is_empty() {
                        let n = conn.buf.len().min(cap);
                        let data = conn.buf.split_to(n).freeze();
                        self.handed();
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
            }
            if self.backlogged {
                conn.slow_down();
            }
            match conn.poll_fill(cx) {
                Poll::Pending => {
                    if let Some(w) = &self.wait {
                        // A backend waiting for the rest of the upload is not idle; one
                        // taking it is not silent.
                        let on = if upload_waits_on_client {
                            Phase::Client
                        } else {
                            Phase::Server
                        };
                        if upload_moved {
                            w.enter(on);
                        } else {
                            w.enter_if_new(on);
                        }
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Ok(0)) if matches!(self.left, Left::Close) => {
                    self.left = Left::Done;
                    self.handed();
                    return Poll::Ready(None);
                }
                Poll::Ready(Ok(0)) => return Poll::Ready(Some(Err(SendError::Closed))),
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
            }
        }
    }

    pub fn size_hint(&self) -> SizeHint {
        match &self.left {
            Left::Done if self.trailers.is_none() => SizeHint::with_exact(0),
            Left::Length(n) => SizeHint::with_exact(*n),
            _ => SizeHint::default(),
        }
    }
}
