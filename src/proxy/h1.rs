//! The HTTP/1.1 client side of the proxy, as pure functions over bytes: the request head
//! written to a backend, the response head read from it, and the response body's
//! framing (RFC 9112 §6).
//!
//! Owns the wire format and nothing else: no sockets, no timers. [`super::upstream`]
//! drives these over a backend connection in the task of the client's request, so that a
//! request costs no hand-over to another task (hyper's client connection runs in a task
//! of its own, fed through channels).
//!
//! Strict where a lenient reading could desynchronise the connection: a response whose
//! length cannot be known for sure (several different `Content-Length`s, a length that
//! is not a number, malformed chunk sizes) is an error and its connection is closed; a
//! body delimited by the connection's end is read to the end and never reused.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Version};

/// Most headers a response head may have (hyper's default too).
pub const MAX_HEADERS: usize = 100;

/// Largest response head accepted, in bytes.
pub const MAX_HEAD: usize = 256 * 1024;

/// Longest chunk-size line (with extensions), and most trailer bytes, accepted.
const MAX_CHUNK_LINE: usize = 4096;
const MAX_TRAILERS: usize = 64 * 1024;

/// Why a response could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("malformed response head: {0}")]
    Head(&'static str),
    #[error("response head larger than {MAX_HEAD} bytes")]
    TooLarge,
    #[error("invalid Content-Length")]
    Length,
    #[error("malformed chunked body: {0}")]
    Chunked(&'static str),
}

/// How a request body is framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReqFraming {
    /// No body.
    Empty,
    /// `Content-Length`, sent as the client gave it.
    Length(u64),
    /// `Transfer-Encoding: chunked` (the client's length is unknown).
    Chunked,
}

/// Write the head of `parts` to `out`. `Transfer-Encoding: chunked` is added for a
/// chunked body (hop-by-hop headers were removed from `parts` already).
pub fn encode_request_head(parts: &http::request::Parts, framing: ReqFraming, out: &mut BytesMut) {
    let target = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .filter(|s| !s.is_empty())
        .unwrap_or("/");
    let mut len = parts.method.as_str().len() + target.len() + 16;
    for (k, v) in &parts.headers {
        len += k.as_str().len() + v.len() + 4;
    }
    out.reserve(len + 32);
    out.put_slice(parts.method.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(target.as_bytes());
    out.put_slice(b" HTTP/1.1\r\n");
    for (k, v) in &parts.headers {
        out.put_slice(k.as_str().as_bytes());
        out.put_slice(b": ");
        out.put_slice(v.as_bytes());
        out.put_slice(b"\r\n");
    }
    if framing == ReqFraming::Chunked {
        out.put_slice(b"transfer-encoding: chunked\r\n");
    }
    out.put_slice(b"\r\n");
}

/// The framing of a request body, from what the body itself knows (`empty`, and its
/// exact length if known): the length the client's framing gave, or chunked. The
/// `Content-Length` header is made to agree with it, so that the head never announces a
/// length the body does not have.
pub fn request_framing(headers: &mut HeaderMap, empty: bool, exact: Option<u64>) -> ReqFraming {
    // `Content-Length: 3, 3` (or the header twice) is one length written several times:
    // the gear gets it once (RFC 9110 §8.6).
    let (declared, pieces) = content_length_pieces(headers).unwrap_or((None, 0));
    let once = pieces == 1;
    match (empty, exact) {
        (true, _) if declared == Some(0) => {
            if !once {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
            }
            ReqFraming::Length(0)
        }
        (true, _) => {
            headers.remove(header::CONTENT_LENGTH);
            ReqFraming::Empty
        }
        (false, Some(n)) => {
            if declared != Some(n) || !once {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
            }
            ReqFraming::Length(n)
        }
        (false, None) => {
            headers.remove(header::CONTENT_LENGTH);
            ReqFraming::Chunked
        }
    }
}

/// Append one chunk of a chunked body.
pub fn encode_chunk(data: &[u8], out: &mut BytesMut) {
    if data.is_empty() {
        return;
    }
    out.reserve(data.len() + 20);
    let hex = format!("{:x}\r\n", data.len());
    out.put_slice(hex.as_bytes());
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

/// The end of a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// The end of a chunked body carrying trailer fields (RFC 9112 §7.1.2), those a
/// recipient may take as trailers (see [`trailer_allowed`]).
pub fn last_chunk(trailers: &HeaderMap) -> Bytes {
    let mut out = BytesMut::with_capacity(64);
    out.put_slice(b"0\r\n");
    for (k, v) in trailers {
        if trailer_allowed(k) {
            out.put_slice(k.as_str().as_bytes());
            out.put_slice(b": ");
            out.put_slice(v.as_bytes());
            out.put_slice(b"\r\n");
        }
    }
    out.put_slice(b"\r\n");
    out.freeze()
}

/// Whether a field may travel as a trailer: not one that frames, routes or controls the
/// message, which must be known before the body (RFC 9110 §6.5.1), nor a hop-by-hop one,
/// nor one of the forwarding fields the balancer sets (a server merging trailers into
/// the head would take a client's for the balancer's).
pub fn trailer_allowed(name: &HeaderName) -> bool {
    !matches!(
        name.as_str(),
        "content-length"
            | "transfer-encoding"
            | "trailer"
            | "te"
            | "host"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "upgrade"
            | "content-type"
            | "content-encoding"
            | "content-range"
            | "cache-control"
            | "expect"
            | "max-forwards"
            | "authorization"
            | "proxy-authorization"
            | "proxy-authenticate"
            | "www-authenticate"
            | "set-cookie"
            | "cookie"
            | "age"
            | "expires"
            | "date"
            | "location"
            | "retry-after"
            | "vary"
            | "warning"
            // What the balancer vouches for in the head: a trailer must not restate it.
            | "x-forwarded-for"
            | "x-forwarded-proto"
            | "x-forwarded-host"
            | "x-forwarded-port"
            | "forwarded"
    )
}

/// Trailer fields as a recipient may take them ([`trailer_allowed`]); `None` if none is.
pub fn allowed_trailers(mut t: HeaderMap) -> Option<HeaderMap> {
    if t.keys().any(|k| !trailer_allowed(k)) {
        let names: Vec<HeaderName> = t.keys().filter(|k| !trailer_allowed(k)).cloned().collect();
        for n in names {
            t.remove(n);
        }
    }
    (!t.is_empty()).then_some(t)
}

/// An interim (`1xx`) response head as it goes to an HTTP/1.1 client: the status line
/// and its fields, hop-by-hop ones removed by the caller.
pub fn encode_interim(status: StatusCode, headers: &HeaderMap, out: &mut BytesMut) {
    out.reserve(64);
    out.put_slice(b"HTTP/1.1 ");
    out.put_slice(status.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.put_slice(b"\r\n");
    for (k, v) in headers {
        out.put_slice(k.as_str().as_bytes());
        out.put_slice(b": ");
        out.put_slice(v.as_bytes());
        out.put_slice(b"\r\n");
    }
    out.put_slice(b"\r\n");
}

/// How a response body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLen {
    /// No body (`HEAD`, 1xx, 204, 304, or `Content-Length: 0`).
    Empty,
    Length(u64),
    Chunked,
    /// Delimited by the end of the connection.
    Close,
}

/// A parsed response head.
#[derive(Debug)]
pub struct Head {
    pub parts: http::response::Parts,
    pub body: BodyLen,
    /// The connection may carry another request once this body is read.
    pub keep_alive: bool,
}

/// Parse a response head at the start of `buf`. `Ok(None)`: incomplete, read more.
/// On success the head's bytes are taken out of `buf` (header values share them).
pub fn parse_response(buf: &mut BytesMut, method: &Method) -> Result<Option<Head>, ParseError> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut r = httparse::Response::new(&mut slots);
    let status = r.parse(buf);
    let head_len = match status {
        // However the bytes arrived, a head over the limit is refused.
        Ok(httparse::Status::Complete(n)) if n > MAX_HEAD => return Err(ParseError::TooLarge),
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return if buf.len() >= MAX_HEAD {
                Err(ParseError::TooLarge)
            } else {
                Ok(None)
            };
        }
        Err(httparse::Error::TooManyHeaders) => return Err(ParseError::Head("too many headers")),
        Err(_) => return Err(ParseError::Head("not an HTTP/1 response")),
    };
    let code = r.code.ok_or(ParseError::Head("no status"))?;
    let status = StatusCode::from_u16(code).map_err(|_| ParseError::Head("bad status"))?;
    let version = match r.version {
        Some(1) => Version::HTTP_11,
        _ => Version::HTTP_10,
    };
    // Offsets of each name and value in `buf`, so that the values can share the head's
    // bytes once it is frozen.
    let base = buf.as_ptr() as usize;
    let mut spans: Vec<(usize, usize, usize, usize)> = Vec::with_capacity(r.headers.len());
    for h in r.headers.iter() {
        let n = h.name.as_ptr() as usize - base;
        let v = h.value.as_ptr() as usize - base;
        spans.push((n, h.name.len(), v, h.value.len()));
    }
    let head = buf.split_to(head_len).freeze();
    let mut headers = HeaderMap::with_capacity(spans.len());
    for (n, nl, v, vl) in spans {
        let name = HeaderName::from_bytes(&head[n..n + nl])
            .map_err(|_| ParseError::Head("invalid header name"))?;
        let value = HeaderValue::from_maybe_shared(head.slice(v..v + vl))
            .map_err(|_| ParseError::Head("invalid header value"))?;
        headers.append(name, value);
    }

    let mut keep_alive = version == Version::HTTP_11;
    // An HTTP/1.0 message with Transfer-Encoding: its framing is faulty, and the
    // connection closes after it (RFC 9112 §6.1).
    let te_in_10 = version == Version::HTTP_10 && headers.contains_key(header::TRANSFER_ENCODING);
    for v in headers.get_all(header::CONNECTION) {
        for t in tokens(v.as_bytes()) {
            if t.eq_ignore_ascii_case(b"close") {
                keep_alive = false;
            } else if t.eq_ignore_ascii_case(b"keep-alive") && version == Version::HTTP_10 {
                keep_alive = true;
            }
        }
    }
    if te_in_10 {
        keep_alive = false;
    }
    let body = if *method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        BodyLen::Empty
    } else if headers.contains_key(header::TRANSFER_ENCODING) {
        // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length, and such a message
        // is not to be trusted with the connection after it.
        if headers.remove(header::CONTENT_LENGTH).is_some() {
            keep_alive = false;
        }
        if last_coding_is_chunked(&headers) {
            BodyLen::Chunked
        } else {
            keep_alive = false;
            BodyLen::Close
        }
    } else {
        let (length, pieces) = content_length_pieces(&headers)?;
        if let (Some(n), 2..) = (length, pieces) {
            // One length written several times (`3, 3`): the client gets it once.
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
        match length {
            Some(0) => BodyLen::Empty,
            Some(n) => BodyLen::Length(n),
            None => {
                keep_alive = false;
                BodyLen::Close
            }
        }
    };
    // A bodiless response still says what length the body would have had (`HEAD`, 304):
    // written once too.
    if matches!(body, BodyLen::Empty) && headers.contains_key(header::CONTENT_LENGTH) {
        if let Ok((Some(n), 2..)) = content_length_pieces(&headers) {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
    }
    let mut parts = http::Response::new(()).into_parts().0;
    parts.status = status;
    parts.version = version;
    parts.headers = headers;
    Ok(Some(Head {
        parts,
        body,
        keep_alive,
    }))
}

/// The items of a comma-separated header value (`Connection`, say), trimmed.
pub fn tokens(value: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii)
}

fn last_coding_is_chunked(h: &HeaderMap) -> bool {
    h.get_all(header::TRANSFER_ENCODING)
        .iter()
        .next_back()
        .and_then(|v| tokens(v.as_bytes()).next_back())
        .is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"))
}

/// The message's `Content-Length` (every value and list element must be the same
/// number), and in how many pieces (values and list elements) it was written.
fn content_length_pieces(h: &HeaderMap) -> Result<(Option<u64>, usize), ParseError> {
    let mut found = None;
    let mut pieces = 0;
    for v in h.get_all(header::CONTENT_LENGTH) {
        for part in tokens(v.as_bytes()) {
            pieces += 1;
            if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
                return Err(ParseError::Length);
            }
            let n: u64 = std::str::from_utf8(part)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or(ParseError::Length)?;
            match found {
                Some(m) if m != n => return Err(ParseError::Length),
                _ => found = Some(n),
            }
        }
    }
    Ok((found, pieces))
}

/// Decodes a chunked body out of a read buffer (RFC 9112 §7.1). Chunk extensions are
/// read and dropped; trailer fields are kept ([`Chunked::take_trailers`]).
#[derive(Debug, Default)]
pub struct Chunked {
    state: ChunkState,
    /// Data bytes left in the current chunk.
    left: u64,
    /// Trailer bytes seen so far.
    trailers: usize,
    /// The trailer section as read (field lines, each with its CRLF).
    trailer_lines: Option<BytesMut>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Data,
    DataEnd,
    Trailers,
    Done,
}

/// What [`Chunked::decode`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    Data(Bytes),
    /// More bytes are needed.
    More,
    /// The body ended (its last byte was taken from the buffer).
    End,
}

impl Chunked {
    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// The trailer fields read after the last chunk, those a recipient may take (see
    /// [`allowed_trailers`]); malformed ones are dropped whole, never half-read.
    pub fn take_trailers(&mut self) -> Option<HeaderMap> {
        let mut lines = self.trailer_lines.take()?;
        lines.put_slice(b"\r\n");
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let Ok(httparse::Status::Complete((_, fields))) =
            httparse::parse_headers(&lines, &mut slots)
        else {
            return None;
        };
        let mut map = HeaderMap::with_capacity(fields.len());
        for f in fields {
            let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(f.name.as_bytes()),
                HeaderValue::from_bytes(f.value),
            ) else {
                return None;
            };
            map.append(name, value);
        }
        allowed_trailers(map)
    }

    /// Take what `buf` holds of the body: the next data, or its end.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Step, ParseError> {
        loop {
            match self.state {
                ChunkState::Size => {
                    let Some(line) = take_line(buf, MAX_CHUNK_LINE)? else {
                        return Ok(Step::More);
                    };
                    let size = chunk_size(&line)?;
                    if size == 0 {
                        self.state = ChunkState::Trailers;
                    } else {
                        self.left = size;
                        self.state = ChunkState::Data;
                    }
                }
                ChunkState::Data => {
                    if buf.is_empty() {
                        return Ok(Step::More);
                    }
                    let n = (buf.len() as u64).min(self.left) as usize;
                    self.left -= n as u64;
                    if self.left == 0 {
                        self.state = ChunkState::DataEnd;
                    }
                    return Ok(Step::Data(buf.split_to(n).freeze()));
                }
                ChunkState::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(Step::More);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(ParseError::Chunked("chunk not followed by CRLF"));
                    }
                    buf.advance(2);
                    self.state = ChunkState::Size;
                }
                ChunkState::Trailers => {
                    let Some(line) = take_line(buf, MAX_TRAILERS)? else {
                        return Ok(Step::More);
                    };
                    self.trailers += line.len() + 2;
                    if self.trailers > MAX_TRAILERS {
                        return Err(ParseError::Chunked("trailers too large"));
                    }
                    if line.is_empty() {
                        self.state = ChunkState::Done;
                        return Ok(Step::End);
                    }
                    let lines = self.trailer_lines.get_or_insert_with(BytesMut::new);
                    lines.put_slice(&line);
                    lines.put_slice(b"\r\n");
                }
                ChunkState::Done => return Ok(Step::End),
            }
        }
    }
}

/// A CRLF-terminated line out of `buf` (without the CRLF), if complete.
fn take_line(buf: &mut BytesMut, max: usize) -> Result<Option<BytesMut>, ParseError> {
    match buf.iter().take(max + 2).position(|&b| b == b'\n') {
        Some(i) => {
            if i == 0 || buf[i - 1] != b'\r' {
                return Err(ParseError::Chunked("line not ended by CRLF"));
            }
            let mut line = buf.split_to(i + 1);
            line.truncate(i - 1);
            Ok(Some(line))
        }
        None if buf.len() > max => Err(ParseError::Chunked("line too long")),
        None => Ok(None),
    }
}

/// The size of a chunk-size line: hex digits, then optional whitespace and extensions.
fn chunk_size(line: &[u8]) -> Result<u64, ParseError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(ParseError::Chunked("no chunk size"));
    }
    if digits > 15 {
        return Err(ParseError::Chunked("chunk size too large"));
    }
    let rest = line[digits..].trim_ascii_start();
    if !(rest.is_empty() || rest[0] == b';') {
        return Err(ParseError::Chunked("invalid chunk size"));
    }
    let hex = std::str::from_utf8(&line[..digits]).map_err(|_| ParseError::Chunked("size"))?;
    u64::from_str_radix(hex, 16).map_err(|_| ParseError::Chunked("invalid chunk size"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str, method: Method) -> Result<Option<Head>, ParseError> {
        parse_response(&mut BytesMut::from(raw), &method)
    }

    #[test]
    fn request_head_carries_method_target_and_headers_as_given() {
        let (mut parts, ()) = http::Request::post("/a%2Fb?x=1")
            .header("host", "App.Example:81")
            .header("x-forwarded-for", "192.0.2.1")
            .body(())
            .unwrap()
            .into_parts();
        let mut out = BytesMut::new();
        encode_request_head(&parts, ReqFraming::Chunked, &mut out);
        assert_eq!(
            &out[..],
            b"POST /a%2Fb?x=1 HTTP/1.1\r\nhost: App.Example:81\r\nx-forwarded-for: 192.0.2.1\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        parts.uri = http::Uri::from_static("*");
        parts.method = Method::OPTIONS;
        parts.headers.clear();
        out.clear();
        encode_request_head(&parts, ReqFraming::Empty, &mut out);
        assert_eq!(&out[..], b"OPTIONS * HTTP/1.1\r\n\r\n");
    }

    #[test]
    fn request_framing_follows_the_body_and_the_head_agrees() {
        let mut h = HeaderMap::new();
        assert_eq!(request_framing(&mut h, true, Some(0)), ReqFraming::Empty);
        assert_eq!(request_framing(&mut h, false, None), ReqFraming::Chunked);
        assert!(h.is_empty());
        h.insert("content-length", "12".parse().unwrap());
        assert_eq!(
            request_framing(&mut h, false, Some(12)),
            ReqFraming::Length(12)
        );
        assert_eq!(h["content-length"], "12");
        h.insert("content-length", "0".parse().unwrap());
        assert_eq!(
            request_framing(&mut h, true, Some(0)),
            ReqFraming::Length(0)
        );
        // A header that disagrees with the body loses.
        h.insert("content-length", "99".parse().unwrap());
        assert_eq!(
            request_framing(&mut h, false, Some(3)),
            ReqFraming::Length(3)
        );
        assert_eq!(h["content-length"], "3");
        assert_eq!(request_framing(&mut h, false, None), ReqFraming::Chunked);
        assert!(!h.contains_key("content-length"));
        h.insert("content-length", "7".parse().unwrap());
        assert_eq!(request_framing(&mut h, true, Some(0)), ReqFraming::Empty);
        assert!(!h.contains_key("content-length"));
    }

    #[test]
    fn chunks_are_encoded_in_hex() {
        let mut out = BytesMut::new();
        encode_chunk(&[b'x'; 26], &mut out);
        encode_chunk(b"", &mut out);
        assert_eq!(&out[..6], b"1a\r\nxx");
        assert!(out.ends_with(b"x\r\n"));
        assert_eq!(out.len(), 4 + 26 + 2);
    }

    #[test]
    fn response_heads_and_their_framing() {
        let h = parse(
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nX-A: 2\r\n\r\nhello",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.parts.status, 200);
        assert_eq!(h.body, BodyLen::Length(5));
        assert!(h.keep_alive);
        assert_eq!(h.parts.headers.get_all("x-a").iter().count(), 2);
        let h = parse(
            "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.body, BodyLen::Chunked);
        assert!(
            !h.parts.headers.contains_key("content-length"),
            "a length the chunked body overrides is not passed on"
        );

        let cases: &[(&str, Method, BodyLen, bool)] = &[
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n",
                Method::HEAD,
                BodyLen::Empty,
                true,
            ),
            (
                "HTTP/1.1 204 No Content\r\n\r\n",
                Method::GET,
                BodyLen::Empty,
                true,
            ),
            (
                "HTTP/1.1 304 Not Modified\r\ncontent-length: 9\r\n\r\n",
                Method::GET,
                BodyLen::Empty,
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
                Method::GET,
                BodyLen::Empty,
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
                Method::GET,
                BodyLen::Chunked,
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
                Method::GET,
                BodyLen::Chunked,
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n",
                Method::GET,
                BodyLen::Chunked,
                false,
            ),
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
                Method::GET,
                BodyLen::Close,
                false,
            ),
            (
                "HTTP/1.1 200 OK\r\n\r\n",
                Method::GET,
                BodyLen::Close,
                false,
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\n",
                Method::GET,
                BodyLen::Length(3),
                false,
            ),
            (
                "HTTP/1.0 200 OK\r\ncontent-length: 3\r\n\r\n",
                Method::GET,
                BodyLen::Length(3),
                false,
            ),
            (
                "HTTP/1.0 200 OK\r\ncontent-length: 3\r\nConnection: Keep-Alive\r\n\r\n",
                Method::GET,
                BodyLen::Length(3),
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 3, 3\r\ncontent-length: 3\r\n\r\n",
                Method::GET,
                BodyLen::Length(3),
                true,
            ),
            (
                "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n",
                Method::GET,
                BodyLen::Empty,
                true,
            ),
            // RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding closes its
            // connection, whatever it says about keep-alive.
            (
                "HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n",
                Method::GET,
                BodyLen::Chunked,
                false,
            ),
            (
                "HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\nconnection: keep-alive\r\n\r\n",
                Method::GET,
                BodyLen::Chunked,
                false,
            ),
        ];
        for (raw, m, body, keep) in cases {
            let h = parse(raw, m.clone()).unwrap().unwrap();
            assert_eq!((h.body, h.keep_alive), (*body, *keep), "{raw:?}");
        }
    }

    /// RFC 9110 §8.6: a length written as a list of the same number is one length; the
    /// client gets it once, as it would from a gear that wrote it so.
    #[test]
    fn a_length_written_several_times_is_passed_on_once() {
        for raw in [
            "HTTP/1.1 200 OK\r\ncontent-length: 3, 3\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 3\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 3,3\r\ncontent-length: 3\r\n\r\n",
        ] {
            let h = parse(raw, Method::GET).unwrap().unwrap();
            assert_eq!(h.body, BodyLen::Length(3));
            let cl: Vec<_> = h.parts.headers.get_all("content-length").iter().collect();
            assert_eq!(cl, ["3"], "{raw:?}");
        }
        let h = parse(
            "HTTP/1.1 200 OK\r\ncontent-length: 7, 7\r\n\r\n",
            Method::HEAD,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.parts.headers["content-length"], "7");
        let mut req = HeaderMap::new();
        req.append("content-length", "5, 5".parse().unwrap());
        assert_eq!(
            request_framing(&mut req, false, Some(5)),
            ReqFraming::Length(5)
        );
        assert_eq!(
            req.get_all("content-length").iter().collect::<Vec<_>>(),
            ["5"]
        );
        let mut req = HeaderMap::new();
        req.append("content-length", "0".parse().unwrap());
        req.append("content-length", "0".parse().unwrap());
        assert_eq!(
            request_framing(&mut req, true, Some(0)),
            ReqFraming::Length(0)
        );
        assert_eq!(
            req.get_all("content-length").iter().collect::<Vec<_>>(),
            ["0"]
        );
    }

    #[test]
    fn partial_heads_wait_and_bad_ones_are_errors() {
        assert!(parse("HTTP/1.1 200 OK\r\ncontent-le", Method::GET)
            .unwrap()
            .is_none());
        assert!(parse("", Method::GET).unwrap().is_none());
        for bad in [
            "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 0x10\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: \r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n\r\n",
            "SSH-2.0-OpenSSH\r\n\r\n",
            "HTTP/1.1 abc OK\r\n\r\n",
        ] {
            assert!(parse(bad, Method::GET).is_err(), "{bad:?} accepted");
        }
        let many: String = (0..MAX_HEADERS + 1)
            .map(|i| format!("x-{i}: v\r\n"))
            .collect();
        let raw = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
        assert_eq!(
            parse(&raw, Method::GET).unwrap_err(),
            ParseError::Head("too many headers")
        );
        let big = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD));
        assert_eq!(parse(&big, Method::GET).unwrap_err(), ParseError::TooLarge);
        // A complete head over the limit is refused too, even when it arrived whole.
        let whole = format!("{big}\r\n\r\n");
        assert_eq!(
            parse(&whole, Method::GET).unwrap_err(),
            ParseError::TooLarge
        );
    }

    #[test]
    fn the_head_leaves_the_body_in_the_buffer() {
        let mut buf = BytesMut::from("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello");
        let h = parse_response(&mut buf, &Method::GET).unwrap().unwrap();
        assert_eq!(&buf[..], b"hello");
        assert_eq!(h.parts.headers["content-length"], "5");
    }

    /// Decode `input` fed in pieces of `step` bytes; the data and whether it ended.
    fn decode_in_steps(input: &[u8], step: usize) -> Result<(Vec<u8>, bool, BytesMut), ParseError> {
        let mut c = Chunked::default();
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for piece in input.chunks(step) {
            buf.extend_from_slice(piece);
            loop {
                match c.decode(&mut buf)? {
                    Step::Data(d) => out.extend_from_slice(&d),
                    Step::More => break,
                    Step::End => return Ok((out, true, buf)),
                }
            }
        }
        Ok((out, false, buf))
    }

    #[test]
    fn chunked_bodies_decode_whatever_the_read_sizes() {
        let body = b"5\r\nhello\r\n1;ext=1\r\n \r\nA \r\n0123456789\r\n0\r\nx-t: 1\r\n\r\nNEXT";
        for step in [1, 2, 3, 7, 100] {
            let (data, ended, rest) = decode_in_steps(body, step).unwrap();
            assert_eq!(data, b"hello 0123456789", "step {step}");
            assert!(ended);
            if step == 100 {
                assert_eq!(&rest[..], b"NEXT", "bytes after the body stay");
            }
        }
        let (data, ended, _) = decode_in_steps(b"3\r\nabc\r\n", 2).unwrap();
        assert_eq!((data.as_slice(), ended), (&b"abc"[..], false));
    }

    #[test]
    fn malformed_chunked_bodies_are_errors() {
        for bad in [
            &b"x\r\n"[..],
            b"3\r\nabcX\r\n",
            b"-1\r\n",
            b"1000000000000000\r\n",
            b"3 junk\r\nabc\r\n",
            b"3\nabc\r\n",
        ] {
            assert!(decode_in_steps(bad, 64).is_err(), "{bad:?} accepted");
        }
        let long = vec![b'1'; MAX_CHUNK_LINE + 10];
        assert!(decode_in_steps(&long, 64).is_err());
    }
}
