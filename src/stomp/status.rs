//! What the consumer is doing, for reports and the health endpoint: written by the
//! consumer, read by anyone without a lock (atomics and `ArcSwap`s).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use serde::Serialize;

use crate::time::unix_ms;

/// The consumer's live state. Share it in an `Arc`; [`Status::snapshot`] for a report.
#[derive(Debug, Default)]
pub struct Status {
    connected: ArcSwapOption<Connected>,
    last_error: ArcSwapOption<Note>,
    attempts: AtomicU64,
    connections: AtomicU64,
    received: AtomicU64,
    acked: AtomicU64,
    last_message_ms: AtomicU64,
}

#[derive(Debug)]
struct Connected {
    broker: String,
    since_ms: u64,
}

#[derive(Debug)]
struct Note {
    text: String,
    at_ms: u64,
}

/// A copy of [`Status`] at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StatusReport {
    /// The broker the consumer is subscribed at (`host:port`), if it is.
    pub broker: Option<String>,
    /// Since when (Unix ms).
    pub connected_since_ms: Option<u64>,
    /// Connections tried (TCP connects), successful or not.
    pub attempts: u64,
    /// Connections that got as far as a subscription.
    pub connections: u64,
    /// Why the last connection failed or ended, and when (Unix ms).
    pub last_error: Option<String>,
    pub last_error_at_ms: Option<u64>,
    /// MESSAGE frames received (a redelivery counts again).
    pub received: u64,
    /// ACKs sent.
    pub acked: u64,
    /// When the last MESSAGE arrived (Unix ms).
    pub last_message_at_ms: Option<u64>,
}

impl Status {
    pub fn new() -> Status {
        Status::default()
    }

    pub fn snapshot(&self) -> StatusReport {
        let connected = self.connected.load_full();
        let error = self.last_error.load_full();
        let last = self.last_message_ms.load(Ordering::Relaxed);
        StatusReport {
            broker: connected.as_ref().map(|c| c.broker.clone()),
            connected_since_ms: connected.as_ref().map(|c| c.since_ms),
            attempts: self.attempts.load(Ordering::Relaxed),
            connections: self.connections.load(Ordering::Relaxed),
            last_error: error.as_ref().map(|e| e.text.clone()),
            last_error_at_ms: error.as_ref().map(|e| e.at_ms),
            received: self.received.load(Ordering::Relaxed),
            acked: self.acked.load(Ordering::Relaxed),
            last_message_at_ms: (last != 0).then_some(last),
        }
    }

    /// Subscribed at a broker now.
    pub fn connected(&self) -> bool {
        self.connected.load().is_some()
    }

    /// The broker subscribed at, if any.
    pub fn broker(&self) -> Option<String> {
        self.connected.load().as_ref().map(|c| c.broker.clone())
    }

    pub(super) fn attempt(&self) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn set_connected(&self, broker: &str) {
        self.connections.fetch_add(1, Ordering::Relaxed);
        self.connected.store(Some(Arc::new(Connected {
            broker: broker.to_string(),
            since_ms: unix_ms(),
        })));
    }

    pub(super) fn set_disconnected(&self) {
        self.connected.store(None);
    }

    pub(super) fn set_error(&self, text: String) {
        self.last_error.store(Some(Arc::new(Note {
            text,
            at_ms: unix_ms(),
        })));
    }

    pub(super) fn received(&self) {
        self.received.fetch_add(1, Ordering::Relaxed);
        self.last_message_ms.store(unix_ms(), Ordering::Relaxed);
    }

    pub(super) fn acked(&self) {
        self.acked.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_follows_updates() {
        let s = Status::new();
        assert_eq!(s.snapshot(), StatusReport::default());
        assert!(!s.connected());
        s.attempt();
        s.set_error("refused".into());
        s.set_connected("127.0.0.1:61613");
        s.received();
        s.acked();
        let r = s.snapshot();
        assert!(s.connected());
        assert_eq!(r.broker.as_deref(), Some("127.0.0.1:61613"));
        assert_eq!(
            (r.attempts, r.connections, r.received, r.acked),
            (1, 1, 1, 1)
        );
        assert_eq!(r.last_error.as_deref(), Some("refused"));
        assert!(r.last_message_at_ms.is_some() && r.connected_since_ms.is_some());
        s.set_disconnected();
        assert!(!s.connected());
        assert_eq!(s.snapshot().broker, None);
        let json = serde_json::to_value(s.snapshot()).unwrap();
        assert_eq!(json["received"], 1);
    }
}
