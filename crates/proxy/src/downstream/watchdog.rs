//! The downstream connection's timeouts, kept by one timer per connection (not one per
//! request): [`check_deadlines`], which the connection task's watchdog runs, and the
//! executor that gives each HTTP/2 stream a timer of its own ([`StreamExec`]).
//!
//! - `client`: no byte moved while the balancer waits on the client (not while its
//!   request waits on a backend);
//! - `server`: an HTTP/1 request's wait on its backend (see
//!   [`Wait`](crate::wait::Wait)), marked expired here and answered `504` by the
//!   request;
//! - `request_header`: from the moment the connection waits for a request head (accept,
//!   or the end of the previous response) until a complete head arrived, and again
//!   from a head's end for a small body the byte path reads whole behind it; this also
//!   bounds how long an idle keep-alive connection is kept. Closed without a response,
//!   as hyper's own header timeout would. An HTTP/2 connection is bounded so while it
//!   has no stream open (then GOAWAY, and [`GOAWAY_GRACE_MS`] for it to go out), PINGs
//!   or not; its streams keep their own `client` and `server` timeouts, each with a
//!   timer ([`StreamExec`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::debug;

use crate::session::ConnState;
use crate::wait::{watched, Phase};

/// How long an idle HTTP/2 connection sent GOAWAY has to let it go out before it closes.
pub(super) const GOAWAY_GRACE_MS: u64 = 1000;

/// The client's inactivity and head timeouts at `now`: `Err(counted)` when the
/// connection must close (`counted`: it was the client timeout), else the next time to
/// look again. Also marks an HTTP/1 request's wait on a backend as expired when it
/// passed `timeouts.server` (see [`Wait`](crate::wait::Wait)): the connection
/// task polls the request right after this, and it answers `504`.
///
/// - `client` (HAProxy's `timeout client`): no byte moved from or to the client, while
///   nothing waits on a backend. An HTTP/2 connection with streams open is left to its
///   streams' own timeouts (as HAProxy's h2 mux does): the connection is bounded once
///   it has none.
/// - `request_header` (`head_ms`; HAProxy's `timeout http-request`, and
///   `http-keep-alive`): no request in flight for that long since the last one ended
///   (or the accept, or the byte path's head whose body it reads whole): no complete
///   head, or body, arrived. For HTTP/2 this bounds an idle
///   connection however many PINGs keep it busy, and a HEADERS never completed.
pub(super) fn check_deadlines(
    st: &ConnState,
    now: u64,
    client_ms: u64,
    head_ms: u64,
    streams: bool,
) -> Result<u64, bool> {
    let last = st.last_io.load(Ordering::Relaxed);
    let busy = st.in_flight.load(Ordering::Relaxed) > 0;
    let on_server = st.wait.phase() == Phase::Server;
    let exempt = on_server || (streams && busy);
    let idle_ms = now.saturating_sub(last);
    if !exempt && idle_ms >= client_ms {
        return Err(true);
    }
    let mut next = now
        + if exempt {
            client_ms
        } else {
            client_ms - idle_ms
        };
    if on_server {
        if let Some(deadline) = st.wait.deadline() {
            if now >= deadline {
                st.wait.expire();
            } else {
                next = next.min(deadline);
            }
        }
    }
    if busy {
        // A request may start waiting at any time: look again within a tick.
        next = next.min(now + st.tick_ms);
    } else {
        let since = st.idle_since.load(Ordering::Relaxed);
        let waited = now.saturating_sub(since);
        if waited >= head_ms {
            return Err(false);
        }
        next = next.min(now + head_ms - waited);
    }
    Ok(next)
}

/// The executor of a client connection's HTTP/2 streams: each stream is spawned under
/// its own [`Wait`](crate::wait::Wait) (handed over by the service that made
/// it), kept by one timer ([`watched`]): a stream waiting too long on the client (its
/// request body, or a window to send the response in) or on the backend is answered
/// `504`/`408` if it can still be, and otherwise reset (`RST_STREAM`), which closes its
/// backend connection. Without it, a client granting no window would hold a backend connection
/// per stream for as long as it keeps the connection.
#[derive(Clone)]
pub(super) struct StreamExec(pub(super) Arc<ConnState>);

impl<F> hyper::rt::Executor<F> for StreamExec
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        let Some(wait) = self.0.handoff.swap(None) else {
            tokio::spawn(fut);
            return;
        };
        let stats = self.0.ctx.stats.clone();
        let peer = self.0.client.peer;
        tokio::spawn(async move {
            if let Err(phase) = watched(&wait, fut).await {
                if phase == Phase::Client {
                    stats.client_timeouts.fetch_add(1, Ordering::Relaxed);
                }
                debug!(client = %peer, ?phase, "HTTP/2 stream reset: no progress in time");
            }
        });
    }
}
