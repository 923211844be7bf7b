//! Why connecting to a backend, or an exchange with it, failed.
//!
//! What may be done about a failure (send the request again, or elsewhere) is decided
//! in [`super::retry`].

use std::io;
use std::time::Duration;

use crate::h1;
use crate::wait::Phase;

/// Why a new connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connect timed out after {0:?}")]
    Timeout(Duration),
    #[error("connect failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Why an exchange with a backend failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("connection to the backend failed: {0}")]
    Io(#[from] io::Error),
    #[error("the backend closed the connection before the response was complete")]
    Closed,
    #[error(transparent)]
    Parse(#[from] h1::ParseError),
    /// The client's request body failed (malformed chunked framing, or the client went
    /// away mid-upload): the client's fault, never the backend's.
    #[error("request body from the client failed: {0}")]
    ClientBody(hyper::Error),
    #[error("request body longer or shorter than its Content-Length")]
    BodyLength,
    /// A wait ran out ([`Wait`](crate::wait::Wait)): on the backend (`504`), or on the client's body.
    #[error("no progress within the {0:?} timeout")]
    Timeout(Phase),
}
