//! Upgraded connections (WebSocket and other `Connection: Upgrade` protocols).
//!
//! Owns the byte tunnel between a client and a backend once both sides switched
//! protocols: copied both ways, closed after `timeouts.tunnel` without traffic, when the
//! balancer stops, or when the backend's tunnels are closed (drain deadline). Every open
//! tunnel is counted on its backend so drain can see it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::io::{ActivityIo, Clock, Counted};
use crate::routing::Backend;

/// Counts a tunnel on its backend until dropped.
struct Open(Arc<Backend>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.tunnels.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Wait for the client's upgrade, pass on what the backend sent after its `101`
/// (`server.1`), then copy bytes until either side closes, `idle` passes without
/// traffic, or `stop` is cancelled.
pub async fn run(
    client: OnUpgrade,
    server: (Counted<TcpStream>, Bytes),
    backend: Arc<Backend>,
    idle: Duration,
    stop: CancellationToken,
    kill: CancellationToken,
) {
    backend.tunnels.fetch_add(1, Ordering::Relaxed);
    let _open = Open(backend.clone());
    let (mut server, early) = server;
    let client = match client.await {
        Ok(c) => c,
        Err(e) => {
            debug!(error = %e, "client upgrade did not complete");
            return;
        }
    };
    let clock = Clock::new();
    let last = Arc::new(AtomicU64::new(0));
    // Both directions pass through the client side: watching it sees all traffic.
    let mut client = ActivityIo::new(TokioIo::new(client), clock, last.clone());
    if !early.is_empty() {
        if let Err(e) = client.write_all(&early).await {
            debug!(error = %e, "tunnel closed before it started");
            return;
        }
    }
    let copy = tokio::io::copy_bidirectional(&mut client, &mut server);
    tokio::pin!(copy);
    let watchdog = tokio::time::sleep(idle);
    tokio::pin!(watchdog);
    loop {
        tokio::select! {
            r = &mut copy => {
                debug!(backend = %backend.name(), result = ?r, "tunnel closed");
                return;
            }
            _ = stop.cancelled() => {
                debug!(backend = %backend.name(), "tunnel closed by the balancer");
                return;
            }
            _ = kill.cancelled() => {
                debug!(backend = %backend.name(), "tunnel closed at the drain deadline");
                return;
            }
            _ = &mut watchdog => {
                let quiet = clock.now_ms().saturating_sub(last.load(Ordering::Relaxed));
                let limit = idle.as_millis() as u64;
                if quiet >= limit {
                    debug!(backend = %backend.name(), "tunnel idle for {idle:?}, closed");
                    return;
                }
                watchdog.as_mut().reset(tokio::time::Instant::now() + Duration::from_millis(limit - quiet));
            }
        }
    }
}
