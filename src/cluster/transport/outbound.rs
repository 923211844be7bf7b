//! The outgoing side of the gossip transport: [`Outbound`], one writer task and
//! connection per peer (plain TCP, or an HTTP/1.1 upgrade proven with the cluster
//! secret) or the UDP socket, shared by chitchat's socket and the notes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::frame::*;
use crate::time::unix_secs;

/// Frames to peers: a writer task (and connection) per peer for TCP and HTTP
/// upgrades, or the UDP socket. Shared by chitchat's socket and [`super::Notes`].
pub(super) struct Outbound {
    udp: Option<Arc<UdpSocket>>,
    streams: Mutex<HashMap<SocketAddr, mpsc::Sender<Vec<u8>>>>,
    /// Connections are HTTP upgrades proven with this.
    upgrade: Option<Auth>,
    auth: Auth,
    /// This balancer's advertised gossip address, written out once.
    advertise: String,
    stats: Arc<GossipStats>,
}

impl Outbound {
    /// Frames sealed with `auth` as from `advertise`: over `udp` when given, else over
    /// connections (HTTP upgrades proven with `upgrade` when given).
    pub(super) fn new(
        udp: Option<Arc<UdpSocket>>,
        upgrade: Option<Auth>,
        auth: Auth,
        advertise: SocketAddr,
        stats: Arc<GossipStats>,
    ) -> Self {
        Outbound {
            udp,
            streams: Mutex::new(HashMap::new()),
            upgrade,
            auth,
            advertise: advertise.to_string(),
            stats,
        }
    }

    /// Seal `message` in a frame from this balancer and send it to `to`; returns the
    /// frame's length. Failures are counted, never waited for.
    pub(super) async fn send(&self, to: SocketAddr, message: &[u8]) -> usize {
        let (frame, n) = if self.udp.is_some() {
            let f = self.auth.seal_from(&self.advertise, message);
            let n = f.len();
            (f, n)
        } else {
            let f = self.auth.seal_prefixed(&self.advertise, message);
            let n = f.len() - 4;
            (f, n)
        };
        if let Some(sock) = &self.udp {
            if let Err(e) = sock.send_to(&frame, to).await {
                self.stats.send_failures.fetch_add(1, Ordering::Relaxed);
                debug!(peer = %to, error = %e, "gossip send failed");
            }
        } else {
            let queued = self.streams.lock().map(|mut peers| {
                let queue = peers
                    .entry(to)
                    .or_insert_with(|| spawn_writer(to, self.upgrade.clone(), self.stats.clone()));
                if queue.is_closed() {
                    *queue = spawn_writer(to, self.upgrade.clone(), self.stats.clone());
                }
                queue.try_send(frame).is_ok()
            });
            if !queued.unwrap_or(false) {
                self.stats.send_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.stats.frames_sent.fetch_add(1, Ordering::Relaxed);
        n
    }
}

/// Open a connection to `to` for frames: plain TCP, or (with `upgrade`) an HTTP/1.1
/// request for `Upgrade: gearlb-gossip/1` carrying the handshake proof, answered `101`.
async fn connect(to: SocketAddr, upgrade: Option<&Auth>) -> std::io::Result<TcpStream> {
    let mut s = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(to))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    let _ = s.set_nodelay(true);
    let Some(auth) = upgrade else {
        return Ok(s);
    };
    let request = format!(
        "GET {UPGRADE_PATH} HTTP/1.1\r\nHost: {to}\r\nConnection: Upgrade\r\nUpgrade: {UPGRADE_PROTOCOL}\r\n{AUTH_HEADER}: {}\r\nContent-Length: 0\r\n\r\n",
        auth.handshake(unix_secs())
    );
    let answer = async {
        s.write_all(request.as_bytes()).await?;
        // The peer sends nothing after its response head (incoming connections carry
        // frames one way), so whatever is read up to the blank line is the head.
        let mut head = Vec::with_capacity(256);
        let mut chunk = [0u8; 512];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            if head.len() >= MAX_HANDSHAKE_RESPONSE {
                return Err(std::io::Error::other("upgrade response head too long"));
            }
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "closed during the gossip upgrade",
                ));
            }
            head.extend_from_slice(&chunk[..n]);
        }
        Ok(head)
    };
    let head = tokio::time::timeout(HANDSHAKE_TIMEOUT, answer)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no upgrade answer"))??;
    let text = String::from_utf8_lossy(&head);
    let status_ok = text.starts_with("HTTP/1.1 101 ");
    let protocol_ok = text.lines().any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("upgrade")
                && v.trim().eq_ignore_ascii_case(UPGRADE_PROTOCOL)
        })
    });
    if status_ok && protocol_ok {
        Ok(s)
    } else {
        let line = text.lines().next().unwrap_or_default().to_string();
        Err(std::io::Error::other(format!(
            "gossip upgrade refused: {}",
            crate::gear::printable(&line)
        )))
    }
}

/// A task owning the outgoing connection to one peer; it writes frames as queued,
/// each already behind its length ([`Auth::seal_prefixed`]).
pub(super) fn spawn_writer(
    to: SocketAddr,
    upgrade: Option<Auth>,
    stats: Arc<GossipStats>,
) -> mpsc::Sender<Vec<u8>> {
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(PEER_QUEUE);
    tokio::spawn(async move {
        let mut conn: Option<TcpStream> = None;
        // The last reason a connection could not be opened, logged when it changes.
        let mut last_error = String::new();
        while let Some(frame) = rx.recv().await {
            if conn.is_none() {
                match connect(to, upgrade.as_ref()).await {
                    Ok(s) => {
                        if !last_error.is_empty() {
                            debug!(peer = %to, "gossip connection open again");
                            last_error.clear();
                        }
                        conn = Some(s);
                    }
                    Err(e) => {
                        stats.send_failures.fetch_add(1, Ordering::Relaxed);
                        let now = e.to_string();
                        if now != last_error {
                            if now.contains("refused:") {
                                warn!(peer = %to, error = %now, "peer refused gossip (other application secret, or clocks more than 15 min apart?)");
                            } else {
                                debug!(peer = %to, error = %now, "gossip connection failed");
                            }
                            last_error = now;
                        }
                        continue; // dropped: the next gossip round sends fresh state
                    }
                }
            }
            if let Some(s) = conn.as_mut() {
                // Length prefix and frame in one write: one system call per frame.
                let ok = s.write_all(&frame).await.is_ok();
                if !ok {
                    stats.send_failures.fetch_add(1, Ordering::Relaxed);
                    conn = None;
                }
            }
        }
    });
    tx
}
