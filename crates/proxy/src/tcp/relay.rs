//! A TCP connection's relay once its backend is connected: the bytes already read (and
//! a PROXY header) go first, then both ways ([`super::copy`]), counted on the
//! frontend and on the backend, until a side closes, no byte moves for the idle limit,
//! the balancer stops, or the drain deadline cuts the backend's connections.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing::debug;

use crate::io::{ActivityIo, Clock, Counted};
use crate::session::Session;
use crate::shared::{InFlight, ProxyCtx};
use crate::tunnel::{watch, Open};

/// Relay `client` and `server` (after `early` went to the server) until the end; the
/// session and the backend's in-flight count end with it, backend first.
pub(super) async fn run(
    ctx: &Arc<ProxyCtx>,
    session: Session,
    client: TcpStream,
    server: TcpStream,
    early: Vec<u8>,
    flight: InFlight,
    idle: Duration,
) {
    let backend = flight.backend().clone();
    // Taken now: a rotate-in after the cut makes a new token for new connections.
    let kill = backend.pool.kill_token();
    {
        let _open = Open::new(&flight, &ctx.stats);
        let clock = Clock::new();
        let last = Arc::new(AtomicU64::new(0));
        let mut client = ActivityIo::new(
            Counted::new(client, ctx.stats.traffic.clone()),
            clock,
            last.clone(),
        );
        let mut server = Counted::new(server, backend.pool.traffic_handle());
        if !early.is_empty() {
            if let Err(e) = server.write_all(&early).await {
                debug!(backend = %backend.name(), error = %e, "backend closed before the relay");
                backend
                    .stats
                    .response_errors
                    .fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let copy = super::copy::both_ways(&mut client, &mut server);
        let end = watch(copy, clock, &last, idle, &ctx.stopping, &kill).await;
        debug!(backend = %backend.name(), ended = ?end, "TCP connection closed");
    }
    drop(flight);
    drop(session);
}
