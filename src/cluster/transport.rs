//! Gossip transport: chitchat's messages in authenticated frames over a connection
//! upgraded from HTTP on the proxy port (or over a TCP or UDP port of its own).
//!
//! Owns the frame format, its authentication, and moving frames between balancers.
//! In a gear the only public port is the HTTP one: the node announces every public
//! endpoint of a `web_proxy` cartridge to the routers as an application endpoint, and
//! its port proxy forwards TCP only. So by default ([`Carrier::Http`]) a balancer opens
//! one cached connection per peer to the peer's public HTTP address, asks for
//! `Upgrade: gearlb-gossip/1` with an authenticated handshake ([`Auth::handshake`]),
//! and after the `101` writes frames on it; the peer's proxy hands such connections
//! over ([`GossipUpgrade`], an [`UpgradeEndpoint`]) and no request asking for that
//! protocol ever reaches a web gear. [`Carrier::Tcp`] and [`Carrier::Udp`] carry the
//! same frames on a port of their own (`cluster.listen`, standalone set-ups). Incoming
//! connections only ever carry frames towards this balancer; replies go out on its own
//! connection to the sender's advertised address.
//!
//! Frame (`u32` big-endian length prefix on TCP; the datagram itself on UDP):
//!
//! ```text
//! "GLB1" | cluster tag (8) | addr len (1) | sender's advertised gossip address | message | HMAC-SHA256 (32)
//! ```
//!
//! The cluster tag is a hash of the cluster id (the application), so frames from another
//! application's balancers are told apart from forgeries; the HMAC (key derived with
//! HKDF from the cluster secret) covers everything before it. A frame that is too short,
//! too long, from another cluster or badly tagged is dropped and counted; a TCP
//! connection that sends one is closed. The sender's address inside the frame is what
//! chitchat sees as `from`, so replies go to the peer's advertised (public) address.
//!
//! chitchat 0.13 keeps its message encoding crate-private; rather than re-implement its
//! wire format, [`Codec`] borrows chitchat's own UDP socket over a private loopback pair
//! to turn envelopes into bytes and back. Gossip is a few messages per interval, so the
//! two extra loopback syscalls per message do not matter.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chitchat::transport::{RecvOutcome, SendOutcome, Socket, Transport, UdpSocket as ChitchatUdp};
use chitchat::ChitchatEnvelope;
use hmac::{Hmac, Mac};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// Named here too: the transport is chosen by `cluster.transport` in the configuration.
pub use crate::config::Carrier;
use crate::proxy::UpgradeEndpoint;

const MAGIC: &[u8; 4] = b"GLB1";
const TAG_LEN: usize = 32;
const CLUSTER_TAG_LEN: usize = 8;
/// chitchat's largest message plus our header and tag.
pub const MAX_FRAME: usize = 65_507 + 4 + CLUSTER_TAG_LEN + 1 + 64 + TAG_LEN;
/// Frames queued per peer before new ones are dropped (gossip is best effort).
const PEER_QUEUE: usize = 64;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Time a peer has to finish sending a frame it started.
const FRAME_TIMEOUT: Duration = Duration::from_secs(10);
/// Incoming gossip connections served at once.
const MAX_INBOUND: usize = 256;
/// The HTTP `Upgrade` token of gossip on the proxy port.
pub const UPGRADE_PROTOCOL: &str = "gearlb-gossip/1";
/// Path of the gossip upgrade request (the `Upgrade` token is what selects it).
pub const UPGRADE_PATH: &str = "/.gearlb/gossip";
/// Header carrying the handshake's proof of the cluster secret.
pub const AUTH_HEADER: &str = "gearlb-gossip-auth";
/// How far a handshake's timestamp may be from this balancer's clock.
const HANDSHAKE_WINDOW_SECS: u64 = 15 * 60;
/// Time a peer has to answer our upgrade request.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest response head accepted for our upgrade request.
const MAX_HANDSHAKE_RESPONSE: usize = 4096;
/// Time a new incoming connection has to deliver its first authentic frame (a peer
/// sends one as soon as it connects). Until then it is "unproven": when every slot is
/// taken, the oldest unproven connection is closed to make room, so connections that
/// never authenticate cannot lock the balancer's peers out.
const FIRST_FRAME_TIMEOUT: Duration = Duration::from_secs(3);

/// Counters of the gossip transport.
#[derive(Debug, Default)]
pub struct GossipStats {
    pub frames_sent: AtomicU64,
    pub frames_received: AtomicU64,
    pub rejected_bad_tag: AtomicU64,
    pub rejected_other_cluster: AtomicU64,
    pub rejected_malformed: AtomicU64,
    pub rejected_oversized: AtomicU64,
    pub send_failures: AtomicU64,
    /// Gossip upgrade requests refused (bad or missing handshake proof).
    pub rejected_handshake: AtomicU64,
}

/// A snapshot of [`GossipStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GossipCounters {
    pub frames_sent: u64,
    pub frames_received: u64,
    pub rejected_bad_tag: u64,
    pub rejected_other_cluster: u64,
    pub rejected_malformed: u64,
    pub rejected_oversized: u64,
    pub send_failures: u64,
    #[serde(default)]
    pub rejected_handshake: u64,
}

impl GossipStats {
    pub fn read(&self) -> GossipCounters {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        GossipCounters {
            frames_sent: r(&self.frames_sent),
            frames_received: r(&self.frames_received),
            rejected_bad_tag: r(&self.rejected_bad_tag),
            rejected_other_cluster: r(&self.rejected_other_cluster),
            rejected_malformed: r(&self.rejected_malformed),
            rejected_oversized: r(&self.rejected_oversized),
            send_failures: r(&self.send_failures),
            rejected_handshake: r(&self.rejected_handshake),
        }
    }
}

/// Why a frame was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("malformed frame")]
    Malformed,
    #[error("frame larger than {MAX_FRAME} bytes")]
    Oversized,
    #[error("frame from another cluster")]
    OtherCluster,
    #[error("frame authentication failed")]
    BadTag,
}

/// Keys of one cluster: who may gossip with whom.
#[derive(Clone)]
pub struct Auth {
    key: [u8; 32],
    cluster_tag: [u8; CLUSTER_TAG_LEN],
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Auth(<redacted>)")
    }
}

impl Auth {
    pub fn new(cluster_id: &str, secret: &[u8]) -> Self {
        let hk = hkdf::Hkdf::<Sha256>::new(Some(b"gearlb"), secret);
        let mut key = [0u8; 32];
        // 32 bytes is far below HKDF-SHA256's output limit: expand cannot fail.
        hk.expand(b"gearlb gossip v1", &mut key)
            .expect("32-byte HKDF output");
        let digest = Sha256::digest(cluster_id.as_bytes());
        let mut cluster_tag = [0u8; CLUSTER_TAG_LEN];
        cluster_tag.copy_from_slice(&digest[..CLUSTER_TAG_LEN]);
        Auth { key, cluster_tag }
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC accepts keys of any length.
        Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length")
    }

    /// Build a frame carrying `message` from `sender`.
    pub fn seal(&self, sender: SocketAddr, message: &[u8]) -> Vec<u8> {
        let addr = sender.to_string();
        let mut out =
            Vec::with_capacity(4 + CLUSTER_TAG_LEN + 1 + addr.len() + message.len() + TAG_LEN);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.cluster_tag);
        out.push(addr.len() as u8); // a SocketAddr's text is at most 47 bytes
        out.extend_from_slice(addr.as_bytes());
        out.extend_from_slice(message);
        let mut mac = self.mac();
        mac.update(&out);
        out.extend_from_slice(&mac.finalize().into_bytes());
        out
    }

    /// The handshake proof of a gossip upgrade request made at `unix_secs`:
    /// `v1 <secs> <hex HMAC(key, "gearlb gossip upgrade" | cluster tag | secs)>`.
    pub fn handshake(&self, unix_secs: u64) -> String {
        let mut mac = self.mac();
        mac.update(b"gearlb gossip upgrade");
        mac.update(&self.cluster_tag);
        mac.update(&unix_secs.to_be_bytes());
        let tag = mac.finalize().into_bytes();
        let mut hex = String::with_capacity(64);
        for b in tag {
            hex.push_str(&format!("{b:02x}"));
        }
        format!("v1 {unix_secs} {hex}")
    }

    /// Whether `value` is a handshake proof of this cluster made within
    /// [`HANDSHAKE_WINDOW_SECS`] of `now_secs`.
    pub fn check_handshake(&self, value: &[u8], now_secs: u64) -> bool {
        let Ok(text) = std::str::from_utf8(value) else {
            return false;
        };
        let mut parts = text.split(' ');
        let (Some("v1"), Some(secs), Some(hex), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        let Ok(secs) = secs.parse::<u64>() else {
            return false;
        };
        if secs.abs_diff(now_secs) > HANDSHAKE_WINDOW_SECS || hex.len() != 64 {
            return false;
        }
        let mut tag = [0u8; 32];
        for (i, byte) in tag.iter_mut().enumerate() {
            match u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or("zz"), 16) {
                Ok(b) => *byte = b,
                Err(_) => return false,
            }
        }
        let mut mac = self.mac();
        mac.update(b"gearlb gossip upgrade");
        mac.update(&self.cluster_tag);
        mac.update(&secs.to_be_bytes());
        mac.verify_slice(&tag).is_ok()
    }

    /// Check a frame; returns the sender's address and the message.
    pub fn open<'a>(&self, frame: &'a [u8]) -> Result<(SocketAddr, &'a [u8]), FrameError> {
        if frame.len() > MAX_FRAME {
            return Err(FrameError::Oversized);
        }
        let header = 4 + CLUSTER_TAG_LEN + 1;
        if frame.len() < header + TAG_LEN || &frame[..4] != MAGIC {
            return Err(FrameError::Malformed);
        }
        if frame[4..4 + CLUSTER_TAG_LEN] != self.cluster_tag {
            return Err(FrameError::OtherCluster);
        }
        let (body, tag) = frame.split_at(frame.len() - TAG_LEN);
        let mut mac = self.mac();
        mac.update(body);
        mac.verify_slice(tag).map_err(|_| FrameError::BadTag)?;
        let addr_len = body[header - 1] as usize;
        let addr = body
            .get(header..header + addr_len)
            .and_then(|a| std::str::from_utf8(a).ok())
            .and_then(|a| a.parse::<SocketAddr>().ok())
            .ok_or(FrameError::Malformed)?;
        Ok((addr, &body[header + addr_len..]))
    }
}

fn count_rejection(stats: &GossipStats, e: &FrameError) {
    let c = match e {
        FrameError::Malformed => &stats.rejected_malformed,
        FrameError::Oversized => &stats.rejected_oversized,
        FrameError::OtherCluster => &stats.rejected_other_cluster,
        FrameError::BadTag => &stats.rejected_bad_tag,
    };
    c.fetch_add(1, Ordering::Relaxed);
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

/// An incoming gossip connection: frames are only ever read from it.
pub type InboundStream = Box<dyn AsyncRead + Send + Unpin>;

/// Incoming connections handed over by the proxy, queued for the gossip reader.
const UPGRADE_QUEUE: usize = 64;

enum Bound {
    Tcp(TcpListener),
    Udp(Arc<UdpSocket>),
    Http(mpsc::Receiver<(InboundStream, SocketAddr)>),
}

/// chitchat [`Transport`] over authenticated frames. The listening socket is bound
/// beforehand (so its address is known before chitchat starts) and handed over on
/// `open`; with [`Carrier::Http`] nothing is bound here: the proxy listener passes
/// upgraded connections in through [`GossipTransport::upgrade_endpoint`].
pub struct GossipTransport {
    bound: Mutex<Option<Bound>>,
    carrier: Carrier,
    local: SocketAddr,
    advertise: SocketAddr,
    auth: Auth,
    stats: Arc<GossipStats>,
    upgrades: Option<mpsc::Sender<(InboundStream, SocketAddr)>>,
}

impl GossipTransport {
    /// Bind `listen` with `carrier` (for [`Carrier::Http`], `listen` is the proxy
    /// listener's address and nothing is bound); frames say they come from `advertise`
    /// (or the listen address when `None`).
    pub async fn bind(
        carrier: Carrier,
        listen: SocketAddr,
        advertise: Option<SocketAddr>,
        auth: Auth,
        stats: Arc<GossipStats>,
    ) -> std::io::Result<Self> {
        let mut upgrades = None;
        let (bound, local) = match carrier {
            Carrier::Tcp => {
                let l = TcpListener::bind(listen).await?;
                let a = l.local_addr()?;
                (Bound::Tcp(l), a)
            }
            Carrier::Udp => {
                let s = UdpSocket::bind(listen).await?;
                let a = s.local_addr()?;
                (Bound::Udp(Arc::new(s)), a)
            }
            Carrier::Http => {
                let (tx, rx) = mpsc::channel(UPGRADE_QUEUE);
                upgrades = Some(tx);
                (Bound::Http(rx), listen)
            }
        };
        Ok(GossipTransport {
            bound: Mutex::new(Some(bound)),
            carrier,
            local,
            advertise: advertise.unwrap_or(local),
            auth,
            stats,
            upgrades,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn advertise_addr(&self) -> SocketAddr {
        self.advertise
    }

    /// What the proxy listener needs to hand gossip upgrades over ([`Carrier::Http`]).
    pub fn upgrade_endpoint(&self) -> Option<Arc<GossipUpgrade>> {
        let tx = self.upgrades.clone()?;
        Some(Arc::new(GossipUpgrade {
            auth: self.auth.clone(),
            stats: self.stats.clone(),
            tx,
        }))
    }
}

/// The proxy port's side of gossip: checks a gossip upgrade request's handshake and
/// takes the connection once upgraded.
pub struct GossipUpgrade {
    auth: Auth,
    stats: Arc<GossipStats>,
    tx: mpsc::Sender<(InboundStream, SocketAddr)>,
}

impl UpgradeEndpoint for GossipUpgrade {
    fn protocol(&self) -> &'static str {
        UPGRADE_PROTOCOL
    }

    fn admit(&self, headers: &http::HeaderMap) -> bool {
        let ok = headers
            .get(AUTH_HEADER)
            .is_some_and(|v| self.auth.check_handshake(v.as_bytes(), unix_secs()));
        if !ok {
            self.stats
                .rejected_handshake
                .fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    fn accept(&self, io: hyper::upgrade::Upgraded, peer: SocketAddr) {
        let stream: InboundStream = Box::new(TokioIo::new(io));
        if self.tx.try_send((stream, peer)).is_err() {
            debug!(peer = %peer, "gossip upgrade queue full: connection dropped");
        }
    }
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[async_trait]
impl Transport for GossipTransport {
    async fn open(&self, _listen_addr: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let bound = self
            .bound
            .lock()
            .map_err(|_| anyhow::anyhow!("gossip transport lock poisoned"))?
            .take()
            .ok_or_else(|| anyhow::anyhow!("gossip transport already opened"))?;
        let (inbound_tx, inbound) = mpsc::channel(1024);
        let outbound = match bound {
            Bound::Tcp(listener) => {
                let (tx, rx) = mpsc::channel(UPGRADE_QUEUE);
                tokio::spawn(tcp_accept_loop(listener, tx, inbound_tx.clone()));
                tokio::spawn(serve_inbound(
                    rx,
                    self.auth.clone(),
                    self.stats.clone(),
                    inbound_tx,
                ));
                Outbound::Streams(HashMap::new())
            }
            Bound::Http(rx) => {
                tokio::spawn(serve_inbound(
                    rx,
                    self.auth.clone(),
                    self.stats.clone(),
                    inbound_tx,
                ));
                Outbound::Streams(HashMap::new())
            }
            Bound::Udp(socket) => {
                tokio::spawn(udp_recv_loop(
                    socket.clone(),
                    self.auth.clone(),
                    self.stats.clone(),
                    inbound_tx,
                ));
                Outbound::Udp(socket)
            }
        };
        Ok(Box::new(GossipSocket {
            codec: Codec::new().await?,
            inbound,
            outbound,
            carrier: self.carrier,
            auth: self.auth.clone(),
            local: self.local,
            advertise: self.advertise,
            stats: self.stats.clone(),
        }))
    }
}

enum Outbound {
    Streams(HashMap<SocketAddr, mpsc::Sender<Vec<u8>>>),
    Udp(Arc<UdpSocket>),
}

struct GossipSocket {
    codec: Codec,
    inbound: mpsc::Receiver<(SocketAddr, Vec<u8>)>,
    outbound: Outbound,
    carrier: Carrier,
    auth: Auth,
    local: SocketAddr,
    advertise: SocketAddr,
    stats: Arc<GossipStats>,
}

#[async_trait]
impl Socket for GossipSocket {
    fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.local)
    }

    async fn send(
        &mut self,
        to: SocketAddr,
        envelope: ChitchatEnvelope,
    ) -> anyhow::Result<SendOutcome> {
        let message = self.codec.encode(envelope).await?;
        let frame = self.auth.seal(self.advertise, &message);
        let n = frame.len();
        match &mut self.outbound {
            Outbound::Udp(sock) => {
                if let Err(e) = sock.send_to(&frame, to).await {
                    self.stats.send_failures.fetch_add(1, Ordering::Relaxed);
                    debug!(peer = %to, error = %e, "gossip send failed");
                }
            }
            Outbound::Streams(peers) => {
                let upgrade = (self.carrier == Carrier::Http).then(|| self.auth.clone());
                let queue = peers
                    .entry(to)
                    .or_insert_with(|| spawn_writer(to, upgrade.clone(), self.stats.clone()));
                if queue.is_closed() {
                    *queue = spawn_writer(to, upgrade, self.stats.clone());
                }
                if queue.try_send(frame).is_err() {
                    self.stats.send_failures.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.stats.frames_sent.fetch_add(1, Ordering::Relaxed);
        Ok(SendOutcome { num_bytes_sent: n })
    }

    async fn recv(&mut self) -> anyhow::Result<RecvOutcome> {
        loop {
            let (from, message) = self
                .inbound
                .recv()
                .await
                .ok_or_else(|| anyhow::anyhow!("gossip listener stopped"))?;
            match self.codec.decode(&message).await {
                Some(envelope) => {
                    return Ok(RecvOutcome {
                        from_addr: from,
                        envelope,
                        num_bytes_received: message.len(),
                    })
                }
                None => {
                    self.stats
                        .rejected_malformed
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
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

/// A task owning the outgoing connection to one peer.
fn spawn_writer(
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
                let mut buf = Vec::with_capacity(4 + frame.len());
                buf.extend_from_slice(&(frame.len() as u32).to_be_bytes());
                buf.extend_from_slice(&frame);
                let ok = s.write_all(&buf).await.is_ok();
                if !ok {
                    stats.send_failures.fetch_add(1, Ordering::Relaxed);
                    conn = None;
                }
            }
        }
    });
    tx
}

/// Accept TCP gossip connections and queue them for [`serve_inbound`].
async fn tcp_accept_loop(
    listener: TcpListener,
    streams: mpsc::Sender<(InboundStream, SocketAddr)>,
    inbound: mpsc::Sender<(SocketAddr, Vec<u8>)>,
) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                warn!(error = %e, "gossip accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if inbound.is_closed() || streams.send((Box::new(stream), peer)).await.is_err() {
            return;
        }
    }
}

/// Read frames from every incoming connection (at most [`MAX_INBOUND`] at once).
async fn serve_inbound(
    mut streams: mpsc::Receiver<(InboundStream, SocketAddr)>,
    auth: Auth,
    stats: Arc<GossipStats>,
    inbound: mpsc::Sender<(SocketAddr, Vec<u8>)>,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_INBOUND));
    // Connections that have not sent an authentic frame yet, oldest first.
    let unproven: Arc<Mutex<VecDeque<(u64, CancellationToken)>>> = Arc::default();
    let mut next_id: u64 = 0;
    while let Some((stream, peer)) = streams.recv().await {
        if inbound.is_closed() {
            return;
        }
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                // Full: close the oldest connection that has not authenticated yet.
                let oldest = unproven.lock().ok().and_then(|mut q| q.pop_front());
                let Some((_, token)) = oldest else {
                    continue; // every slot holds a proven peer: refuse this one
                };
                token.cancel();
                match tokio::time::timeout(
                    Duration::from_millis(100),
                    permits.clone().acquire_owned(),
                )
                .await
                {
                    Ok(Ok(p)) => p,
                    _ => continue,
                }
            }
        };
        next_id += 1;
        let id = next_id;
        let token = CancellationToken::new();
        if let Ok(mut q) = unproven.lock() {
            q.push_back((id, token.clone()));
        }
        let (auth, stats, inbound, unproven) = (
            auth.clone(),
            stats.clone(),
            inbound.clone(),
            unproven.clone(),
        );
        tokio::spawn(async move {
            let proven = || {
                if let Ok(mut q) = unproven.lock() {
                    q.retain(|(i, _)| *i != id);
                }
            };
            tokio::select! {
                // Buffered: a frame's length and body (and often the next frame) in one
                // system call.
                r = read_frames(tokio::io::BufReader::with_capacity(64 * 1024, stream), &auth, &stats, &inbound, &proven) => {
                    if let Err(e) = r {
                        debug!(peer = %peer, error = %e, "gossip connection closed");
                    }
                }
                _ = token.cancelled() => {
                    debug!(peer = %peer, "unauthenticated gossip connection closed to make room");
                }
            }
            proven();
            drop(permit);
        });
    }
}

async fn read_frames<S: AsyncRead + Unpin>(
    mut stream: S,
    auth: &Auth,
    stats: &GossipStats,
    inbound: &mpsc::Sender<(SocketAddr, Vec<u8>)>,
    proven: &impl Fn(),
) -> anyhow::Result<()> {
    let mut buf = Vec::new();
    let mut authenticated = false;
    loop {
        let mut len = [0u8; 4];
        if authenticated {
            // A proven peer's idle connection waits as long as it likes for the next frame…
            stream.read_exact(&mut len).await?;
        } else {
            tokio::time::timeout(FIRST_FRAME_TIMEOUT, stream.read_exact(&mut len)).await??;
        }
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_FRAME {
            count_rejection(stats, &FrameError::Oversized);
            anyhow::bail!("oversized frame ({len} bytes)");
        }
        buf.resize(len, 0);
        // …but one started must arrive in time.
        tokio::time::timeout(FRAME_TIMEOUT, stream.read_exact(&mut buf)).await??;
        match auth.open(&buf) {
            Ok((from, message)) => {
                stats.frames_received.fetch_add(1, Ordering::Relaxed);
                if !authenticated {
                    authenticated = true;
                    proven();
                }
                if inbound.try_send((from, message.to_vec())).is_err() {
                    debug!("gossip inbound queue full: frame dropped");
                }
            }
            Err(e) => {
                count_rejection(stats, &e);
                anyhow::bail!("{e}");
            }
        }
    }
}

async fn udp_recv_loop(
    socket: Arc<UdpSocket>,
    auth: Auth,
    stats: Arc<GossipStats>,
    inbound: mpsc::Sender<(SocketAddr, Vec<u8>)>,
) {
    let mut buf = vec![0u8; 65_536];
    loop {
        let n = match socket.recv_from(&mut buf).await {
            Ok((n, _)) => n,
            Err(e) => {
                debug!(error = %e, "gossip UDP receive error");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if inbound.is_closed() {
            return;
        }
        match auth.open(&buf[..n]) {
            Ok((from, message)) => {
                stats.frames_received.fetch_add(1, Ordering::Relaxed);
                let _ = inbound.try_send((from, message.to_vec()));
            }
            Err(e) => count_rejection(&stats, &e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> SocketAddr {
        "127.0.0.1:7001".parse().unwrap()
    }

    #[test]
    fn frames_round_trip_and_reject_forgeries() {
        let a = Auth::new("app1", b"secret-0123456789");
        let frame = a.seal(addr(), b"hello");
        assert_eq!(a.open(&frame).unwrap(), (addr(), &b"hello"[..]));

        let wrong_key = Auth::new("app1", b"secret-other-key");
        assert_eq!(wrong_key.open(&frame), Err(FrameError::BadTag));
        let other_app = Auth::new("app2", b"secret-0123456789");
        assert_eq!(other_app.open(&frame), Err(FrameError::OtherCluster));

        for i in 0..frame.len() {
            let mut t = frame.clone();
            t[i] ^= 0x01;
            assert!(a.open(&t).is_err(), "bit flip at {i} accepted");
        }
        assert_eq!(a.open(&frame[..10]), Err(FrameError::Malformed));
        assert_eq!(a.open(b""), Err(FrameError::Malformed));
        assert_eq!(
            a.open(&vec![0u8; MAX_FRAME + 1]),
            Err(FrameError::Oversized)
        );
    }

    #[test]
    fn handshakes_prove_the_secret_within_a_window() {
        let a = Auth::new("app1", b"secret-0123456789");
        let now = 1_800_000_000;
        let proof = a.handshake(now);
        assert!(a.check_handshake(proof.as_bytes(), now));
        assert!(
            a.check_handshake(proof.as_bytes(), now + 60),
            "small clock skew"
        );
        assert!(
            !a.check_handshake(proof.as_bytes(), now + HANDSHAKE_WINDOW_SECS + 1),
            "a replay later than the window"
        );
        assert!(!Auth::new("app1", b"secret-other-key").check_handshake(proof.as_bytes(), now));
        assert!(!Auth::new("app2", b"secret-0123456789").check_handshake(proof.as_bytes(), now));
        // Another time in the same proof: the tag no longer matches.
        let forged = proof.replacen(&now.to_string(), &(now + 1).to_string(), 1);
        assert!(!a.check_handshake(forged.as_bytes(), now));
        for bad in [
            "",
            "v1",
            "v1 x y",
            "v2 1 00",
            "v1 1800000000 zz",
            &format!("{proof} x"),
        ] {
            assert!(!a.check_handshake(bad.as_bytes(), now), "{bad:?} accepted");
        }
        assert!(!a.check_handshake(&[0xff, 0xfe], now));
    }

    #[test]
    fn random_garbage_never_panics() {
        let a = Auth::new("app1", b"secret-0123456789");
        let mut rng = fastrand::Rng::with_seed(1);
        for _ in 0..10_000 {
            let len = rng.usize(0..200);
            let mut v: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
            if rng.bool() && v.len() >= 12 {
                v[..4].copy_from_slice(MAGIC);
            }
            assert!(a.open(&v).is_err());
        }
    }
}
