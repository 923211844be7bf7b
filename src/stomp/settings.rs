//! What the consumer is told ([`Settings`]), what it hands over ([`Delivery`]) and to
//! whom ([`Handler`]).

use std::time::Duration;

use bytes::Bytes;

/// How to reach the brokers and what to consume.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `host:port` of each broker, tried in order, then around again.
    pub brokers: Vec<String>,
    /// `/topic/routinginfo`, or a virtual topic's queue,
    /// `/queue/Consumer.<router>.VirtualTopic.routinginfo`.
    pub destination: String,
    pub login: Option<String>,
    pub passcode: Option<String>,
    /// CONNECT's `client-id`. ActiveMQ allows one connection per client id, and a
    /// durable subscription belongs to one.
    pub client_id: String,
    /// Set: a durable topic subscription of that name (SUBSCRIBE's
    /// `activemq.subscriptionName`); what is published while the consumer is away is
    /// kept for it.
    pub subscription_name: Option<String>,
    /// What we promise to send and ask the broker to send (`heart-beat:cx,cy`). A broker
    /// silent for 2.5 times the interval it agreed to is taken for dead. Zero: none.
    pub heartbeat: Duration,
    /// `activemq.prefetchSize`: messages the broker may send ahead of ACKs (1: the next
    /// message comes only once this one is ACKed).
    pub prefetch: u32,
    /// For the TCP connect and for the broker's CONNECTED answer, each.
    pub connect_timeout: Duration,
    /// Reconnect backoff: 250 ms, doubling after each round of the broker list that
    /// failed, up to this.
    pub max_backoff: Duration,
}

impl Settings {
    /// Settings for one broker and a non-durable subscription, with the defaults a
    /// router uses: 5 s heart-beats, prefetch 1, 5 s connect timeout, 30 s max backoff.
    pub fn new(broker: impl Into<String>, destination: impl Into<String>) -> Settings {
        Settings {
            brokers: vec![broker.into()],
            destination: destination.into(),
            login: None,
            passcode: None,
            client_id: default_client_id(),
            subscription_name: None,
            heartbeat: Duration::from_secs(5),
            prefetch: 1,
            connect_timeout: Duration::from_secs(5),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// `gearlb-<hostname>-<pid>`, like origin-server's daemon's `hostname-pid` (a durable
/// subscriber must set a stable one of its own).
fn default_client_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("gearlb-{}-{}", host.trim(), std::process::id())
}

/// One MESSAGE, as the handler gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The `message-id` header (unescaped: ActiveMQ's hold colons).
    pub message_id: String,
    /// The `destination` header: where it was published (a virtual topic's message
    /// names the topic).
    pub destination: String,
    /// ActiveMQ's `timestamp` header: when the broker got it, Unix milliseconds.
    pub timestamp_ms: Option<u64>,
    /// `redelivered:true`. ActiveMQ 5.17 does not set it on a message redelivered after
    /// a broken connection, so a handler must not count on it.
    pub redelivered: bool,
    /// Every header, unescaped, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Delivery {
    /// The first header of that name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What became of a message handed to a [`Handler`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled {
    /// Taken (applied, or refused for good): ACK it.
    Ack,
    /// Not taken (it could not be saved, the consumer stops): leave it unacknowledged.
    /// The consumer ends the session (unless it is stopping anyway), so that the
    /// broker delivers it again; it never NACKs it.
    Keep,
}

/// Who gets the messages.
#[async_trait::async_trait]
pub trait Handler: Send + Sync {
    /// Called for each MESSAGE, one at a time, in delivery order. When it returns
    /// [`Handled::Ack`], the message is ACKed (client-individual). The consumer never
    /// NACKs (ActiveMQ dead-letters a NACKed message at once: it would be lost).
    ///
    /// The same message may come again (its ACK was lost with the connection; the broker
    /// redelivers it, without saying so): handling must be idempotent. The consumer polls
    /// this future on its own task, between reads and heart-beats: it may take long
    /// (an fsync through `spawn_blocking`) but must not block the thread.
    async fn handle(&self, delivery: Delivery) -> Handled;
}
