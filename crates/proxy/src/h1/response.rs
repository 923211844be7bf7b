//! Reading a backend's response head (RFC 9112 §6): its status and fields, whether the
//! connection may be reused, and how its body is framed.

use bytes::BytesMut;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Version};

/// Most headers a response head may have (hyper's default too).
pub const MAX_HEADERS: usize = 100;

/// Largest response head accepted, in bytes.
pub const MAX_HEAD: usize = 256 * 1024;

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
pub(super) fn content_length_pieces(h: &HeaderMap) -> Result<(Option<u64>, usize), ParseError> {
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
