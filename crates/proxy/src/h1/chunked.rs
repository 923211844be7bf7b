//! Decoding a chunked response body out of a read buffer (RFC 9112 §7.1), trailer
//! fields included; the checks of a chunked body's first bytes made before it is
//! decoded (a response's first chunk, [`check_start`]; a request's chunk sizes,
//! [`oversized_size`]).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};

use super::response::{ParseError, MAX_HEADERS};
use super::write::allowed_trailers;

/// Longest chunk-size line (with extensions), and most trailer bytes, accepted.
pub(super) const MAX_CHUNK_LINE: usize = 4096;
/// Most significant hex digits in a chunk size: 13, sizes below 2^52 (HAProxy's bound;
/// no gear holding numbers as doubles can misread one), leading zeros aside.
const MAX_SIZE_DIGITS: usize = 13;
const MAX_TRAILERS: usize = 64 * 1024;

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
        self.decode_at_most(buf, usize::MAX)
    }

    /// As [`Chunked::decode`], with no more than `max` bytes of data in one step.
    pub fn decode_at_most(&mut self, buf: &mut BytesMut, max: usize) -> Result<Step, ParseError> {
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
                    let n = (buf.len().min(max) as u64).min(self.left) as usize;
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
                    if line.iter().any(|&b| b == b'\r' || b == 0) {
                        return Err(ParseError::Chunked("bare CR or NUL in a trailer line"));
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

/// Whether a chunked body's first bytes, read with its head (`buf`, not consumed),
/// start as a chunked body may: its first chunk-size line, and the CRLF after the first
/// chunk's data, as far as `buf` holds them. A body broken before its first chunk is
/// whole is the response's error (a 502, as HAProxy answers), as a malformed head is,
/// rather than a `200` cut short after its head; a break further on is the body's (the
/// client gets what came before it).
pub fn check_start(buf: &[u8]) -> Result<(), ParseError> {
    let Some(i) = line_end(buf, MAX_CHUNK_LINE)? else {
        return Ok(());
    };
    let size = chunk_size(&buf[..i - 1])?;
    let end = usize::try_from(size)
        .ok()
        .filter(|&n| n > 0)
        .and_then(|n| (i + 1).checked_add(n));
    match end.and_then(|e| buf.get(e..e.checked_add(2)?)) {
        Some(crlf) if crlf != b"\r\n" => Err(ParseError::Chunked("chunk not followed by CRLF")),
        _ => Ok(()),
    }
}

/// Whether the start of a chunked body (`buf`, the bytes at hand from the body's first
/// byte) names a chunk size of more than 13 significant hex digits (2^52 or more), in any
/// chunk-size line it holds whole. The walk reads only the sizes: it steps over each
/// chunk's data and the two bytes after it unchecked (a body malformed there is refused
/// by whoever decodes it, the strict decoder and hyper's alike), and stops, finding
/// nothing, at the last chunk, at the end of `buf`, or at a line without a size.
pub fn oversized_size(mut buf: &[u8]) -> bool {
    loop {
        let Some(i) = lf_at(buf, MAX_CHUNK_LINE) else {
            return false;
        };
        let digits = buf[..i]
            .iter()
            .take_while(|b| b.is_ascii_hexdigit())
            .count();
        let Some(size) = size_of_digits(&buf[..digits]) else {
            return true;
        };
        let next = usize::try_from(size)
            .ok()
            .filter(|&n| n > 0 && digits > 0)
            .and_then(|n| n.checked_add(i + 3));
        match next {
            Some(n) if n <= buf.len() => buf = &buf[n..],
            _ => return false,
        }
    }
}

/// The value of a chunk size's hex digits, `None` beyond [`MAX_SIZE_DIGITS`]
/// significant ones.
fn size_of_digits(digits: &[u8]) -> Option<u64> {
    let significant = &digits[digits.iter().take_while(|&&b| b == b'0').count()..];
    if significant.len() > MAX_SIZE_DIGITS {
        return None;
    }
    Some(significant.iter().fold(0, |n, &b| {
        (n << 4) | u64::from(char::from(b).to_digit(16).unwrap_or(0))
    }))
}

/// A CRLF-terminated line out of `buf` (without the CRLF), if complete.
fn take_line(buf: &mut BytesMut, max: usize) -> Result<Option<BytesMut>, ParseError> {
    let Some(i) = line_end(buf, max)? else {
        return Ok(None);
    };
    let mut line = buf.split_to(i + 1);
    line.truncate(i - 1);
    Ok(Some(line))
}

/// Where the line at the start of `buf` ends (the index of its LF), if it is all there;
/// an error for a line of more than `max` bytes or one not ended by CRLF.
fn line_end(buf: &[u8], max: usize) -> Result<Option<usize>, ParseError> {
    match lf_at(buf, max) {
        Some(i) if i == 0 || buf[i - 1] != b'\r' => {
            Err(ParseError::Chunked("line not ended by CRLF"))
        }
        Some(i) => Ok(Some(i)),
        None if buf.len() > max => Err(ParseError::Chunked("line too long")),
        None => Ok(None),
    }
}

/// The index of the first LF in `buf`, looked for no further than a line of `max`
/// bytes and its CRLF.
fn lf_at(buf: &[u8], max: usize) -> Option<usize> {
    buf.iter().take(max + 2).position(|&b| b == b'\n')
}

/// The size of a chunk-size line: hex digits, then optional whitespace and extensions.
fn chunk_size(line: &[u8]) -> Result<u64, ParseError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(ParseError::Chunked("no chunk size"));
    }
    let size =
        size_of_digits(&line[..digits]).ok_or(ParseError::Chunked("chunk size too large"))?;
    // Whitespace (BWS: SP, HTAB) before an extension; no control byte in one (a bare CR
    // or a form feed ends a line for some parsers: RFC 9112 §7.1.1 has none there).
    let rest = &line[digits..];
    let rest = &rest[rest
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count()..];
    if !(rest.is_empty() || rest[0] == b';') {
        return Err(ParseError::Chunked("invalid chunk size"));
    }
    if rest.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(ParseError::Chunked("control byte in a chunk extension"));
    }
    Ok(size)
}
