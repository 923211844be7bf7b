//! A failed exchange, and what may be done about it.

use super::error::SendError;
use super::request::Outgoing;

/// A failed [`send`].
#[derive(Debug)]
pub enum SendFailure {
    /// Not one byte was written: the request is handed back, untouched.
    NotSent(Box<Outgoing>, SendError),
    /// It was (at least partly) sent.
    Sent(SendError),
}
