//! The gossip frame of wire v1 and the cluster's keys: [`Auth`] (keys derived from the
//! cluster secret; sealing and opening v1 frames; the v1 upgrade proof; the v2 keys of
//! [`super::session`] and [`super::datagram`]).

use std::net::SocketAddr;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::datagram::{DatagramOpener, DatagramSealer};
use super::limits::*;
use super::session::{hex, unhex, Keys};

/// Keys of one cluster: who may gossip with whom.
#[derive(Clone)]
pub struct Auth {
    cluster_tag: [u8; CLUSTER_TAG_LEN],
    /// HMAC keyed once (its inner and outer pads computed), cloned per frame.
    keyed: Hmac<Sha256>,
    v2: Keys,
    /// The cluster secret, for the datagram keys.
    secret: std::sync::Arc<[u8]>,
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
        // HMAC accepts keys of any length.
        let keyed = Hmac::<Sha256>::new_from_slice(&key).expect("any key length");
        Auth {
            cluster_tag,
            keyed,
            v2: Keys::new(cluster_tag, secret),
            secret: secret.into(),
        }
    }

    /// The keys of wire v2 on connections.
    pub fn v2(&self) -> &Keys {
        &self.v2
    }

    /// This balancer's sealer of v2 datagrams.
    pub fn datagram_sealer(&self) -> DatagramSealer {
        DatagramSealer::new(self.cluster_tag, &self.secret)
    }

    /// An opener of peers' v2 datagrams.
    pub fn datagram_opener(&self) -> DatagramOpener {
        DatagramOpener::new(self.cluster_tag, &self.secret)
    }

    fn mac(&self) -> Hmac<Sha256> {
        self.keyed.clone()
    }

    /// Build a frame carrying `message` from `sender`.
    pub fn seal(&self, sender: SocketAddr, message: &[u8]) -> Vec<u8> {
        self.seal_into(Vec::new(), &sender.to_string(), message)
    }

    /// [`Auth::seal`] with the sender's address already written out (as `SocketAddr`
    /// displays it): what a transport sending many frames keeps.
    pub fn seal_from(&self, sender: &str, message: &[u8]) -> Vec<u8> {
        self.seal_into(Vec::new(), sender, message)
    }

    /// A frame carrying `message` from `sender` (written out) behind its `u32`
    /// big-endian length, as a connection carries it: written in one go, no copy.
    pub fn seal_prefixed(&self, sender: &str, message: &[u8]) -> Vec<u8> {
        let mut out = self.seal_into(vec![0; 4], sender, message);
        let len = (out.len() - 4) as u32;
        out[..4].copy_from_slice(&len.to_be_bytes());
        out
    }

    /// Append a frame to `out` (which holds only what goes before it).
    fn seal_into(&self, mut out: Vec<u8>, addr: &str, message: &[u8]) -> Vec<u8> {
        let start = out.len();
        out.reserve(4 + CLUSTER_TAG_LEN + 1 + addr.len() + message.len() + TAG_LEN);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.cluster_tag);
        put_sender(&mut out, addr, message);
        let mut mac = self.mac();
        mac.update(&out[start..]);
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
        format!("v1 {unix_secs} {}", hex(&mac.finalize().into_bytes()))
    }

    /// Whether `value` is a handshake proof of this cluster made within
    /// `HANDSHAKE_WINDOW_SECS` (15 minutes) of `now_secs`.
    pub fn check_handshake(&self, value: &[u8], now_secs: u64) -> bool {
        self.handshake_tag(value, now_secs).is_some()
    }

    /// The HMAC of a valid handshake proof: what identifies it however its text is
    /// written (hex case, zeros before the time), so that each is taken once.
    pub fn handshake_tag(&self, value: &[u8], now_secs: u64) -> Option<[u8; 32]> {
        let text = std::str::from_utf8(value).ok()?;
        let mut parts = text.split(' ');
        let (Some("v1"), Some(secs), Some(tag_hex), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let secs = secs.parse::<u64>().ok()?;
        if secs.abs_diff(now_secs) > HANDSHAKE_WINDOW_SECS {
            return None;
        }
        let tag = unhex::<32>(tag_hex)?;
        let mut mac = self.mac();
        mac.update(b"gearlb gossip upgrade");
        mac.update(&self.cluster_tag);
        mac.update(&secs.to_be_bytes());
        mac.verify_slice(&tag).ok()?;
        Some(tag)
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
        take_sender(&body[header - 1..])
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
        // On a connection: the same frame behind its length.
        let prefixed = a.seal_prefixed(&addr().to_string(), b"hello");
        assert_eq!(a.seal_from(&addr().to_string(), b"hello"), frame);
        assert_eq!(prefixed[..4], (frame.len() as u32).to_be_bytes());
        assert_eq!(prefixed[4..], frame[..]);

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
