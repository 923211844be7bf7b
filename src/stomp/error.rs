//! Why a connection to a broker failed or ended: one value per cause, its text what the
//! log and the status show.

use std::time::Duration;

use super::codec::FrameError;
use super::frame::{excerpt, Frame};

/// How a session with one broker ended, other than by a stop.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("no TCP connection within {0:?}")]
    ConnectTimeout(Duration),
    #[error("no CONNECTED answer within {0:?}")]
    HandshakeTimeout(Duration),
    /// An ERROR frame in answer to CONNECT (bad credentials, client id in use).
    #[error("broker refused the connection: {0}")]
    Refused(String),
    /// An ERROR frame later (SUBSCRIBE not allowed, a bad ACK).
    #[error("broker sent ERROR: {0}")]
    ErrorFrame(String),
    #[error("broker silent for {0:?} (it agreed to send a heart-beat every {1:?})")]
    Silent(Duration, Duration),
    #[error("connection closed by the broker")]
    Closed,
    #[error("connection: {0}")]
    Io(std::io::Error),
    #[error("write not done within {0:?}")]
    WriteTimeout(Duration),
    #[error("malformed frame from the broker: {0}")]
    Frame(FrameError),
    /// A well-formed frame that makes no sense here.
    #[error("{0}")]
    Protocol(String),
    /// The handler kept a message unacknowledged: the session ends so that the broker
    /// delivers it again.
    #[error("a message was not taken (it could not be saved): reconnecting for it to come again")]
    Kept,
    /// A frame this client could not encode (a setting holds a newline or a NUL).
    #[error("cannot send: {0}")]
    Encode(FrameError),
}

/// What an ERROR frame says, for a log line: its `message` header and the first line of
/// its body when that adds something (ActiveMQ's body is a Java stack trace), bounded.
pub fn error_text(frame: &Frame) -> String {
    let message = excerpt(frame.get("message").unwrap_or("").as_bytes(), 300);
    let first = frame.body.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let body = excerpt(first, 300);
    match (message.is_empty(), body.is_empty() || body == message) {
        (true, true) => "(no message)".to_string(),
        (true, false) => body,
        (false, true) => message,
        (false, false) => format!("{message} ({body})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stomp::frame::Command;
    use bytes::Bytes;

    #[test]
    fn error_text_is_message_and_first_body_line() {
        let mut f =
            Frame::new(Command::Error).header("message", "User name [x] or password is invalid.");
        f.body = Bytes::from_static(b"User name [x] or password is invalid.");
        assert_eq!(error_text(&f), "User name [x] or password is invalid.");
        f.body =
            Bytes::from_static(b"javax.jms.InvalidClientIDException: in use\n\tat org.apache...");
        assert_eq!(
            error_text(&f),
            "User name [x] or password is invalid. (javax.jms.InvalidClientIDException: in use)"
        );
        let big = Frame::new(Command::Error).header("message", "x".repeat(10_000));
        assert!(error_text(&big).len() < 310);
        assert_eq!(error_text(&Frame::new(Command::Error)), "(no message)");
    }
}
