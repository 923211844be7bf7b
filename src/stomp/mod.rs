//! A STOMP 1.2 (1.1 fallback) consumer on tokio, for origin-server's routing SPI events
//! that its ActiveMQ plugin publishes: [`consume`] one destination (a topic, durable or
//! not, or a virtual topic's queue) from a list of brokers, handing each message to a
//! [`Handler`] and ACKing it after (client-individual, never NACK), with heart-beats
//! both ways and reconnection with backoff; [`Status`] says how it goes.
//!
//! Only the frames a consumer needs are spoken: CONNECT, SUBSCRIBE, ACK, DISCONNECT out;
//! CONNECTED, MESSAGE, RECEIPT, ERROR and heart-beats in. A broker cannot make it panic
//! nor allocate without bound (frames are capped: [`Limits`]); anything malformed ends
//! the connection with an error saying what, and the consumer reconnects.
//!
//! - `frame`: a frame as a value, header escaping;
//! - `codec`: the wire format (`tokio_util::codec`), with its limits;
//! - `settings`: [`Settings`], [`Delivery`], [`Handler`];
//! - `session`: one connection, from connect to its end;
//! - `client`: [`consume`], across connections: broker order, backoff, log;
//! - `status`: [`Status`] and its [`StatusReport`];
//! - `error`: why a connection ended.
//!
//! ActiveMQ specifics (5.17): a durable topic subscription is CONNECT's `client-id` plus
//! SUBSCRIBE's `activemq.subscriptionName`, and one connection per client id is allowed
//! (a second gets an ERROR until the broker drops the first). A message received but not
//! ACKed when the connection broke is redelivered on the next one without a
//! `redelivered` header; a NACKed one would go to the dead-letter queue at once.

mod client;
mod codec;
mod error;
mod frame;
mod session;
mod settings;
mod status;

pub use client::consume;
pub use codec::{FrameError, Limits, StompCodec};
pub use error::SessionError;
pub use frame::{Command, Frame, Version};
pub use settings::{Delivery, Handled, Handler, Settings};
pub use status::{Status, StatusReport};
