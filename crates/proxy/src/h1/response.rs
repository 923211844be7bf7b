//! Reading a backend's response head (RFC 9112 §6): its status and fields, whether the
//! connection may be reused, and how its body is framed.

use bytes::{Bytes, BytesMut};
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

/// A parsed response head, kept as the bytes it came in: the fields are spans of
/// them, and a `HeaderMap` is built only for the paths that need one (HTTP/2 clients,
/// hyper's HTTP/1 server); an HTTP/1 client's head is written from the spans
/// (`h1::reply`).
#[derive(Debug)]
pub struct Head {
    pub status: StatusCode,
    pub version: Version,
    pub body: BodyLen,
    /// The connection may carry another request once this body is read.
    pub keep_alive: bool,
    raw: Bytes,
    fields: Vec<Span>,
    /// Where the status line's reason phrase is in `raw` (empty: none).
    reason: (u32, u32),
    /// What becomes of the `Content-Length` fields on the way on.
    pub(super) length: LengthFix,
    /// `Connection` names fields to drop (beyond `close` and `keep-alive`).
    pub(super) named_hops: bool,
}

/// One field: where its name and value are in the head's bytes.
#[derive(Debug, Clone, Copy)]
struct Span {
    name: (u32, u32),
    value: (u32, u32),
    kind: Kind,
}

/// What a field is to the proxy, known from its name once, when the head is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Other,
    /// Hop-by-hop (RFC 9110 §7.6.1): `Keep-Alive`, `Proxy-Connection`, `TE`, `Upgrade`,
    /// `Proxy-Authenticate`.
    Hop,
    Connection,
    TransferEncoding,
    ContentLength,
    Date,
    CacheControl,
    SetCookie,
    Trailer,
}

impl Kind {
    fn of(name: &[u8]) -> Kind {
        let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
        match name.len() {
            2 if is("te") => Kind::Hop,
            4 if is("date") => Kind::Date,
            7 if is("upgrade") => Kind::Hop,
            7 if is("trailer") => Kind::Trailer,
            10 if is("connection") => Kind::Connection,
            10 if is("keep-alive") => Kind::Hop,
            10 if is("set-cookie") => Kind::SetCookie,
            13 if is("cache-control") => Kind::CacheControl,
            14 if is("content-length") => Kind::ContentLength,
            16 if is("proxy-connection") => Kind::Hop,
            17 if is("transfer-encoding") => Kind::TransferEncoding,
            18 if is("proxy-authenticate") => Kind::Hop,
            _ => Kind::Other,
        }
    }
}

/// A field of a head: its name, its value, its whole line as it came when that line
/// is `name: value\r\n` exactly, and its kind.
pub(super) struct Field<'a> {
    pub(super) name: &'a [u8],
    pub(super) value: &'a [u8],
    pub(super) line: Option<&'a [u8]>,
    pub(super) kind: Kind,
}

/// What becomes of a response's `Content-Length` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LengthFix {
    /// Passed on as they are.
    AsIs,
    /// Dropped: `Transfer-Encoding` frames the body (RFC 9112 §6.3).
    Drop,
    /// One length written several times (`3, 3`): the client gets it once.
    Once(u64),
}

impl Head {
    /// The fields with their kinds and lines.
    pub(super) fn spans(&self) -> impl Iterator<Item = Field<'_>> {
        let raw = &self.raw[..];
        self.fields.iter().map(move |s| {
            let (n0, n1) = (s.name.0 as usize, (s.name.0 + s.name.1) as usize);
            let (v0, v1) = (s.value.0 as usize, (s.value.0 + s.value.1) as usize);
            let line = (v0 == n1 + 2
                && raw.get(n1..v0) == Some(&b": "[..])
                && raw.get(v1..v1 + 2) == Some(&b"\r\n"[..]))
            .then(|| &raw[n0..v1 + 2]);
            Field {
                name: &raw[n0..n1],
                value: &raw[v0..v1],
                line,
                kind: s.kind,
            }
        })
    }

    /// The head has a `Trailer` field.
    pub fn has_trailer(&self) -> bool {
        self.fields.iter().any(|s| s.kind == Kind::Trailer)
    }

    /// The values of the fields of one kind, in order (no name compared again).
    fn of_kind(&self, kind: Kind) -> impl Iterator<Item = &[u8]> {
        self.fields
            .iter()
            .filter(move |s| s.kind == kind)
            .map(|s| &self.raw[s.value.0 as usize..(s.value.0 + s.value.1) as usize])
    }

    /// The values of its `Transfer-Encoding` fields.
    pub fn transfer_encodings(&self) -> impl Iterator<Item = &[u8]> {
        self.of_kind(Kind::TransferEncoding)
    }

    /// The values of its `Trailer` fields.
    pub fn trailer_fields(&self) -> impl Iterator<Item = &[u8]> {
        self.of_kind(Kind::Trailer)
    }

    /// The values of its `Content-Length` fields.
    fn lengths(&self) -> impl Iterator<Item = &[u8]> {
        self.of_kind(Kind::ContentLength)
    }

    /// The reason phrase to pass on for a status without a canonical one (`419 Page
    /// Expired`, `599 …`): the backend's own, possibly empty (HAProxy passes it on too).
    /// `None` for a status with a canonical reason, which both paths write instead of
    /// the backend's (`200 OK` whatever came).
    pub fn unknown_reason(&self) -> Option<&[u8]> {
        self.unknown_reason_range().map(|r| &self.raw[r])
    }

    fn unknown_reason_range(&self) -> Option<std::ops::Range<usize>> {
        if self.status.canonical_reason().is_some() {
            return None;
        }
        let start = self.reason.0 as usize;
        Some(start..start + self.reason.1 as usize)
    }

    /// The head's length in bytes.
    pub fn raw_len(&self) -> usize {
        self.raw.len()
    }

    /// The fields as a `HeaderMap` (the length fixed as it goes on), their values
    /// sharing the head's bytes.
    pub fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::with_capacity(self.fields.len());
        let mut length_done = false;
        for s in &self.fields {
            let n = &self.raw[s.name.0 as usize..(s.name.0 + s.name.1) as usize];
            // Names were checked by the parser as tokens; values as field bytes.
            let Ok(name) = HeaderName::from_bytes(n) else {
                continue;
            };
            if name == header::CONTENT_LENGTH {
                match self.length {
                    LengthFix::AsIs => {}
                    LengthFix::Drop => continue,
                    LengthFix::Once(_) if length_done => continue,
                    LengthFix::Once(len) => {
                        length_done = true;
                        headers.append(name, HeaderValue::from(len));
                        continue;
                    }
                }
            }
            let v = (s.value.0 as usize)..((s.value.0 + s.value.1) as usize);
            if let Ok(value) = HeaderValue::from_maybe_shared(self.raw.slice(v)) {
                headers.append(name, value);
            }
        }
        headers
    }

    /// The head as `http` parts.
    pub fn to_parts(&self) -> http::response::Parts {
        let mut parts = http::Response::new(()).into_parts().0;
        parts.status = self.status;
        parts.version = self.version;
        parts.headers = self.headers();
        // hyper writes `<none>` for a status without a canonical reason unless told.
        if let Some(range) = self.unknown_reason_range() {
            if let Ok(reason) = hyper::ext::ReasonPhrase::try_from(self.raw.slice(range)) {
                parts.extensions.insert(reason);
            }
        }
        parts
    }
}

/// Where the reason phrase of the status line httparse accepted in `head` is, for a
/// reason httparse gives as empty: (0, 0) when the line has none. The line is
/// `HTTP/1.x NNN SP reason`, after any empty lines httparse skipped.
fn obs_text_reason(head: &[u8]) -> (u32, u32) {
    let start = head
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(0);
    let line = &head[start..];
    let end = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
    let end = if end > 0 && line[end - 1] == b'\r' {
        end - 1
    } else {
        end
    };
    const REASON_AT: usize = "HTTP/1.1 200 ".len();
    if end <= REASON_AT || line[REASON_AT - 1] != b' ' {
        return (0, 0);
    }
    ((start + REASON_AT) as u32, (end - REASON_AT) as u32)
}

/// Parse a response head at the start of `buf`. `Ok(None)`: incomplete, read more.
/// On success the head's bytes are taken out of `buf` (the head keeps them).
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
    // RFC 9110 15: codes outside 100..=599 are invalid (600-999 are often a library's
    // own errors, which `StatusCode` would hold): a broken response (502), not passed on.
    let status = StatusCode::from_u16(code)
        .ok()
        .filter(|_| code <= 599)
        .ok_or(ParseError::Head("status outside 100-599"))?;
    let version = match r.version {
        Some(1) => Version::HTTP_11,
        _ => Version::HTTP_10,
    };
    let base = buf.as_ptr() as usize;
    // httparse gives a slice of `buf`, or an empty one for a reason with bytes beyond
    // ASCII (obs-text, which RFC 9112 allows): that one is read from the line itself.
    let reason = match r.reason {
        Some(t) if !t.is_empty() => ((t.as_ptr() as usize - base) as u32, t.len() as u32),
        Some(_) => obs_text_reason(&buf[..head_len]),
        None => (0, 0),
    };
    let mut fields: Vec<Span> = Vec::with_capacity(r.headers.len());
    let mut keep_alive = version == Version::HTTP_11;
    let (mut te, mut te_last_chunked, mut cl) = (false, false, false);
    let mut named_hops = false;
    for h in r.headers.iter() {
        let n = h.name.as_bytes();
        let kind = Kind::of(n);
        fields.push(Span {
            name: ((n.as_ptr() as usize - base) as u32, n.len() as u32),
            value: (
                (h.value.as_ptr() as usize - base) as u32,
                h.value.len() as u32,
            ),
            kind,
        });
        match kind {
            Kind::Connection => {
                // Names are dropped only from a value `HeaderValue::to_str` takes.
                let text = is_text(h.value);
                for t in tokens(h.value) {
                    if t.eq_ignore_ascii_case(b"close") {
                        keep_alive = false;
                    } else if t.eq_ignore_ascii_case(b"keep-alive") {
                        keep_alive |= version == Version::HTTP_10;
                    } else if text
                        && !(t.is_empty()
                            || t.eq_ignore_ascii_case(b"host")
                            || t.eq_ignore_ascii_case(b"content-length"))
                    {
                        named_hops = true;
                    }
                }
            }
            Kind::TransferEncoding => {
                te = true;
                // Empty list elements are ignored (RFC 9110 §5.6.1: `chunked,` is
                // chunked); a coding that is not `token *( ";" param )` is refused.
                for t in tokens(h.value).filter(|t| !t.is_empty()) {
                    if !is_coding(t) {
                        return Err(ParseError::Head("invalid transfer coding"));
                    }
                    te_last_chunked = t.eq_ignore_ascii_case(b"chunked");
                }
            }
            Kind::ContentLength => cl = true,
            _ => {}
        }
    }
    let raw = buf.split_to(head_len).freeze();
    let mut head = Head {
        status,
        version,
        body: BodyLen::Close,
        keep_alive,
        raw,
        fields,
        reason,
        length: LengthFix::AsIs,
        named_hops,
    };
    // An HTTP/1.0 message with Transfer-Encoding: its framing is faulty, and the
    // connection closes after it (RFC 9112 §6.1).
    if te && version == Version::HTTP_10 {
        head.keep_alive = false;
    }
    // A bodiless response's framing fields still say what the body would have been
    // (`HEAD`, 304): checked and passed on as for any other.
    let bodiless = bodiless(*method == Method::HEAD, status);
    head.body = if te {
        // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length, and such a message
        // is not to be trusted with the connection after it.
        if cl {
            head.length = LengthFix::Drop;
            head.keep_alive = false;
        }
        if bodiless {
            BodyLen::Empty
        } else if te_last_chunked {
            BodyLen::Chunked
        } else {
            head.keep_alive = false;
            BodyLen::Close
        }
    } else {
        let (length, pieces) = content_length_pieces(head.lengths())?;
        // Written several times, or with leading zeros: passed on once, as a number.
        if let (Some(n), Pieces { count: 2.., .. } | Pieces { padded: true, .. }) = (length, pieces)
        {
            head.length = LengthFix::Once(n);
        }
        match length {
            _ if bodiless => BodyLen::Empty,
            Some(0) => BodyLen::Empty,
            Some(n) => BodyLen::Length(n),
            None => {
                head.keep_alive = false;
                BodyLen::Close
            }
        }
    };
    Ok(Some(head))
}

/// Whether a response has no body whatever its head says (RFC 9112 §6.3 ¶1–2): it
/// answers a `HEAD`, or it is a 1xx, 204 or 304.
pub fn bodiless(head_request: bool, status: StatusCode) -> bool {
    head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
}

/// A transfer coding as RFC 9112 §7 writes it: a token, then `; name=value`
/// parameters (a token or a quoted string each, with optional whitespace).
fn is_coding(t: &[u8]) -> bool {
    let is_token = |s: &[u8]| !s.is_empty() && s.iter().all(|&b| is_tchar(b));
    let quoted = |s: &[u8]| {
        s.len() >= 2
            && s[0] == b'"'
            && s[s.len() - 1] == b'"'
            && s[1..s.len() - 1]
                .iter()
                .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b) || b >= 0x80)
    };
    let mut parts = t.split(|&b| b == b';');
    is_token(parts.next().unwrap_or_default().trim_ascii())
        && parts.all(|p| match p.iter().position(|&b| b == b'=') {
            Some(i) => {
                let v = p[i + 1..].trim_ascii();
                is_token(p[..i].trim_ascii()) && (is_token(v) || quoted(v))
            }
            None => false,
        })
}

/// RFC 9110 `tchar`: a byte of a token.
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The items of a comma-separated header value (`Connection`, say), trimmed.
pub fn tokens(value: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii)
}

/// How a `Content-Length` was written: in how many pieces (values and list elements),
/// and whether one has leading zeros.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pieces {
    pub(super) count: usize,
    pub(super) padded: bool,
}

/// The message's `Content-Length` (every value and list element must be the same
/// number), and how it was written.
pub(super) fn content_length_pieces<'a>(
    values: impl Iterator<Item = &'a [u8]>,
) -> Result<(Option<u64>, Pieces), ParseError> {
    let mut found = None;
    let mut pieces = Pieces {
        count: 0,
        padded: false,
    };
    for v in values {
        for part in tokens(v) {
            pieces.count += 1;
            pieces.padded |= part.len() > 1 && part[0] == b'0';
            if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
                return Err(ParseError::Length);
            }
            let n: u64 = std::str::from_utf8(part)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or(ParseError::Length)?;
            // Beyond a signed 64-bit number: more than any body, and more than many
            // clients hold.
            if n > i64::MAX as u64 {
                return Err(ParseError::Length);
            }
            match found {
                Some(m) if m != n => return Err(ParseError::Length),
                _ => found = Some(n),
            }
        }
    }
    Ok((found, pieces))
}

/// A field value `HeaderValue::to_str` takes: visible ASCII, spaces and tabs.
pub fn is_text(v: &[u8]) -> bool {
    v.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
}
