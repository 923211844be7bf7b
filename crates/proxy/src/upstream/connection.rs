//! One HTTP/1 connection to a backend: its socket, the bytes read from it and not
//! consumed yet, and the cell through which [`super::Pool::force_close`] cuts it.
//!
//! Reads grow and shrink their buffer with what the backend sends; a cut (the drain
//! deadline) wakes whoever waits on the socket. What goes over the connection is the
//! business of [`super::exchange`], [`super::upload`] and [`super::body`].

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use atomic_waker::AtomicWaker;
use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWrite;
use tokio::net::TcpStream;

use crate::io::Counted;

/// Read buffer sizes: start small (most responses are), double while reads fill the
/// space, halve after a read that used less than a quarter of it, and fall back to the
/// smallest while the client does not keep up ([`Conn::slow_down`]). Large bodies move
/// in large reads: fewer system calls, and the backend's socket is drained sooner, so
/// it can keep sending (128 KiB at most cost ~10% of the throughput of 1 MiB responses).
pub(super) const READ_MIN: usize = 8 * 1024;
pub(super) const READ_MAX: usize = 512 * 1024;

/// What [`Pool::force_close`] needs of a connection, wherever it is: a flag, and the
/// waker of whoever waits on its socket.
#[derive(Default)]
pub(super) struct ConnCell {
    pub(super) killed: AtomicBool,
    pub(super) waker: AtomicWaker,
}

/// Decrements the pool's count of open connections when the connection is gone.
pub(super) struct OpenGuard(pub(super) Arc<AtomicU64>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One connection to a backend, with the bytes read from it and not consumed yet.
pub struct Conn {
    pub(super) io: ConnIo,
    pub(super) buf: BytesMut,
    pub(super) read_size: usize,
    /// A byte arrived since the last request was sent (see [`Conn::answered_nothing`]).
    pub(super) heard: bool,
    pub(super) cell: Arc<ConnCell>,
    pub(super) _open: OpenGuard,
}

/// A backend connection's socket: TCP, or in unit tests a scripted one
/// (`tokio_test::io::Mock`) for the exchanges real sockets make awkward to stage.
pub(super) enum ConnIo {
    Tcp(Counted<TcpStream>),
    #[cfg(test)]
    Mock(Box<tokio_test::io::Mock>),
}

impl ConnIo {
    fn tcp(&self) -> Option<&TcpStream> {
        match self {
            ConnIo::Tcp(io) => Some(io.get_ref()),
            #[cfg(test)]
            ConnIo::Mock(_) => None,
        }
    }
}

impl tokio::io::AsyncRead for ConnIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnIo::Tcp(io) => Pin::new(io).poll_read(cx, buf),
            #[cfg(test)]
            ConnIo::Mock(io) => Pin::new(io).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ConnIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ConnIo::Tcp(io) => Pin::new(io).poll_write(cx, buf),
            #[cfg(test)]
            ConnIo::Mock(io) => Pin::new(io).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnIo::Tcp(io) => Pin::new(io).poll_flush(cx),
            #[cfg(test)]
            ConnIo::Mock(io) => Pin::new(io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnIo::Tcp(io) => Pin::new(io).poll_shutdown(cx),
            #[cfg(test)]
            ConnIo::Mock(io) => Pin::new(io).poll_shutdown(cx),
        }
    }
}

fn cut() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "backend connection cut (drain deadline)",
    )
}

impl Conn {
    pub(super) fn killed(&self) -> bool {
        self.cell.killed.load(Ordering::Acquire)
    }

    /// Wait for the socket on behalf of the task in `cx`; a cut wakes it.
    fn pending<T>(&self, cx: &Context<'_>) -> Poll<io::Result<T>> {
        self.cell.waker.register(cx.waker());
        if self.killed() {
            return Poll::Ready(Err(cut()));
        }
        Poll::Pending
    }

    /// Read more bytes into the buffer; `Ok(0)` at the end of the stream.
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.killed() {
            return Poll::Ready(Err(cut()));
        }
        let spare = self.buf.capacity() - self.buf.len();
        if spare < self.read_size / 2 {
            self.buf.reserve(self.read_size);
        }
        let spare = self.buf.capacity() - self.buf.len();
        match tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf) {
            Poll::Pending => self.pending(cx),
            Poll::Ready(Ok(n)) => {
                self.heard |= n > 0;
                if n == spare && self.read_size < READ_MAX {
                    self.read_size *= 2;
                } else if n > 0 && n < self.read_size / 4 && self.read_size > READ_MIN {
                    self.read_size /= 2;
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        }
    }

    /// The client this connection's response goes to takes less than it is sent: read
    /// in the smallest steps, and give back a large read's buffer once it was handed on
    /// (what the client has not taken then waits in the backend's socket, not here).
    pub(super) fn slow_down(&mut self) {
        self.read_size = READ_MIN;
        if self.buf.is_empty() {
            // A fresh buffer: the emptied one may still own a large read's allocation,
            // which the next read would reclaim and fill whole.
            self.buf = BytesMut::new();
        }
    }

    /// Write `data[*at..]`, advancing `at`.
    pub(super) fn poll_write_all(
        &mut self,
        cx: &mut Context<'_>,
        data: &[u8],
        at: &mut usize,
    ) -> Poll<io::Result<()>> {
        while *at < data.len() {
            if self.killed() {
                return Poll::Ready(Err(cut()));
            }
            match Pin::new(&mut self.io).poll_write(cx, &data[*at..]) {
                Poll::Pending => return self.pending(cx),
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *at += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Still usable after sitting idle: nothing unread, not closed nor failed. Only
    /// when the runtime saw the socket become readable does this cost a system call.
    pub(super) fn idle_ok(&mut self) -> bool {
        if !self.buf.is_empty() || self.killed() {
            return false;
        }
        let mut b = [0u8; 1];
        let Some(tcp) = self.io.tcp() else {
            return false;
        };
        matches!(tcp.try_read(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Asks the kernel, whatever the runtime recorded: is the socket still open, with
    /// nothing to read? A close that reached the socket after the runtime last polled
    /// its events (a busy worker polls them every few dozen tasks) is seen here, and
    /// [`Self::idle_ok`] would miss it. One `recv(MSG_PEEK | MSG_DONTWAIT)`.
    pub(super) fn open_now(&self) -> bool {
        use rustix::net::{recv, RecvFlags};
        let mut b = [0u8; 1];
        let Some(tcp) = self.io.tcp() else {
            return false;
        };
        matches!(
            recv(tcp, &mut b[..], RecvFlags::PEEK | RecvFlags::DONTWAIT),
            Err(e) if e == rustix::io::Errno::WOULDBLOCK
        )
    }

    /// Not one byte came back since the last request was sent: when [`send`](super::send) then
    /// fails on a pooled connection, the backend closed it as the request went out (its
    /// keep-alive timeout, a restart), not while it was answering.
    pub fn answered_nothing(&self) -> bool {
        !self.heard
    }

    /// The socket, and the bytes already read from it, for a tunnel after `101`.
    pub fn into_upgraded(self) -> Option<(Counted<TcpStream>, Bytes)> {
        match self.io {
            ConnIo::Tcp(io) => Some((io, self.buf.freeze())),
            #[cfg(test)]
            ConnIo::Mock(_) => None,
        }
    }
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn")
            .field("buffered", &self.buf.len())
            .field("killed", &self.killed())
            .finish()
    }
}
