use bytes::{Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::{FrameError, Limits, StompCodec};
use crate::stomp::frame::{Command, Frame, Version};

/// A MESSAGE exactly as ActiveMQ 5.17 sends it in STOMP 1.2 (the `\0` is followed by an
/// EOL, as ActiveMQ does).
const ACTIVEMQ_MESSAGE: &[u8] = b"MESSAGE\ncontent-length:5\nexpires:0\ndestination:/topic/routinginfo\nack:ID\\cvm-39365-1795861145351-4\\c1\nsubscription:0\npriority:4\nmessage-id:ID\\cvm-39365-1795861145351-3\\c4\\c-1\\c1\\c1\ncontent-type:text/plain; charset=UTF-8\npersistent:true\ntimestamp:1795861157812\n\nhell0\x00\n";

fn codec(v: Version) -> StompCodec {
    let mut c = StompCodec::new(Limits::default());
    c.set_version(v);
    c
}

/// Every frame in `bytes`, fed in one piece.
fn decode_all(c: &mut StompCodec, bytes: &[u8]) -> Result<Vec<Frame>, FrameError> {
    let mut buf = BytesMut::from(bytes);
    let mut out = Vec::new();
    while let Some(f) = c.decode(&mut buf)? {
        out.push(f);
    }
    Ok(out)
}

/// Every frame in `bytes`, fed in the pieces given by `cuts` (ascending offsets).
fn decode_cut(v: Version, bytes: &[u8], cuts: &[usize]) -> Result<Vec<Frame>, FrameError> {
    let mut c = codec(v);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut at = 0;
    for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
        buf.extend_from_slice(&bytes[at..cut]);
        at = cut;
        while let Some(f) = c.decode(&mut buf)? {
            out.push(f);
        }
    }
    assert!(buf.is_empty(), "left over: {buf:?}");
    Ok(out)
}

#[test]
fn activemq_message_unescaped_in_order() {
    let frames = decode_all(&mut codec(Version::V1_2), ACTIVEMQ_MESSAGE).unwrap();
    assert_eq!(frames.len(), 1);
    let f = &frames[0];
    assert_eq!(f.command, Command::Message);
    assert_eq!(f.body, Bytes::from_static(b"hell0"));
    assert_eq!(f.get("ack"), Some("ID:vm-39365-1795861145351-4:1"));
    assert_eq!(
        f.get("message-id"),
        Some("ID:vm-39365-1795861145351-3:4:-1:1:1")
    );
    assert_eq!(f.get("content-type"), Some("text/plain; charset=UTF-8"));
    let names: Vec<&str> = f.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "content-length",
            "expires",
            "destination",
            "ack",
            "subscription",
            "priority",
            "message-id",
            "content-type",
            "persistent",
            "timestamp"
        ]
    );
}

/// A stream with everything a broker sends: CONNECTED (not unescaped), heart-beats
/// (LF and CRLF) between frames, bodies with and without content-length, a body holding
/// a NUL, CRLF line ends, RECEIPT and ERROR.
fn stream() -> Vec<u8> {
    let mut s = Vec::new();
    s.extend_from_slice(b"CONNECTED\nversion:1.2\nheart-beat:1000,1000\nserver:a\\cb\n\n\0\n");
    s.extend_from_slice(b"\n\r\n\n");
    s.extend_from_slice(ACTIVEMQ_MESSAGE);
    s.extend_from_slice(b"MESSAGE\r\nmessage-id:m\\c2\r\nack:a2\r\n\r\nno length\0");
    s.extend_from_slice(b"\r\n");
    s.extend_from_slice(b"MESSAGE\nmessage-id:m3\ncontent-length:3\nack:a3\n\na\0b\0");
    s.extend_from_slice(b"RECEIPT\nreceipt-id:r\\n1\n\n\0");
    s.extend_from_slice(b"ERROR\nmessage:bad \\\\ thing\n\nstack\ntrace\0\n\n");
    s
}

fn check_stream(frames: &[Frame]) {
    let commands: Vec<Command> = frames.iter().map(|f| f.command).collect();
    assert_eq!(
        commands,
        [
            Command::Connected,
            Command::Message,
            Command::Message,
            Command::Message,
            Command::Receipt,
            Command::Error
        ]
    );
    // CONNECTED is never unescaped.
    assert_eq!(frames[0].get("server"), Some("a\\cb"));
    assert_eq!(frames[1].body, Bytes::from_static(b"hell0"));
    assert_eq!(frames[2].get("message-id"), Some("m:2"));
    assert_eq!(frames[2].get("ack"), Some("a2"));
    assert_eq!(frames[2].body, Bytes::from_static(b"no length"));
    assert_eq!(frames[3].body, Bytes::from_static(b"a\0b"));
    assert_eq!(frames[4].get("receipt-id"), Some("r\n1"));
    assert_eq!(frames[5].get("message"), Some("bad \\ thing"));
    assert_eq!(frames[5].body, Bytes::from_static(b"stack\ntrace"));
}

#[test]
fn whole_stream() {
    check_stream(&decode_cut(Version::V1_2, &stream(), &[]).unwrap());
}

#[test]
fn split_at_every_byte_boundary() {
    let s = stream();
    for cut in 0..=s.len() {
        let frames = decode_cut(Version::V1_2, &s, &[cut]).unwrap();
        check_stream(&frames);
    }
    for (a, b) in [(1, 2), (10, 11), (50, 300), (7, 400)] {
        check_stream(&decode_cut(Version::V1_2, &s, &[a, b]).unwrap());
    }
}

#[test]
fn byte_by_byte() {
    let s = stream();
    let cuts: Vec<usize> = (1..s.len()).collect();
    check_stream(&decode_cut(Version::V1_2, &s, &cuts).unwrap());
}

#[test]
fn only_heart_beats() {
    let mut c = codec(Version::V1_2);
    let mut buf = BytesMut::from(&b"\n\n\r\n\n\r"[..]);
    assert!(c.decode(&mut buf).unwrap().is_none());
    // A lone CR waits for its LF.
    assert_eq!(&buf[..], b"\r");
    buf.extend_from_slice(b"\n");
    assert!(c.decode(&mut buf).unwrap().is_none());
    assert!(buf.is_empty());
}

#[test]
fn version_1_1_escapes_but_not_cr() {
    let f = decode_all(
        &mut codec(Version::V1_1),
        b"MESSAGE\nmessage-id:a\\cb\\\\c\\nd\n\n\0",
    )
    .unwrap();
    assert_eq!(f[0].get("message-id"), Some("a:b\\c\nd"));
    let e = decode_all(&mut codec(Version::V1_1), b"MESSAGE\nx:a\\rb\n\n\0").unwrap_err();
    assert!(matches!(e, FrameError::Escape(_)), "{e}");
    // 1.0: no escapes at all.
    let f = decode_all(&mut codec(Version::V1_0), b"MESSAGE\nx:a\\tb\n\n\0").unwrap();
    assert_eq!(f[0].get("x"), Some("a\\tb"));
}

#[test]
fn malformed_frames_are_errors() {
    let cases: &[(&[u8], &str)] = &[
        (b"HELLO\n\n\0", "unknown command"),
        (b"MESSAGE\nno colon here\n\n\0", "without a colon"),
        (b"MESSAGE\nx:a\\tb\n\n\0", "undefined escape"),
        (b"MESSAGE\nx:a\\\n\n\0", "lone backslash"),
        (b"MESSAGE\ncontent-length:abc\n\n\0", "bad content-length"),
        (b"MESSAGE\ncontent-length:-1\n\n\0", "bad content-length"),
        (b"MESSAGE\ncontent-length:2\n\nabc\0", "not followed by NUL"),
        (b"MESSAGE\nx:\xff\n\n\0", "not UTF-8"),
        (b"\0\n\n\0", "unknown command"),
    ];
    for (bytes, want) in cases {
        let e = decode_all(&mut codec(Version::V1_2), bytes).unwrap_err();
        assert!(
            e.to_string().contains(want),
            "{:?}: {e} (wanted {want})",
            String::from_utf8_lossy(bytes)
        );
    }
}

fn small() -> StompCodec {
    StompCodec::new(Limits {
        max_frame: 1000,
        max_head: 200,
        max_headers: 4,
    })
}

#[test]
fn limits_bound_what_a_broker_can_make_us_hold() {
    // A head line that never ends.
    let mut c = small();
    let mut buf = BytesMut::from(&[b'M'; 201][..]);
    assert!(matches!(
        c.decode(&mut buf),
        Err(FrameError::HeadTooLong(200))
    ));
    // Header lines that never end the head.
    let mut c = small();
    let mut buf = BytesMut::from(&b"MESSAGE\na:1\nb:2\nc:3\nd:4\ne:5\n"[..]);
    assert!(matches!(
        c.decode(&mut buf),
        Err(FrameError::TooManyHeaders(4))
    ));
    // Four headers are fine.
    let mut c = small();
    let mut buf = BytesMut::from(&b"MESSAGE\na:1\nb:2\nc:3\nd:4\n\n\0"[..]);
    assert!(c.decode(&mut buf).unwrap().is_some());
    // A content-length over the cap is refused before anything is reserved.
    let mut c = small();
    let mut buf = BytesMut::from(&b"MESSAGE\ncontent-length:999999999999\n\n"[..]);
    let cap = buf.capacity();
    assert!(matches!(c.decode(&mut buf), Err(FrameError::TooLong(1000))));
    assert_eq!(buf.capacity(), cap);
    // A content-length that does not even fit a usize.
    let mut c = small();
    let mut buf = BytesMut::from(&b"MESSAGE\ncontent-length:99999999999999999999999\n\n"[..]);
    assert!(matches!(c.decode(&mut buf), Err(FrameError::BadLength(_))));
    // A body without NUL that never ends, fed in pieces.
    let mut c = small();
    let mut buf = BytesMut::from(&b"MESSAGE\n\n"[..]);
    let mut err = None;
    for _ in 0..100 {
        buf.extend_from_slice(&[b'x'; 64]);
        match c.decode(&mut buf) {
            Ok(None) => continue,
            Ok(Some(f)) => panic!("a frame: {f:?}"),
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    assert!(matches!(err, Some(FrameError::TooLong(1000))), "{err:?}");
    assert!(buf.len() <= 1000 + 64);
}

#[test]
fn encodes_client_frames() {
    let mut c = codec(Version::V1_2);
    let mut out = BytesMut::new();
    let ack = Frame::new(Command::Ack).header("id", "ID:vm-1:2\\x");
    c.encode(&ack, &mut out).unwrap();
    assert_eq!(&out[..], b"ACK\nid:ID\\cvm-1\\c2\\\\x\n\n\0");
    // CONNECT is never escaped; a colon in a value is fine there.
    let mut out = BytesMut::new();
    let connect = Frame::new(Command::Connect)
        .header("accept-version", "1.2,1.1")
        .header("passcode", "p:w\\d");
    c.encode(&connect, &mut out).unwrap();
    assert_eq!(
        &out[..],
        b"CONNECT\naccept-version:1.2,1.1\npasscode:p:w\\d\n\n\0"
    );
    // ... but a newline there cannot be sent.
    let bad = Frame::new(Command::Connect).header("login", "a\nb");
    let e = c.encode(&bad, &mut BytesMut::new()).unwrap_err();
    assert!(e.to_string().contains("login"), "{e}");
    // A body gets its content-length.
    let mut out = BytesMut::new();
    let mut send = Frame::new(Command::Send).header("destination", "/q");
    send.body = Bytes::from_static(b"a\0b");
    c.encode(&send, &mut out).unwrap();
    assert_eq!(
        &out[..],
        b"SEND\ndestination:/q\ncontent-length:3\n\na\0b\0"
    );
    // In 1.1 a CR cannot be escaped.
    let mut c11 = codec(Version::V1_1);
    let cr = Frame::new(Command::Ack).header("id", "a\rb");
    assert!(c11.encode(&cr, &mut BytesMut::new()).is_err());
}

/// Random frames (headers drawn from an alphabet full of what must be escaped) encode
/// and decode back to themselves, whatever the read boundaries.
#[test]
fn round_trip_random_frames() {
    let alphabet: Vec<char> = "ab:\\\n\rc é0".chars().collect();
    let mut rng = fastrand::Rng::with_seed(7);
    let word = |rng: &mut fastrand::Rng, min: usize| -> String {
        let n = rng.usize(min..8);
        (0..n)
            .map(|_| alphabet[rng.usize(..alphabet.len())])
            .collect()
    };
    for _ in 0..300 {
        let mut f = Frame::new(Command::Message);
        for _ in 0..rng.usize(0..5) {
            let name = word(&mut rng, 1);
            let value = word(&mut rng, 0);
            if name != "content-length" {
                f.headers.push((name, value));
            }
        }
        let body: Vec<u8> = (0..rng.usize(0..20)).map(|_| rng.u8(..)).collect();
        f.body = Bytes::from(body);
        let mut c = codec(Version::V1_2);
        let mut out = BytesMut::new();
        c.encode(&f, &mut out).unwrap();
        let cut = rng.usize(0..=out.len());
        let got = decode_cut(Version::V1_2, &out, &[cut]).unwrap();
        assert_eq!(got.len(), 1);
        let mut want = f.clone();
        if !want.body.is_empty() {
            let n = want.body.len().to_string();
            want.headers.push(("content-length".into(), n));
        }
        assert_eq!(got[0], want);
    }
}

/// Garbage and mutated frames never panic, and never leave more than the limits held.
#[test]
fn garbage_never_panics() {
    let mut rng = fastrand::Rng::with_seed(11);
    let base = stream();
    let alphabet = b"\0\n\r:\\cMESAGCONTDRIP-l0123456789 ";
    for round in 0..3000 {
        let bytes: Vec<u8> = if round % 2 == 0 {
            (0..rng.usize(0..300))
                .map(|_| alphabet[rng.usize(..alphabet.len())])
                .collect()
        } else {
            let mut b = base.clone();
            for _ in 0..rng.usize(1..6) {
                let i = rng.usize(..b.len());
                b[i] = alphabet[rng.usize(..alphabet.len())];
            }
            b
        };
        let mut c = small();
        let mut buf = BytesMut::new();
        // After an error the connection is closed: nothing more is fed.
        'feed: for chunk in bytes.chunks(rng.usize(1..40)) {
            buf.extend_from_slice(chunk);
            loop {
                match c.decode(&mut buf) {
                    Ok(Some(_)) => continue,
                    Ok(None) => break,
                    Err(_) => break 'feed,
                }
            }
            assert!(buf.len() <= 1000 + 40);
        }
    }
}
