//! The STOMP wire format as a `tokio_util::codec` [`Decoder`] and [`Encoder`]: frames
//! out of a byte stream and into one, within [`Limits`].
//!
//! Reading: EOLs between frames are heart-beats and are skipped (the session counts any
//! byte read as a sign of life); lines end in LF or CRLF; a body is `content-length`
//! bytes followed by a NUL when the header is there, else everything up to the first
//! NUL. A broker cannot make it allocate without bound: the head (command and headers)
//! is capped in bytes and in lines, the whole frame in bytes, and a `content-length`
//! over the cap is refused before anything is reserved. Anything malformed is a
//! [`FrameError`]; after one the stream is unusable and the connection must be closed.
//!
//! Header values are unescaped and escaped by the connection's [`Version`] (set it once
//! CONNECTED has told), except in CONNECT and CONNECTED (see [`super::frame`]).

use bytes::{BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::frame::{escape, representable, unescape, Command, EscapeError, Frame, Version};

/// What a peer may make the decoder hold.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The whole frame (head and body), bytes.
    pub max_frame: usize,
    /// The command and header lines, bytes.
    pub max_head: usize,
    /// Header lines in one frame.
    pub max_headers: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_frame: 4 << 20,
            max_head: 64 << 10,
            max_headers: 128,
        }
    }
}

/// A frame that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame head (command and headers) longer than {0} bytes")]
    HeadTooLong(usize),
    #[error("frame with more than {0} headers")]
    TooManyHeaders(usize),
    #[error("frame longer than {0} bytes")]
    TooLong(usize),
    #[error("unknown command {0:?}")]
    UnknownCommand(String),
    #[error("header line without a colon: {0:?}")]
    NoColon(String),
    #[error("frame head is not UTF-8")]
    NotUtf8,
    #[error(transparent)]
    Escape(#[from] EscapeError),
    #[error("bad content-length {0:?}")]
    BadLength(String),
    #[error("body of content-length {0} not followed by NUL")]
    NoNul(usize),
    #[error("header {0:?} cannot be sent in a {1} frame")]
    Unrepresentable(String, &'static str),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The codec of one connection.
#[derive(Debug)]
pub struct StompCodec {
    version: Version,
    limits: Limits,
    /// The head of the frame being read, once complete.
    head: Option<Head>,
    /// Where to go on scanning: the start of the head line being read, or, once the head
    /// is read, how far the body was searched for its NUL.
    scanned: usize,
    /// Header lines seen in the head being read.
    lines: usize,
}

#[derive(Debug)]
struct Head {
    command: Command,
    headers: Vec<(String, String)>,
    len: usize,
    content_length: Option<usize>,
}

impl StompCodec {
    pub fn new(limits: Limits) -> StompCodec {
        StompCodec {
            version: Version::V1_0,
            limits,
            head: None,
            scanned: 0,
            lines: 0,
        }
    }

    /// The version the broker chose (from then on headers are escaped by it).
    pub fn set_version(&mut self, version: Version) {
        self.version = version;
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// Scan for the end of the head; `Ok(None)` = need more bytes.
    fn read_head(&mut self, buf: &BytesMut) -> Result<Option<Head>, FrameError> {
        let mut line_start = self.scanned;
        loop {
            let Some(nl) = buf[line_start..].iter().position(|&b| b == b'\n') else {
                if buf.len() > self.limits.max_head {
                    return Err(FrameError::HeadTooLong(self.limits.max_head));
                }
                self.scanned = line_start;
                return Ok(None);
            };
            let end = line_start + nl;
            if end + 1 > self.limits.max_head {
                return Err(FrameError::HeadTooLong(self.limits.max_head));
            }
            let line = strip_cr(&buf[line_start..end]);
            if line.is_empty() {
                return self.parse_head(&buf[..line_start], end + 1).map(Some);
            }
            self.lines += 1;
            // The command line and at most `max_headers` header lines.
            if self.lines > self.limits.max_headers + 1 {
                return Err(FrameError::TooManyHeaders(self.limits.max_headers));
            }
            line_start = end + 1;
        }
    }

    /// `head` = the command and header lines, each with its EOL.
    fn parse_head(&self, head: &[u8], len: usize) -> Result<Head, FrameError> {
        let text = std::str::from_utf8(head).map_err(|_| FrameError::NotUtf8)?;
        let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
        let first = lines.next().unwrap_or("");
        let command = Command::parse(first.as_bytes())
            .ok_or_else(|| FrameError::UnknownCommand(first.chars().take(40).collect()))?;
        let escaped = command.escaped(self.version);
        let version = if escaped { self.version } else { Version::V1_0 };
        let mut headers = Vec::new();
        for line in lines.filter(|l| !l.is_empty()) {
            let Some((name, value)) = line.split_once(':') else {
                return Err(FrameError::NoColon(line.chars().take(80).collect()));
            };
            headers.push((unescape(name, version)?, unescape(value, version)?));
        }
        let content_length = match headers.iter().find(|(n, _)| n == "content-length") {
            None => None,
            Some((_, v)) => {
                let n = v
                    .parse::<usize>()
                    .map_err(|_| FrameError::BadLength(v.chars().take(40).collect()))?;
                if n.saturating_add(len).saturating_add(1) > self.limits.max_frame {
                    return Err(FrameError::TooLong(self.limits.max_frame));
                }
                Some(n)
            }
        };
        Ok(Head {
            command,
            headers,
            len,
            content_length,
        })
    }
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

impl Decoder for StompCodec {
    type Item = Frame;
    type Error = FrameError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        if self.head.is_none() {
            // Heart-beats (EOLs) before a frame.
            while self.scanned == 0 && !buf.is_empty() {
                if buf.starts_with(b"\n") {
                    let _ = buf.split_to(1);
                } else if buf.starts_with(b"\r\n") {
                    let _ = buf.split_to(2);
                } else {
                    break;
                }
            }
            if buf.is_empty() || buf[..] == b"\r"[..] {
                return Ok(None);
            }
            match self.read_head(buf)? {
                None => return Ok(None),
                Some(head) => {
                    self.head = Some(head);
                    self.scanned = 0;
                    self.lines = 0;
                }
            }
        }
        let Some(head) = &self.head else {
            return Ok(None);
        };
        let (body_end, frame_end) = match head.content_length {
            Some(n) => {
                let end = head.len + n;
                if buf.len() <= end {
                    buf.reserve(end + 1 - buf.len());
                    return Ok(None);
                }
                if buf[end] != 0 {
                    return Err(FrameError::NoNul(n));
                }
                (end, end + 1)
            }
            None => {
                let from = head.len + self.scanned;
                match buf[from..].iter().position(|&b| b == 0) {
                    Some(p) => (from + p, from + p + 1),
                    None => {
                        if buf.len() >= self.limits.max_frame {
                            return Err(FrameError::TooLong(self.limits.max_frame));
                        }
                        self.scanned = buf.len() - head.len;
                        return Ok(None);
                    }
                }
            }
        };
        let Some(head) = self.head.take() else {
            return Ok(None);
        };
        self.scanned = 0;
        let mut frame = buf.split_to(frame_end);
        frame.truncate(body_end);
        let body = frame.split_off(head.len).freeze();
        Ok(Some(Frame {
            command: head.command,
            headers: head.headers,
            body,
        }))
    }
}

impl Encoder<&Frame> for StompCodec {
    type Error = FrameError;

    fn encode(&mut self, frame: &Frame, dst: &mut BytesMut) -> Result<(), FrameError> {
        let escaped = frame.command.escaped(self.version);
        for (name, value) in &frame.headers {
            if !representable(name, true, escaped, self.version)
                || !representable(value, false, escaped, self.version)
            {
                return Err(FrameError::Unrepresentable(
                    name.clone(),
                    frame.command.as_str(),
                ));
            }
        }
        let version = if escaped { self.version } else { Version::V1_0 };
        dst.put_slice(frame.command.as_str().as_bytes());
        dst.put_u8(b'\n');
        for (name, value) in &frame.headers {
            dst.put_slice(escape(name, version).as_bytes());
            dst.put_u8(b':');
            dst.put_slice(escape(value, version).as_bytes());
            dst.put_u8(b'\n');
        }
        if !frame.body.is_empty() && frame.get("content-length").is_none() {
            dst.put_slice(format!("content-length:{}\n", frame.body.len()).as_bytes());
        }
        dst.put_u8(b'\n');
        dst.put_slice(&frame.body);
        dst.put_u8(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
