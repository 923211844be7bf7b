//! The incoming side's handshake: [`Gate`] checks a peer's upgrade proof (v2 bound
//! to the connection, or the release before's v1), [`negotiate`] runs the same
//! upgrade on a raw `cluster.listen` connection, and [`FrameReader`] opens the frames
//! that follow in the wire format agreed.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::delta::{accepts, DELTA_HEADER, DELTA_SCHEME};
use super::frame::*;
use super::limits::*;
use super::session::{Opener, SeenNonces, UPGRADE_PROTOCOL_V2};
use crate::config::GossipWire;
use crate::time::unix_secs;

/// An incoming gossip connection: frames are only ever read from it.
pub type InboundStream = Box<dyn tokio::io::AsyncRead + Send + Unpin>;

/// An incoming connection: upgraded on the proxy port (its wire format agreed), or
/// raw from `cluster.listen` (not yet).
pub enum Inbound {
    Ready(InboundStream, FrameReader),
    Raw(TcpStream),
}

/// How a connection's frames are opened.
pub enum FrameReader {
    /// The release before's frames, authenticated with the cluster key.
    V1(Box<Auth>),
    /// Encrypted with the connection's key, in sequence.
    V2(Opener),
}

impl FrameReader {
    /// Open a frame (without its length prefix): the sender's address and message.
    pub fn open<'a>(
        &'a mut self,
        frame: &'a mut [u8],
        stats: &GossipStats,
    ) -> Result<(SocketAddr, &'a [u8]), FrameError> {
        match self {
            FrameReader::V1(auth) => {
                let r = auth.open(frame);
                if r.is_ok() {
                    stats.frames_received_v1.fetch_add(1, Ordering::Relaxed);
                }
                r
            }
            FrameReader::V2(opener) => opener.open(frame),
        }
    }
}

/// The `Upgrade` tokens answered with `formats`, preferred first.
pub fn protocols(formats: GossipWire) -> Vec<&'static str> {
    match formats {
        GossipWire::V1 => vec![UPGRADE_PROTOCOL],
        GossipWire::Both => vec![UPGRADE_PROTOCOL_V2, UPGRADE_PROTOCOL],
        GossipWire::V2 => vec![UPGRADE_PROTOCOL_V2],
    }
}

/// An upgrade admitted by [`Gate::check`].
pub struct Checked {
    /// The v2 answer's [`AUTH_HEADER`] value (none for v1).
    pub answer: Option<String>,
    /// How the connection's frames are opened.
    pub reader: FrameReader,
    /// Frames are delta-coded: the answer carries [`DELTA_HEADER`]: [`DELTA_SCHEME`].
    pub delta: bool,
}

/// Who may open a gossip connection to this balancer.
pub struct Gate {
    pub auth: Auth,
    pub formats: GossipWire,
    pub protocols: Vec<&'static str>,
    /// v2 handshake nonces already answered (a replayed request is refused).
    seen: Mutex<SeenNonces>,
    pub stats: Arc<GossipStats>,
}

impl Gate {
    pub fn new(auth: Auth, formats: GossipWire, stats: Arc<GossipStats>) -> Self {
        Gate {
            auth,
            formats,
            protocols: protocols(formats),
            seen: Mutex::default(),
            stats,
        }
    }

    /// Check an upgrade `proof` for `protocol`: the answer's header value (v2) and how
    /// the connection's frames are read. A refusal is counted. With `delta` (the
    /// request offered [`DELTA_SCHEME`]), a v2 connection's frames are delta-coded:
    /// the answer must then say so ([`Checked::delta`]).
    pub fn check(&self, protocol: &str, proof: Option<&[u8]>, delta: bool) -> Option<Checked> {
        let checked = proof.and_then(|proof| {
            if !self.protocols.contains(&protocol) {
                None
            } else if protocol == UPGRADE_PROTOCOL_V2 {
                let mut seen = self.seen.lock().ok()?;
                let (answer, opener) = self.auth.v2().answer(proof, unix_secs(), &mut seen)?;
                let opener = if delta { opener.with_delta() } else { opener };
                Some(Checked {
                    answer: Some(answer),
                    reader: FrameReader::V2(opener),
                    delta,
                })
            } else {
                // A v1 proof is bound to nothing but its second: each is taken once, so
                // a recorded one cannot open connections again. (Two balancers of the
                // release before connecting here within the same second make the same
                // proof: the second retries a second later.)
                let tag = self.auth.handshake_tag(proof, unix_secs())?;
                let fresh = self.seen.lock().ok()?.insert(tag);
                fresh.then(|| Checked {
                    answer: None,
                    reader: FrameReader::V1(Box::new(self.auth.clone())),
                    delta: false,
                })
            }
        });
        if checked.is_none() {
            self.stats
                .rejected_handshake
                .fetch_add(1, Ordering::Relaxed);
        }
        checked
    }
}

/// The wire format of a raw connection to `cluster.listen`: an HTTP/1.1 upgrade
/// request to v2 (answered here, as the proxy port answers it), or the release
/// before's frames straight away (their first byte is a length's, never `G`).
pub async fn negotiate(
    mut stream: TcpStream,
    gate: &Gate,
) -> anyhow::Result<(InboundStream, FrameReader)> {
    let mut head = Vec::with_capacity(512);
    let read_head = async {
        let mut chunk = [0u8; 512];
        loop {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                anyhow::bail!("closed before its first frame");
            }
            head.extend_from_slice(&chunk[..n]);
            if head[0] != b'G' || head.windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok(());
            }
            if head.len() > MAX_HANDSHAKE_RESPONSE {
                anyhow::bail!("upgrade request head too long");
            }
        }
    };
    tokio::time::timeout(FIRST_FRAME_TIMEOUT, read_head).await??;
    if head[0] != b'G' {
        if !gate.formats.v1() {
            gate.stats
                .rejected_handshake
                .fetch_add(1, Ordering::Relaxed);
            anyhow::bail!("a v1 connection, and v1 is not spoken (cluster.gossip_wire)");
        }
        // The frames began: what was read is their start.
        let stream: InboundStream = Box::new(std::io::Cursor::new(head).chain(stream));
        return Ok((stream, FrameReader::V1(Box::new(gate.auth.clone()))));
    }
    let end = head
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(head.len(), |p| p + 4);
    let text = String::from_utf8_lossy(&head[..end]).into_owned();
    let field = |name: &str| {
        text.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let asks_v2 = text.starts_with("GET ")
        && field("upgrade").is_some_and(|u| {
            u.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case(UPGRADE_PROTOCOL_V2))
        });
    let proof = field(AUTH_HEADER);
    let delta = accepts(field(DELTA_HEADER).as_deref().map(str::as_bytes));
    let checked = if asks_v2 {
        gate.check(
            UPGRADE_PROTOCOL_V2,
            proof.as_deref().map(str::as_bytes),
            delta,
        )
    } else {
        gate.stats
            .rejected_handshake
            .fetch_add(1, Ordering::Relaxed);
        None
    };
    let Some(Checked {
        answer: Some(answer),
        reader,
        delta,
    }) = checked
    else {
        let _ = stream
            .write_all(b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
            .await;
        anyhow::bail!("gossip upgrade refused");
    };
    let delta = if delta {
        format!("{DELTA_HEADER}: {DELTA_SCHEME}\r\n")
    } else {
        String::new()
    };
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: {UPGRADE_PROTOCOL_V2}\r\n{AUTH_HEADER}: {answer}\r\n{delta}\r\n"
    );
    stream.write_all(response.as_bytes()).await?;
    gate.stats.upgrades_accepted.fetch_add(1, Ordering::Relaxed);
    // The client writes nothing before the `101`; anything after the head is frames.
    let rest = head.split_off(end);
    Ok((Box::new(std::io::Cursor::new(rest).chain(stream)), reader))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v1_proof_is_taken_once_however_it_is_written() {
        let auth = Auth::new("app1", b"secret-0123456789");
        let gate = Gate::new(auth.clone(), GossipWire::Both, Arc::default());
        let proof = auth.handshake(unix_secs());
        assert!(gate
            .check(UPGRADE_PROTOCOL, Some(proof.as_bytes()), true)
            .is_some_and(|c| !c.delta && c.answer.is_none()));
        let (secs, tag) = proof[3..].split_once(' ').unwrap();
        for again in [
            proof.clone(),
            format!("v1 {secs} {}", tag.to_uppercase()),
            format!("v1 0{secs} {tag}"),
        ] {
            assert!(
                gate.check(UPGRADE_PROTOCOL, Some(again.as_bytes()), false)
                    .is_none(),
                "{again}"
            );
        }
        assert_eq!(gate.stats.read().rejected_handshake, 3);
    }

    /// A raw `cluster.listen` connection: the upgrade as `outbound` writes it, with
    /// or without the delta offer; the answer says whether frames are delta-coded,
    /// and frames sealed accordingly open on the far side.
    async fn upgrade_and_send(offer_delta: bool, messages: &[Vec<u8>]) -> (bool, Vec<Vec<u8>>) {
        let auth = Auth::new("app1", b"secret-0123456789");
        let gate = Arc::new(Gate::new(auth.clone(), GossipWire::V2, Arc::default()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let g = gate.clone();
        let n = messages.len();
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let (mut stream, mut reader) = negotiate(s, &g).await.unwrap();
            let mut got = Vec::new();
            for _ in 0..n {
                let mut len = [0u8; 4];
                stream.read_exact(&mut len).await.unwrap();
                let mut buf = vec![0u8; u32::from_be_bytes(len) as usize];
                stream.read_exact(&mut buf).await.unwrap();
                let (_, m) = reader.open(&mut buf, &g.stats).unwrap();
                got.push(m.to_vec());
            }
            got
        });
        let mut c = TcpStream::connect(addr).await.unwrap();
        let keys = auth.v2();
        let offer = keys.offer(unix_secs());
        let extra = if offer_delta {
            format!("{DELTA_HEADER}: {DELTA_SCHEME}\r\n")
        } else {
            String::new()
        };
        let request = format!(
            "GET {UPGRADE_PATH} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: {UPGRADE_PROTOCOL_V2}\r\n{AUTH_HEADER}: {}\r\n{extra}\r\n",
            offer.header
        );
        c.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let mut b = [0u8; 256];
            let k = c.read(&mut b).await.unwrap();
            assert!(k > 0, "closed: {}", String::from_utf8_lossy(&head));
            head.extend_from_slice(&b[..k]);
        }
        let head = String::from_utf8(head).unwrap();
        let value = |name: &str| {
            head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
        };
        let sealer = keys
            .confirm(&offer, value(AUTH_HEADER).unwrap().as_bytes())
            .unwrap();
        let delta = accepts(value(DELTA_HEADER).as_deref().map(str::as_bytes));
        let mut sealer = if delta { sealer.with_delta() } else { sealer };
        for m in messages {
            c.write_all(&sealer.seal_prefixed("10.0.0.1:8080", m))
                .await
                .unwrap();
        }
        (delta, server.await.unwrap())
    }

    #[tokio::test]
    async fn delta_frames_are_used_only_when_both_ends_agree() {
        let messages: Vec<Vec<u8>> = (0..5u8)
            .map(|i| {
                let mut m = b"\x53\xb0\x00\x00".to_vec();
                m.extend(std::iter::repeat_n(b"0123456789abcdef-node", 40).flatten());
                m.push(i);
                m
            })
            .collect();
        let (delta, got) = upgrade_and_send(true, &messages).await;
        assert!(delta, "a v2 peer that offers delta frames gets them");
        assert_eq!(got, messages);
        // A balancer of the release before offers nothing: frames stay whole.
        let (delta, got) = upgrade_and_send(false, &messages).await;
        assert!(!delta);
        assert_eq!(got, messages);
    }
}
