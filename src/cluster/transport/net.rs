//! Moving frames between balancers: [`GossipTransport`] (chitchat's `Transport`), the
//! per-peer outbound connections and writers, the inbound readers (TCP, UDP, upgraded
//! HTTP) and [`GossipUpgrade`], the endpoint the proxy hands upgraded connections to.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chitchat::transport::{RecvOutcome, SendOutcome, Socket, Transport};
use chitchat::ChitchatEnvelope;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::codec::{self, Codec};
use super::datagram::DatagramOpener;
use super::delta::{accepts, DELTA_HEADER, DELTA_SCHEME};
use super::frame::*;
use super::inbound::{negotiate, FrameReader, Gate, Inbound};
use super::limits::*;
use super::notes::{is_note, NoteInbox, Notes};
use super::outbound::{Outbound, Wire};
use super::slots::Slots;
use crate::config::{Carrier, GossipWire};
use crate::proxy::upgrade::{Admission, UpgradeEndpoint};
use crate::time::unix_secs;

pub use super::inbound::InboundStream;

/// Incoming connections handed over by the proxy, queued for the gossip reader.
pub(super) const UPGRADE_QUEUE: usize = 64;

/// Notes received and not yet taken by the cluster node.
const NOTES_QUEUE: usize = 1024;

enum Bound {
    Tcp(TcpListener),
    Udp(Arc<UdpSocket>),
    Http(mpsc::Receiver<(Inbound, SocketAddr)>),
}

/// chitchat [`Transport`] over authenticated frames. The listening socket is bound
/// beforehand (so its address is known before chitchat starts) and handed over on
/// `open`; with [`Carrier::Http`] nothing is bound here: the proxy listener passes
/// upgraded connections in through [`GossipTransport::upgrade_endpoint`].
pub struct GossipTransport {
    bound: Mutex<Option<Bound>>,
    local: SocketAddr,
    advertise: SocketAddr,
    gate: Arc<Gate>,
    stats: Arc<GossipStats>,
    upgrades: Option<mpsc::Sender<(Inbound, SocketAddr)>>,
    outbound: Arc<Outbound>,
    notes: mpsc::Sender<(SocketAddr, Vec<u8>)>,
    notes_inbox: Mutex<Option<NoteInbox>>,
}

impl GossipTransport {
    /// Bind `listen` with `carrier` (for [`Carrier::Http`], `listen` is the proxy
    /// listener's address and nothing is bound); frames say they come from `advertise`
    /// (or the listen address when `None`), in the wire `formats`.
    pub async fn bind(
        carrier: Carrier,
        formats: GossipWire,
        listen: SocketAddr,
        advertise: Option<SocketAddr>,
        auth: Auth,
        stats: Arc<GossipStats>,
    ) -> std::io::Result<Self> {
        let mut upgrades = None;
        let mut udp = None;
        let (bound, local) = match carrier {
            Carrier::Tcp => {
                let l = TcpListener::bind(listen).await?;
                let a = l.local_addr()?;
                (Bound::Tcp(l), a)
            }
            Carrier::Udp => {
                let s = Arc::new(UdpSocket::bind(listen).await?);
                let a = s.local_addr()?;
                udp = Some(s.clone());
                (Bound::Udp(s), a)
            }
            Carrier::Http => {
                let (tx, rx) = mpsc::channel(UPGRADE_QUEUE);
                upgrades = Some(tx);
                (Bound::Http(rx), listen)
            }
        };
        let advertise = advertise.unwrap_or(local);
        let outbound = Arc::new(Outbound::new(
            udp,
            Wire {
                carrier,
                formats,
                auth: auth.clone(),
                advertise: advertise.to_string().into(),
                stats: stats.clone(),
            },
        ));
        let (notes, inbox) = mpsc::channel(NOTES_QUEUE);
        Ok(GossipTransport {
            bound: Mutex::new(Some(bound)),
            local,
            advertise,
            gate: Arc::new(Gate::new(auth, formats, stats.clone())),
            stats,
            upgrades,
            outbound,
            notes,
            notes_inbox: Mutex::new(Some(inbox)),
        })
    }

    /// What sends notes to peers over this transport's connections, and the notes
    /// peers sent here (once: the cluster node takes them).
    pub fn notes(&self) -> Option<(Notes, NoteInbox)> {
        let inbox = self.notes_inbox.lock().ok()?.take()?;
        Some((Notes::new(self.outbound.clone()), inbox))
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The transport's counters.
    pub fn stats(&self) -> Arc<GossipStats> {
        self.stats.clone()
    }

    pub fn advertise_addr(&self) -> SocketAddr {
        self.advertise
    }

    /// What the proxy listener needs to hand gossip upgrades over ([`Carrier::Http`]).
    pub fn upgrade_endpoint(&self) -> Option<Arc<GossipUpgrade>> {
        let tx = self.upgrades.clone()?;
        Some(Arc::new(GossipUpgrade {
            gate: self.gate.clone(),
            tx,
        }))
    }
}

/// The proxy port's side of gossip: checks a gossip upgrade request's handshake and
/// takes the connection once upgraded.
pub struct GossipUpgrade {
    gate: Arc<Gate>,
    tx: mpsc::Sender<(Inbound, SocketAddr)>,
}

impl UpgradeEndpoint for GossipUpgrade {
    fn protocols(&self) -> &[&'static str] {
        &self.gate.protocols
    }

    fn admit(&self, protocol: &'static str, headers: &http::HeaderMap) -> Option<Admission> {
        let proof = headers.get(AUTH_HEADER).map(|v| v.as_bytes());
        let delta = accepts(headers.get(DELTA_HEADER).map(|v| v.as_bytes()));
        let checked = self.gate.check(protocol, proof, delta)?;
        let mut headers: Vec<_> = checked
            .answer
            .and_then(|a| http::HeaderValue::from_str(&a).ok())
            .map(|v| (self.credential_header().clone(), v))
            .into_iter()
            .collect();
        if checked.delta {
            headers.push((
                http::HeaderName::from_static(DELTA_HEADER),
                http::HeaderValue::from_static(DELTA_SCHEME),
            ));
        }
        Some(Admission {
            headers,
            session: Box::new(checked.reader),
        })
    }

    fn credential_header(&self) -> &http::HeaderName {
        static NAME: http::HeaderName = http::HeaderName::from_static(AUTH_HEADER);
        &NAME
    }

    fn accept(
        &self,
        io: hyper::upgrade::Upgraded,
        peer: SocketAddr,
        session: Box<dyn std::any::Any + Send>,
    ) {
        let Ok(reader) = session.downcast::<FrameReader>() else {
            return; // not what admit gave: cannot happen
        };
        self.gate
            .stats
            .upgrades_accepted
            .fetch_add(1, Ordering::Relaxed);
        let stream: InboundStream = Box::new(TokioIo::new(io));
        if self
            .tx
            .try_send((Inbound::Ready(stream, *reader), peer))
            .is_err()
        {
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
        let sink = Sink {
            gossip: inbound_tx,
            notes: self.notes.clone(),
        };
        match bound {
            Bound::Tcp(listener) => {
                let (tx, rx) = mpsc::channel(UPGRADE_QUEUE);
                tokio::spawn(tcp_accept_loop(listener, tx, sink.gossip.clone()));
                tokio::spawn(serve_inbound(rx, self.gate.clone(), sink));
            }
            Bound::Http(rx) => {
                tokio::spawn(serve_inbound(rx, self.gate.clone(), sink));
            }
            Bound::Udp(socket) => {
                tokio::spawn(udp_recv_loop(
                    socket,
                    self.gate.clone(),
                    self.outbound.heard_v2.clone(),
                    sink,
                ));
            }
        }
        Ok(Box::new(GossipSocket {
            codec: Codec::new().await?,
            inbound,
            outbound: self.outbound.clone(),
            local: self.local,
            stats: self.stats.clone(),
        }))
    }
}

/// Where an authentic frame goes: chitchat's messages to its socket, notes to the
/// cluster node ([`super::notes`]).
#[derive(Clone)]
struct Sink {
    gossip: mpsc::Sender<(SocketAddr, Vec<u8>)>,
    notes: mpsc::Sender<(SocketAddr, Vec<u8>)>,
}

impl Sink {
    fn deliver(&self, from: SocketAddr, message: &[u8]) {
        let queue = if is_note(message) {
            &self.notes
        } else {
            &self.gossip
        };
        if queue.try_send((from, message.to_vec())).is_err() {
            debug!("gossip inbound queue full: frame dropped");
        }
    }

    fn is_closed(&self) -> bool {
        self.gossip.is_closed()
    }
}

struct GossipSocket {
    codec: Codec,
    inbound: mpsc::Receiver<(SocketAddr, Vec<u8>)>,
    outbound: Arc<Outbound>,
    local: SocketAddr,
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
        let n = self.outbound.send(to, &message).await;
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

/// Accept TCP gossip connections and queue them for [`serve_inbound`].
async fn tcp_accept_loop(
    listener: TcpListener,
    streams: mpsc::Sender<(Inbound, SocketAddr)>,
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
        if inbound.is_closed() || streams.send((Inbound::Raw(stream), peer)).await.is_err() {
            return;
        }
    }
}

/// Read frames from every incoming connection (at most [`MAX_INBOUND`] at once; who
/// gives a slot up when they are all taken is [`Slots`]'s rule).
async fn serve_inbound(
    mut streams: mpsc::Receiver<(Inbound, SocketAddr)>,
    gate: Arc<Gate>,
    inbound: Sink,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_INBOUND));
    let holders: Arc<Mutex<Holders>> = Arc::default();
    let epoch = tokio::time::Instant::now();
    let now_ms = move || epoch.elapsed().as_millis() as u64;
    let mut next_id: u64 = 0;
    while let Some((stream, peer)) = streams.recv().await {
        if inbound.is_closed() {
            return;
        }
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                let victim = holders.lock().ok().and_then(|h| {
                    let id = h.slots.victim(now_ms())?;
                    h.tokens.get(&id).cloned()
                });
                let Some(token) = victim else {
                    continue; // every slot holds a peer that talks: refuse this one
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
        if let Ok(mut h) = holders.lock() {
            h.slots.opened(id);
            h.tokens.insert(id, token.clone());
        }
        let (gate, inbound, holders) = (gate.clone(), inbound.clone(), holders.clone());
        tokio::spawn(async move {
            // Each authentic frame: the connection is proven under the identity it
            // names; one identity's oldest connection past the bound is closed.
            let on_frame = |from: SocketAddr| {
                if let Ok(mut h) = holders.lock() {
                    if let Some(old) = h.slots.frame(id, from, now_ms()) {
                        if let Some(t) = h.tokens.get(&old) {
                            t.cancel();
                        }
                    }
                }
            };
            let serve = async {
                let (stream, reader) = match stream {
                    Inbound::Ready(s, r) => (s, r),
                    Inbound::Raw(s) => negotiate(s, &gate).await?,
                };
                // Buffered: a frame's length and body (and often the next frame) in one
                // system call.
                let stream = tokio::io::BufReader::with_capacity(64 * 1024, stream);
                read_frames(stream, reader, &gate.stats, &inbound, &on_frame).await
            };
            tokio::select! {
                r = serve => {
                    if let Err(e) = r {
                        debug!(peer = %peer, error = %e, "gossip connection closed");
                    }
                }
                _ = token.cancelled() => {
                    debug!(peer = %peer, "gossip connection closed to make room");
                }
            }
            if let Ok(mut h) = holders.lock() {
                h.slots.closed(id);
                h.tokens.remove(&id);
            }
            drop(permit);
        });
    }
}

/// The incoming connections' slots and how to close each.
#[derive(Default)]
struct Holders {
    slots: Slots,
    tokens: HashMap<u64, CancellationToken>,
}

async fn read_frames<S: AsyncRead + Unpin>(
    mut stream: S,
    mut reader: FrameReader,
    stats: &GossipStats,
    inbound: &Sink,
    on_frame: &impl Fn(SocketAddr),
) -> anyhow::Result<()> {
    let mut buf = Vec::new();
    let mut authenticated = false;
    loop {
        let mut len = [0u8; 4];
        // A new connection has little time for its first frame; a proven one is closed
        // once silent for PROVEN_IDLE (its peer opens a new one when it has more).
        let wait = if authenticated {
            PROVEN_IDLE
        } else {
            FIRST_FRAME_TIMEOUT
        };
        tokio::time::timeout(wait, stream.read_exact(&mut len)).await??;
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_FRAME {
            count_rejection(stats, &FrameError::Oversized);
            anyhow::bail!("oversized frame ({len} bytes)");
        }
        buf.resize(len, 0);
        // …but one started must arrive in time.
        tokio::time::timeout(FRAME_TIMEOUT, stream.read_exact(&mut buf)).await??;
        match reader.open(&mut buf, stats) {
            Ok((from, message)) => {
                stats.frames_received.fetch_add(1, Ordering::Relaxed);
                stats
                    .bytes_received
                    .fetch_add(4 + len as u64, Ordering::Relaxed);
                authenticated = true;
                on_frame(from);
                inbound.deliver(from, message);
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
    gate: Arc<Gate>,
    heard_v2: Arc<Mutex<HashSet<SocketAddr>>>,
    inbound: Sink,
) {
    let mut buf = vec![0u8; 65_536];
    let mut opener = gate.auth.datagram_opener();
    let stats = &gate.stats;
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
        let datagram = &mut buf[..n];
        let opened = if DatagramOpener::is_v2(datagram) {
            if gate.formats.v2() {
                opener.open(datagram, unix_secs()).inspect(|(from, _)| {
                    if let Ok(mut h) = heard_v2.lock() {
                        h.insert(*from);
                    }
                })
            } else {
                Err(FrameError::Malformed)
            }
        } else if gate.formats.v1() {
            let r = gate.auth.open(datagram);
            if r.is_ok() {
                stats.frames_received_v1.fetch_add(1, Ordering::Relaxed);
            }
            r
        } else {
            Err(FrameError::Malformed)
        };
        match opened {
            Ok((from, message)) => {
                stats.frames_received.fetch_add(1, Ordering::Relaxed);
                stats.bytes_received.fetch_add(n as u64, Ordering::Relaxed);
                inbound.deliver(from, message);
            }
            Err(e) => count_rejection(stats, &e),
        }
    }
}
