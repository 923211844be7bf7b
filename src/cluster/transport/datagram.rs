//! Gossip wire v2 over UDP (`cluster.transport = "udp"`): a datagram has no connection
//! to bind a handshake to, so each one is sealed on its own and carries what its
//! receiver needs to refuse it a second time.
//!
//! ```text
//! "GLB2" | cluster tag (8) | unix secs (8) | sender's run (8) | sequence (8) |
//! XChaCha20-Poly1305(addr len | sender's address | message) | tag (16)
//! ```
//!
//! The run is random, drawn at start; the sequence counts the run's datagrams; run,
//! sequence and time make the AEAD nonce (never twice under one key). The header is the
//! associated data. A receiver refuses a datagram more than [`HANDSHAKE_WINDOW_SECS`]
//! from its clock, and one whose (run, sequence) it has already taken: per run the
//! highest sequence and a 64-datagram window below it (as IPsec's anti-replay
//! window). Runs silent for the whole time window are forgotten: any of their
//! datagrams is by then too old.

use std::collections::HashMap;
use std::net::SocketAddr;

use chacha20poly1305::aead::rand_core::RngCore;
use chacha20poly1305::aead::{AeadInPlace, KeyInit, OsRng};
use chacha20poly1305::{Key, Tag, XChaCha20Poly1305, XNonce};
use sha2::Sha256;

use super::limits::{put_sender, take_sender, FrameError, HANDSHAKE_WINDOW_SECS, MAX_FRAME};
use super::session::AEAD_TAG_LEN;

const MAGIC: &[u8; 4] = b"GLB2";
const HEADER: usize = 4 + 8 + 8 + 8 + 8;
/// Runs remembered at once (only authentic datagrams create one).
const MAX_RUNS: usize = 4096;
/// Datagrams below a run's highest sequence still accepted once (reordering).
const WINDOW: u64 = 64;

/// Seals this balancer's datagrams.
pub struct DatagramSealer {
    tag: [u8; 8],
    cipher: XChaCha20Poly1305,
    run: [u8; 8],
    seq: std::sync::atomic::AtomicU64,
}

/// Opens peers' datagrams and remembers what it took.
pub struct DatagramOpener {
    tag: [u8; 8],
    cipher: XChaCha20Poly1305,
    runs: HashMap<[u8; 8], Run>,
}

#[derive(Clone, Copy)]
struct Run {
    highest: u64,
    /// Bit i: `highest - i` was taken.
    taken: u64,
    last_secs: u64,
}

fn cipher(secret: &[u8]) -> XChaCha20Poly1305 {
    let hk = hkdf::Hkdf::<Sha256>::new(Some(b"gearlb"), secret);
    let mut key = [0u8; 32];
    hk.expand(b"gearlb gossip v2 datagrams", &mut key)
        .expect("32-byte HKDF output");
    XChaCha20Poly1305::new(Key::from_slice(&key))
}

fn nonce(header: &[u8]) -> XNonce {
    // run | sequence | secs: unique per datagram of one key.
    let mut n = [0u8; 24];
    n[..16].copy_from_slice(&header[20..36]);
    n[16..].copy_from_slice(&header[12..20]);
    *XNonce::from_slice(&n)
}

impl DatagramSealer {
    pub fn new(cluster_tag: [u8; 8], secret: &[u8]) -> Self {
        let mut run = [0u8; 8];
        OsRng.fill_bytes(&mut run);
        DatagramSealer {
            tag: cluster_tag,
            cipher: cipher(secret),
            run,
            seq: Default::default(),
        }
    }

    /// A datagram carrying `message` from `sender` (written out), sealed at `now_secs`.
    pub fn seal(&self, now_secs: u64, sender: &str, message: &[u8]) -> Vec<u8> {
        let seq = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut out = Vec::with_capacity(HEADER + 1 + sender.len() + message.len() + AEAD_TAG_LEN);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.tag);
        out.extend_from_slice(&now_secs.to_be_bytes());
        out.extend_from_slice(&self.run);
        out.extend_from_slice(&seq.to_be_bytes());
        put_sender(&mut out, sender, message);
        let (header, body) = out.split_at_mut(HEADER);
        let tag = self
            .cipher
            .encrypt_in_place_detached(&nonce(header), header, body)
            .expect("datagram within XChaCha20's limit");
        out.extend_from_slice(&tag);
        out
    }
}

impl DatagramOpener {
    pub fn new(cluster_tag: [u8; 8], secret: &[u8]) -> Self {
        DatagramOpener {
            tag: cluster_tag,
            cipher: cipher(secret),
            runs: HashMap::new(),
        }
    }

    /// Whether `datagram` is in this format (else it may be a v1 frame).
    pub fn is_v2(datagram: &[u8]) -> bool {
        datagram.starts_with(MAGIC)
    }

    /// Open a datagram received at `now_secs`, in place: the sender's address and the
    /// message, once.
    pub fn open<'a>(
        &mut self,
        datagram: &'a mut [u8],
        now_secs: u64,
    ) -> Result<(SocketAddr, &'a [u8]), FrameError> {
        if datagram.len() > MAX_FRAME {
            return Err(FrameError::Oversized);
        }
        if datagram.len() < HEADER + 1 + AEAD_TAG_LEN || !datagram.starts_with(MAGIC) {
            return Err(FrameError::Malformed);
        }
        if datagram[4..12] != self.tag {
            return Err(FrameError::OtherCluster);
        }
        let (header, rest) = datagram.split_at_mut(HEADER);
        let (body, tag) = rest.split_at_mut(rest.len() - AEAD_TAG_LEN);
        self.cipher
            .decrypt_in_place_detached(&nonce(header), header, body, Tag::from_slice(tag))
            .map_err(|_| FrameError::BadTag)?;
        let field = |i: usize| u64::from_be_bytes(header[i..i + 8].try_into().expect("8 bytes"));
        let (secs, seq) = (field(12), field(28));
        let run: [u8; 8] = header[20..28].try_into().expect("8 bytes");
        if secs.abs_diff(now_secs) > HANDSHAKE_WINDOW_SECS || !self.take(run, seq, now_secs) {
            return Err(FrameError::Replayed);
        }
        take_sender(body)
    }

    /// Record (run, seq) as taken; false if it was, or is too far behind.
    fn take(&mut self, run: [u8; 8], seq: u64, now_secs: u64) -> bool {
        if !self.runs.contains_key(&run) && self.runs.len() >= MAX_RUNS {
            self.runs
                .retain(|_, r| now_secs.saturating_sub(r.last_secs) <= HANDSHAKE_WINDOW_SECS);
            if self.runs.len() >= MAX_RUNS {
                return false;
            }
        }
        let r = self.runs.entry(run).or_insert(Run {
            highest: seq,
            taken: 0,
            last_secs: now_secs,
        });
        r.last_secs = now_secs;
        if seq > r.highest || r.taken == 0 {
            let shift = seq.saturating_sub(r.highest);
            r.taken = if r.taken == 0 || shift >= WINDOW {
                1
            } else {
                (r.taken << shift) | 1
            };
            r.highest = seq;
            return true;
        }
        let back = r.highest - seq;
        if back >= WINDOW || r.taken & (1 << back) != 0 {
            return false;
        }
        r.taken |= 1 << back;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;
    const TAG: [u8; 8] = *b"clustert";

    fn open(o: &mut DatagramOpener, d: &[u8], now: u64) -> Result<Vec<u8>, FrameError> {
        let mut d = d.to_vec();
        o.open(&mut d, now).map(|(_, m)| m.to_vec())
    }

    #[test]
    fn datagrams_open_once_and_nothing_is_in_clear() {
        let s = DatagramSealer::new(TAG, b"secret-0123456789");
        let mut o = DatagramOpener::new(TAG, b"secret-0123456789");
        let d = s.seal(NOW, "10.0.0.7:7000", b"gear-alpha up");
        assert!(!d.windows(10).any(|w| w == b"gear-alpha"));
        assert!(DatagramOpener::is_v2(&d));
        assert_eq!(open(&mut o, &d, NOW + 1).unwrap(), b"gear-alpha up");
        assert_eq!(open(&mut o, &d, NOW + 1), Err(FrameError::Replayed));
        // Too old or from too far ahead.
        let late = s.seal(NOW, "10.0.0.7:7000", b"x");
        assert_eq!(
            open(&mut o, &late, NOW + HANDSHAKE_WINDOW_SECS + 1),
            Err(FrameError::Replayed)
        );
        // Other secret, other cluster, tampered.
        let d = s.seal(NOW, "10.0.0.7:7000", b"y");
        let mut other = DatagramOpener::new(TAG, b"secret-other-key");
        assert_eq!(open(&mut other, &d, NOW), Err(FrameError::BadTag));
        let mut app2 = DatagramOpener::new(*b"otherapp", b"secret-0123456789");
        assert_eq!(open(&mut app2, &d, NOW), Err(FrameError::OtherCluster));
        for i in 4..d.len() {
            let mut t = d.clone();
            t[i] ^= 1;
            let mut fresh = DatagramOpener::new(TAG, b"secret-0123456789");
            assert!(open(&mut fresh, &t, NOW).is_err(), "flip at {i}");
        }
        assert_eq!(open(&mut o, b"GLB2", NOW), Err(FrameError::Malformed));
    }

    #[test]
    fn reordering_within_the_window_is_accepted_once() {
        let s = DatagramSealer::new(TAG, b"k-0123456789");
        let mut o = DatagramOpener::new(TAG, b"k-0123456789");
        let ds: Vec<_> = (0..100)
            .map(|i| s.seal(NOW, "10.0.0.7:7000", &[i]))
            .collect();
        assert!(open(&mut o, &ds[10], NOW).is_ok());
        assert!(open(&mut o, &ds[5], NOW).is_ok(), "late, within the window");
        assert!(open(&mut o, &ds[5], NOW).is_err());
        assert!(open(&mut o, &ds[90], NOW).is_ok());
        assert!(open(&mut o, &ds[20], NOW).is_err(), "behind the window");
        assert!(open(&mut o, &ds[89], NOW).is_ok());
        assert!(open(&mut o, &ds[90], NOW).is_err());
        // A second sender's run has its own window.
        let s2 = DatagramSealer::new(TAG, b"k-0123456789");
        assert!(open(&mut o, &s2.seal(NOW, "10.0.0.8:7000", b"a"), NOW).is_ok());
    }
}
