//! Parking: an idle HTTP/1 keep-alive connection gives back its HTTP state.
//!
//! An HTTP/1 keep-alive connection idle for [`PARK_AFTER_MS`] gives back hyper's read
//! and write buffers (about 16 KiB) and its dispatcher: the socket wrapper
//! ([`super::socket::ClientIo`]) reports end-of-stream to hyper at a moment hyper is
//! waiting for a new head with nothing buffered, hyper closes its side gracefully
//! without touching the socket, and the socket is handed back ([`Handback::Parked`]) to
//! wait for readability with no buffer at all. Its next bytes start a fresh HTTP/1
//! connection object on the same socket. "Nothing buffered" is made sure of without
//! looking into hyper: no request in flight, the response flushed, the last request had
//! no body, and the bytes read last ended a request head (`\r\n\r\n`, see
//! [`ends_head`]): a connection where any of this does not hold is simply not parked.
//! TLS connections are never parked.

use std::sync::atomic::{AtomicU64, Ordering};

/// Idle time after which an HTTP/1 keep-alive connection gives back its HTTP state.
pub const PARK_AFTER_MS: u64 = 500;

/// Why a socket wrapper handed its socket back to the connection task.
pub(super) enum Handback {
    /// Idle: served again by a fresh HTTP/1 connection object on its next bytes.
    Parked,
    /// hyper closed the connection (its write side is shut): it closes, perhaps after a
    /// lingering read (see the module docs).
    Closed,
}

/// Keep the last four bytes read in `tail`.
pub(super) fn push_tail(tail: &mut [u8; 4], got: &[u8]) {
    let n = got.len();
    if n >= 4 {
        tail.copy_from_slice(&got[n - 4..]);
    } else {
        tail.rotate_left(n);
        tail[4 - n..].copy_from_slice(got);
    }
}

/// The bytes read last end a request head (CRLF CRLF, or bare LF LF).
pub(super) fn ends_head(tail: &[u8; 4]) -> bool {
    tail == b"\r\n\r\n" || tail[2..] == *b"\n\n"
}

/// Counts a connection in `connections_parked` while it lives.
pub(super) struct ParkedGauge<'a>(&'a AtomicU64);

impl<'a> ParkedGauge<'a> {
    pub(super) fn new(g: &'a AtomicU64) -> Self {
        g.fetch_add(1, Ordering::Relaxed);
        ParkedGauge(g)
    }
}

impl Drop for ParkedGauge<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn park_needs_a_complete_head_last() {
        let mut tail = *b"\r\n\r\n";
        push_tail(&mut tail, b"GET / HTTP/1.1\r\nHost: x\r\n");
        assert!(!ends_head(&tail));
        push_tail(&mut tail, b"\r");
        assert!(!ends_head(&tail));
        push_tail(&mut tail, b"\n");
        assert!(ends_head(&tail), "a head split across reads");
        push_tail(&mut tail, b"GET /next HTTP/1.1\r\nHo");
        assert!(!ends_head(&tail), "half of a pipelined head");
        push_tail(&mut tail, b"st: x\n\n");
        assert!(ends_head(&tail));
    }
}
