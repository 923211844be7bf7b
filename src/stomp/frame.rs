//! A STOMP frame as a value: its command, its headers (unescaped, in order) and its body,
//! and the header-value escaping of STOMP 1.1 and 1.2. Pure: no I/O.
//!
//! Escaping (<https://stomp.github.io/stomp-specification-1.2.html#Value_Encoding>): in
//! STOMP 1.1 a header's name and value escape `\` as `\\`, `:` as `\c` and LF as `\n`;
//! 1.2 adds CR as `\r`. Any other `\x` is a fatal protocol error. CONNECT and CONNECTED
//! frames are never escaped (the version is not known yet), nor is anything in 1.0.

use bytes::Bytes;

/// The protocol version in use on a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    /// Before CONNECTED, and a broker that answers without `version`: no escaping.
    V1_0,
    V1_1,
    V1_2,
}

impl Version {
    /// The value of CONNECTED's `version` header (absent = 1.0).
    pub fn parse(v: Option<&str>) -> Option<Version> {
        match v.map(str::trim) {
            None | Some("1.0") => Some(Version::V1_0),
            Some("1.1") => Some(Version::V1_1),
            Some("1.2") => Some(Version::V1_2),
            Some(_) => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1_0 => "1.0",
            Version::V1_1 => "1.1",
            Version::V1_2 => "1.2",
        }
    }
}

/// The commands this client sends or understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    // Client frames.
    Connect,
    Stomp,
    Send,
    Subscribe,
    Unsubscribe,
    Ack,
    Nack,
    Begin,
    Commit,
    Abort,
    Disconnect,
    // Server frames.
    Connected,
    Message,
    Receipt,
    Error,
}

impl Command {
    pub fn parse(s: &[u8]) -> Option<Command> {
        Some(match s {
            b"CONNECT" => Command::Connect,
            b"STOMP" => Command::Stomp,
            b"SEND" => Command::Send,
            b"SUBSCRIBE" => Command::Subscribe,
            b"UNSUBSCRIBE" => Command::Unsubscribe,
            b"ACK" => Command::Ack,
            b"NACK" => Command::Nack,
            b"BEGIN" => Command::Begin,
            b"COMMIT" => Command::Commit,
            b"ABORT" => Command::Abort,
            b"DISCONNECT" => Command::Disconnect,
            b"CONNECTED" => Command::Connected,
            b"MESSAGE" => Command::Message,
            b"RECEIPT" => Command::Receipt,
            b"ERROR" => Command::Error,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Command::Connect => "CONNECT",
            Command::Stomp => "STOMP",
            Command::Send => "SEND",
            Command::Subscribe => "SUBSCRIBE",
            Command::Unsubscribe => "UNSUBSCRIBE",
            Command::Ack => "ACK",
            Command::Nack => "NACK",
            Command::Begin => "BEGIN",
            Command::Commit => "COMMIT",
            Command::Abort => "ABORT",
            Command::Disconnect => "DISCONNECT",
            Command::Connected => "CONNECTED",
            Command::Message => "MESSAGE",
            Command::Receipt => "RECEIPT",
            Command::Error => "ERROR",
        }
    }

    /// CONNECT, STOMP and CONNECTED carry their header values as they are.
    pub fn escaped(self, version: Version) -> bool {
        version >= Version::V1_1
            && !matches!(self, Command::Connect | Command::Stomp | Command::Connected)
    }
}

/// One frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub command: Command,
    /// Unescaped, in the order received or to be sent; repeated names kept.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Frame {
    pub fn new(command: Command) -> Frame {
        Frame {
            command,
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }

    /// Add a header (builder style).
    pub fn header(mut self, name: &str, value: impl Into<String>) -> Frame {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    /// The first header of that name: the one that counts when a name repeats (spec).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text for a log line: at most `max` bytes, lossily decoded.
    pub fn body_excerpt(&self, max: usize) -> String {
        excerpt(&self.body, max)
    }
}

/// At most `max` bytes of `bytes` as text (lossy), with `…` when cut, trimmed.
pub fn excerpt(bytes: &[u8], max: usize) -> String {
    let cut = bytes.len() > max;
    let mut s = String::from_utf8_lossy(&bytes[..bytes.len().min(max)])
        .trim()
        .to_string();
    if cut {
        s.push('…');
    }
    s
}

/// Why a header could not be read back.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EscapeError {
    #[error("undefined escape sequence \\{0} in a header")]
    Undefined(char),
    #[error("header ends with a lone backslash")]
    Trailing,
}

/// Unescape one header name or value received in `version`.
pub fn unescape(raw: &str, version: Version) -> Result<String, EscapeError> {
    if version == Version::V1_0 || !raw.contains('\\') {
        return Ok(raw.to_string());
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('c') => out.push(':'),
            Some('n') => out.push('\n'),
            Some('r') if version == Version::V1_2 => out.push('\r'),
            Some(other) => return Err(EscapeError::Undefined(other)),
            None => return Err(EscapeError::Trailing),
        }
    }
    Ok(out)
}

/// Escape one header name or value to send in `version`. In 1.1 a CR cannot be
/// escaped: the caller must not send one ([`representable`]).
pub fn escape(raw: &str, version: Version) -> String {
    if version == Version::V1_0 || !raw.contains(['\\', ':', '\n', '\r']) {
        return raw.to_string();
    }
    let mut out = String::with_capacity(raw.len() + 8);
    for c in raw.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            ':' => out.push_str("\\c"),
            '\n' => out.push_str("\\n"),
            '\r' if version == Version::V1_2 => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

/// Whether a header name or value can be sent in a frame of this kind: no NUL ever, and
/// no CR or LF where it would not be escaped (CONNECT, 1.0; CR in 1.1), nor a colon in a
/// name that is not escaped.
pub fn representable(raw: &str, is_name: bool, escaped: bool, version: Version) -> bool {
    if raw.contains('\0') {
        return false;
    }
    if !escaped {
        let colon_in_name = is_name && raw.contains(':');
        return !raw.contains(['\n', '\r']) && !colon_in_name;
    }
    version == Version::V1_2 || !raw.contains('\r')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_round_trip_in_1_2() {
        for s in [
            "",
            "plain",
            "a:b",
            "ID:vm-1:2",
            "back\\slash",
            "l1\nl2",
            "cr\rlf\n",
            "\\c",
        ] {
            let e = escape(s, Version::V1_2);
            assert!(!e.contains([':', '\n', '\r']), "{e:?}");
            assert_eq!(unescape(&e, Version::V1_2).unwrap(), s);
        }
    }

    #[test]
    fn activemq_ack_header() {
        assert_eq!(
            unescape("ID\\cvm-39365-1795861145351-4\\c1", Version::V1_2).unwrap(),
            "ID:vm-39365-1795861145351-4:1"
        );
    }

    #[test]
    fn undefined_escapes_are_errors() {
        assert_eq!(
            unescape("a\\tb", Version::V1_2),
            Err(EscapeError::Undefined('t'))
        );
        // `\r` is 1.2's only.
        assert_eq!(
            unescape("a\\rb", Version::V1_1),
            Err(EscapeError::Undefined('r'))
        );
        assert_eq!(unescape("a\\", Version::V1_1), Err(EscapeError::Trailing));
        // 1.0 has no escapes: the backslash is a character.
        assert_eq!(unescape("a\\tb", Version::V1_0).unwrap(), "a\\tb");
    }

    #[test]
    fn escape_in_1_1_leaves_cr_which_is_not_representable() {
        assert_eq!(escape("a\rb:c", Version::V1_1), "a\rb\\cc");
        assert!(!representable("a\rb", false, true, Version::V1_1));
        assert!(representable("a\rb", false, true, Version::V1_2));
        assert!(!representable("a\nb", false, false, Version::V1_2));
        assert!(representable("a:b", false, false, Version::V1_2));
        assert!(!representable("a:b", true, false, Version::V1_2));
        assert!(!representable("a\0b", false, true, Version::V1_2));
    }

    #[test]
    fn first_header_wins() {
        let f = Frame::new(Command::Message)
            .header("a", "1")
            .header("a", "2");
        assert_eq!(f.get("a"), Some("1"));
        assert_eq!(f.get("b"), None);
    }

    #[test]
    fn versions() {
        assert_eq!(Version::parse(None), Some(Version::V1_0));
        assert_eq!(Version::parse(Some("1.2")), Some(Version::V1_2));
        assert_eq!(Version::parse(Some("2.0")), None);
        assert!(!Command::Connected.escaped(Version::V1_2));
        assert!(Command::Message.escaped(Version::V1_1));
        assert!(!Command::Message.escaped(Version::V1_0));
    }

    #[test]
    fn excerpts_are_bounded() {
        assert_eq!(excerpt(b"  short  ", 100), "short");
        assert_eq!(excerpt(b"abcdef", 3), "abc…");
        // A cut inside a UTF-8 sequence does not panic.
        assert_eq!(excerpt("é".as_bytes(), 1), "\u{fffd}…");
    }
}
