//! [`Codec`]: chitchat's own message encoder and decoder, reached through a private
//! loopback socket pair (chitchat 0.13 keeps its wire format crate-private).

use std::net::SocketAddr;
use std::time::Duration;

use chitchat::transport::{Socket, UdpSocket as ChitchatUdp};
use chitchat::ChitchatEnvelope;
use tokio::net::UdpSocket;

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
