//! [`Codec`]: chitchat's own message encoder and decoder, reached through a private
//! loopback socket pair (chitchat 0.13 keeps its wire format crate-private).

use std::net::SocketAddr;
use std::time::Duration;

use chitchat::transport::{Socket, UdpSocket as ChitchatUdp};
use chitchat::{ChitchatEnvelope, ChitchatMessage};
use tokio::net::UdpSocket;

/// The longest encoding of an `Ack` that carries no change: chitchat's header (magic
/// number, protocol version, message type) and the end of an empty block stream.
const EMPTY_ACK_LEN: usize = 4 + 1;
/// chitchat 0.13's magic number (little endian) and protocol version 0.
const CHITCHAT_PREFIX: [u8; 3] = [0x53, 0xb0, 0];

/// Whether `envelope`, encoded as `bytes`, is an `Ack` with nothing in it: the last
/// message of an exchange in which the peer needed nothing from this balancer (what
/// every idle exchange ends with). Its receiver would only discard it, so it need not
/// be sent: a third of idle gossip's messages. A delta with any change has at least
/// one block, so it never fits in [`EMPTY_ACK_LEN`].
pub fn is_empty_ack(envelope_is_ack: bool, bytes: &[u8]) -> bool {
    envelope_is_ack && bytes.len() <= EMPTY_ACK_LEN
}

/// Whether the envelope is an `Ack` (see [`is_empty_ack`]).
pub fn is_ack(envelope: &ChitchatEnvelope) -> bool {
    matches!(envelope.message, ChitchatMessage::Ack { .. })
}

/// chitchat's own encoder and decoder, reached through a private loopback socket pair.
pub struct Codec {
    inner: ChitchatUdp,
    inner_addr: SocketAddr,
    tap: UdpSocket,
    tap_addr: SocketAddr,
    buf: Vec<u8>,
}

impl Codec {
    pub async fn new() -> anyhow::Result<Codec> {
        let inner = ChitchatUdp::open(([127, 0, 0, 1], 0).into()).await?;
        let inner_addr = inner.local_addr()?;
        let tap = UdpSocket::bind(("127.0.0.1", 0)).await?;
        let tap_addr = tap.local_addr()?;
        Ok(Codec {
            inner,
            inner_addr,
            tap,
            tap_addr,
            buf: vec![0u8; 65_536],
        })
    }

    /// The bytes chitchat would put on the wire for `envelope`.
    pub async fn encode(&mut self, envelope: ChitchatEnvelope) -> anyhow::Result<Vec<u8>> {
        self.inner.send(self.tap_addr, envelope).await?;
        loop {
            let (n, from) =
                tokio::time::timeout(Duration::from_secs(1), self.tap.recv_from(&mut self.buf))
                    .await??;
            // Anything not from our own encoder is a stray datagram: ignore it.
            if from == self.inner_addr {
                return Ok(self.buf[..n].to_vec());
            }
        }
    }

    /// The envelope in `bytes`, if chitchat can read it.
    pub async fn decode(&mut self, bytes: &[u8]) -> Option<ChitchatEnvelope> {
        // Not even chitchat's magic number and version: refused at once, rather than
        // after the wait below (each such message would hold every later one up).
        if !bytes.starts_with(&CHITCHAT_PREFIX) {
            return None;
        }
        self.tap.send_to(bytes, self.inner_addr).await.ok()?;
        // chitchat's socket skips what it cannot decode, so bound the wait.
        let deadline = tokio::time::Instant::now() + Duration::from_millis(200);
        loop {
            let out = tokio::time::timeout_at(deadline, self.inner.recv())
                .await
                .ok()?
                .ok()?;
            if out.from_addr == self.tap_addr {
                return Some(out.envelope);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// chitchat 0.13's encoding of an `Ack` with an empty delta: magic number 45 139
    /// (little endian), protocol version 0, message type 2 (`Ack`), and the end of
    /// the block stream (0).
    const EMPTY_ACK: [u8; 5] = [0x53, 0xb0, 0, 2, 0];

    #[tokio::test]
    async fn an_ack_without_changes_is_known_by_its_length() {
        let mut codec = Codec::new().await.unwrap();
        let envelope = codec.decode(&EMPTY_ACK).await.expect("chitchat reads it");
        assert!(is_ack(&envelope));
        let bytes = codec.encode(envelope).await.unwrap();
        assert_eq!(bytes, EMPTY_ACK, "chitchat writes it back the same");
        assert!(is_empty_ack(true, &bytes));
        // An ack with one key in it is longer, and is sent.
        let syn_sized = [&EMPTY_ACK[..4], &[2, 1, 0, 7], &[0u8; 8], &[0]].concat();
        assert!(!is_empty_ack(true, &syn_sized));
        assert!(!is_empty_ack(false, &EMPTY_ACK));
    }
}
