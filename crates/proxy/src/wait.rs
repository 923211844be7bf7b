//! What a backend exchange is waiting on, for the `client` and `server` timeouts.
//!
//! Owns [`Wait`]: one exchange's current [`Phase`] (waiting on the client, on the
//! backend, or on nothing) and when that wait began, written by the exchange as it
//! goes, and read by whoever keeps time for it: the client connection's watchdog for
//! HTTP/1 (one timer per connection, not per request), or [`watched`] for an HTTP/2
//! stream and for the end of an upload that outlives its response (one timer each,
//! re-armed only when it fires). Both are inactivity timeouts, as HAProxy's `timeout
//! client` and `timeout server` are: a phase's wait starts when it is entered and again
//! whenever bytes move in it, so a slow but steady upload never times out, and a wait
//! on one side never counts against the other.
//!
//! When a wait expires, the timekeeper marks it ([`Wait::expired`]) and polls the
//! exchange again: an exchange still waiting for its response head answers `504`
//! (`408` when it was the client's body it waited for) and clears the mark; a stream
//! whose response already started is cut.

use std::future::{poll_fn, Future};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use super::io::Clock;

/// What an exchange waits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Nothing the timeouts look at (routing, or the client's connection keeps time).
    Idle,
    /// The client: the next piece of its request body, or taking the response.
    Client,
    /// The backend: taking the request, its response head, or its response body.
    Server,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            1 => Phase::Client,
            2 => Phase::Server,
            _ => Phase::Idle,
        }
    }

    fn as_u8(self) -> u8 {
        match self {
            Phase::Idle => 0,
            Phase::Client => 1,
            Phase::Server => 2,
        }
    }
}

/// One exchange's wait (see the module docs). Plain atomics: written and read by one
/// task at a time (the exchange and its timekeeper run in the same task).
#[derive(Debug)]
pub struct Wait {
    clock: Clock,
    on: AtomicU8,
    /// When the current wait began, on `clock` (ms).
    since: AtomicU64,
    /// The phase whose wait ran out, not yet answered; 0: none.
    expired: AtomicU8,
    client_ms: u64,
    server_ms: u64,
}

impl Wait {
    /// A wait with these limits (`timeouts.client`, `timeouts.server`).
    pub fn new(clock: Clock, client: Duration, server: Duration) -> Self {
        Wait {
            clock,
            on: AtomicU8::new(0),
            since: AtomicU64::new(0),
            expired: AtomicU8::new(0),
            client_ms: client.as_millis() as u64,
            server_ms: server.as_millis() as u64,
        }
    }

    pub fn clock(&self) -> Clock {
        self.clock
    }

    pub fn client(&self) -> Duration {
        Duration::from_millis(self.client_ms)
    }

    pub fn server(&self) -> Duration {
        Duration::from_millis(self.server_ms)
    }

    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.on.load(Ordering::Relaxed))
    }

    /// Wait on `p` from now: a new phase, or bytes moved in this one.
    pub fn enter(&self, p: Phase) {
        self.since.store(self.clock.now_ms(), Ordering::Relaxed);
        self.on.store(p.as_u8(), Ordering::Relaxed);
    }

    /// Wait on `p`, counting from now only if that is a change (a poll that moved no
    /// byte must not put the deadline off).
    pub fn enter_if_new(&self, p: Phase) {
        if self.phase() != p {
            self.enter(p);
        }
    }

    /// Waiting on nothing the timeouts look at (no clock read).
    pub fn idle(&self) {
        self.on.store(0, Ordering::Relaxed);
    }

    /// A new exchange: nothing awaited, nothing expired.
    pub fn reset(&self) {
        self.on.store(0, Ordering::Relaxed);
        self.expired.store(0, Ordering::Relaxed);
    }

    /// When the current wait runs out, on the clock (ms); `None` while idle.
    pub fn deadline(&self) -> Option<u64> {
        let limit = match self.phase() {
            Phase::Idle => return None,
            Phase::Client => self.client_ms,
            Phase::Server => self.server_ms,
        };
        Some(self.since.load(Ordering::Relaxed).saturating_add(limit))
    }

    /// The timekeeper found the current wait over.
    pub fn expire(&self) {
        self.expired
            .store(self.on.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// The phase whose wait ran out, until the exchange answered it ([`Wait::reset`]).
    pub fn expired(&self) -> Option<Phase> {
        match self.expired.load(Ordering::Relaxed) {
            0 => None,
            p => Some(Phase::from_u8(p)),
        }
    }
}

/// Run `fut` under `wait`'s deadlines with one timer: when the current wait runs out,
/// it is marked expired and `fut` polled again, so that it can answer (an exchange
/// still waiting for its response head answers 504); if it does not finish then and
/// leaves the mark, it is dropped: `Err` with the phase that ran out. The timer is
/// re-armed only when it fires early (progress moved the deadline) or the deadline
/// came closer (a phase with a shorter limit).
pub async fn watched<F: Future>(wait: &Wait, fut: F) -> Result<F::Output, Phase> {
    // Deadlines are on the coarse clock; the timer is on tokio's.
    let now = Instant::now();
    let epoch = now
        .checked_sub(Duration::from_millis(wait.clock().now_ms()))
        .unwrap_or(now);
    let at = |ms: u64| epoch + Duration::from_millis(ms);
    let mut fut = std::pin::pin!(fut);
    let sleep = tokio::time::sleep_until(now + Duration::from_secs(86_400 * 365));
    let mut sleep = std::pin::pin!(sleep);
    poll_fn(|cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(Ok(v));
        }
        // Bounded: each turn either returns or handles one expiry, after which the
        // exchange has answered (cleared the mark) or is dropped.
        for _ in 0..4 {
            let Some(deadline) = wait.deadline() else {
                return Poll::Pending;
            };
            let due = at(deadline);
            if sleep.deadline() != due {
                sleep.as_mut().reset(due);
            }
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let phase = wait.phase();
            wait.expire();
            if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                return Poll::Ready(Ok(v));
            }
            if wait.expired().is_some() {
                return Poll::Ready(Err(phase));
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(client: u64, server: u64) -> Wait {
        Wait::new(
            Clock::new(),
            Duration::from_secs(client),
            Duration::from_secs(server),
        )
    }

    #[test]
    fn deadlines_follow_the_phase() {
        let w = wait(10, 60);
        assert_eq!(w.deadline(), None);
        w.enter(Phase::Server);
        let since = w.since.load(Ordering::Relaxed);
        assert_eq!(w.deadline(), Some(since + 60_000));
        w.enter(Phase::Client);
        assert!(w.deadline().unwrap() >= since + 10_000);
        assert!(w.deadline().unwrap() < since + 60_000);
        w.since.store(5, Ordering::Relaxed);
        w.enter_if_new(Phase::Client);
        assert_eq!(w.deadline(), Some(10_005), "same phase: the wait goes on");
        w.expire();
        assert_eq!(w.expired(), Some(Phase::Client));
        w.reset();
        assert_eq!((w.expired(), w.deadline()), (None, None));
    }

    /// A future that never finishes and ignores expiry is dropped at the deadline.
    #[tokio::test(start_paused = true)]
    async fn a_wait_that_runs_out_drops_what_ignores_it() {
        let w = wait(2, 5);
        w.enter(Phase::Server);
        let t = Instant::now();
        let r = watched(&w, std::future::pending::<()>()).await;
        assert_eq!(r, Err(Phase::Server));
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(4_900) && took <= Duration::from_millis(5_100),
            "{took:?}"
        );
    }

    /// Progress puts the deadline off: a wait is inactivity, not a total.
    #[tokio::test(start_paused = true)]
    async fn progress_moves_the_deadline_and_an_answered_expiry_goes_on() {
        let w = wait(2, 3);
        w.enter(Phase::Server);
        let t = Instant::now();
        // Bytes move every second for 8 s.
        let busy = async {
            for _ in 1..=8u64 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                w.enter(Phase::Server);
            }
            "done"
        };
        assert_eq!(watched(&w, busy).await, Ok("done"));
        assert!(t.elapsed() >= Duration::from_secs(8));

        // An exchange that answers its expiry (504) and clears the mark finishes.
        let w = wait(2, 3);
        w.enter(Phase::Server);
        let answers = poll_fn(|_| match w.expired() {
            Some(p) => {
                w.reset();
                Poll::Ready(p)
            }
            None => Poll::Pending,
        });
        assert_eq!(watched(&w, answers).await, Ok(Phase::Server));
    }
}
