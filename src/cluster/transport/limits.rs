//! What every gossip carrier and wire format shares: the limits and timeouts, the
//! names of the upgrade, why a frame is refused ([`FrameError`]) and the transport's
//! counters ([`GossipStats`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub(super) const MAGIC: &[u8; 4] = b"GLB1";
pub(super) const TAG_LEN: usize = 32;
pub(super) const CLUSTER_TAG_LEN: usize = 8;
/// chitchat's largest message plus our header and tag.
pub const MAX_FRAME: usize = 65_507 + 4 + CLUSTER_TAG_LEN + 1 + 64 + TAG_LEN;
/// Frames queued per peer before new ones are dropped (gossip is best effort).
pub(super) const PEER_QUEUE: usize = 64;
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Time a peer has to finish sending a frame it started.
pub(super) const FRAME_TIMEOUT: Duration = Duration::from_secs(10);
/// Incoming gossip connections served at once.
pub(super) const MAX_INBOUND: usize = 256;
/// The HTTP `Upgrade` token of gossip wire v1 (the release before's) on the proxy port.
pub const UPGRADE_PROTOCOL: &str = "gearlb-gossip/1";
/// Path of the gossip upgrade request (the `Upgrade` token is what selects it).
pub const UPGRADE_PATH: &str = "/.gearlb/gossip";
/// Header carrying the handshake's proof of the cluster secret.
pub const AUTH_HEADER: &str = "gearlb-gossip-auth";
/// How far a handshake's timestamp may be from this balancer's clock.
pub(super) const HANDSHAKE_WINDOW_SECS: u64 = 15 * 60;
/// Time a peer has to answer our upgrade request.
pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest response head accepted for our upgrade request.
pub(super) const MAX_HANDSHAKE_RESPONSE: usize = 4096;
/// Time a new incoming connection has to deliver its first authentic frame (a peer
/// sends one as soon as it connects). Until then it is "unproven": when every slot is
/// taken, the oldest unproven connection is closed to make room, so connections that
/// never authenticate cannot lock the balancer's peers out.
pub(super) const FIRST_FRAME_TIMEOUT: Duration = Duration::from_secs(3);
/// A proven incoming connection silent this long is closed: its peer opens a new one
/// when it has more to say (with many balancers, chitchat may not pick a given peer
/// for several rounds, so this is well above the gossip interval).
pub(super) const PROVEN_IDLE: Duration = Duration::from_secs(30);

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
    /// Peers' gossip connections upgraded on the proxy port (not client traffic: the
    /// FRONTEND counts none of their requests, responses or bytes).
    pub upgrades_accepted: AtomicU64,
    /// Frames (datagrams) refused as already taken or too old.
    pub rejected_replayed: AtomicU64,
    /// Frames received in wire v1 (from balancers of the release before).
    pub frames_received_v1: AtomicU64,
    /// Bytes of the frames written to peers (length prefixes included; not the
    /// upgrade requests, nor TCP's own headers).
    pub bytes_sent: AtomicU64,
    /// Bytes of the authenticated frames received.
    pub bytes_received: AtomicU64,
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
    #[serde(default)]
    pub upgrades_accepted: u64,
    #[serde(default)]
    pub rejected_replayed: u64,
    #[serde(default)]
    pub frames_received_v1: u64,
    #[serde(default)]
    pub bytes_sent: u64,
    #[serde(default)]
    pub bytes_received: u64,
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
            upgrades_accepted: r(&self.upgrades_accepted),
            rejected_replayed: r(&self.rejected_replayed),
            frames_received_v1: r(&self.frames_received_v1),
            bytes_sent: r(&self.bytes_sent),
            bytes_received: r(&self.bytes_received),
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
    #[error("frame already received, or too old")]
    Replayed,
}

pub(super) fn count_rejection(stats: &GossipStats, e: &FrameError) {
    let c = match e {
        FrameError::Malformed => &stats.rejected_malformed,
        FrameError::Oversized => &stats.rejected_oversized,
        FrameError::OtherCluster => &stats.rejected_other_cluster,
        FrameError::BadTag => &stats.rejected_bad_tag,
        FrameError::Replayed => &stats.rejected_replayed,
    };
    c.fetch_add(1, Ordering::Relaxed);
}

/// Append what every frame format carries: `addr len (1) | sender's address | message`
/// (`sender` is a `SocketAddr` written out: at most 47 bytes).
pub(super) fn put_sender(out: &mut Vec<u8>, sender: &str, message: &[u8]) {
    out.push(sender.len() as u8);
    out.extend_from_slice(sender.as_bytes());
    out.extend_from_slice(message);
}

/// The sender's address and the message of an opened frame's body ([`put_sender`]).
pub(super) fn take_sender(body: &[u8]) -> Result<(SocketAddr, &[u8]), FrameError> {
    let (&len, rest) = body.split_first().ok_or(FrameError::Malformed)?;
    let len = len as usize;
    let addr = rest
        .get(..len)
        .and_then(|a| std::str::from_utf8(a).ok())
        .and_then(|a| a.parse::<SocketAddr>().ok())
        .ok_or(FrameError::Malformed)?;
    Ok((addr, &rest[len..]))
}
