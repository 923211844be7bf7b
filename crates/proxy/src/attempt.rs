//! One attempt of a request on one backend: a pooled connection or a new one, the
//! request sent, and what a failure leaves (the request handed back untouched, or a
//! replayable head sent again once on a new connection when a pooled one closed under
//! it). The choice among backends and the retries are the caller's ([`super::request`]).

use std::future::Future as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;

use http::Method;
use tracing::debug;

use super::error::ForwardError;
use super::h1::ReqFraming;
use super::shared::Settings;
use super::upstream::{
    self, Answer, Check, Conn, FailedAt, Outgoing, ReqBody, RetryType, SendFailure,
};
use super::wait::{Phase, Wait};
use crate::router::Target;

/// Methods whose requests may be sent twice (RFC 9110 §9.2.2).
pub(super) fn idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    )
}

/// What is needed to send a body-less request again: its head as it went on the wire.
pub(super) struct Replay(pub(super) Outgoing);

impl Replay {
    pub(super) fn request(&self) -> Outgoing {
        Outgoing {
            head: self.0.head.clone(),
            method: self.0.method.clone(),
            framing: ReqFraming::Empty,
            body: ReqBody::Empty,
        }
    }
}

/// What every attempt of one request shares.
pub(super) struct Sending<'a> {
    /// How a pooled connection is checked before the request goes into it.
    pub(super) check: Check,
    /// The head to send again, when the request may be replayed.
    pub(super) replay: Option<&'a Replay>,
    /// The exchange's wait (its timeouts).
    pub(super) wait: &'a Wait,
    /// Where interim responses go.
    pub(super) interim: upstream::Interim<'a>,
}

/// One attempt's outcome when it did not produce a response, with what the retry
/// decision table ([`upstream::decide`], [`upstream::blames`]) says of it: the caller
/// acts on `retry` and `blamed`, and decides nothing itself.
pub(super) struct Failed {
    pub(super) error: ForwardError,
    /// [`RetryType::Elsewhere`], [`RetryType::ReplayElsewhere`] or [`RetryType::Never`]
    /// (the same backend's retries are this attempt's own).
    pub(super) retry: RetryType,
    /// Counted toward the backend's passive ejection.
    pub(super) blamed: bool,
    /// The request, untouched, when not one byte of it left.
    pub(super) unsent: Option<Box<Outgoing>>,
}

impl Failed {
    /// A failure at `at`, as the table decides it for `attempt`.
    fn at(
        at: FailedAt,
        attempt: upstream::Attempt,
        error: ForwardError,
        unsent: Option<Box<Outgoing>>,
    ) -> Self {
        Failed {
            error,
            retry: upstream::decide(at, attempt),
            blamed: upstream::blames(at, attempt),
            unsent,
        }
    }
}

/// One attempt on one backend: a pooled connection (one the backend closed meanwhile
/// hands the request back untouched, so try the next) or a new one, then the request.
///
/// A pooled connection can also be closed by the backend while the request goes out
/// (its keep-alive timeout, a restart): the request is written and nothing comes back.
/// A request that can be `replay`ed is then sent again, once, on a new connection to
/// the same backend, and the backend is not blamed (as nginx does for its cached
/// connections). Without this, with one gear or `proxy.retries = 0`, a GET would get a
/// 502 for a race of the connection's, not a fault of the gear's.
pub(super) async fn send_once(
    settings: &Settings,
    backend: &Arc<Target>,
    mut req: Outgoing,
    sending: &Sending<'_>,
) -> Result<(Answer, Conn), Failed> {
    let Sending {
        check,
        replay,
        wait,
        interim,
    } = *sending;
    let t = &settings.timeouts;
    // Sent again already after a pooled connection closed under it: new connections only.
    let mut resent = false;
    loop {
        let attempt = |fresh: bool| upstream::Attempt {
            reused: !fresh,
            resent,
            replayable: replay.is_some(),
        };
        let pooled = if resent {
            None
        } else {
            backend.pool.checkout_idle(t.upstream_idle, check)
        };
        let (mut up, fresh) = match pooled {
            Some(c) => (c, false),
            None => match connect(backend, settings).await {
                Ok(c) => {
                    backend
                        .stats
                        .connections_opened
                        .fetch_add(1, Ordering::Relaxed);
                    (c, true)
                }
                Err(e) => {
                    backend.stats.connect_errors.fetch_add(1, Ordering::Relaxed);
                    let (error, unsent) = (ForwardError::Connect(e), Some(Box::new(req)));
                    return Err(Failed::at(FailedAt::Connect, attempt(true), error, unsent));
                }
            },
        };
        let sent = {
            let exchange = upstream::send(&mut up, req, wait, interim);
            // Its timekeeper (the connection's watchdog for HTTP/1, the stream's timer
            // for HTTP/2) marks a wait that ran out and has it polled again at once.
            let mut exchange = std::pin::pin!(exchange);
            std::future::poll_fn(|cx| match exchange.as_mut().poll(cx) {
                Poll::Ready(r) => Poll::Ready(Ok(r)),
                Poll::Pending => match wait.expired() {
                    Some(p) => Poll::Ready(Err(p)),
                    None => Poll::Pending,
                },
            })
            .await
        };
        match sent {
            Err(phase) => {
                // Answered here: the mark is cleared.
                wait.reset();
                let error = if phase == Phase::Client {
                    ForwardError::ClientTimeout(t.client)
                } else {
                    backend.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                    ForwardError::Timeout(t.server)
                };
                return Err(Failed::at(FailedAt::Timeout, attempt(fresh), error, None));
            }
            Ok(Ok(answer)) => {
                wait.idle();
                return Ok((answer, up));
            }
            Ok(Err(failure)) => {
                // Whether and where to try again is decided once, on the failure itself
                // (`upstream::retry`, a table test of every case).
                let at = failure.failed_at(&up);
                let retry = upstream::decide(at, attempt(fresh));
                match (failure, retry, replay) {
                    // A pooled connection the backend had closed: the request never left.
                    (SendFailure::NotSent(back, _), RetryType::NextConnection, _) => {
                        req = *back;
                    }
                    // A pooled connection the backend closed as the request went out:
                    // not one byte came back.
                    (SendFailure::Sent(e), RetryType::Resend, Some(r)) => {
                        debug!(backend = %backend.name(), error = %e, "pooled connection closed under the request, sending it again on a new one");
                        resent = true;
                        req = r.request();
                    }
                    (SendFailure::Sent(e), _, _) if at == FailedAt::ClientBody => {
                        let error = ForwardError::ClientBody(e);
                        return Err(Failed::at(at, attempt(fresh), error, None));
                    }
                    (failure, _, _) => {
                        backend
                            .stats
                            .response_errors
                            .fetch_add(1, Ordering::Relaxed);
                        let (error, unsent) = match failure {
                            SendFailure::NotSent(back, e) => (e, Some(back)),
                            SendFailure::Sent(e) => (e, None),
                        };
                        let error = ForwardError::Upstream(error);
                        return Err(Failed::at(at, attempt(fresh), error, unsent));
                    }
                }
            }
        }
    }
}

/// A new connection to `backend` (its name resolved through its pool's cache).
async fn connect(backend: &Target, settings: &Settings) -> Result<Conn, upstream::ConnectError> {
    backend.pool.resolver().set_ttl(settings.dns_ttl);
    backend
        .pool
        .connect(&backend.spec.addr, settings.timeouts.connect)
        .await
}
