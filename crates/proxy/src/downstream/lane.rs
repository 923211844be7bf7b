//! The byte path of an HTTP/1.1 client connection, plain or inside TLS: request heads
//! read into one buffer and parsed once
//! ([`forward::head::read`](crate::forward::head::read)), with a small body of a given
//! length read whole behind its head (within `request_header` again from the head's
//! end), each answered by [`crate::direct`], its response head and body written here;
//! keep-alive and pipelined requests one after the other; parking and the stop between
//! requests.
//!
//! Everything the byte path does not take (a chunked or longer body, an upgrade,
//! `Expect`, HTTP/1.0, HTTP/2's preface, a malformed or oversized head) goes to hyper's
//! server with the bytes read so far ([`LaneEnd::Hyper`]), which serves the rest of the
//! connection; a plain connection that parks comes back here when its next bytes arrive
//! (one over TLS, [`super::tls`], never parks: it stays with hyper). A head hyper would
//! take and mishandle is refused here instead ([`refused_head`]: a chunk size it would
//! wait for, a target's fragment it would cut off): a 400, then the lingering close
//! (plain or TLS). The connection's watchdog ([`super::conn`],
//! [`super::tls`]) keeps its timeouts as for hyper's: it looks at the same atomics, and
//! drops this future to close.
//!
//! Writes go through the same socket wrapper hyper's do ([`ClientIo`]): bytes counted,
//! activity noted, the turn's write order and budget, interim responses, the client's
//! socket noted full. A response's head and the body bytes ready with it leave in one
//! write.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;

use bytes::{Buf, BufMut, BytesMut};
use http_body::Body as _;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::socket::ClientIo;
use crate::direct::{self, Answer};
use crate::forward::framing::refused_head;
use crate::forward::head::{read, Read, LANE_FIELDS};
use crate::h1::{self, Framing};
use crate::session::{ConnState, FrontendRequest};

/// How the byte path let go of a connection (`S`: the plain socket, or a TLS stream).
pub(super) enum LaneEnd<S> {
    /// Closed: by the client, after `Connection: close`, at the stop, or on an error.
    Closed,
    /// Idle and asked to park: the socket, nothing read from it.
    Parked(S),
    /// For hyper's server: the socket, and what was read from it.
    Hyper(S, BytesMut),
    /// Refused before its upload was read: the answer written and the write side shut;
    /// the rest of the upload is to be read and dropped (the lingering close, run by the
    /// connection task outside the watchdog, as for hyper's connections).
    Linger(S),
}

/// Most body bytes gathered behind a response head before they are written.
const GATHER: usize = 16 * 1024;

/// Serve `stream`'s requests until it closes, parks (only if `may_park`: a plain
/// connection), or a request is hyper's.
pub(super) async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    state: Arc<ConnState>,
    stream: S,
    stop: CancellationToken,
    may_park: bool,
) -> LaneEnd<S> {
    let endpoint = state.ctx.endpoint.clone();
    let credential = endpoint
        .as_ref()
        .map_or("", |ep| ep.credential_header().as_str());
    let settings = state.ctx.settings.load();
    let max_head = settings.max_header_size;
    // A connection only the balancers' own protocol may use, or a TCP-mode port: its
    // requests are refused on hyper's path.
    if state.reserved || settings.mode == gearlb_core::config::Mode::Tcp {
        return LaneEnd::Hyper(stream, BytesMut::new());
    }
    drop(settings);
    let mut io = ClientIo::new(stream, state.clone(), None);
    let mut buf = BytesMut::with_capacity(4096);
    // Where the request whose head was read ends, while its body is still coming.
    let mut body_end = None;
    loop {
        let step = if body_end.is_some_and(|end| buf.len() < end) {
            // The head is whole (not parsed again until the body is): read on.
            Some(None)
        } else {
            body_end = None;
            let mut slots = [httparse::EMPTY_HEADER; LANE_FIELDS];
            match read(&buf, &mut slots, credential, max_head) {
                Read::Other => refused_head(&buf).map(|(method, path, refusal)| {
                    let frontend = FrontendRequest::start(&state, false);
                    let answer = direct::refuse(&state, &method, path, refusal.why());
                    Some((buf.len(), answer, frontend, true))
                }),
                Read::Partial => Some(None),
                Read::Body(end) => {
                    // The body gets `request_header` of its own, from its head's end
                    // (the wait for the head counted from the last response).
                    let now = state.ctx.clock.now_ms();
                    state.idle_since.store(now, Ordering::Relaxed);
                    body_end = Some(end);
                    Some(None)
                }
                Read::Head(h) => {
                    let frontend = FrontendRequest::start(&state, false);
                    let wait = state.wait.clone();
                    let serving = direct::serve(&state, &h, &wait, &stop);
                    let answer = with_interims(&mut io, &state, serving).await;
                    Some(Some((h.end(), answer, frontend, false)))
                }
            }
        };
        match step {
            None => return to_hyper(io, buf),
            Some(None) => match fill(&mut io, &mut buf, &state, &stop, may_park).await {
                Fill::Read => {}
                Fill::Park => {
                    return match io.into_inner() {
                        Some(s) => LaneEnd::Parked(s),
                        None => LaneEnd::Closed,
                    }
                }
                Fill::End => return LaneEnd::Closed,
            },
            Some(Some((len, answer, frontend, refused))) => {
                buf.advance(len);
                let close = answer.close;
                if write_answer(&mut io, answer, frontend).await.is_err() {
                    return LaneEnd::Closed;
                }
                if close {
                    let _ = io.shutdown().await;
                    return match (refused, io.into_inner()) {
                        (true, Some(s)) => LaneEnd::Linger(s),
                        _ => LaneEnd::Closed,
                    };
                }
            }
        }
    }
}

/// Run `serving`, writing the interim responses (`103 Early Hints`) its exchange
/// passes on as they come (the socket wrapper writes them when flushed).
async fn with_interims<S: AsyncWrite + Unpin, F: Future<Output = Answer>>(
    io: &mut ClientIo<S>,
    state: &ConnState,
    serving: F,
) -> Answer {
    let mut serving = std::pin::pin!(serving);
    poll_fn(|cx| {
        if let Poll::Ready(a) = serving.as_mut().poll(cx) {
            return Poll::Ready(a);
        }
        if state.has_interim.load(Ordering::Relaxed) {
            // A failed write shows again when the response is written.
            let _ = Pin::new(&mut *io).poll_flush(cx);
        }
        Poll::Pending
    })
    .await
}

fn to_hyper<S>(io: ClientIo<S>, buf: BytesMut) -> LaneEnd<S> {
    match io.into_inner() {
        Some(s) => LaneEnd::Hyper(s, buf),
        None => LaneEnd::Closed,
    }
}

enum Fill {
    Read,
    Park,
    End,
}

/// Read more of the next head; between requests (nothing buffered), the stop closes
/// the connection and a request to park parks it (if it `may_park`).
async fn fill<S: AsyncRead + Unpin>(
    io: &mut ClientIo<S>,
    buf: &mut BytesMut,
    state: &ConnState,
    stop: &CancellationToken,
    may_park: bool,
) -> Fill {
    poll_fn(|cx| {
        if buf.is_empty() {
            if stop.is_cancelled() {
                return Poll::Ready(Fill::End);
            }
            if may_park
                && state.park.load(Ordering::Relaxed)
                && state.in_flight.load(Ordering::Relaxed) == 0
            {
                return Poll::Ready(Fill::Park);
            }
        }
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(4096);
        }
        match tokio_util::io::poll_read_buf(Pin::new(&mut *io), cx, buf) {
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => Poll::Ready(Fill::End),
            Poll::Ready(Ok(_)) => Poll::Ready(Fill::Read),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// Write a response: its head, then its body as it comes, framed as the head says.
/// An error (the client gone, the body cut) ends the connection.
async fn write_answer<S: AsyncWrite + Unpin>(
    io: &mut ClientIo<S>,
    answer: Answer,
    frontend: FrontendRequest,
) -> std::io::Result<()> {
    let Answer {
        head: mut out,
        framing,
        body,
        trailers_from,
        ..
    } = answer;
    // The request is counted until its body is dropped: once written in full.
    let mut body = body.with_frontend(frontend);
    if framing == Framing::Empty {
        io.write_all(&out).await?;
        return io.flush().await;
    }
    let mut ended = false;
    while !ended {
        let frame = poll_fn(|cx| match Pin::new(&mut body).poll_frame(cx) {
            Poll::Ready(f) => Poll::Ready(Some(f)),
            // Nothing more right now: what is gathered goes first.
            Poll::Pending if !out.is_empty() => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        })
        .await;
        let data = match frame {
            None => {
                io.write_all(&out).await?;
                io.flush().await?;
                out.clear();
                continue;
            }
            Some(None) => {
                if framing == Framing::Chunked {
                    out.put_slice(h1::LAST_CHUNK);
                }
                ended = true;
                None
            }
            Some(Some(Err(e))) => {
                // The client gets what came before the cut (the connection then closes
                // without the body's end).
                io.write_all(&out).await?;
                io.flush().await?;
                return Err(std::io::Error::other(e));
            }
            Some(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => Some(data),
                Err(frame) => {
                    if let (Ok(t), Framing::Chunked) = (frame.into_trailers(), framing) {
                        put_trailers(&mut out, trailers_from.as_ref(), &t);
                    }
                    ended = true;
                    None
                }
            },
        };
        if let Some(data) = data {
            if framing == Framing::Chunked {
                if data.is_empty() {
                    continue;
                }
                out.put_slice(format!("{:x}\r\n", data.len()).as_bytes());
            }
            if data.len() <= GATHER {
                out.put_slice(&data);
            } else {
                // Large: written from its own buffer, not copied.
                io.write_all(&out).await?;
                out.clear();
                io.write_all(&data).await?;
            }
            if framing == Framing::Chunked {
                out.put_slice(b"\r\n");
            }
        }
        if ended || out.len() >= GATHER {
            io.write_all(&out).await?;
            io.flush().await?;
            out.clear();
        }
    }
    drop(body);
    Ok(())
}

/// The end of a chunked body with the trailer fields its head's `Trailer` declared.
fn put_trailers(out: &mut BytesMut, head: Option<&h1::Head>, t: &http::HeaderMap) {
    let declared = head.map(h1::declared_trailers).unwrap_or_default();
    out.put_slice(b"0\r\n");
    for (k, v) in t {
        if declared.contains(k) {
            out.put_slice(k.as_str().as_bytes());
            out.put_slice(b": ");
            out.put_slice(v.as_bytes());
            out.put_slice(b"\r\n");
        }
    }
    out.put_slice(b"\r\n");
}
