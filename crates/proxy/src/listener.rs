//! The listeners: accept client connections under `limits.max_connections`, hand each
//! to its downstream connection task ([`super::downstream`]), and stop accepting at the
//! graceful stop. Also starts the pools' idle sweeper (once, with the first listener).

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
