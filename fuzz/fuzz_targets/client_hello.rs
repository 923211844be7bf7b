//! The TLS ClientHello's server name: `wire::client_hello::parse`, which TCP mode calls
//! on the bytes a client has sent so far to route by SNI without terminating TLS. The
//! input is read twice: as those bytes, and (after its first byte, which picks a record
//! size) as a handshake message the harness frames into records itself.
//!
//! Oracle: no panic; the verdict on any prefix of the bytes is `Incomplete` or the
//! verdict on the whole (a verdict never changes as bytes arrive, and a prefix of a
//! `Complete` buffer is `Incomplete` or the same `Complete`); a buffer of `MAX_HELLO`
//! bytes or more is never `Incomplete` and gets the verdict of its first `MAX_HELLO`
//! bytes; a name found is non-empty, lowercase ASCII from `[a-z0-9._-]`, without a
//! trailing dot, and (in the harness's framing) taken from the message; the same
//! message framed into records of two different sizes gets the same verdict (unless the
//! record headers make one of them too large).
#![no_main]

use gearlb_core::wire::client_hello::{parse, Hello, MAX_HELLO};
use libfuzzer_sys::fuzz_target;

/// `message` cut into handshake records of at most `chunk` bytes.
fn frame(message: &[u8], chunk: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + message.len() / chunk * 5 + 5);
    for piece in message.chunks(chunk) {
        let len = u16::try_from(piece.len())
            .expect("chunk ≤ 2^14")
            .to_be_bytes();
        out.extend_from_slice(&[0x16, 3, 1, len[0], len[1]]);
        out.extend_from_slice(piece);
    }
    out
}

/// A name found is normalised, and (when `source` is the unframed message it was read
/// from) taken from `source`.
fn check_name(verdict: &Hello, source: Option<&[u8]>) {
    let Hello::Complete { sni: Some(name) } = verdict else {
        return;
    };
    assert!(!name.is_empty(), "empty name");
    assert!(!name.ends_with('.'), "trailing dot: {name:?}");
    assert!(
        name.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b)),
        "{name:?}"
    );
    if let Some(source) = source {
        let lower = source.to_ascii_lowercase();
        assert!(
            lower.windows(name.len()).any(|w| w == name.as_bytes()),
            "{name:?} is not in the message"
        );
    }
}

/// Every prefix of `buf` (all of them for short buffers, about 300 spread over it and the
/// last 16 for long ones) is `Incomplete` or has `whole`'s verdict.
fn check_prefixes(buf: &[u8], whole: &Hello) {
    let stride = (buf.len() / 256).max(1);
    let cuts = (0..buf.len())
        .step_by(stride)
        .chain(buf.len().saturating_sub(16)..buf.len());
    for n in cuts {
        let p = parse(&buf[..n]);
        assert!(
            p == Hello::Incomplete || p == *whole,
            "prefix {n}/{}: {p:?}, whole: {whole:?}",
            buf.len()
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let whole = parse(data);
    assert_eq!(parse(data), whole, "not deterministic");
    // The name may straddle records here, so it need not be contiguous in `data`.
    check_name(&whole, None);
    check_prefixes(data, &whole);
    if data.len() >= MAX_HELLO {
        assert_ne!(
            whole,
            Hello::Incomplete,
            "a full buffer is still Incomplete"
        );
        assert_eq!(
            parse(&data[..MAX_HELLO]),
            whole,
            "a byte past MAX_HELLO mattered"
        );
    }

    // The same message in records of two sizes.
    let Some((&pick, message)) = data.split_first() else {
        return;
    };
    let small = frame(message, 1 + usize::from(pick % 64));
    let large = frame(message, 16 * 1024);
    let (a, b) = (parse(&small), parse(&large));
    check_name(&a, Some(message));
    check_name(&b, Some(message));
    let too_large = Hello::NotHello("hello too large");
    if a != too_large && b != too_large {
        assert_eq!(a, b, "records of {} and of 16384 bytes", 1 + pick % 64);
    }
    check_prefixes(&small, &a);
});
