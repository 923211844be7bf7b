//! The outgoing side of the gossip transport: [`Outbound`], one writer task and
//! connection per peer (an HTTP/1.1 upgrade to wire v2 — or v1 for a balancer of the
//! release before — on the proxy port or on `cluster.listen`), or the UDP socket,
//! shared by chitchat's socket and the notes.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::datagram::DatagramSealer;
use super::delta::{accepts, DELTA_HEADER, DELTA_SCHEME};
use super::frame::*;
use super::limits::*;
use super::session::{Sealer, UPGRADE_PROTOCOL_V2};
use crate::config::{Carrier, GossipWire};
use crate::time::unix_secs;

/// After a peer refused v2 (a balancer of the release before), v1 is used with it for
/// this long before v2 is offered again.
const V1_FALLBACK: Duration = Duration::from_secs(300);

/// How this balancer reaches its peers.
#[derive(Clone)]
pub(super) struct Wire {
    pub carrier: Carrier,
    pub formats: GossipWire,
    pub auth: Auth,
    /// This balancer's advertised gossip address, written out once.
    pub advertise: Arc<str>,
    pub stats: Arc<GossipStats>,
}

/// Messages to peers: a writer task (and connection) per peer for TCP and HTTP
/// upgrades, or the UDP socket. Shared by chitchat's socket and [`super::Notes`].
pub(super) struct Outbound {
    udp: Option<Arc<UdpSocket>>,
    streams: Mutex<HashMap<SocketAddr, mpsc::Sender<Vec<u8>>>>,
    wire: Wire,
    datagrams: DatagramSealer,
    /// UDP peers heard speaking v2 (sent v2 only; the others get v1 too while v1 is
    /// spoken).
    pub(super) heard_v2: Arc<Mutex<HashSet<SocketAddr>>>,
}

impl Outbound {
    /// Messages sealed for `wire`'s peers: over `udp` when given, else over
    /// connections.
    pub(super) fn new(udp: Option<Arc<UdpSocket>>, wire: Wire) -> Self {
        Outbound {
            udp,
            streams: Mutex::new(HashMap::new()),
            datagrams: wire.auth.datagram_sealer(),
            wire,
            heard_v2: Arc::default(),
        }
    }

    /// Send `message` to `to` in a frame from this balancer; returns about the frame's
    /// length. Failures are counted, never waited for.
    pub(super) async fn send(&self, to: SocketAddr, message: &[u8]) -> usize {
        let (w, stats) = (&self.wire, &self.wire.stats);
        let n = message.len() + 1 + w.advertise.len() + 16;
        if let Some(sock) = &self.udp {
            let mut frames = Vec::with_capacity(2);
            if w.formats.v2() {
                frames.push(self.datagrams.seal(unix_secs(), &w.advertise, message));
            }
            let v2_peer = self.heard_v2.lock().is_ok_and(|h| h.contains(&to));
            if w.formats == GossipWire::V1 || (w.formats.v1() && !v2_peer) {
                frames.push(w.auth.seal_from(&w.advertise, message));
            }
            for frame in frames {
                stats
                    .bytes_sent
                    .fetch_add(frame.len() as u64, Ordering::Relaxed);
                if let Err(e) = sock.send_to(&frame, to).await {
                    stats.send_failures.fetch_add(1, Ordering::Relaxed);
                    debug!(peer = %to, error = %e, "gossip send failed");
                }
            }
        } else {
            let queued = self.streams.lock().map(|mut peers| {
                let queue = peers
                    .entry(to)
                    .or_insert_with(|| spawn_writer(to, w.clone()));
                if queue.is_closed() {
                    *queue = spawn_writer(to, w.clone());
                }
                queue.try_send(message.to_vec()).is_ok()
            });
            if !queued.unwrap_or(false) {
                stats.send_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        stats.frames_sent.fetch_add(1, Ordering::Relaxed);
        n
    }
}

/// Why a connection could not be opened.
enum ConnectError {
    /// The peer answered, but not to this wire format: it may speak the other.
    Refused(String),
    Io(std::io::Error),
}

impl From<std::io::Error> for ConnectError {
    fn from(e: std::io::Error) -> Self {
        ConnectError::Io(e)
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Refused(why) => write!(f, "gossip upgrade refused: {why}"),
            ConnectError::Io(e) => e.fmt(f),
        }
    }
}

/// An open connection to a peer: frames sealed with `sealer` (v2) or the cluster's v1
/// key.
struct Conn {
    stream: TcpStream,
    sealer: Option<Sealer>,
}

async fn tcp_connect(to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(to))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// Send an upgrade request for `protocol` with the proof `proof` (and the header lines
/// `extra`, each ending in CRLF); the response head.
async fn upgrade(
    s: &mut TcpStream,
    to: SocketAddr,
    protocol: &str,
    proof: &str,
    extra: &str,
) -> Result<String, ConnectError> {
    let request = format!(
        "GET {UPGRADE_PATH} HTTP/1.1\r\nHost: {to}\r\nConnection: Upgrade\r\nUpgrade: {protocol}\r\n{AUTH_HEADER}: {proof}\r\n{extra}Content-Length: 0\r\n\r\n"
    );
    let answer = async {
        s.write_all(request.as_bytes()).await?;
        // The peer sends nothing after its response head (incoming connections carry
        // frames one way), so whatever is read up to the blank line is the head.
        let mut head = Vec::with_capacity(256);
        let mut chunk = [0u8; 512];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            if head.len() >= MAX_HANDSHAKE_RESPONSE {
                return Err(ConnectError::Refused("response head too long".into()));
            }
            match s.read(&mut chunk).await {
                // A balancer of the release before closes its raw gossip port on a
                // request (a frame length it refuses): it does not speak this.
                Ok(0) => return Err(ConnectError::Refused("closed without an answer".into())),
                Ok(n) => head.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return Err(ConnectError::Refused("reset without an answer".into()))
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(head)
    };
    let head = tokio::time::timeout(HANDSHAKE_TIMEOUT, answer)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no upgrade answer"))??;
    let text = String::from_utf8_lossy(&head).into_owned();
    let upgraded = text.starts_with("HTTP/1.1 101 ")
        && header(&text, "upgrade").is_some_and(|v| v.eq_ignore_ascii_case(protocol));
    if upgraded {
        Ok(text)
    } else {
        let line = text.lines().next().unwrap_or_default().to_string();
        Err(ConnectError::Refused(crate::gear::printable(&line)))
    }
}

/// The value of header `name` in a response head.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then_some(v.trim())
    })
}

/// Open a v2 connection: the upgrade with a fresh nonce, the peer's proof checked.
async fn connect_v2(to: SocketAddr, w: &Wire) -> Result<Conn, ConnectError> {
    let mut stream = tcp_connect(to).await?;
    let keys = w.auth.v2();
    let offer = keys.offer(unix_secs());
    // Delta frames are offered; a balancer of the release before ignores the header
    // and its answer does not carry it: frames are then sent whole.
    let offer_delta = format!("{DELTA_HEADER}: {DELTA_SCHEME}\r\n");
    let head = upgrade(
        &mut stream,
        to,
        UPGRADE_PROTOCOL_V2,
        &offer.header,
        &offer_delta,
    )
    .await?;
    let sealer = header(&head, AUTH_HEADER)
        .and_then(|v| keys.confirm(&offer, v.as_bytes()))
        .ok_or_else(|| {
            ConnectError::Io(std::io::Error::other(
                "gossip upgrade refused: the peer's answer does not prove the cluster secret",
            ))
        })?;
    let sealer = if accepts(header(&head, DELTA_HEADER).map(str::as_bytes)) {
        sealer.with_delta()
    } else {
        sealer
    };
    Ok(Conn {
        stream,
        sealer: Some(sealer),
    })
}

/// Open a v1 connection (the release before's): plain frames on `cluster.listen`, or
/// the v1 upgrade on the proxy port.
async fn connect_v1(to: SocketAddr, w: &Wire) -> Result<Conn, ConnectError> {
    let mut stream = tcp_connect(to).await?;
    if w.carrier == Carrier::Http {
        upgrade(
            &mut stream,
            to,
            UPGRADE_PROTOCOL,
            &w.auth.handshake(unix_secs()),
            "",
        )
        .await?;
    }
    Ok(Conn {
        stream,
        sealer: None,
    })
}

/// A task owning the outgoing connection to one peer; it seals and writes messages as
/// queued.
pub(super) fn spawn_writer(to: SocketAddr, w: Wire) -> mpsc::Sender<Vec<u8>> {
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(PEER_QUEUE);
    tokio::spawn(async move {
        let mut conn: Option<Conn> = None;
        // Until when this peer is spoken to in v1 (it refused v2).
        let mut v1_until: Option<tokio::time::Instant> = None;
        // Once this peer has spoken v2, a refusal of v2 is never taken as a reason to
        // fall back to v1: someone on the path could otherwise force readable frames.
        let mut spoke_v2 = false;
        // The last reason a connection could not be opened, logged when it changes.
        let mut last_error = String::new();
        while let Some(message) = rx.recv().await {
            if conn.is_none() {
                let now = tokio::time::Instant::now();
                let try_v2 = w.formats.v2() && v1_until.is_none_or(|t| now >= t);
                let mut opened = if try_v2 {
                    connect_v2(to, &w).await
                } else {
                    connect_v1(to, &w).await
                };
                if try_v2 && w.formats.v1() && !spoke_v2 {
                    if let Err(ConnectError::Refused(why)) = &opened {
                        debug!(peer = %to, why = %why, "peer does not speak gossip v2: v1 for now");
                        v1_until = Some(now + V1_FALLBACK);
                        opened = connect_v1(to, &w).await;
                    }
                }
                match opened {
                    Ok(c) => {
                        spoke_v2 |= c.sealer.is_some();
                        if !last_error.is_empty() {
                            debug!(peer = %to, "gossip connection open again");
                            last_error.clear();
                        }
                        conn = Some(c);
                    }
                    Err(e) => {
                        w.stats.send_failures.fetch_add(1, Ordering::Relaxed);
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
            if let Some(c) = conn.as_mut() {
                let frame = match c.sealer.as_mut() {
                    Some(s) => s.seal_prefixed(&w.advertise, &message),
                    None => w.auth.seal_prefixed(&w.advertise, &message),
                };
                // Length prefix and frame in one write: one system call per frame.
                w.stats
                    .bytes_sent
                    .fetch_add(frame.len() as u64, Ordering::Relaxed);
                if c.stream.write_all(&frame).await.is_err() {
                    w.stats.send_failures.fetch_add(1, Ordering::Relaxed);
                    conn = None;
                }
            }
        }
    });
    tx
}
