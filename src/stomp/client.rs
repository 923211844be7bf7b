//! The consumer's life across connections: which broker to try next, how long to wait
//! before, what the log says about it (once per outage, not once per retry), and the
//! status.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::session::{self, End};
use super::settings::{Handler, Settings};
use super::status::Status;

/// The first reconnect delay.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// A session subscribed this long was a real one: the backoff starts over after it.
const STABLE: Duration = Duration::from_secs(10);

/// Consume until `stop` is cancelled: connect to the first broker that answers,
/// subscribe with `ack:client-individual`, hand each message to `handler` and ACK it
/// after, keep heart-beats both ways (also while the handler runs: a slow handler does
/// not get the connection dropped), and on any break (refused, reset, ERROR frame,
/// heart-beat silence, EOF, a malformed frame) reconnect to the next broker after a
/// backoff (250 ms doubling after each failed round of the list, up to
/// `max_backoff`), and subscribe again.
///
/// At least once, not exactly once: a message whose handler finished but whose ACK
/// could not be sent (the connection broke meanwhile) is redelivered by the broker
/// later, so the handler must be idempotent. Messages are never NACKed.
///
/// On stop: a message being handled is let finish and ACKed if the connection still
/// stands, then DISCONNECT with a receipt (waited for 2 s at most). Dropping the future
/// instead abandons the message being handled, unACKed (the broker redelivers it).
pub async fn consume(
    settings: Settings,
    handler: Arc<dyn Handler>,
    status: Arc<Status>,
    stop: CancellationToken,
) {
    let s = &settings;
    if s.brokers.is_empty() {
        error!(destination = %s.destination, "STOMP consumer: no broker to connect to");
        status.set_error("no broker to connect to".to_string());
        stop.cancelled().await;
        return;
    }
    let mut outage = Outage::default();
    // Consecutive sessions that failed (or did not last), for the backoff.
    let mut failures: u32 = 0;
    for broker in s.brokers.iter().cycle() {
        if stop.is_cancelled() {
            break;
        }
        status.attempt();
        let mut on_subscribed = |neg: &session::Negotiated| {
            let hb = |d: Option<Duration>| d.map_or(0, |d| d.as_millis() as u64);
            match outage.since.take() {
                Some(since) => info!(
                    broker = %broker,
                    destination = %s.destination,
                    down_for = ?since.elapsed(),
                    failed_attempts = outage.failures,
                    "STOMP consumer subscribed again"
                ),
                None => info!(
                    broker = %broker,
                    destination = %s.destination,
                    version = neg.version.as_str(),
                    server = neg.server.as_deref().unwrap_or(""),
                    heartbeat_send_ms = hb(neg.send_every),
                    heartbeat_expect_ms = hb(neg.expect_every),
                    "STOMP consumer subscribed"
                ),
            }
            outage.failures = 0;
        };
        let out = session::run(broker, s, &handler, &status, &stop, &mut on_subscribed).await;
        status.set_disconnected();
        let e = match out.end {
            End::Stopped => {
                info!(broker = %broker, destination = %s.destination, "STOMP consumer stopped");
                return;
            }
            End::Failed(e) => e,
        };
        status.set_error(format!("{broker}: {e}"));
        let lasted = out.subscribed_at.map(|t| t.elapsed());
        if lasted.is_some_and(|d| d >= STABLE) {
            failures = 0;
        }
        failures = failures.saturating_add(1);
        let wait = backoff(failures, s.brokers.len(), s.max_backoff);
        outage.failed(broker, &e, lasted.is_some(), wait);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => break,
        }
    }
    info!(destination = %s.destination, "STOMP consumer stopped");
}

/// The wait after the `failures`th failure in a row with `brokers` brokers: 250 ms,
/// doubled after each round of the list, up to `max`.
pub fn backoff(failures: u32, brokers: usize, max: Duration) -> Duration {
    let rounds = (failures.saturating_sub(1) as usize) / brokers.max(1);
    let factor = 1u32 << rounds.min(20);
    FIRST_BACKOFF.saturating_mul(factor).min(max)
}

/// A time without a subscription, for the log: one warning when it starts, debug lines
/// while it lasts, one info line when it ends.
#[derive(Default)]
struct Outage {
    since: Option<Instant>,
    failures: u64,
}

impl Outage {
    fn failed(
        &mut self,
        broker: &str,
        e: &super::error::SessionError,
        was_up: bool,
        wait: Duration,
    ) {
        self.failures += 1;
        if self.since.is_some() {
            debug!(broker = %broker, error = %e, failures = self.failures, retry_in = ?wait, "STOMP consumer: still no broker");
            return;
        }
        self.since = Some(Instant::now());
        if was_up {
            warn!(broker = %broker, error = %e, "STOMP consumer: connection lost; reconnecting (retries logged at debug until subscribed again)");
        } else {
            warn!(broker = %broker, error = %e, "STOMP consumer: cannot subscribe at the broker; retrying with backoff (retries logged at debug until subscribed)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_round_up_to_the_max() {
        let max = Duration::from_secs(5);
        let one: Vec<u64> = (1..=7)
            .map(|f| backoff(f, 1, max).as_millis() as u64)
            .collect();
        assert_eq!(one, [250, 500, 1000, 2000, 4000, 5000, 5000]);
        let two: Vec<u64> = (1..=6)
            .map(|f| backoff(f, 2, max).as_millis() as u64)
            .collect();
        assert_eq!(two, [250, 250, 500, 500, 1000, 1000]);
        assert_eq!(backoff(u32::MAX, 1, max), max);
        assert_eq!(backoff(1, 0, Duration::from_millis(100)).as_millis(), 100);
    }
}
