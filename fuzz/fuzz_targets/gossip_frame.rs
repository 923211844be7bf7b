//! Gossip frames: `cluster::transport::Auth::open`, the first thing that touches bytes
//! from the gossip port (reachable by anything that can reach the node).
//!
//! Two modes. Raw: the bytes are a frame; nothing without the key may ever open, so
//! `open` must fail (no panic). Signed: the harness plays a peer holding the key and
//! signs arbitrary header/address/message bytes, to reach the parsing after the HMAC;
//! `open` must succeed exactly when the address is a socket address, and return the
//! message untouched. A start-up self-check ties the harness's signer to `Auth::seal`.
#![no_main]

use std::net::SocketAddr;
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use gearlb::cluster::transport::{Auth, FrameError, MAX_FRAME};
use hmac::{Hmac, Mac};
use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};

const CLUSTER: &str = "app1";
const SECRET: &[u8] = b"fuzz-cluster-secret-0123456789";

#[derive(Debug, Arbitrary)]
enum Input {
    Raw(Vec<u8>),
    Signed {
        addr: Vec<u8>,
        message: Vec<u8>,
        addr_len: Option<u8>,
    },
}

/// A peer's signer, re-derived from the documented frame format.
fn sign(addr: &[u8], addr_len: u8, message: &[u8]) -> Vec<u8> {
    let hk = hkdf::Hkdf::<Sha256>::new(Some(b"gearlb"), SECRET);
    let mut key = [0u8; 32];
    hk.expand(b"gearlb gossip v1", &mut key).unwrap();
    let mut out = b"GLB1".to_vec();
    out.extend_from_slice(&Sha256::digest(CLUSTER.as_bytes())[..8]);
    out.push(addr_len);
    out.extend_from_slice(addr);
    out.extend_from_slice(message);
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(&out);
    out.extend_from_slice(&mac.finalize().into_bytes());
    out
}

fn auth() -> &'static Auth {
    static A: OnceLock<Auth> = OnceLock::new();
    A.get_or_init(|| {
        let a = Auth::new(CLUSTER, SECRET);
        let from: SocketAddr = "127.0.0.1:7001".parse().unwrap();
        let text = from.to_string();
        assert_eq!(
            a.seal(from, b"hello"),
            sign(text.as_bytes(), text.len() as u8, b"hello"),
            "the harness signs frames exactly as gearlb does"
        );
        a
    })
}

fuzz_target!(|input: Input| {
    let a = auth();
    match input {
        Input::Raw(frame) => {
            let r = a.open(&frame);
            assert!(r.is_err(), "an unsigned frame opened: {r:?}");
            if frame.len() > MAX_FRAME {
                assert_eq!(r, Err(FrameError::Oversized));
            }
        }
        Input::Signed {
            addr,
            message,
            addr_len,
        } => {
            let len = addr_len.unwrap_or(addr.len().min(255) as u8);
            let frame = sign(&addr, len, &message);
            let r = a.open(&frame);
            if frame.len() > MAX_FRAME {
                assert_eq!(r, Err(FrameError::Oversized));
                return;
            }
            // What the frame says its address is: `len` bytes after the header.
            let mut body = addr.clone();
            body.extend_from_slice(&message);
            let claimed = body.get(..len as usize);
            let parsed = claimed
                .and_then(|c| std::str::from_utf8(c).ok())
                .and_then(|s| s.parse::<SocketAddr>().ok());
            match (r, parsed) {
                (Ok((from, msg)), Some(p)) => {
                    assert_eq!(from, p);
                    assert_eq!(msg, &body[len as usize..]);
                }
                (Err(FrameError::Malformed), None) => {}
                (r, p) => panic!("open {r:?} but the address parses as {p:?}"),
            }
        }
    }
});
