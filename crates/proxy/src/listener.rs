//! The listeners: accept client connections under `limits.max_connections`, hand each
//! to its downstream connection task ([`super::downstream`]), and stop accepting at the
//! graceful stop. Also starts the pools' idle sweeper (once, with the first listener).
//!
//! A listener's queue of connections not yet accepted holds `max_connections` (as
//! HAProxy's `backlog` defaults to `maxconn`; the kernel caps it at
//! `net.core.somaxconn`), not the 128 of a socket bound by the standard library or
//! tokio: a burst of new connections while the thread is busy (an attack's connections
//! opening) waits in the queue instead of having its handshakes dropped, each of which
//! would cost its client a second before it tries again.
//!
//! A client that advertised a tiny receive window when it connected (what a slow-read
//! attack does: slowhttptest's `-X` sets 512 B to 1 KiB) keeps at most
//! [`TINY_WINDOW_UNSENT`] of unsent bytes in the kernel (`TCP_NOTSENT_LOWAT`). The kernel
//! cuts what it sends such a client into segments of half its window, so without a
//! bound it would take as much as the send buffer grows to (over a megabyte each on the
//! bench host) in allocations of a few hundred bytes: for 500 such clients a gigabyte
//! of kernel memory, seconds of the balancer's thread, and the host's TCP stack pushed
//! into its memory-pressure mode, where every connection, the normal ones included, sees
//! drops and retransmissions. The window is read back as the connection's segment size
//! (`TCP_MAXSEG`, which the kernel caps at half the largest window the peer advertised;
//! one `getsockopt` per connection). Other clients are not bounded: a client that keeps
//! up moves large bodies fastest when the kernel can take a whole read at once (a bound
//! of 512 KiB on every connection cost 1 MiB responses on loopback about 13% of their
//! throughput). Issue 34, `bench/slow_read.sh`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

use super::downstream::conn::serve_connection;
use super::downstream::tls::serve_tls_connection;
use super::shared::ProxyCtx;
use crate::session::Session;

/// A connection whose segment size is below this was opened with a tiny receive window
/// (an Ethernet path gives 1460 bytes, IPv6's smallest MTU 1220; a client still on
/// IPv4's old default of 536 is bounded too, at no cost to it); see the module docs.
pub const TINY_MSS: u32 = 1024;

/// The most such a connection's socket holds of what was written to it and not sent yet
/// (`TCP_NOTSENT_LOWAT`): many times what its window lets through per round trip.
pub const TINY_WINDOW_UNSENT: u32 = 64 * 1024;

/// Bound the unsent bytes of a connection opened with a tiny receive window.
fn bound_tiny_window(stream: &tokio::net::TcpStream) {
    let s = socket2::SockRef::from(stream);
    if s.tcp_mss().is_ok_and(|mss| mss < TINY_MSS) {
        let _ = s.set_tcp_notsent_lowat(TINY_WINDOW_UNSENT);
    }
}

/// Accept client connections until `shutdown` is cancelled: HTTP, or forwarded as
/// bytes when the context's settings say `mode = "tcp"` (see `tcp`). Connections over
/// `max_connections` are closed at once (counted as refused); an open WebSocket (any
/// upgraded connection) keeps its connection's place. Each connection is tracked on
/// `tracker` until it closes, tunnel included, so the caller can wait for them.
pub async fn serve(
    listener: TcpListener,
    ctx: Arc<ProxyCtx>,
    max_connections: usize,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    accept_loop(listener, ctx, max_connections, shutdown, tracker, None).await
}

/// Accept HTTPS client connections until `shutdown` is cancelled: as [`serve`], each
/// connection first completes a TLS handshake (within `timeouts.request_header`) with
/// the certificates `tls` holds when it arrives. Requests get `X-Forwarded-Proto:
/// https` and a `Secure` sticky cookie.
pub async fn serve_tls(
    listener: TcpListener,
    ctx: Arc<ProxyCtx>,
    tls: Arc<crate::tls::TlsAcceptor>,
    max_connections: usize,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    accept_loop(listener, ctx, max_connections, shutdown, tracker, Some(tls)).await
}

async fn accept_loop(
    listener: TcpListener,
    ctx: Arc<ProxyCtx>,
    max_connections: usize,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    tls: Option<Arc<crate::tls::TlsAcceptor>>,
) {
    if !ctx.sweeping.swap(true, Ordering::Relaxed) {
        tokio::spawn(sweep_pools(ctx.clone(), shutdown.clone()));
    }
    let permits = ctx
        .permits
        .get_or_init(|| Arc::new(Semaphore::new(max_connections)))
        .clone();
    let backlog = i32::try_from(max_connections).unwrap_or(i32::MAX);
    // Listening again on a listening socket only sets its queue's length (Linux).
    if let Err(e) = rustix::net::listen(&listener, backlog) {
        warn!(error = %e, "cannot lengthen the listener's queue");
    }
    let local_port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    // The mode is the listener's for its life (a restart-only setting).
    let tcp = ctx.settings.load().mode == gearlb_core::config::Mode::Tcp;
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = listener.accept() => r,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: back off briefly instead of spinning.
                warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Every client place taken: a connection may still be a peer's gossip, in the
        // room kept for it (it is closed if it turns out to be anything else).
        let (permit, reserved) = match permits.clone().try_acquire_owned() {
            Ok(p) => (p, false),
            Err(_) => match ctx
                .endpoint
                .as_ref()
                .and(ctx.reserve.clone().try_acquire_owned().ok())
            {
                Some(p) => (p, true),
                None => {
                    ctx.stats
                        .connections_refused
                        .fetch_add(1, Ordering::Relaxed);
                    drop(stream);
                    continue;
                }
            },
        };
        bound_tiny_window(&stream);
        // Counted, permitted and tracked until the connection closes, its tunnel
        // included (the connection task returns when hyper hands an upgrade over).
        let mut session = Session::open(ctx.stats.clone(), permit, tracker.token());
        session.reserved = reserved;
        let ctx = ctx.clone();
        let shutdown = shutdown.clone();
        match &tls {
            None if tcp => tokio::spawn(crate::tcp::serve(
                ctx, session, stream, peer, local_port, shutdown,
            )),
            None => tokio::spawn(async move {
                serve_connection(&ctx, session, stream, peer, local_port, shutdown).await;
            }),
            Some(tls) => {
                let acceptor = tls.acceptor();
                tokio::spawn(async move {
                    serve_tls_connection(
                        &ctx, session, acceptor, stream, peer, local_port, shutdown,
                    )
                    .await;
                })
            }
        };
    }
}

/// Close pooled backend connections idle longer than `timeouts.upstream_idle`, once a
/// second, until `shutdown`.
async fn sweep_pools(ctx: Arc<ProxyCtx>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let max_age = ctx.settings.load().timeouts.upstream_idle;
        for t in ctx.router.load().targets() {
            t.pool.sweep(max_age);
        }
        if let Some(services) = &*ctx.services.load() {
            for s in services.services() {
                if !Arc::ptr_eq(&s.router, &ctx.router) {
                    for t in s.router.load().targets() {
                        t.pool.sweep(max_age);
                    }
                }
            }
        }
    }
}
