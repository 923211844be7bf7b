//! Gossip wire v2: the upgrade proof a balancer checks (`Keys::answer`), the frames of
//! a v2 connection (`Opener::open`) and UDP datagrams (`DatagramOpener::open`), all
//! reachable by anything that can reach the node.
//!
//! Oracles: no proof, frame or datagram made without the key is ever accepted; frames
//! sealed by a peer holding the key open in order, exactly once, with the sender and
//! message untouched, and a frame out of order never opens.
#![no_main]

use std::net::SocketAddr;
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use gearlb::cluster::transport::Auth;
use libfuzzer_sys::fuzz_target;

const NOW: u64 = 1_800_000_000;

#[derive(Debug, Arbitrary)]
enum Input {
    Proof(Vec<u8>),
    Frames(Vec<Vec<u8>>),
    Datagram(Vec<u8>),
    Sealed {
        port: u16,
        messages: Vec<Vec<u8>>,
        skip: Option<u8>,
    },
}

fn auth() -> &'static Auth {
    static A: OnceLock<Auth> = OnceLock::new();
    A.get_or_init(|| Auth::new("app1", b"fuzz-cluster-secret-0123456789"))
}

fuzz_target!(|input: Input| {
    let a = auth();
    let k = a.v2();
    match input {
        Input::Proof(p) => {
            assert!(k.answer(&p, NOW, &mut Default::default()).is_none());
        }
        Input::Frames(frames) => {
            let offer = k.offer(NOW);
            let (_, mut opener) = k
                .answer(offer.header.as_bytes(), NOW, &mut Default::default())
                .expect("a fresh proof is accepted");
            for mut f in frames {
                assert!(opener.open(&mut f).is_err());
            }
        }
        Input::Datagram(mut d) => {
            assert!(a.datagram_opener().open(&mut d, NOW).is_err());
        }
        Input::Sealed {
            port,
            messages,
            skip,
        } => {
            let offer = k.offer(NOW);
            let (answer, mut opener) = k
                .answer(offer.header.as_bytes(), NOW, &mut Default::default())
                .expect("a fresh proof is accepted");
            let mut sealer = k
                .confirm(&offer, answer.as_bytes())
                .expect("the answer proves the secret");
            let from: SocketAddr = ([10, 0, 0, 1], port).into();
            let sender = from.to_string();
            let skip = skip.map(|s| s as usize % messages.len().max(1));
            for (i, m) in messages.iter().enumerate() {
                let frame = sealer.seal_prefixed(&sender, m);
                if Some(i) == skip {
                    continue; // lost: every later frame must now fail
                }
                let mut body = frame[4..].to_vec();
                let opened = opener.open(&mut body).map(|(a, msg)| (a, msg.to_vec()));
                match skip {
                    Some(s) if i > s => assert!(opened.is_err()),
                    _ => assert_eq!(opened.unwrap(), (from, m.clone())),
                }
                if skip.is_some_and(|s| i > s) {
                    break; // the connection is closed at the first failure
                }
            }
        }
    }
});
