//! Delta frames: on a wire v2 connection whose two ends agreed to it at the upgrade
//! ([`DELTA_HEADER`]), every message is compressed with zstd against the message
//! before it on the same connection, loaded as a raw-content dictionary (it never
//! starts with zstd's dictionary magic number: a plaintext starts with the sender
//! address's length, then its text).
//!
//! Idle gossip is the same digest over and over: every `Syn` and `SynAck` carries
//! every balancer's id, incarnation, address, heartbeat and versions, of which only
//! the heartbeats and a few versions moved since the last message on that connection.
//! Against the previous message, a digest of 30 balancers (2 kB) travels in a few
//! hundred bytes. A connection is ordered and reliable (a frame lost, reordered or
//! replayed fails authentication and closes it), so both ends always hold the same
//! previous message; a new connection starts from an empty one. UDP datagrams are
//! never delta-coded.
//!
//! What is coded is the frame's whole plaintext, the sender's address and the message
//! (the address, the same in every frame, then costs nothing). Compression happens
//! before sealing (nothing is compressed after encryption, and a peer's sizes say no
//! more than before: the same messages, shorter). The
//! decompressed size is bounded by [`MAX_FRAME`] before anything is allocated.

use std::cell::RefCell;

use super::limits::{FrameError, MAX_FRAME};

/// The request and response header by which both ends agree to delta frames.
pub const DELTA_HEADER: &str = "gearlb-gossip-delta";
/// The one delta scheme spoken (zstd against the previous message, raw dictionary).
pub const DELTA_SCHEME: &str = "zstd1";
/// The largest message coded. Coding costs CPU in proportion to the message and to
/// its dictionary (the previous message, hashed anew for each one): about 20 µs for a
/// digest of 100 balancers (8 kB), about 0.15% of a core per balancer at M = 100,
/// which on a 2-core host running 100 balancers was enough to keep a cold start of
/// all of them at once from converging (it converged in 21 s without). Up to 4 kB —
/// a digest of up to about 45 balancers, the idle gossip of every cluster up to that
/// size — messages are coded, and cost a few µs; larger ones, and the bulk of a cold
/// start (deltas of up to a datagram's 64 kB), travel as they are.
pub const MAX_CODED: usize = 4 * 1024;
/// The first byte of a delta frame's plaintext: coded, or sent as it is.
const CODED: u8 = 1;
const RAW: u8 = 0;
/// zstd's level: the messages are small, the previous one does most of the work (level
/// 3 codes an idle digest of 100 balancers no smaller, and slower).
const LEVEL: i32 = 1;

thread_local! {
    // One compression and one decompression context per thread, reused for every
    // message of every connection: creating a context costs more than coding a digest
    // (about 20 µs against 9), and a context per connection would hold a few hundred
    // kB each. Each message loads its connection's previous message as the dictionary.
    static CCTX: RefCell<Option<zstd_safe::CCtx<'static>>> = const { RefCell::new(None) };
    static DCTX: RefCell<Option<zstd_safe::DCtx<'static>>> = const { RefCell::new(None) };
}

fn new_cctx() -> zstd_safe::CCtx<'static> {
    let mut cctx = zstd_safe::CCtx::create();
    // Setting a level and a flag within their ranges cannot fail.
    let _ = cctx.set_parameter(zstd_safe::CParameter::CompressionLevel(LEVEL));
    let _ = cctx.set_parameter(zstd_safe::CParameter::ContentSizeFlag(true));
    cctx
}

/// Whether a request or response header value asks for [`DELTA_SCHEME`].
pub fn accepts(value: Option<&[u8]>) -> bool {
    value.is_some_and(|v| {
        v.split(|b| *b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(DELTA_SCHEME.as_bytes()))
    })
}

/// The sending end: compresses each message against the one before it.
#[derive(Default)]
pub struct DeltaEncoder {
    prev: Vec<u8>,
}

impl DeltaEncoder {
    /// `message` compressed against the previous coded one (which it then becomes),
    /// or, past [`MAX_CODED`] bytes (or should zstd refuse it), as it is.
    pub fn encode(&mut self, message: &[u8]) -> Vec<u8> {
        if message.len() <= MAX_CODED {
            // zstd writes from the start of the vector: the tag goes in front after.
            let mut out = Vec::with_capacity(1 + zstd_safe::compress_bound(message.len()));
            let coded = CCTX.with_borrow_mut(|cctx| {
                let cctx = cctx.get_or_insert_with(new_cctx);
                cctx.load_dictionary(&self.prev)
                    .and_then(|_| cctx.compress2(&mut out, message))
                    .is_ok()
            });
            if coded {
                out.insert(0, CODED);
                self.prev.clear();
                self.prev.extend_from_slice(message);
                return out;
            }
        }
        let mut out = Vec::with_capacity(1 + message.len());
        out.push(RAW);
        out.extend_from_slice(message);
        out
    }
}

/// The receiving end: restores each message from the one before it.
#[derive(Default)]
pub struct DeltaDecoder {
    prev: Vec<u8>,
}

impl DeltaDecoder {
    /// The message in `data`: restored from the previous coded one (which it then
    /// becomes), or sent as it is. Anything else — not one zstd frame of at most
    /// [`MAX_FRAME`] bytes against the previous message, an unknown tag — is refused:
    /// the connection is then closed, as for any frame that fails.
    pub fn decode<'a>(&'a mut self, data: &'a [u8]) -> Result<&'a [u8], FrameError> {
        let (tag, data) = data.split_first().ok_or(FrameError::Malformed)?;
        match *tag {
            RAW => return Ok(data),
            CODED => {}
            _ => return Err(FrameError::Malformed),
        }
        let size = match zstd_safe::get_frame_content_size(data) {
            Ok(Some(n)) if n <= MAX_FRAME as u64 => n as usize,
            Ok(Some(_)) => return Err(FrameError::Oversized),
            _ => return Err(FrameError::Malformed),
        };
        let mut out = Vec::with_capacity(size);
        DCTX.with_borrow_mut(|dctx| {
            let dctx = dctx.get_or_insert_with(zstd_safe::DCtx::create);
            dctx.load_dictionary(&self.prev)
                .and_then(|_| dctx.decompress(&mut out, data))
                .map_err(|_| FrameError::Malformed)
        })?;
        if out.len() != size {
            return Err(FrameError::Malformed);
        }
        self.prev = out;
        Ok(&self.prev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Something shaped like a digest: 30 ids with counters that move a little.
    fn digest(round: u64) -> Vec<u8> {
        let mut out = vec![0x53, 0xb0, 0, 0];
        for i in 0..30u64 {
            out.extend(format!("{:032x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).bytes());
            out.extend(1_764_000_000_000u64.to_le_bytes());
            out.extend(format!("10.0.0.{i}:8080").bytes());
            out.extend((1_000 + round * 5 + i).to_le_bytes());
            out.extend(0u64.to_le_bytes());
            out.extend((40 + round / 5 + i).to_le_bytes());
        }
        out
    }

    #[test]
    fn messages_round_trip_in_sequence_and_repeats_cost_little() {
        let (mut enc, mut dec) = (DeltaEncoder::default(), DeltaDecoder::default());
        let mut sizes = Vec::new();
        for round in 0..10 {
            let m = digest(round);
            let z = enc.encode(&m);
            sizes.push((m.len(), z.len()));
            assert_eq!(dec.decode(&z).unwrap(), m.as_slice(), "round {round}");
        }
        // A note between two digests, and an empty message, keep both ends in step.
        for m in [b"GLBN{\"note\":\"ack\"}".to_vec(), Vec::new(), digest(11)] {
            let z = enc.encode(&m);
            assert_eq!(dec.decode(&z).unwrap(), m.as_slice());
        }
        let (plain, first) = sizes[0];
        let later = sizes[1..].iter().map(|s| s.1).max().unwrap();
        assert!(first < plain, "{sizes:?}");
        assert!(
            later * 5 < plain,
            "a repeated digest must shrink 5×: {sizes:?}"
        );
    }

    #[test]
    fn a_decoder_out_of_step_or_garbage_is_refused_never_a_panic() {
        let mut enc = DeltaEncoder::default();
        let z1 = enc.encode(&digest(1));
        let z2 = enc.encode(&digest(2));
        // Skipping a message: the prefix differs, the content is wrong or refused.
        let mut dec = DeltaDecoder::default();
        match dec.decode(&z2) {
            Ok(m) => assert_ne!(m, digest(2).as_slice()),
            Err(e) => assert_eq!(e, FrameError::Malformed),
        }
        let mut dec = DeltaDecoder::default();
        for bad in [
            &b""[..],
            b"\x28\xb5\x2f\xfd",
            b"not zstd at all",
            &z1[..z1.len() / 2],
        ] {
            assert!(dec.decode(bad).is_err(), "{bad:?}");
        }
        // A frame that claims more than MAX_FRAME is refused before any allocation.
        let zeros = vec![0u8; MAX_FRAME + 1];
        let mut z = Vec::with_capacity(zstd_safe::compress_bound(zeros.len()));
        zstd_safe::compress(&mut z, &zeros, 1).unwrap();
        let mut huge = vec![CODED];
        huge.extend(z);
        assert_eq!(
            DeltaDecoder::default().decode(&huge),
            Err(FrameError::Oversized)
        );
        for tag in [2u8, 255] {
            let mut other = z1.clone();
            other[0] = tag;
            assert_eq!(dec.decode(&other), Err(FrameError::Malformed));
        }
        // After refusals the decoder still opens the stream from its start.
        let mut dec = DeltaDecoder::default();
        assert_eq!(dec.decode(&z1).unwrap(), digest(1).as_slice());
        assert_eq!(dec.decode(&z2).unwrap(), digest(2).as_slice());
    }

    #[test]
    fn a_large_message_travels_as_it_is_and_the_next_codes_against_the_last_coded() {
        let (mut enc, mut dec) = (DeltaEncoder::default(), DeltaDecoder::default());
        let big: Vec<u8> = (0..MAX_CODED + 1).map(|i| (i * 7 % 251) as u8).collect();
        for m in [digest(1), big.clone(), digest(2), big, digest(3)] {
            let z = enc.encode(&m);
            if m.len() > MAX_CODED {
                assert_eq!((z[0], &z[1..]), (RAW, m.as_slice()));
            } else {
                assert_eq!(z[0], CODED);
            }
            assert_eq!(dec.decode(&z).unwrap(), m.as_slice());
        }
        // digest(3) was coded against digest(2), not against the large message.
        let mut fresh = DeltaEncoder::default();
        fresh.encode(&digest(2));
        let against_2 = fresh.encode(&digest(3));
        assert!(against_2.len() * 5 < digest(3).len(), "{}", against_2.len());
    }

    #[test]
    fn the_header_is_read_as_a_token_list() {
        assert!(accepts(Some(b"zstd1")));
        assert!(accepts(Some(b"other, ZSTD1 ")));
        assert!(!accepts(Some(b"zstd2")));
        assert!(!accepts(None));
    }
}
