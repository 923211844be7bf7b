//! Lingering close (as nginx's `lingering_close`).
//!
//! When hyper closes an HTTP/1 connection whose last request had a body, that body may
//! not have been read to its end (a gear refused the upload early, say). Closing a
//! socket with unread bytes in it sends a reset, and a client still writing its upload,
//! which reads the answer only once the upload is sent, would then lose the answer. So
//! the write side is shut (the answer and a FIN go out: hyper's shutdown, seen by the
//! socket wrapper, which hands the socket back as [`super::parking::Handback::Closed`]),
//! and whatever the client still sends is read and thrown away ([`linger`]) until it
//! closes, or is silent for [`LINGER_READ`], or [`LINGER_TOTAL`] passed, or the balancer
//! stops ([`close`]). The byte path does the same after a request it refuses before its
//! upload (`super::lane::LaneEnd::Linger`), on a plain connection or inside TLS. The
//! connection task runs it outside its watchdog. HTTP/2 connections, and TLS ones that
//! hyper closes, close at once.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::AsyncRead;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::session::ConnState;

/// Lingering close: the longest wait for the client's next bytes, and for all of them
/// (nginx's `lingering_timeout` and `lingering_time`).
pub(super) const LINGER_READ: Duration = Duration::from_secs(5);
pub(super) const LINGER_TOTAL: Duration = Duration::from_secs(30);

/// The lingering close of a client connection whose write side is shut: the rest of
/// the upload read and thrown away ([`linger`]; counted as received), until the stop at
/// the latest; the socket is closed when dropped.
pub(super) async fn close<S: AsyncRead + Unpin>(
    mut stream: S,
    state: &ConnState,
    stop: &CancellationToken,
) {
    let thrown = tokio::select! {
        n = linger(&mut stream, LINGER_READ, LINGER_TOTAL) => n,
        _ = stop.cancelled() => 0,
    };
    if thrown > 0 {
        let received = &state.ctx.stats.traffic.received;
        received.fetch_add(thrown, Ordering::Relaxed);
        debug!(client = %state.client.peer, bytes = thrown, "lingering close: the rest of an upload read and dropped");
    }
}

/// Read and throw away what the peer still sends, until it closes, is silent for
/// `read_wait`, or `total` passed (the lingering close, see the module docs). Returns
/// the bytes thrown away.
pub(super) async fn linger<S: AsyncRead + Unpin>(
    s: &mut S,
    read_wait: Duration,
    total: Duration,
) -> u64 {
    use tokio::io::AsyncReadExt;
    let end = Instant::now() + total;
    // Small: a lingering connection holds it for up to `total`, and there may be as
    // many of them as `limits.max_connections`.
    let mut buf = vec![0u8; 8 * 1024];
    let mut got = 0;
    loop {
        let wait = read_wait.min(end.saturating_duration_since(Instant::now()));
        if wait.is_zero() {
            return got;
        }
        match tokio::time::timeout(wait, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got += n as u64,
            _ => return got,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lingering read ends when the client closes, falls silent, or takes too long,
    /// whichever comes first, and reads everything the client sent meanwhile.
    #[tokio::test(start_paused = true)]
    async fn lingering_ends_on_close_silence_or_the_total_time() {
        use tokio::io::AsyncWriteExt;
        let (read_wait, total) = (Duration::from_secs(5), Duration::from_secs(30));

        // The rest of an upload, then the client's close: all of it read, at once.
        let (mut ours, mut client) = tokio::io::duplex(1024);
        let sender = tokio::spawn(async move {
            for _ in 0..100 {
                client.write_all(&[b'x'; 1000]).await.unwrap();
            }
        });
        let t = Instant::now();
        assert_eq!(linger(&mut ours, read_wait, total).await, 100_000);
        assert!(t.elapsed() < Duration::from_millis(1));
        sender.await.unwrap();

        // A client that keeps the connection open and sends nothing: one read wait.
        let (mut ours, _client) = tokio::io::duplex(1024);
        let t = Instant::now();
        assert_eq!(linger(&mut ours, read_wait, total).await, 0);
        assert_eq!(t.elapsed(), read_wait);

        // A client that trickles bytes for ever (every 4 s, within the read wait): cut
        // at the total time.
        let (mut ours, mut client) = tokio::io::duplex(1024);
        let trickle = tokio::spawn(async move {
            for _ in 0..1000 {
                if client.write_all(b"x").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(4)).await;
            }
        });
        let t = Instant::now();
        let got = linger(&mut ours, read_wait, total).await;
        assert_eq!(t.elapsed(), total);
        assert_eq!(got, 8, "bytes at 0, 4, ... 28 s");
        drop(ours);
        trickle.await.unwrap();
    }
}
