//! Moving frames between balancers: [`GossipTransport`] (chitchat's `Transport`), the
//! per-peer outbound connections and writers, the inbound readers (TCP, UDP, upgraded
//! HTTP) and [`GossipUpgrade`], the endpoint the proxy hands upgraded connections to.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chitchat::transport::{RecvOutcome, SendOutcome, Socket, Transport};
use chitchat::ChitchatEnvelope;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::codec::{self, Codec};
use super::frame::*;
use crate::config::Carrier;
use crate::proxy::upgrade::UpgradeEndpoint;
use crate::time::unix_secs;

/// An incoming gossip connection: frames are only ever read from it.
pub type InboundStream = Box<dyn AsyncRead + Send + Unpin>;

/// Incoming connections handed over by the proxy, queued for the gossip reader.
pub(super) const UPGRADE_QUEUE: usize = 64;

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
        let ack = codec::is_ack(&envelope);
        let message = self.codec.encode(envelope).await?;
        if codec::is_empty_ack(ack, &message) {
            return Ok(SendOutcome { num_bytes_sent: 0 });
        }
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
