//! Gossip wire v2 on connections: a handshake bound to the connection, then every
//! frame sealed with a key of that connection alone and a sequence number.
//!
//! **Handshake.** The connecting balancer picks a random nonce and sends, in the
//! `gearlb-gossip-auth` header of its `Upgrade: gearlb-gossip/2` request,
//! `v2 <unix secs> <hex nonce_c> <hex HMAC(K_auth, "request" | cluster tag | secs | nonce_c)>`.
//! The peer checks the proof (within [`HANDSHAKE_WINDOW_SECS`] of its clock, and a
//! nonce it has not seen before: a recorded request replayed is refused with a `403`),
//! picks its own nonce and answers the `101` with
//! `v2 <hex nonce_s> <hex HMAC(K_auth, "response" | cluster tag | nonce_c | nonce_s)>`,
//! which tells the connecting side it reached a balancer holding the same secret.
//!
//! **Frames.** Both sides derive the connection's key:
//! `HKDF-SHA256(salt = nonce_c | nonce_s, ikm = K_frames, info = "gearlb gossip v2 frames" | cluster tag)`.
//! Each frame is `u32 length | ChaCha20-Poly1305(addr len | sender's address | message) | tag (16)`,
//! the AEAD nonce the frame's sequence number on the connection (0, 1, 2… as in TLS 1.3,
//! never sent). A frame replayed, reordered, dropped or copied from another connection
//! fails authentication, and the connection is closed. Nothing of the message travels
//! in clear: no key, gear name, load or rotation.
//!
//! `K_auth` and `K_frames` come from the cluster secret by HKDF (salt `gearlb`), with
//! labels of their own, so no v1 key is reused.

use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;

use chacha20poly1305::aead::rand_core::RngCore;
use chacha20poly1305::aead::{AeadInPlace, KeyInit, OsRng};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce, Tag};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::delta::{DeltaDecoder, DeltaEncoder};
use super::limits::{put_sender, take_sender, FrameError, HANDSHAKE_WINDOW_SECS, MAX_FRAME};

/// The HTTP `Upgrade` token of gossip wire v2.
pub const UPGRADE_PROTOCOL_V2: &str = "gearlb-gossip/2";
/// Bytes of each side's handshake nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes of a frame's authentication tag.
pub const AEAD_TAG_LEN: usize = 16;
/// Associated data of every v2 frame (a v1 frame can never open as one).
const AAD: &[u8] = b"GLB2";
/// Handshake nonces remembered to refuse a replayed upgrade request. Only requests
/// with a valid proof are remembered, so no one without the secret can fill it.
const SEEN_NONCES: usize = 65_536;

/// The v2 keys of one cluster.
#[derive(Clone)]
pub struct Keys {
    tag: [u8; 8],
    auth: Hmac<Sha256>,
    frames: [u8; 32],
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(<redacted>)")
    }
}

/// The connecting side's handshake in progress: its nonce, to check the answer with.
pub struct Offer {
    nonce: [u8; NONCE_LEN],
    /// The `gearlb-gossip-auth` value of the upgrade request.
    pub header: String,
}

impl Keys {
    pub fn new(cluster_tag: [u8; 8], secret: &[u8]) -> Self {
        let hk = hkdf::Hkdf::<Sha256>::new(Some(b"gearlb"), secret);
        let mut auth = [0u8; 32];
        let mut frames = [0u8; 32];
        // 32 bytes is far below HKDF-SHA256's output limit: expand cannot fail.
        hk.expand(b"gearlb gossip v2 auth", &mut auth)
            .expect("32-byte HKDF output");
        hk.expand(b"gearlb gossip v2 frames", &mut frames)
            .expect("32-byte HKDF output");
        Keys {
            tag: cluster_tag,
            auth: <Hmac<Sha256> as Mac>::new_from_slice(&auth).expect("any key length"),
            frames,
        }
    }

    fn request_mac(&self, secs: u64, nonce_c: &[u8; NONCE_LEN]) -> Hmac<Sha256> {
        let mut mac = self.auth.clone();
        mac.update(b"gearlb gossip v2 request");
        mac.update(&self.tag);
        mac.update(&secs.to_be_bytes());
        mac.update(nonce_c);
        mac
    }

    fn response_mac(&self, nonce_c: &[u8; NONCE_LEN], nonce_s: &[u8; NONCE_LEN]) -> Hmac<Sha256> {
        let mut mac = self.auth.clone();
        mac.update(b"gearlb gossip v2 response");
        mac.update(&self.tag);
        mac.update(nonce_c);
        mac.update(nonce_s);
        mac
    }

    /// The connecting side's upgrade proof, made at `unix_secs` with a fresh nonce.
    pub fn offer(&self, unix_secs: u64) -> Offer {
        let mut nonce = [0u8; NONCE_LEN];
        OsRng.fill_bytes(&mut nonce);
        let tag = self.request_mac(unix_secs, &nonce).finalize().into_bytes();
        Offer {
            nonce,
            header: format!("v2 {unix_secs} {} {}", hex(&nonce), hex(&tag)),
        }
    }

    /// Check an upgrade proof (`value`) at `now_secs`. A valid one not seen before
    /// (`seen` remembers it) gets the answer's header value and the connection's
    /// frame opener.
    pub fn answer(
        &self,
        value: &[u8],
        now_secs: u64,
        seen: &mut SeenNonces,
    ) -> Option<(String, Opener)> {
        let text = std::str::from_utf8(value).ok()?;
        let mut parts = text.split(' ');
        let (Some("v2"), Some(secs), Some(nonce), Some(tag), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return None;
        };
        let secs: u64 = secs.parse().ok()?;
        if secs.abs_diff(now_secs) > HANDSHAKE_WINDOW_SECS {
            return None;
        }
        let nonce_c: [u8; NONCE_LEN] = unhex(nonce)?;
        let tag: [u8; 32] = unhex(tag)?;
        self.request_mac(secs, &nonce_c).verify_slice(&tag).ok()?;
        if !seen.insert(nonce_c) {
            return None; // a recorded request, replayed
        }
        let mut nonce_s = [0u8; NONCE_LEN];
        OsRng.fill_bytes(&mut nonce_s);
        let proof = self
            .response_mac(&nonce_c, &nonce_s)
            .finalize()
            .into_bytes();
        let header = format!("v2 {} {}", hex(&nonce_s), hex(&proof));
        Some((header, Opener::new(self.cipher(&nonce_c, &nonce_s))))
    }

    /// Check the peer's answer to `offer`: the connection's frame sealer when the peer
    /// proved the same secret.
    pub fn confirm(&self, offer: &Offer, value: &[u8]) -> Option<Sealer> {
        let text = std::str::from_utf8(value).ok()?;
        let mut parts = text.split(' ');
        let (Some("v2"), Some(nonce), Some(tag), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let nonce_s: [u8; NONCE_LEN] = unhex(nonce)?;
        let tag: [u8; 32] = unhex(tag)?;
        self.response_mac(&offer.nonce, &nonce_s)
            .verify_slice(&tag)
            .ok()?;
        Some(Sealer::new(self.cipher(&offer.nonce, &nonce_s)))
    }

    fn cipher(&self, nonce_c: &[u8; NONCE_LEN], nonce_s: &[u8; NONCE_LEN]) -> ChaCha20Poly1305 {
        let mut salt = [0u8; 2 * NONCE_LEN];
        salt[..NONCE_LEN].copy_from_slice(nonce_c);
        salt[NONCE_LEN..].copy_from_slice(nonce_s);
        let hk = hkdf::Hkdf::<Sha256>::new(Some(&salt), &self.frames);
        let mut info = b"gearlb gossip v2 frames ".to_vec();
        info.extend_from_slice(&self.tag);
        let mut key = [0u8; 32];
        hk.expand(&info, &mut key).expect("32-byte HKDF output");
        ChaCha20Poly1305::new(Key::from_slice(&key))
    }
}

fn seq_nonce(seq: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&seq.to_be_bytes());
    *Nonce::from_slice(&n)
}

/// The sending side of a v2 connection.
pub struct Sealer {
    cipher: ChaCha20Poly1305,
    seq: u64,
    delta: Option<DeltaEncoder>,
}

impl Sealer {
    fn new(cipher: ChaCha20Poly1305) -> Self {
        Sealer {
            cipher,
            seq: 0,
            delta: None,
        }
    }

    /// From now on every message is delta-coded (see [`super::delta`]): the peer agreed.
    pub fn with_delta(mut self) -> Self {
        self.delta = Some(DeltaEncoder::default());
        self
    }

    /// The next frame carrying `message` from `sender` (written out), behind its
    /// `u32` big-endian length, ready to be written in one go.
    pub fn seal_prefixed(&mut self, sender: &str, message: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + 1 + sender.len() + message.len() + AEAD_TAG_LEN);
        out.extend_from_slice(&[0; 4]);
        match self.delta.as_mut() {
            // The sender's address and the message, coded together: the address, the
            // same in every frame of the connection, then costs nothing.
            Some(d) => {
                let mut plain = Vec::with_capacity(1 + sender.len() + message.len());
                put_sender(&mut plain, sender, message);
                out.extend_from_slice(&d.encode(&plain));
            }
            None => put_sender(&mut out, sender, message),
        }
        let nonce = seq_nonce(self.seq);
        self.seq += 1;
        // Encryption fails only past ChaCha20's 256 GiB per message: a frame is ≤64 KiB.
        let tag = self
            .cipher
            .encrypt_in_place_detached(&nonce, AAD, &mut out[4..])
            .expect("frame within ChaCha20's limit");
        out.extend_from_slice(&tag);
        let len = (out.len() - 4) as u32;
        out[..4].copy_from_slice(&len.to_be_bytes());
        out
    }
}

/// The receiving side of a v2 connection: frames must come in order, each once.
pub struct Opener {
    cipher: ChaCha20Poly1305,
    seq: u64,
    delta: Option<DeltaDecoder>,
}

impl Opener {
    fn new(cipher: ChaCha20Poly1305) -> Self {
        Opener {
            cipher,
            seq: 0,
            delta: None,
        }
    }

    /// Every message of this connection is delta-coded (see [`super::delta`]): agreed
    /// at the upgrade.
    pub fn with_delta(mut self) -> Self {
        self.delta = Some(DeltaDecoder::default());
        self
    }

    /// Open the next frame (without its length prefix) in place: the sender's address
    /// and the message. Any failure ends the connection (the sequence is then lost).
    pub fn open<'a>(
        &'a mut self,
        frame: &'a mut [u8],
    ) -> Result<(SocketAddr, &'a [u8]), FrameError> {
        if frame.len() > MAX_FRAME {
            return Err(FrameError::Oversized);
        }
        if frame.len() < 1 + AEAD_TAG_LEN {
            return Err(FrameError::Malformed);
        }
        let (body, tag) = frame.split_at_mut(frame.len() - AEAD_TAG_LEN);
        let nonce = seq_nonce(self.seq);
        self.cipher
            .decrypt_in_place_detached(&nonce, AAD, body, Tag::from_slice(tag))
            .map_err(|_| FrameError::BadTag)?;
        self.seq += 1;
        match self.delta.as_mut() {
            Some(d) => take_sender(d.decode(body)?),
            None => take_sender(body),
        }
    }
}

/// Handshake nonces already answered (the most recent [`SEEN_NONCES`]).
#[derive(Default)]
pub struct SeenNonces {
    set: HashSet<[u8; NONCE_LEN]>,
    order: VecDeque<[u8; NONCE_LEN]>,
}

impl SeenNonces {
    /// Remember `nonce`; false if it was already there.
    pub fn insert(&mut self, nonce: [u8; NONCE_LEN]) -> bool {
        if !self.set.insert(nonce) {
            return false;
        }
        self.order.push_back(nonce);
        if self.order.len() > SEEN_NONCES {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }
}

pub(super) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * bytes.len());
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

pub(super) fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let t = text.as_bytes();
    if t.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = digit(t[2 * i])? << 4 | digit(t[2 * i + 1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn keys(secret: &[u8]) -> Keys {
        Keys::new(*b"clustert", secret)
    }

    fn addr() -> SocketAddr {
        "10.0.0.7:8080".parse().unwrap()
    }

    fn pair() -> (Sealer, Opener) {
        let k = keys(b"secret-0123456789");
        let offer = k.offer(NOW);
        let (answer, opener) = k
            .answer(offer.header.as_bytes(), NOW, &mut SeenNonces::default())
            .unwrap();
        (k.confirm(&offer, answer.as_bytes()).unwrap(), opener)
    }

    fn open_prefixed(o: &mut Opener, frame: &[u8]) -> Result<(SocketAddr, Vec<u8>), FrameError> {
        assert_eq!(frame[..4], ((frame.len() - 4) as u32).to_be_bytes());
        let mut body = frame[4..].to_vec();
        o.open(&mut body).map(|(a, m)| (a, m.to_vec()))
    }

    #[test]
    fn frames_flow_in_order_and_carry_nothing_in_clear() {
        let (mut s, mut o) = pair();
        for i in 0..5u8 {
            let msg = format!("gear-alpha-{i} load 0.{i}");
            let f = s.seal_prefixed(&addr().to_string(), msg.as_bytes());
            assert!(
                !f.windows(10).any(|w| w == b"gear-alpha"),
                "plaintext in frame"
            );
            assert!(!f.windows(8).any(|w| w == b"10.0.0.7"), "address in clear");
            assert_eq!(
                open_prefixed(&mut o, &f).unwrap(),
                (addr(), msg.into_bytes())
            );
        }
    }

    #[test]
    fn replayed_reordered_or_foreign_frames_are_refused() {
        let a = addr().to_string();
        // Replay: the same frame twice.
        let (mut s, mut o) = pair();
        let f0 = s.seal_prefixed(&a, b"one");
        open_prefixed(&mut o, &f0).unwrap();
        assert_eq!(open_prefixed(&mut o, &f0), Err(FrameError::BadTag));
        // Reorder: the second frame first.
        let (mut s, mut o) = pair();
        let _f0 = s.seal_prefixed(&a, b"one");
        let f1 = s.seal_prefixed(&a, b"two");
        assert_eq!(open_prefixed(&mut o, &f1), Err(FrameError::BadTag));
        // Another connection's frame (same secret, other nonces).
        let (mut s2, _) = pair();
        let (_, mut o3) = pair();
        assert_eq!(
            open_prefixed(&mut o3, &s2.seal_prefixed(&a, b"x")),
            Err(FrameError::BadTag)
        );
        // Bit flips anywhere.
        let (mut s, _) = pair();
        let f = s.seal_prefixed(&a, b"payload");
        for i in 4..f.len() {
            let mut t = f.clone();
            t[i] ^= 1;
            let mut fresh = {
                let (_, o) = pair();
                o
            };
            assert!(open_prefixed(&mut fresh, &t).is_err());
        }
        // Too short.
        let (_, mut o) = pair();
        assert_eq!(o.open(&mut [0u8; 5]), Err(FrameError::Malformed));
    }

    #[test]
    fn the_handshake_needs_the_secret_a_fresh_time_and_a_fresh_nonce() {
        let k = keys(b"secret-0123456789");
        let offer = k.offer(NOW);
        let mut seen = SeenNonces::default();
        assert!(k
            .answer(offer.header.as_bytes(), NOW + 60, &mut seen)
            .is_some());
        assert!(
            k.answer(offer.header.as_bytes(), NOW + 60, &mut seen)
                .is_none(),
            "a replayed request is refused"
        );
        let offer = k.offer(NOW);
        let mut seen = SeenNonces::default();
        assert!(k
            .answer(
                offer.header.as_bytes(),
                NOW + HANDSHAKE_WINDOW_SECS + 1,
                &mut seen
            )
            .is_none());
        assert!(keys(b"secret-other-key")
            .answer(offer.header.as_bytes(), NOW, &mut seen)
            .is_none());
        assert!(Keys::new(*b"otherapp", b"secret-0123456789")
            .answer(offer.header.as_bytes(), NOW, &mut seen)
            .is_none());
        let forged = offer
            .header
            .replacen(&NOW.to_string(), &(NOW + 1).to_string(), 1);
        assert!(k.answer(forged.as_bytes(), NOW, &mut seen).is_none());
        for bad in [
            "",
            "v2",
            "v1 1 00",
            "v2 x y z",
            &format!("{} x", offer.header),
        ] {
            assert!(
                k.answer(bad.as_bytes(), NOW, &mut seen).is_none(),
                "{bad:?}"
            );
        }
        // The answer proves the peer holds the secret too.
        let (answer, _) = k.answer(offer.header.as_bytes(), NOW, &mut seen).unwrap();
        assert!(k.confirm(&offer, answer.as_bytes()).is_some());
        assert!(keys(b"secret-other-key")
            .confirm(&offer, answer.as_bytes())
            .is_none());
        let other = k.offer(NOW);
        assert!(k.confirm(&other, answer.as_bytes()).is_none());
        assert!(k.confirm(&offer, b"v2 00 11").is_none());
    }

    #[test]
    fn seen_nonces_are_bounded() {
        let mut seen = SeenNonces::default();
        let n = |i: u32| {
            let mut x = [0u8; NONCE_LEN];
            x[..4].copy_from_slice(&i.to_be_bytes());
            x
        };
        for i in 0..(SEEN_NONCES as u32 + 10) {
            assert!(seen.insert(n(i)));
        }
        assert_eq!(seen.order.len(), SEEN_NONCES);
        assert!(!seen.insert(n(SEEN_NONCES as u32 + 9)));
        assert!(seen.insert(n(0)), "the oldest is forgotten first");
    }

    #[test]
    fn garbage_never_panics_nor_opens() {
        let k = keys(b"secret-0123456789");
        let mut seen = SeenNonces::default();
        let offer = k.offer(NOW);
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..5_000 {
            let len = rng.usize(0..300);
            let mut v: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
            if rng.bool() && v.len() > 3 {
                v[..3].copy_from_slice(b"v2 ");
            }
            assert!(k.answer(&v, NOW, &mut seen).is_none());
            assert!(k.confirm(&offer, &v).is_none());
            let (_, mut o) = pair();
            assert!(o.open(&mut v).is_err());
        }
    }

    #[test]
    fn hex_round_trips() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(hex(&b), "0001abff");
        assert_eq!(unhex::<4>("0001ABff"), Some(b));
        assert_eq!(unhex::<4>("0001abf"), None);
        assert_eq!(unhex::<2>("zz00"), None);
    }
}
