//! Delta frames: on a wire v2 connection whose two ends agreed to it at the upgrade
//! ([`DELTA_HEADER`]), every message is compressed with zstd against the message
//! before it on the same connection, used as a raw prefix ("dictionary" of one use).
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
//! before sealing (nothing is compressed after encryption, and
//! a peer's sizes say no more than before: the same messages, shorter). The
//! decompressed size is bounded by [`MAX_FRAME`] before anything is allocated.

use super::limits::{FrameError, MAX_FRAME};

/// The request and response header by which both ends agree to delta frames.
pub const DELTA_HEADER: &str = "gearlb-gossip-delta";
/// The one delta scheme spoken (zstd against the previous message, raw prefix).
pub const DELTA_SCHEME: &str = "zstd1";
/// zstd's level: the messages are small, the prefix does most of the work.
const LEVEL: i32 = 3;

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
    /// `message` compressed against the previous one (which it then becomes).
    pub fn encode(&mut self, message: &[u8]) -> Result<Vec<u8>, FrameError> {
        let mut out = Vec::with_capacity(zstd_safe::compress_bound(message.len()));
        {
            let mut cctx = zstd_safe::CCtx::create();
            cctx.set_parameter(zstd_safe::CParameter::CompressionLevel(LEVEL))
                .and_then(|_| cctx.set_parameter(zstd_safe::CParameter::ContentSizeFlag(true)))
                .and_then(|_| cctx.ref_prefix(&self.prev))
                .and_then(|_| cctx.compress2(&mut out, message))
                .map_err(|_| FrameError::Malformed)?;
        }
        self.prev.clear();
        self.prev.extend_from_slice(message);
        Ok(out)
    }
}

/// The receiving end: restores each message from the one before it.
#[derive(Default)]
pub struct DeltaDecoder {
    prev: Vec<u8>,
}

impl DeltaDecoder {
    /// The message compressed in `data` (which it then becomes the prefix of the next).
    /// Anything that is not one zstd frame of at most [`MAX_FRAME`] bytes against the
    /// previous message is refused: the connection is then closed, as for any frame
    /// that fails.
    pub fn decode(&mut self, data: &[u8]) -> Result<&[u8], FrameError> {
        let size = match zstd_safe::get_frame_content_size(data) {
            Ok(Some(n)) if n <= MAX_FRAME as u64 => n as usize,
            Ok(Some(_)) => return Err(FrameError::Oversized),
            _ => return Err(FrameError::Malformed),
        };
        let mut out = Vec::with_capacity(size);
        {
            let mut dctx = zstd_safe::DCtx::create();
            dctx.ref_prefix(&self.prev)
                .and_then(|_| dctx.decompress(&mut out, data))
                .map_err(|_| FrameError::Malformed)?;
        }
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
            let z = enc.encode(&m).unwrap();
            sizes.push((m.len(), z.len()));
            assert_eq!(dec.decode(&z).unwrap(), m.as_slice(), "round {round}");
        }
        // A note between two digests, and an empty message, keep both ends in step.
        for m in [b"GLBN{\"note\":\"ack\"}".to_vec(), Vec::new(), digest(11)] {
            let z = enc.encode(&m).unwrap();
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
        let z1 = enc.encode(&digest(1)).unwrap();
        let z2 = enc.encode(&digest(2)).unwrap();
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
        let mut big = DeltaEncoder::default();
        let huge = big.encode(&vec![0u8; MAX_FRAME + 1]).unwrap();
        assert_eq!(
            DeltaDecoder::default().decode(&huge),
            Err(FrameError::Oversized)
        );
        // After refusals the decoder still opens the stream from its start.
        let mut dec = DeltaDecoder::default();
        assert_eq!(dec.decode(&z1).unwrap(), digest(1).as_slice());
        assert_eq!(dec.decode(&z2).unwrap(), digest(2).as_slice());
    }

    #[test]
    fn the_header_is_read_as_a_token_list() {
        assert!(accepts(Some(b"zstd1")));
        assert!(accepts(Some(b"other, ZSTD1 ")));
        assert!(!accepts(Some(b"zstd2")));
        assert!(!accepts(None));
    }
}
