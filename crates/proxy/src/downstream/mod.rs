//! The downstream connection: one accepted client connection, from accept to close.
//!
//! Owns the life of a client connection (its states and transitions are drawn in
//! `LIFECYCLE.md`, next to this file, and included below) — the session it counts as and
//! the state its task, socket wrapper, requests and tunnel share are
//! [`crate::session`]'s, a leaf the requests and tunnels name too — the socket as hyper
//! sees it
//! ([`socket`]), the HTTP/1.1 byte path that serves plain requests without hyper
//! ([`lane`]), protocol detection ([`protocol`]), the connection's timeouts kept by one
//! watchdog timer and HTTP/2 streams' own timers ([`watchdog`]), giving back an idle
//! HTTP/1 connection's HTTP state ([`parking`]), the lingering close ([`linger`]), and
//! the connection task itself, for plain connections ([`conn`]) and TLS ones ([`tls`]).
//!
//! Cost: an idle connection costs mostly its task's future (kept small, see
//! `connection_task_state_stays_small`) and its [`crate::session::ConnState`];
//! hyper's state is
//! boxed and dropped while the connection is parked. No timer is set per request: the
//! watchdog looks at the connection's atomics (`last_io`, `in_flight`, `idle_since`, the
//! request's [`crate::wait::Wait`]) when it fires.
//!
//! What the requests do once hyper hands them over is [`crate::request`]'s.
//!
#![doc = include_str!("LIFECYCLE.md")]

pub(crate) mod conn;
pub(crate) mod lane;
pub(crate) mod linger;
pub(crate) mod parking;
pub(crate) mod protocol;
pub(crate) mod socket;
pub(crate) mod tls;
pub(crate) mod watchdog;

#[cfg(test)]
mod test_support {
    use std::sync::Arc;

    use tokio_util::sync::CancellationToken;

    use crate::session::Session;
    use crate::shared::{ProxyCtx, Settings};

    pub(super) fn test_session(ctx: &ProxyCtx) -> Session {
        let permit = Arc::new(tokio::sync::Semaphore::new(1))
            .try_acquire_owned()
            .unwrap();
        let tracker = tokio_util::task::TaskTracker::new();
        Session::open(ctx.stats.clone(), permit, tracker.token())
    }

    pub(super) fn test_ctx() -> Arc<ProxyCtx> {
        Arc::new(ProxyCtx::new(
            Arc::new(crate::router::Router::new(4)),
            Arc::default(),
            Settings::from_config(&gearlb_core::config::Config::default()),
            tokio::sync::mpsc::unbounded_channel().0,
            CancellationToken::new(),
        ))
    }
}
