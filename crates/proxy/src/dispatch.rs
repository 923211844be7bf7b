//! A request's way to a backend: the backend chosen (the sticky one first, then by the
//! router, then any not tried yet), a slot taken where backends have a connection
//! limit, each attempt sent ([`super::attempt`]), and what a failure leaves decided by
//! the retry table ([`super::upstream::retry`]): another backend, the head replayed,
//! or the error. The same for requests from hyper's servers ([`super::request`]) and
//! from the byte path (`downstream::lane`): what comes back is the backend's answer,
//! which each turns into its client's response.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::time::Instant;
use tracing::debug;

use super::attempt::{send_once, Replay, Sending};
use super::error::ForwardError;
use super::h1;
use super::health::EjectSender;
use super::respond::usable;
use super::router::{Router, Target};
use super::services::Service;
use super::session::ConnState;
use super::shared::{InFlight, ProxyCtx, Settings};
use super::upstream::{self, Answer, Check, Conn, Outgoing, RetryType};
use super::wait::Wait;
use gearlb_core::routing::sticky::Sticky;
use gearlb_core::time::unix_secs;
use http::HeaderValue;

/// What every attempt of one request shares.
pub(super) struct Dispatch<'a> {
    pub(super) conn: &'a Arc<ConnState>,
    pub(super) settings: &'a Settings,
    pub(super) router: &'a Router,
    pub(super) ejections: &'a EjectSender,
    /// The backend the sticky cookie names, tried first.
    pub(super) pinned: Option<Arc<Target>>,
    /// The head to send again, when the request may be replayed.
    pub(super) replay: Option<&'a Replay>,
    pub(super) wait: &'a Arc<Wait>,
    pub(super) interim: upstream::Interim<'a>,
}

/// A backend's answer: its response head, the rest of an upload it answered early,
/// its connection, and the request's count on it.
pub(super) struct Dispatched {
    pub(super) head: h1::Head,
    pub(super) upload: Option<Box<upstream::Upload>>,
    pub(super) conn: Conn,
    pub(super) backend: Arc<Target>,
    pub(super) flight: InFlight,
}

impl Dispatched {
    /// The transfer codings the body keeps for the client (`respond::usable`), or the
    /// answer is one the client cannot be given: the backend's response error, counted,
    /// and its connection goes with this answer.
    pub(super) fn usable(
        &self,
        asked_upgrade: Option<&HeaderValue>,
        client: http::Version,
    ) -> Result<Option<HeaderValue>, (ForwardError, Option<Arc<Target>>)> {
        usable(&self.head, asked_upgrade, client).map_err(|why| {
            let errors = &self.backend.stats.response_errors;
            errors.fetch_add(1, Ordering::Relaxed);
            (ForwardError::BadResponse(why), Some(self.backend.clone()))
        })
    }

    /// The sticky cookie the client gets: none when the cookie it sent already names
    /// the backend that answered.
    pub(super) fn cookie_to_set<'s>(
        &self,
        sticky: Option<&'s Sticky>,
        pinned: Option<&Arc<Target>>,
    ) -> Option<&'s Sticky> {
        sticky.filter(|_| pinned.is_none_or(|p| !Arc::ptr_eq(p, &self.backend)))
    }
}

/// The service a request for `host` and `path` goes to: none where the listener has no
/// services (its own router serves it), `NoRoute` where no route matches.
pub(super) fn service_for(
    ctx: &ProxyCtx,
    host: &str,
    path: &str,
) -> Result<Option<Arc<Service>>, ForwardError> {
    match &*ctx.services.load() {
        None => Ok(None),
        Some(services) => match services.lookup(host, path) {
            Some(s) => Ok(Some(s.clone())),
            None => Err(ForwardError::NoRoute),
        },
    }
}

/// The router, settings and ejection channel a request's attempts use: its service's,
/// or the listener's own.
pub(super) fn scope<'a>(
    ctx: &'a ProxyCtx,
    service: &'a Option<Arc<Service>>,
    settings: &'a Settings,
) -> (&'a Router, &'a Settings, &'a EjectSender) {
    match service {
        Some(s) => (&*s.router, &*s.settings, &s.ejections),
        None => (&*ctx.router, settings, ctx.ejections()),
    }
}

/// The backend a request's sticky `cookie` names, if usable, and the Unix time sealed
/// cookies are read and made at (0 when they are not sealed: only they need the clock).
pub(super) fn sticky_pin(
    sticky: Option<&Sticky>,
    cookie: Option<Vec<u8>>,
    router: &Router,
) -> (u64, Option<Arc<Target>>) {
    let now = if sticky.is_some_and(Sticky::is_sealed) {
        unix_secs()
    } else {
        0
    };
    let pinned = match (sticky, cookie) {
        (Some(s), Some(raw)) => s
            .decode(&raw, now)
            .and_then(|v| router.load().sticky_target(&v).cloned()),
        _ => None,
    };
    (now, pinned)
}

/// Whether the client's connection is HTTPS, or (when forwarded headers are trusted)
/// says it came over HTTPS: the sticky cookie is then `Secure`.
pub(super) fn secure(conn: &ConnState, forwarded_proto: Option<&[u8]>) -> bool {
    conn.client.scheme == "https"
        || (conn.client.trusted
            && forwarded_proto.is_some_and(|v| v.eq_ignore_ascii_case(b"https")))
}

/// Send `req` to a backend, trying others as the retry table says; the answer, or the
/// error and the last backend tried.
pub(super) async fn dispatch(
    d: &Dispatch<'_>,
    mut req: Outgoing,
) -> Result<Dispatched, (ForwardError, Option<Arc<Target>>)> {
    let Dispatch {
        conn,
        settings,
        router,
        ejections,
        ref pinned,
        replay,
        wait,
        interim,
    } = *d;
    let ctx = &conn.ctx;
    // A request that cannot be replayed must not be written into a pooled connection
    // the backend has just closed: those are checked with the kernel, not only with
    // the readiness the runtime recorded.
    let check = if replay.is_some() {
        Check::Recorded
    } else {
        Check::Kernel
    };
    let mut tried: Vec<Arc<Target>> = Vec::new();
    let mut last_error = ForwardError::NoBackend;
    let mut last: Option<Arc<Target>> = None;

    for attempt in 0..=settings.retries {
        let chosen = match (&pinned, attempt) {
            (Some(p), 0) => Some(p.clone()),
            (None, 0) => router
                .load()
                .select_for(&conn.affinity, settings.connection_affinity)
                .cloned(),
            _ => router.load().select_excluding(&tried).cloned(),
        };
        let Some(backend) = chosen else { break };
        last = Some(backend.clone());
        if let Some(slots) = &backend.slots {
            if !take_slot(slots, &backend, settings.queue_timeout).await {
                return Err((ForwardError::QueueTimeout(settings.queue_timeout), last));
            }
        }
        // Gives the slot back when the response is over.
        let flight = InFlight::start(backend.clone());
        let attempt_started = Instant::now();
        let sending = Sending {
            check,
            replay,
            wait,
            interim,
        };
        match send_once(settings, &backend, req, &sending).await {
            Ok((Answer { head, upload }, up)) => {
                backend.stats.response_head(attempt_started.elapsed());
                ctx.passive_success(&backend);
                return Ok(Dispatched {
                    head,
                    upload,
                    conn: up,
                    backend,
                    flight,
                });
            }
            Err(failed) => {
                // Blame and where to go next are the retry table's (`upstream::retry`).
                conn.affinity.forget();
                if failed.blamed {
                    ctx.passive_failure(ejections, &backend, settings.eject_after);
                }
                let e = failed.error;
                let next = match (failed.retry, failed.unsent, replay) {
                    (RetryType::Elsewhere, Some(unsent), _) => {
                        debug!(backend = %backend.name(), error = %e, "backend unreachable, trying another");
                        *unsent
                    }
                    (RetryType::ReplayElsewhere, _, Some(r)) => {
                        debug!(backend = %backend.name(), error = %e, "backend failed, replaying elsewhere");
                        r.request()
                    }
                    _ => return Err((e, last)),
                };
                backend.stats.redispatches.fetch_add(1, Ordering::Relaxed);
                req = next;
                last_error = e;
            }
        }
        tried.push(backend);
    }
    Err((last_error, last))
}

/// A slot on a backend with a connection limit: at once when one is free, else after
/// the requests queued before this one (FIFO), within `timeout`; false at the timeout.
/// The slot is the request's [`InFlight`]'s to give back.
pub(crate) async fn take_slot(
    slots: &tokio::sync::Semaphore,
    backend: &Target,
    timeout: std::time::Duration,
) -> bool {
    if let Ok(slot) = slots.try_acquire() {
        slot.forget();
        return true;
    }
    backend.queued.fetch_add(1, Ordering::Relaxed);
    let slot = tokio::time::timeout(timeout, slots.acquire()).await;
    backend.queued.fetch_sub(1, Ordering::Relaxed);
    match slot {
        Ok(Ok(slot)) => {
            slot.forget();
            true
        }
        _ => false,
    }
}
