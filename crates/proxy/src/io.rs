//! Socket wrappers: one notes when bytes last moved, for inactivity timeouts; one counts
//! the bytes, for statistics.
//!
//! Owns the coarse activity clock: milliseconds since a shared epoch, stored in an
//! atomic on every read or write that moved data. One relaxed store per I/O call; the
//! watchdogs that read it (client connections, tunnels) live elsewhere. [`Counted`] adds
//! one relaxed atomic addition per I/O call to a [`Traffic`].

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::stats::Traffic;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Milliseconds since an epoch: cheap to read and to store in an atomic.
///
/// Read from the kernel's coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`, a few
/// milliseconds of resolution, no hardware clock read): it is read on every socket read
/// and write of the request path, and only millisecond timeouts are kept with it.
#[derive(Clone, Copy, Debug)]
pub struct Clock(u64);

pub(crate) use crate::clock::coarse_ms;

impl Clock {
    pub fn new() -> Self {
        Clock(coarse_ms())
    }

    pub fn now_ms(&self) -> u64 {
        coarse_ms().saturating_sub(self.0)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// `inner`, storing the clock's time in `last` whenever bytes move.
pub struct ActivityIo<T> {
    inner: T,
    clock: Clock,
    last: Arc<AtomicU64>,
}

impl<T> ActivityIo<T> {
    pub fn new(inner: T, clock: Clock, last: Arc<AtomicU64>) -> Self {
        last.store(clock.now_ms(), Ordering::Relaxed);
        ActivityIo { inner, clock, last }
    }

    fn touch(&self) {
        self.last.store(self.clock.now_ms(), Ordering::Relaxed);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ActivityIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.touch();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ActivityIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.touch();
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// `inner`, adding the bytes read and written to `traffic`.
pub struct Counted<T> {
    inner: T,
    traffic: Arc<Traffic>,
}

impl<T> Counted<T> {
    pub fn new(inner: T, traffic: Arc<Traffic>) -> Self {
        Counted { inner, traffic }
    }

    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    fn wrote(&self, r: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = r {
            self.traffic.sent.fetch_add(*n as u64, Ordering::Relaxed);
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        let n = buf.filled().len().saturating_sub(before);
        if n > 0 {
            this.traffic.received.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.wrote(&r);
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.wrote(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn counted_counts_both_ways() {
        let (a, mut b) = tokio::io::duplex(64);
        let traffic = Arc::new(Traffic::default());
        let mut a = Counted::new(a, traffic.clone());
        a.write_all(b"hello").await.unwrap();
        b.write_all(b"hi!").await.unwrap();
        let mut buf = [0u8; 3];
        a.read_exact(&mut buf).await.unwrap();
        assert_eq!(traffic.sent.load(Ordering::Relaxed), 5);
        assert_eq!(traffic.received.load(Ordering::Relaxed), 3);
    }
}
