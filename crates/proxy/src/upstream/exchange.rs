//! One request/response exchange on a backend connection: the request head and body
//! written, interim responses passed on, the final response head read; and the
//! early-answer sub-machine (what the backend says while the body is still going,
//! rows "Answers before the request body was sent" of the table in [`super`]).

use std::future::poll_fn;
use std::task::Poll;
use std::time::Duration;

use bytes::BytesMut;

use super::connection::Conn;
use super::error::SendError;
use super::request::Outgoing;
use super::retry::SendFailure;
use super::upload::Upload;
use crate::h1::{self, Head, ReqFraming};
use crate::wait::{Phase, Wait};

/// Longest wait for the rest of a backend's answer after a request body could not be
/// written (see [`Conn::read_early_answer`]).
const EARLY_ANSWER_WAIT: Duration = Duration::from_secs(1);

/// Most interim (`1xx`) responses read before a final one: each is forwarded, and a
/// backend sending them for ever would otherwise hold the exchange within its timeout.
pub(super) const MAX_INTERIM: usize = 32;

/// A backend's final response head, and the rest of the request body when the backend
/// answered before it had all of it (rows 5 and 6 of the table in the module docs): it
/// goes on alongside the response body ([`UpBody`](super::UpBody)).
#[derive(Debug)]
pub struct Answer {
    pub head: Head,
    pub upload: Option<Box<Upload>>,
}

/// Where interim responses go (`1xx` other than `100` and `101`), if anywhere.
pub type Interim<'a> = Option<&'a (dyn Fn(&Head) + Sync)>;

/// Send `req` on `conn` and read the response head. Interim responses are handed to
/// `interim` (`100 Continue` excepted: the balancer answers `Expect` itself); `wait`
/// says what the exchange waits on, for its timekeeper (see [`Wait`]). The body, if
/// any, is then read with [`UpBody`](super::UpBody).
pub async fn send(
    conn: &mut Conn,
    req: Outgoing,
    wait: &Wait,
    interim: Interim<'_>,
) -> Result<Answer, SendFailure> {
    wait.reset();
    conn.heard = false;
    // Behind the other reads of this turn (`phase`).
    crate::turn::rest_of_turn().await;
    // Waiting on the backend from now: to take the request, and, for a request without
    // a body (sent at once), to answer it.
    wait.enter(Phase::Server);
    // The head: when not one byte of it could be written, the request goes back.
    let mut at = 0;
    let written = poll_fn(|cx| conn.poll_write_all(cx, &req.head, &mut at)).await;
    if let Err(e) = written {
        if at == 0 {
            return Err(SendFailure::NotSent(Box::new(req), SendError::Io(e)));
        }
        return Err(SendFailure::Sent(SendError::Io(e)));
    }
    let Outgoing {
        method,
        framing,
        body,
        ..
    } = req;
    let mut interims = 0;
    let mut upload = None;
    let mut keep = true;
    if framing != ReqFraming::Empty {
        let mut up = Upload::new(body, framing);
        match drive(conn, &mut up, wait, &method, interim, &mut interims).await {
            // The request is sent: the wait for its answer starts now.
            Driven::Sent => wait.enter(Phase::Server),
            // A final answer while the body still flows. A refusal (an error, or a
            // closing answer: RFC 9112 §9.6) wants no more of it, and the connection
            // cannot carry another request; a success goes to the client at once and
            // the body goes on alongside (full duplex, as HAProxy forwards).
            Driven::Answered { refused: false } => upload = Some(Box::new(up)),
            Driven::Answered { refused: true } => keep = false,
            Driven::Failed(e @ (SendError::ClientBody(_) | SendError::BodyLength)) => {
                return Err(SendFailure::Sent(e))
            }
            // The backend stopped the upload (closed, reset): what it said before is the
            // response (what a client talking to it directly would see), not a 502.
            Driven::Failed(_) if conn.read_early_answer().await => keep = false,
            Driven::Failed(e) => return Err(SendFailure::Sent(e)),
        }
    }

    loop {
        if !conn.buf.is_empty() {
            match h1::parse_response(&mut conn.buf, &method) {
                Ok(Some(h)) if is_interim(&h) => {
                    interims += 1;
                    if interims > MAX_INTERIM {
                        return Err(SendFailure::Sent(SendError::Parse(h1::ParseError::Head(
                            "too many interim responses",
                        ))));
                    }
                    forward_interim(interim, &h);
                    continue;
                }
                Ok(Some(mut head)) => {
                    // A chunked body broken in the bytes that came with its head: the
                    // client gets a 502 (as HAProxy answers), not a `200` cut short.
                    if head.body == h1::BodyLen::Chunked {
                        h1::check_start(&conn.buf).map_err(|e| SendFailure::Sent(e.into()))?;
                    }
                    head.keep_alive &= keep;
                    return Ok(Answer { head, upload });
                }
                Ok(None) => {}
                Err(e) => return Err(SendFailure::Sent(e.into())),
            }
        }
        match poll_fn(|cx| conn.poll_fill(cx)).await {
            Ok(0) => return Err(SendFailure::Sent(SendError::Closed)),
            Ok(_) => {}
            Err(e) => return Err(SendFailure::Sent(e.into())),
        }
    }
}

/// An interim response to pass on: `1xx`, but not `101` (final for the exchange) nor
/// `100` (the balancer sends its own when it starts reading the client's body).
fn is_interim(h: &Head) -> bool {
    h.status.is_informational() && h.status != http::StatusCode::SWITCHING_PROTOCOLS
}

fn forward_interim(interim: Interim<'_>, h: &Head) {
    if let Some(f) = interim {
        if h.status != http::StatusCode::CONTINUE {
            f(h);
        }
    }
}

/// Take the complete interim responses at the start of `buf` out of it, passing them on.
fn take_interims(
    buf: &mut BytesMut,
    method: &http::Method,
    interim: Interim<'_>,
    count: &mut usize,
) -> Result<(), h1::ParseError> {
    while early_is_interim(buf) {
        match h1::parse_response(buf, method)? {
            Some(h) => {
                *count += 1;
                if *count > MAX_INTERIM {
                    return Err(h1::ParseError::Head("too many interim responses"));
                }
                forward_interim(interim, &h);
            }
            None => break,
        }
    }
    Ok(())
}

/// `buf` starts with a complete interim head.
fn early_is_interim(buf: &[u8]) -> bool {
    let mut slots = [httparse::EMPTY_HEADER; h1::MAX_HEADERS];
    let mut r = httparse::Response::new(&mut slots);
    matches!(r.parse(buf), Ok(httparse::Status::Complete(_)))
        && r.code.is_some_and(|c| (100..200).contains(&c) && c != 101)
}

/// How sending a request body ended.
enum Driven {
    /// All of it went.
    Sent,
    /// A final response head arrived first (it is in the connection's buffer).
    Answered {
        refused: bool,
    },
    Failed(SendError),
}

/// Send `up`'s body, listening to the backend meanwhile: whenever the body waits (for
/// the client's next bytes, or for the backend to take more), whatever the backend sent
/// is read, interim responses passed on, and a complete final response head ends the
/// wait at once.
async fn drive(
    conn: &mut Conn,
    up: &mut Upload,
    wait: &Wait,
    method: &http::Method,
    interim: Interim<'_>,
    interims: &mut usize,
) -> Driven {
    poll_fn(|cx| loop {
        match up.poll_send(conn, cx) {
            Poll::Ready(Ok(())) => return Poll::Ready(Driven::Sent),
            Poll::Ready(Err(e)) => return Poll::Ready(Driven::Failed(e)),
            Poll::Pending => up.note_wait(wait),
        }
        let read = conn.poll_fill(cx);
        if let Poll::Ready(Err(e)) = read {
            return Poll::Ready(Driven::Failed(e.into()));
        }
        if take_interims(&mut conn.buf, method, interim, interims).is_err() {
            // The response parser says what is wrong with it.
            return Poll::Ready(Driven::Answered { refused: true });
        }
        match early(&conn.buf) {
            Early::Nothing => {}
            e => {
                return Poll::Ready(Driven::Answered {
                    refused: e.refuses(),
                })
            }
        }
        match read {
            Poll::Ready(Ok(0)) => return Poll::Ready(Driven::Failed(SendError::Closed)),
            // Part of an answer: read on until it would block. (Not progress: a head
            // trickled in byte by byte must not hold the exchange for ever.)
            Poll::Ready(Ok(_)) => {}
            _ => return Poll::Pending,
        }
    })
    .await
}

/// What a backend sent while the request body was still being written.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Early {
    /// Nothing, interim `1xx` responses, or part of a head.
    Nothing,
    /// A complete final response head: its status, and whether it closes.
    Final { status: u16, close: bool },
    /// Not a response, or longer than a head may be: the response parser says why.
    Bad,
}

impl Early {
    /// A backend refusing the request: it answered with an error or is closing, so
    /// the rest of the body is not wanted. (A success while the body still flows may
    /// come from a full-duplex backend that reads on: the body keeps going to it.)
    pub(super) fn refuses(&self) -> bool {
        match *self {
            Early::Nothing => false,
            Early::Final { status, close } => status >= 400 || close,
            Early::Bad => true,
        }
    }
}

/// What `buf` (bytes a backend sent) starts with, after any interim `1xx` heads.
pub(super) fn early(buf: &[u8]) -> Early {
    let mut at = 0;
    while at < buf.len() {
        let mut slots = [httparse::EMPTY_HEADER; h1::MAX_HEADERS];
        let mut r = httparse::Response::new(&mut slots);
        match r.parse(&buf[at..]) {
            Ok(httparse::Status::Complete(n)) => match r.code {
                Some(c) if (100..200).contains(&c) && c != 101 => at += n,
                Some(status) => {
                    let close = r.headers.iter().any(|h| {
                        h.name.eq_ignore_ascii_case("connection")
                            && h1::tokens(h.value).any(|t| t.eq_ignore_ascii_case(b"close"))
                    });
                    return Early::Final { status, close };
                }
                None => return Early::Bad,
            },
            Ok(httparse::Status::Partial) if buf.len() - at < h1::MAX_HEAD => break,
            _ => return Early::Bad,
        }
    }
    Early::Nothing
}

impl Conn {
    /// After writing the request failed: read what the backend sent before it went
    /// away. A response precedes the close that broke the write, so the socket is
    /// readable at once; the wait is bounded all the same. True when a final response
    /// head is complete.
    async fn read_early_answer(&mut self) -> bool {
        let deadline = tokio::time::Instant::now() + EARLY_ANSWER_WAIT;
        loop {
            if early(&self.buf) != Early::Nothing {
                return true;
            }
            let fill = tokio::time::timeout_at(deadline, poll_fn(|cx| self.poll_fill(cx)));
            if !matches!(fill.await, Ok(Ok(n)) if n > 0) {
                return false;
            }
        }
    }
}
