//! The client socket as hyper sees it ([`ClientIo`]): counts bytes, notes activity for
//! the watchdog, holds a response's first write for the rest of the loop turn, and the
//! write after every 64 KiB written in a row ([`crate::turn`]), notes when the client's
//! socket is full (`ConnState::backlogged`, which the response body reads its backend
//! by), writes interim responses (`103 Early Hints`) hyper's server cannot, tells who
//! waits for a flush, and hands the socket back to the connection task when it parks or
//! hyper closes it ([`super::parking`], [`super::linger`]).
//!
//! Interim responses to HTTP/1.1 requests are written at a moment hyper has nothing
//! buffered ([`ConnState::push_interim`] queues them).

use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::parking::{ends_head, push_tail, Handback};
use crate::session::ConnState;
use crate::turn::WriteTurn;

/// The client socket as hyper sees it: counts bytes, notes activity, and can hand the
/// socket back ("park") when the connection is idle.
pub(super) struct ClientIo<S> {
    inner: Option<S>,
    state: Arc<ConnState>,
    /// Where the socket goes when hyper lets go of it (parked or closed); `None`: this
    /// connection never parks, and closes when hyper drops it.
    slot: Option<Arc<OnceLock<(S, Handback)>>>,
    /// The last four bytes read.
    tail: [u8; 4],
    /// End-of-stream was reported to hyper to park the connection.
    parked: bool,
    /// hyper shut the connection's write side: it is closing.
    closed: bool,
    /// A response's first write waits for the rest of the turn (`phase`).
    turn: WriteTurn,
    /// An interim response being written, and how much of it went.
    interim: Option<(bytes::Bytes, usize)>,
    /// Bytes read from the socket before hyper took it (by the byte path,
    /// [`super::lane`]): hyper reads these first.
    pre: bytes::BytesMut,
}

impl<S> ClientIo<S> {
    pub(super) fn new(
        inner: S,
        state: Arc<ConnState>,
        slot: Option<Arc<OnceLock<(S, Handback)>>>,
    ) -> Self {
        ClientIo {
            inner: Some(inner),
            state,
            slot,
            // Nothing read yet: nothing half-read either.
            tail: *b"\r\n\r\n",
            parked: false,
            closed: false,
            turn: WriteTurn::default(),
            interim: None,
            pre: bytes::BytesMut::new(),
        }
    }

    /// The same, for a socket from which `pre` was read already: hyper gets those
    /// bytes first (counted when they were read).
    pub(super) fn with_read(
        inner: S,
        state: Arc<ConnState>,
        slot: Option<Arc<OnceLock<(S, Handback)>>>,
        pre: bytes::BytesMut,
    ) -> Self {
        let mut io = ClientIo::new(inner, state, slot);
        // What was read last is the end of `pre`: a half-read head is not a place to park.
        push_tail(&mut io.tail, &pre);
        io.pre = pre;
        io
    }

    /// The socket, taken back (the byte path hands it to hyper, or parks it).
    pub(super) fn into_inner(mut self) -> Option<S> {
        self.inner.take()
    }

    fn touch(&self) {
        self.state
            .last_io
            .store(self.state.ctx.clock.now_ms(), Ordering::Relaxed);
    }

    fn wrote(&mut self, n: usize) {
        if n > 0 {
            self.turn.wrote(n);
            self.state.unflushed.store(true, Ordering::Relaxed);
            self.touch();
            if !self.state.own.load(Ordering::Relaxed) {
                self.state
                    .ctx
                    .stats
                    .traffic
                    .sent
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }

    /// hyper holds no half-read request and no unsent response, has read every byte
    /// the byte path handed over with the socket, and the task asked to park (see the
    /// module docs).
    fn may_park(&self) -> bool {
        let st = &self.state;
        self.slot.is_some()
            && self.pre.is_empty()
            && st.park.load(Ordering::Relaxed)
            && st.in_flight.load(Ordering::Relaxed) == 0
            && !st.last_had_body.load(Ordering::Relaxed)
            && !st.unflushed.load(Ordering::Relaxed)
            && ends_head(&self.tail)
    }

    /// A write waits for the rest of the turn (`phase`). While it does, hyper holds bytes
    /// for the client: they count as unflushed, so the connection cannot park.
    fn wait_turn(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let r = self.turn.poll_ready(cx);
        if r.is_pending() {
            self.state.unflushed.store(true, Ordering::Relaxed);
        }
        r
    }

    fn inner(&mut self) -> io::Result<&mut S> {
        self.inner
            .as_mut()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "connection parked"))
    }
}

impl<S> Drop for ClientIo<S> {
    fn drop(&mut self) {
        let why = if self.parked {
            Handback::Parked
        } else if self.closed {
            Handback::Closed
        } else {
            return;
        };
        if let (Some(slot), Some(inner)) = (&self.slot, self.inner.take()) {
            let _ = slot.set((inner, why));
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ClientIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.parked {
            return Poll::Ready(Ok(()));
        }
        if this.may_park() {
            // End-of-stream for hyper; the bytes the client may have sent meanwhile stay
            // in the socket for the next connection object.
            this.parked = true;
            return Poll::Ready(Ok(()));
        }
        if !this.pre.is_empty() {
            let n = this.pre.len().min(buf.remaining());
            let got = this.pre.split_to(n);
            buf.put_slice(&got);
            this.turn.read();
            push_tail(&mut this.tail, &got);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(this.inner()?).poll_read(cx, buf);
        let got = &buf.filled()[before..];
        if !got.is_empty() {
            let n = got.len();
            this.turn.read();
            push_tail(&mut this.tail, got);
            this.touch();
            if !this.state.own.load(Ordering::Relaxed) {
                this.state.read_some();
                this.state
                    .ctx
                    .stats
                    .traffic
                    .received
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> ClientIo<S> {
    /// Write the interim responses the exchange queued, in full, before anything else.
    /// `Ready(Ok)` when none is left. Only called when what hyper wrote before was all
    /// flushed (from `poll_flush`, or a write that follows a flush): an interim response
    /// then goes after the previous response and before this request's final one.
    fn poll_interim(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.interim.is_none() && self.state.has_interim.swap(false, Ordering::Acquire) {
            if let Some(b) = self.state.interim.swap(None) {
                self.interim = Some((Arc::unwrap_or_clone(b).freeze(), 0));
            }
        }
        while let Some((b, at)) = self.interim.as_mut() {
            if *at >= b.len() {
                self.interim = None;
                break;
            }
            let inner = self
                .inner
                .as_mut()
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "parked"))?;
            match Pin::new(inner).poll_write(cx, &b[*at..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    *at += n;
                    self.wrote(n);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Before hyper writes: an interim response already started is finished; one not
    /// started goes first only if everything hyper wrote before was flushed (else these
    /// bytes may still be the previous response's, and it is too late for a hint).
    fn poll_interim_before_write(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.interim.is_none()
            && self.state.has_interim.load(Ordering::Relaxed)
            && self.state.unflushed.load(Ordering::Relaxed)
        {
            self.state.has_interim.store(false, Ordering::Relaxed);
            self.state.interim.store(None);
        }
        self.poll_interim(cx)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ClientIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.interim.is_some() || this.state.has_interim.load(Ordering::Relaxed) {
            ready!(this.poll_interim_before_write(cx))?;
        }
        if this.wait_turn(cx).is_pending() {
            return Poll::Pending;
        }
        let r = Pin::new(this.inner()?).poll_write(cx, buf);
        match r {
            Poll::Ready(Ok(n)) => this.wrote(n),
            // The client's socket is full: it reads slower than it is sent to.
            Poll::Pending => this.state.backlogged.store(true, Ordering::Relaxed),
            Poll::Ready(Err(_)) => {}
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.interim.is_some() || this.state.has_interim.load(Ordering::Relaxed) {
            ready!(this.poll_interim_before_write(cx))?;
        }
        if this.wait_turn(cx).is_pending() {
            return Poll::Pending;
        }
        let r = Pin::new(this.inner()?).poll_write_vectored(cx, bufs);
        match r {
            Poll::Ready(Ok(n)) => this.wrote(n),
            // The client's socket is full: it reads slower than it is sent to.
            Poll::Pending => this.state.backlogged.store(true, Ordering::Relaxed),
            Poll::Ready(Err(_)) => {}
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // hyper flushes after each turn of its loop, with its own buffer written out:
        // the moment for an interim response the exchange queued meanwhile.
        if this.interim.is_some() || this.state.has_interim.load(Ordering::Relaxed) {
            ready!(this.poll_interim(cx))?;
        }
        let r = Pin::new(this.inner()?).poll_flush(cx);
        if let Poll::Ready(Ok(())) = r {
            let st = &this.state;
            st.unflushed.store(false, Ordering::Relaxed);
            st.backlogged.store(false, Ordering::Relaxed);
            if st.flush_wanted.load(Ordering::Relaxed) {
                st.flush_wanted.store(false, Ordering::Relaxed);
                st.flushed.wake();
            }
        }
        r
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.parked {
            // hyper closing its side of a parked connection: the socket stays open.
            return Poll::Ready(Ok(()));
        }
        let r = Pin::new(this.inner()?).poll_shutdown(cx);
        if let Poll::Ready(Ok(())) = r {
            this.closed = true;
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{test_ctx, test_session};
    use super::*;
    use crate::forward::ClientInfo;

    /// A plain connection's state, with the default timeouts.
    fn plain_state() -> Arc<ConnState> {
        let ctx = test_ctx();
        Arc::new(ConnState::new(
            ctx.clone(),
            test_session(&ctx),
            ClientInfo::new("192.0.2.1:5".parse().unwrap(), 80, "http"),
            &gearlb_core::config::Config::default().timeouts,
        ))
    }

    /// A connection asked to park (idle too long: a slow backend) whose response is
    /// ready but waits for the rest of the turn must not park: that would end hyper's
    /// connection with the response unsent.
    #[tokio::test]
    async fn a_response_waiting_for_its_turn_keeps_the_connection_from_parking() {
        let state = plain_state();
        let (ours, mut client) = tokio::io::duplex(1024);
        let mut io = ClientIo::new(ours, state.clone(), Some(Arc::new(OnceLock::new())));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut buf = [0u8; 64];

        tokio::io::AsyncWriteExt::write_all(&mut client, b"GET / HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let mut rb = ReadBuf::new(&mut buf);
        assert!(Pin::new(&mut io).poll_read(&mut cx, &mut rb).is_ready());
        assert_eq!(rb.filled().len(), 18);
        state.park.store(true, Ordering::Relaxed);

        let resp = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        assert!(Pin::new(&mut io).poll_write(&mut cx, resp).is_pending());
        let mut rb = ReadBuf::new(&mut buf);
        assert!(
            Pin::new(&mut io).poll_read(&mut cx, &mut rb).is_pending(),
            "parked (end-of-stream to hyper) with a response waiting to be written"
        );
        assert!(matches!(
            Pin::new(&mut io).poll_write(&mut cx, resp),
            Poll::Ready(Ok(n)) if n == resp.len()
        ));
        assert!(Pin::new(&mut io).poll_flush(&mut cx).is_ready());
        // Written and flushed: now it may park.
        let mut rb = ReadBuf::new(&mut buf);
        assert!(Pin::new(&mut io).poll_read(&mut cx, &mut rb).is_ready());
        assert!(rb.filled().is_empty() && io.parked);
    }

    /// A head the byte path began and handed to hyper (the rest of it came later, and
    /// the connection had been idle long enough to be asked to park meanwhile): hyper
    /// gets those bytes and what follows them, never an end-of-stream that would drop
    /// them and read the rest of the request as a new one.
    #[tokio::test]
    async fn bytes_handed_over_by_the_byte_path_are_read_before_any_park() {
        let state = plain_state();
        state.park.store(true, Ordering::Relaxed);
        let (ours, mut client) = tokio::io::duplex(1024);
        let pre = bytes::BytesMut::from(&b"POST /u HTTP/1.1\r\nHost: a\r\n"[..]);
        let mut io = ClientIo::with_read(ours, state, Some(Arc::new(OnceLock::new())), pre);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut buf = [0u8; 64];
        let mut rb = ReadBuf::new(&mut buf);
        assert!(Pin::new(&mut io).poll_read(&mut cx, &mut rb).is_ready());
        assert_eq!(rb.filled(), b"POST /u HTTP/1.1\r\nHost: a\r\n");
        assert!(!io.parked);
        // The rest of the head: still not a place to park until it ends.
        tokio::io::AsyncWriteExt::write_all(&mut client, b"Content-Length: 2\r\n")
            .await
            .unwrap();
        let mut rb = ReadBuf::new(&mut buf);
        assert!(Pin::new(&mut io).poll_read(&mut cx, &mut rb).is_ready());
        assert_eq!(rb.filled(), b"Content-Length: 2\r\n");
        assert!(!io.parked);
    }

    /// A cut at `request_header` is the client's timeout when bytes of a request had
    /// come (a slow head or body), not when a keep-alive connection sent nothing after
    /// its last response; a request body's bytes, read while it is in flight, do not
    /// begin the next one.
    #[tokio::test]
    async fn bytes_read_between_requests_make_a_cut_the_clients_timeout() {
        let state = plain_state();
        let (ours, mut client) = tokio::io::duplex(1024);
        let mut io = ClientIo::new(ours, state.clone(), None);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut buf = [0u8; 64];
        let mut read = |io: &mut ClientIo<_>| {
            let mut rb = ReadBuf::new(&mut buf);
            assert!(Pin::new(io).poll_read(&mut cx, &mut rb).is_ready());
            rb.filled().len()
        };
        assert!(!state.timed_out(false), "nothing came: an idle close");
        assert!(state.timed_out(true), "inactivity is always the client's");

        tokio::io::AsyncWriteExt::write_all(&mut client, b"POST / HTTP/1.1\r\n")
            .await
            .unwrap();
        assert_eq!(read(&mut io), 17);
        assert!(state.timed_out(false), "a head begun and not ended");

        // The head ends: the request is in flight, and its body's bytes begin nothing.
        state.request_started(true);
        assert!(!state.timed_out(false));
        tokio::io::AsyncWriteExt::write_all(&mut client, b"body")
            .await
            .unwrap();
        assert_eq!(read(&mut io), 4);
        assert!(!state.timed_out(false));
        state.request_finished();
        assert!(!state.timed_out(false), "answered, and nothing came after");

        // The next request's first bytes.
        tokio::io::AsyncWriteExt::write_all(&mut client, b"GET")
            .await
            .unwrap();
        assert_eq!(read(&mut io), 3);
        assert!(state.timed_out(false));
    }
}
