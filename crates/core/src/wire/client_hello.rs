//! The TLS ClientHello's server name (SNI), read without terminating TLS: what TCP mode
//! routes on, like HAProxy's `req.ssl_sni`. This module owns the decision over the bytes a
//! client has sent so far: [`Hello::Incomplete`] (read more), [`Hello::NotHello`] (these
//! bytes are not a ClientHello gearlb accepts) or [`Hello::Complete`] with the name. The
//! proxy reads, calls [`parse`] on the whole buffer after each read, and replays the bytes
//! untouched to the backend it chooses; nothing here does I/O or keeps state.
//!
//! Unlike HAProxy (and like rustls), a ClientHello spread over several consecutive
//! handshake records is reassembled, as clients with large key shares (post-quantum
//! hybrids) or small record sizes send it. The verdict comes as soon as the hello's last
//! byte is in (HAProxy and rustls wait for the end of the record holding it). Of the
//! extensions only the framing and `server_name` are checked: the backend may refuse a
//! hello gearlb accepts, but when both accept they read the same name (up to the trailing
//! dot removed here).
//!
//! Everything the parser looks at lies within the first [`MAX_HELLO`] bytes of the
//! buffer, so a longer buffer gets the verdict of its first [`MAX_HELLO`] bytes, and a
//! verdict once reached never changes as more bytes arrive: a prefix of a buffer is either
//! [`Hello::Incomplete`] or has the same verdict as the whole buffer.

/// Most bytes a ClientHello may take before the verdict: rustls's limit for a handshake
/// message (HAProxy's default buffer is 16 KiB, so a larger hello, which padding or large
/// key shares make, is routed here where HAProxy would fall back to its default).
///
/// The bytes counted are the buffer's, record headers included: a hello whose last byte
/// lies beyond this offset is `NotHello("hello too large")`.
pub const MAX_HELLO: usize = 64 * 1024;

/// Largest TLS record payload (2^14 bytes, RFC 8446 section 5.1).
const MAX_RECORD: usize = 16 * 1024;

/// Length of a TLS record header: type, version (2), length (2).
const RECORD_HEADER: usize = 5;

/// Length of a handshake message header: type, length (3).
const HANDSHAKE_HEADER: usize = 4;

/// Record content type of handshake records.
const CONTENT_HANDSHAKE: u8 = 0x16;

/// Handshake message type of the ClientHello.
const CLIENT_HELLO: u8 = 1;

/// Extension type of `server_name` (RFC 6066).
const EXT_SERVER_NAME: u16 = 0;

/// `name_type` of a DNS host name in the `server_name` list.
const NAME_TYPE_HOST: u8 = 0;

/// The reason for a hello that cannot fit in [`MAX_HELLO`] bytes.
const TOO_LARGE: &str = "hello too large";

/// The verdict on the bytes a client has sent so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// More bytes are needed to decide.
    Incomplete,
    /// Not a TLS ClientHello (first byte is not 0x16, bad record version, not a
    /// ClientHello handshake type, lengths out of bounds, malformed extensions...).
    /// Carries a short static reason.
    NotHello(&'static str),
    /// A complete ClientHello; `sni` is the first host_name entry of the server_name
    /// extension, lowercased, any single trailing dot removed, only if it is valid ASCII
    /// hostname bytes (letters, digits, '-', '.', '_', and '*' is NOT allowed), else None.
    /// None also if no SNI extension.
    Complete {
        /// The server name the client asks for, normalised as above.
        sni: Option<String>,
    },
}

/// Decides on `buf`, the bytes a client has sent so far (all of them, from the first).
///
/// Reads consecutive TLS handshake records (type 0x16, version 3.0 to 3.4, length at most
/// 2^14), reassembles the handshake message they carry, and once it is whole checks that
/// it is a well-formed ClientHello and takes its server name. Bytes after the hello are
/// ignored. A buffer of [`MAX_HELLO`] bytes or more that is still incomplete is
/// `NotHello("hello too large")`, so the caller never compares sizes itself. Runs in time
/// linear in `buf.len()` and never panics.
pub fn parse(buf: &[u8]) -> Hello {
    let window = buf.get(..MAX_HELLO).unwrap_or(buf);
    match scan(window) {
        Hello::Incomplete if buf.len() >= MAX_HELLO => Hello::NotHello(TOO_LARGE),
        verdict => verdict,
    }
}

/// First byte test used before anything is read in full: whether `first` starts a TLS
/// handshake record (0x16).
pub fn starts_tls(first: u8) -> bool {
    first == CONTENT_HANDSHAKE
}

/// Walks the records of `buf` (at most [`MAX_HELLO`] bytes), checking each byte as soon as
/// it is present, so that a prefix never gets a verdict its extension would not.
fn scan(buf: &[u8]) -> Hello {
    // The handshake message's bytes gathered so far, record headers stripped.
    let mut message: Vec<u8> = Vec::new();
    // The message's full length (header included), once its header is known.
    let mut message_len: Option<usize> = None;
    let mut pos = 0usize;
    loop {
        let rest = buf.get(pos..).unwrap_or_default();
        if let Some(&typ) = rest.first() {
            if typ != CONTENT_HANDSHAKE {
                return Hello::NotHello(if pos == 0 {
                    "not a TLS handshake record"
                } else {
                    "non-handshake record inside the hello"
                });
            }
        }
        if rest.get(1).is_some_and(|&major| major != 3)
            || rest.get(2).is_some_and(|&minor| minor > 4)
        {
            return Hello::NotHello("bad record version");
        }
        let Some(&[hi, lo]) = rest.get(3..RECORD_HEADER) else {
            return Hello::Incomplete;
        };
        let record_len = usize::from(u16::from_be_bytes([hi, lo]));
        if record_len > MAX_RECORD {
            return Hello::NotHello("record too long");
        }
        if record_len == 0 {
            return Hello::NotHello("empty record");
        }
        let start = pos + RECORD_HEADER;
        let fragment = rest.get(RECORD_HEADER..).unwrap_or_default();
        let fragment = fragment.get(..record_len).unwrap_or(fragment);
        let before = message.len();

        // Gather what this record holds of the message (all of it until the header is
        // known, then no more than the message needs).
        let wanted = match message_len {
            Some(total) => total.saturating_sub(before),
            None => fragment.len(),
        };
        message.extend_from_slice(fragment.get(..wanted).unwrap_or(fragment));
        if message_len.is_none() {
            if message.first().is_some_and(|&t| t != CLIENT_HELLO) {
                return Hello::NotHello("not a ClientHello");
            }
            if let Some(&[_, a, b, c]) = message.get(..HANDSHAKE_HEADER) {
                let body_len = (usize::from(a) << 16) | (usize::from(b) << 8) | usize::from(c);
                let total = HANDSHAKE_HEADER + body_len;
                message_len = Some(total);
                message.truncate(total);
            }
        }

        if let Some(total) = message_len {
            // Where the message ends in the buffer, or the least it can end at: this
            // record's payload, then at least one more record header.
            let needed_here = total.saturating_sub(before);
            let end = if needed_here <= record_len {
                start + needed_here
            } else {
                start + record_len + RECORD_HEADER + (needed_here - record_len)
            };
            if end > MAX_HELLO {
                return Hello::NotHello(TOO_LARGE);
            }
            if message.len() == total {
                let body = message.get(HANDSHAKE_HEADER..).unwrap_or_default();
                return match client_hello_sni(body) {
                    Ok(sni) => Hello::Complete { sni },
                    Err(reason) => Hello::NotHello(reason),
                };
            }
        }
        if fragment.len() < record_len {
            return Hello::Incomplete;
        }
        pos = start + record_len;
    }
}

/// A bounds-checked reader over a byte slice: every read returns `None` past the end.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Takes the next `n` bytes.
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let head = self.bytes.get(..n)?;
        self.bytes = self.bytes.get(n..)?;
        Some(head)
    }

    /// Takes one byte.
    fn u8(&mut self) -> Option<u8> {
        self.take(1)?.first().copied()
    }

    /// Takes a big-endian 16-bit number.
    fn u16(&mut self) -> Option<u16> {
        match self.take(2)? {
            &[hi, lo] => Some(u16::from_be_bytes([hi, lo])),
            _ => None,
        }
    }

    /// Takes a 16-bit length, then that many bytes.
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let len = self.u16()?;
        self.take(usize::from(len))
    }

    /// Whether every byte has been read.
    fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Checks a whole ClientHello body (after the handshake header) and returns its server
/// name, or the reason it is malformed.
fn client_hello_sni(body: &[u8]) -> Result<Option<String>, &'static str> {
    let mut r = Reader { bytes: body };
    let version = r.take(2).ok_or("truncated hello")?;
    if version.first() != Some(&3) {
        return Err("bad client version");
    }
    r.take(32).ok_or("truncated hello")?;
    let session_len = r.u8().ok_or("truncated hello")?;
    if session_len > 32 {
        return Err("bad session id");
    }
    r.take(usize::from(session_len)).ok_or("truncated hello")?;
    let suites = r.vec16().ok_or("bad cipher suites")?;
    if suites.len() < 2 || suites.len() % 2 != 0 {
        return Err("bad cipher suites");
    }
    let compression_len = r.u8().ok_or("truncated hello")?;
    if compression_len == 0 {
        return Err("bad compression methods");
    }
    r.take(usize::from(compression_len))
        .ok_or("bad compression methods")?;
    if r.is_empty() {
        return Ok(None);
    }
    let extensions = r.vec16().ok_or("bad extensions length")?;
    if !r.is_empty() {
        return Err("bad extensions length");
    }

    let mut r = Reader { bytes: extensions };
    let mut sni: Option<Option<String>> = None;
    while !r.is_empty() {
        let typ = r.u16().ok_or("malformed extension")?;
        let data = r.vec16().ok_or("malformed extension")?;
        if typ == EXT_SERVER_NAME {
            if sni.is_some() {
                // Two names: the backend would refuse it, and routing must not guess.
                return Err("duplicate server_name");
            }
            sni = Some(server_name(data)?);
        }
    }
    Ok(sni.flatten())
}

/// Reads the `server_name` extension's data: the first `host_name` entry, normalised.
fn server_name(data: &[u8]) -> Result<Option<String>, &'static str> {
    const MALFORMED: &str = "malformed server_name";
    let mut r = Reader { bytes: data };
    let list = r.vec16().ok_or(MALFORMED)?;
    if !r.is_empty() {
        return Err(MALFORMED);
    }
    let mut r = Reader { bytes: list };
    let mut first: Option<&[u8]> = None;
    while !r.is_empty() {
        let name_type = r.u8().ok_or(MALFORMED)?;
        let name = r.vec16().ok_or(MALFORMED)?;
        if name_type == NAME_TYPE_HOST && first.is_none() {
            first = Some(name);
        }
    }
    Ok(first.and_then(normalise))
}

/// The host name routing compares: lowercase ASCII, without its trailing dot; `None` if
/// empty, holding any byte but letters, digits, '-', '.' and '_', or still ending in a
/// dot once one is removed.
fn normalise(name: &[u8]) -> Option<String> {
    let name = name.strip_suffix(b".").unwrap_or(name);
    let valid = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
    if name.is_empty() || name.ends_with(b".") || !name.iter().all(valid) {
        return None;
    }
    Some(
        name.iter()
            .map(|b| char::from(b.to_ascii_lowercase()))
            .collect(),
    )
}

#[cfg(test)]
mod tests;
