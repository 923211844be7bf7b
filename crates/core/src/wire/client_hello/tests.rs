//! Tests of the ClientHello parser on hellos built field by field (rustls's own hellos are
//! checked against rustls in `crates/proxy/tests/client_hello_oracle.rs`).

use super::*;

/// A ClientHello built field by field, valid unless a test spoils a field.
#[derive(Clone)]
struct Builder {
    version: [u8; 2],
    session_id: Vec<u8>,
    suites: Vec<u8>,
    compression: Vec<u8>,
    /// `None`: no extensions block at all (as SSL 3.0 clients send).
    extensions: Option<Vec<(u16, Vec<u8>)>>,
}

impl Builder {
    fn new() -> Self {
        Builder {
            version: [3, 3],
            session_id: vec![0xab; 32],
            suites: vec![0x13, 0x01, 0x13, 0x02, 0xc0, 0x2f],
            compression: vec![0],
            extensions: Some(Vec::new()),
        }
    }

    fn ext(mut self, typ: u16, data: Vec<u8>) -> Self {
        self.extensions
            .get_or_insert_with(Vec::new)
            .push((typ, data));
        self
    }

    fn sni(self, name: &[u8]) -> Self {
        self.ext(0, sni_data(&[(0, name)]))
    }

    /// The extensions a browser sends before its server name.
    fn browser_extensions(self) -> Self {
        self.ext(0x0a0a, Vec::new()) // GREASE
            .ext(43, vec![4, 0x03, 0x04, 0x03, 0x03]) // supported_versions
            .ext(10, vec![0, 4, 0x00, 0x1d, 0x00, 0x17]) // supported_groups
            .ext(11, vec![1, 0]) // ec_point_formats
            .ext(13, vec![0, 4, 0x04, 0x03, 0x08, 0x04]) // signature_algorithms
            .ext(51, [&[0, 36, 0x00, 0x1d, 0, 32][..], &[7; 32]].concat()) // key_share
    }

    fn body(&self) -> Vec<u8> {
        let mut b = self.version.to_vec();
        b.extend_from_slice(&[0x5a; 32]);
        b.push(self.session_id.len() as u8);
        b.extend_from_slice(&self.session_id);
        b.extend_from_slice(&be16(self.suites.len()));
        b.extend_from_slice(&self.suites);
        b.push(self.compression.len() as u8);
        b.extend_from_slice(&self.compression);
        if let Some(exts) = &self.extensions {
            let mut block = Vec::new();
            for (typ, data) in exts {
                block.extend_from_slice(&typ.to_be_bytes());
                block.extend_from_slice(&be16(data.len()));
                block.extend_from_slice(data);
            }
            b.extend_from_slice(&be16(block.len()));
            b.extend_from_slice(&block);
        }
        b
    }

    /// The handshake message: type 1, 24-bit length, body.
    fn message(&self) -> Vec<u8> {
        handshake(&self.body())
    }

    /// The message in one record.
    fn record(&self) -> Vec<u8> {
        frame(&self.message(), MAX_RECORD)
    }
}

fn be16(n: usize) -> [u8; 2] {
    u16::try_from(n).expect("a 16-bit length").to_be_bytes()
}

fn handshake(body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(body.len()).unwrap().to_be_bytes();
    [&[CLIENT_HELLO, len[1], len[2], len[3]][..], body].concat()
}

/// `message` cut into handshake records of at most `chunk` bytes (version 3.1, as clients
/// write the first record).
fn frame(message: &[u8], chunk: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in message.chunks(chunk) {
        out.extend_from_slice(&[0x16, 3, 1]);
        out.extend_from_slice(&be16(piece.len()));
        out.extend_from_slice(piece);
    }
    out
}

/// A server_name extension's data with these `(name_type, name)` entries.
fn sni_data(entries: &[(u8, &[u8])]) -> Vec<u8> {
    let mut list = Vec::new();
    for (typ, name) in entries {
        list.push(*typ);
        list.extend_from_slice(&be16(name.len()));
        list.extend_from_slice(name);
    }
    [&be16(list.len())[..], &list].concat()
}

fn named(sni: &str) -> Hello {
    Hello::Complete {
        sni: Some(sni.to_owned()),
    }
}

const UNNAMED: Hello = Hello::Complete { sni: None };

/// Every strict prefix of `buf` is `Incomplete` or has `buf`'s verdict.
fn assert_prefixes_agree(buf: &[u8]) {
    let whole = parse(buf);
    // Every prefix of a small buffer; of a large one every prefix near the start and
    // the end, and every 61st between (each parse is linear: all of them would be
    // quadratic).
    let step = |n: usize| {
        if buf.len() <= 4096 || n < 2048 || n + 2048 > buf.len() {
            1
        } else {
            61
        }
    };
    let mut n = 0;
    while n < buf.len() {
        let at = n;
        n += step(n);
        let n = at;
        let p = parse(&buf[..n]);
        assert!(
            p == Hello::Incomplete || p == whole,
            "prefix {n}/{}: {p:?} but whole: {whole:?}",
            buf.len()
        );
    }
}

#[test]
fn starts_tls_only_on_the_handshake_type() {
    assert!(starts_tls(0x16));
    for b in (0..=255u8).filter(|&b| b != 0x16) {
        assert!(!starts_tls(b), "{b:#x}");
    }
}

#[test]
fn reads_the_server_name() {
    let hello = Builder::new().sni(b"app.example.com").record();
    assert_eq!(parse(&hello), named("app.example.com"));
}

#[test]
fn a_hello_without_server_name_is_complete_and_unnamed() {
    let hello = Builder::new().browser_extensions().record();
    assert_eq!(parse(&hello), UNNAMED);
    let mut no_block = Builder::new();
    no_block.extensions = None;
    assert_eq!(parse(&no_block.record()), UNNAMED);
    assert_eq!(parse(&Builder::new().record()), UNNAMED, "empty block");
}

#[test]
fn the_name_is_lowercased_without_its_trailing_dot() {
    let hello = Builder::new().sni(b"App.Example.COM.").record();
    assert_eq!(parse(&hello), named("app.example.com"));
    let hello = Builder::new().sni(b"_Acme-1.x_Y.org").record();
    assert_eq!(parse(&hello), named("_acme-1.x_y.org"));
}

#[test]
fn names_that_are_not_hostnames_are_none() {
    for name in [
        &b""[..],
        b".",
        b"..",
        b"a..",
        b"*.example.com",
        b"exa mple.com",
        b"example.com/x",
        b"caf\xc3\xa9.example",
        b"a\0b",
        b"host:443",
    ] {
        let hello = Builder::new().sni(name).record();
        assert_eq!(
            parse(&hello),
            UNNAMED,
            "{:?}",
            String::from_utf8_lossy(name)
        );
    }
}

#[test]
fn the_name_after_several_extensions_is_found() {
    let hello = Builder::new()
        .browser_extensions()
        .sni(b"shop.example.net")
        .ext(16, vec![0, 3, 2, b'h', b'2']) // alpn
        .record();
    assert_eq!(parse(&hello), named("shop.example.net"));
}

#[test]
fn the_first_host_name_entry_wins() {
    let entries: &[(u8, &[u8])] = &[(7, b"other"), (0, b"first.example"), (0, b"second")];
    let hello = Builder::new().ext(0, sni_data(entries)).record();
    assert_eq!(parse(&hello), named("first.example"));
    let only_other = Builder::new().ext(0, sni_data(&[(1, b"x.example")]));
    assert_eq!(parse(&only_other.record()), UNNAMED);
    let empty_list = Builder::new().ext(0, sni_data(&[]));
    assert_eq!(parse(&empty_list.record()), UNNAMED);
}

#[test]
fn two_server_name_extensions_are_refused() {
    let hello = Builder::new().sni(b"a.example").sni(b"b.example").record();
    assert_eq!(parse(&hello), Hello::NotHello("duplicate server_name"));
}

#[test]
fn a_hello_over_three_records_is_reassembled() {
    let message = Builder::new()
        .browser_extensions()
        .sni(b"Split.Example")
        .message();
    let buf = frame(&message, message.len().div_ceil(3));
    assert_eq!(buf.len(), message.len() + 3 * RECORD_HEADER);
    assert_eq!(parse(&buf), named("split.example"));
    assert_prefixes_agree(&buf);
}

#[test]
fn the_handshake_header_may_be_split_across_records() {
    let message = Builder::new().sni(b"tiny.example").message();
    for chunk in [1, 2, 3, 5] {
        let buf = frame(&message, chunk);
        assert_eq!(parse(&buf), named("tiny.example"), "records of {chunk}");
    }
}

#[test]
fn every_prefix_of_a_hello_is_incomplete() {
    let message = Builder::new()
        .browser_extensions()
        .sni(b"www.example.org")
        .message();
    for buf in [frame(&message, MAX_RECORD), frame(&message, 40)] {
        for n in 0..buf.len() {
            assert_eq!(parse(&buf[..n]), Hello::Incomplete, "prefix {n}");
        }
        assert_eq!(parse(&buf), named("www.example.org"));
    }
}

#[test]
fn bytes_after_the_hello_are_ignored() {
    let mut buf = Builder::new().sni(b"a.example").record();
    buf.extend_from_slice(b"\x17\x03\x03\x00\x05hello garbage");
    assert_eq!(parse(&buf), named("a.example"));
    // Trailing bytes inside the hello's own record too.
    let mut message = Builder::new().sni(b"a.example").message();
    message.extend_from_slice(&[0xff; 10]);
    assert_eq!(parse(&frame(&message, MAX_RECORD)), named("a.example"));
}

#[test]
fn a_hello_of_15_kib_is_valid() {
    let hello = Builder::new()
        .browser_extensions()
        .sni(b"big.example")
        .ext(21, vec![0; 15 * 1024]); // padding
    let buf = frame(&hello.message(), 4000);
    assert!(
        buf.len() > 15 * 1024 && buf.len() < MAX_HELLO,
        "{}",
        buf.len()
    );
    assert_eq!(parse(&buf), named("big.example"));
    assert_prefixes_agree(&buf);
}

#[test]
fn a_hello_over_64_kib_is_too_large() {
    // A message of 70 000 bytes (the ClientHello's own fields cannot be that long with
    // valid lengths, but its handshake header may say so): refused from the header.
    let mut message = vec![1, 0x01, 0x11, 0x70];
    message.extend(vec![0u8; 70_000]);
    let buf = frame(&message, MAX_RECORD);
    assert_eq!(parse(&buf), Hello::NotHello("hello too large"));
    // Known from the handshake header alone.
    assert_eq!(parse(&buf[..9]), Hello::NotHello("hello too large"));
    assert_eq!(parse(&buf[..8]), Hello::Incomplete);
}

#[test]
fn the_limit_counts_record_headers() {
    // A message of exactly MAX_HELLO - 4 record headers fits in four full records, not
    // in eight half ones.
    let pad = MAX_HELLO - 4 * RECORD_HEADER - Builder::new().ext(21, Vec::new()).message().len();
    let message = Builder::new().ext(21, vec![0; pad]).message();
    assert_eq!(message.len(), MAX_HELLO - 4 * RECORD_HEADER);
    let one = frame(&message, MAX_RECORD);
    assert_eq!(one.len(), MAX_HELLO);
    assert_eq!(parse(&one), UNNAMED);
    let two = frame(&message, MAX_RECORD / 2);
    assert_eq!(parse(&two), Hello::NotHello("hello too large"));
    assert_prefixes_agree(&two);
}

#[test]
fn record_headers_that_push_the_hello_past_the_limit_make_it_too_large() {
    // 30 KB of message in 4-byte records would take 67 KB of buffer: refused as soon as
    // the records so far plus the rest of the message cannot end within MAX_HELLO.
    let message = Builder::new().ext(21, vec![0; 30_000]).message();
    let buf = frame(&message, 4);
    assert_eq!(parse(&buf[..7000]), Hello::Incomplete);
    assert_eq!(
        parse(&buf[..MAX_HELLO - 1]),
        Hello::NotHello("hello too large")
    );
    assert_eq!(parse(&buf), Hello::NotHello("hello too large"));
    assert_prefixes_agree(&buf[..MAX_HELLO + 100]);
}

#[test]
fn a_buffer_of_max_hello_bytes_is_never_incomplete() {
    let message = Builder::new().ext(21, vec![0; 65_000]).message();
    for chunk in [1, 3, 100] {
        let buf = frame(&message, chunk);
        assert_eq!(parse(&buf[..MAX_HELLO]), Hello::NotHello("hello too large"));
    }
}

#[test]
fn http_is_not_a_hello() {
    assert_eq!(
        parse(b"GET / HTTP/1.1\r\n"),
        Hello::NotHello("not a TLS handshake record")
    );
    assert_eq!(parse(b"G"), Hello::NotHello("not a TLS handshake record"));
    assert_eq!(parse(b""), Hello::Incomplete);
}

#[test]
fn other_record_types_are_not_a_hello() {
    let mut hello = Builder::new().sni(b"a.example").record();
    hello[0] = 0x17;
    assert_eq!(parse(&hello), Hello::NotHello("not a TLS handshake record"));
    // An application-data record between two pieces of the hello.
    let message = Builder::new().sni(b"a.example").message();
    let mut buf = frame(&message[..20], MAX_RECORD);
    buf.extend_from_slice(&frame(&message[20..], MAX_RECORD));
    buf[25] = 0x17;
    assert_eq!(
        parse(&buf),
        Hello::NotHello("non-handshake record inside the hello")
    );
    assert_eq!(
        parse(&buf[..26]),
        Hello::NotHello("non-handshake record inside the hello")
    );
}

#[test]
fn bad_record_headers_are_not_a_hello() {
    let hello = Builder::new().sni(b"a.example").record();
    for (at, value, reason) in [
        (1, 2, "bad record version"),
        (1, 0x80, "bad record version"),
        (2, 5, "bad record version"),
        (3, 0x40, "record too long"),
        (3, 0xff, "record too long"),
    ] {
        let mut buf = hello.clone();
        buf[at] = value;
        assert_eq!(
            parse(&buf),
            Hello::NotHello(reason),
            "byte {at} = {value:#x}"
        );
        assert_eq!(parse(&buf[..=at.max(4)]), Hello::NotHello(reason));
    }
    assert_eq!(parse(&[0x16, 3, 1, 0, 0]), Hello::NotHello("empty record"));
    // 2^14 itself is allowed.
    assert_eq!(parse(&[0x16, 3, 0, 0x40, 0, 1]), Hello::Incomplete);
    // SSLv2-compatible hellos are not handshake records.
    assert_eq!(
        parse(&[0x80, 0x2e, 1, 3, 1]),
        Hello::NotHello("not a TLS handshake record")
    );
}

#[test]
fn other_handshake_messages_are_not_a_hello() {
    let mut buf = Builder::new().sni(b"a.example").record();
    buf[5] = 2; // ServerHello
    assert_eq!(parse(&buf), Hello::NotHello("not a ClientHello"));
    assert_eq!(parse(&buf[..6]), Hello::NotHello("not a ClientHello"));
}

#[test]
fn bad_fixed_fields_are_not_a_hello() {
    let cases: Vec<(Builder, &str)> = vec![
        (
            Builder {
                version: [2, 0],
                ..Builder::new()
            },
            "bad client version",
        ),
        (
            Builder {
                session_id: vec![1; 33],
                ..Builder::new()
            },
            "bad session id",
        ),
        (
            Builder {
                suites: Vec::new(),
                ..Builder::new()
            },
            "bad cipher suites",
        ),
        (
            Builder {
                suites: vec![0x13, 0x01, 0x13],
                ..Builder::new()
            },
            "bad cipher suites",
        ),
        (
            Builder {
                compression: Vec::new(),
                ..Builder::new()
            },
            "bad compression methods",
        ),
    ];
    for (builder, reason) in cases {
        assert_eq!(parse(&builder.record()), Hello::NotHello(reason));
    }
    assert_eq!(
        parse(&frame(&handshake(&[3, 3, 0]), MAX_RECORD)),
        Hello::NotHello("truncated hello")
    );
    assert_eq!(
        parse(&frame(&handshake(&[]), MAX_RECORD)),
        Hello::NotHello("truncated hello")
    );
}

/// Overwrites the big-endian u16 at `at` in the body of `builder`'s message, reframed.
fn with_u16(builder: &Builder, at: usize, value: u16) -> Vec<u8> {
    let mut body = builder.body();
    body[at..at + 2].copy_from_slice(&value.to_be_bytes());
    frame(&handshake(&body), MAX_RECORD)
}

#[test]
fn overflowing_lengths_are_not_a_hello() {
    let b = Builder::new().sni(b"a.example");
    let suites_at = 2 + 32 + 1 + b.session_id.len();
    let exts_at = suites_at + 2 + b.suites.len() + 1 + b.compression.len();
    let first_ext_len_at = exts_at + 4;
    let list_len_at = exts_at + 6;
    let name_len_at = list_len_at + 3;
    for (at, value, reason) in [
        (suites_at, 0xfffe, "bad cipher suites"),
        (exts_at, 0xffff, "bad extensions length"),
        (exts_at, 1, "bad extensions length"),
        (first_ext_len_at, 0xffff, "malformed extension"),
        (list_len_at, 0xffff, "malformed server_name"),
        (list_len_at, 1, "malformed server_name"),
        (name_len_at, 0xffff, "malformed server_name"),
        (name_len_at, 3, "malformed server_name"),
    ] {
        let buf = with_u16(&b, at, value);
        assert_eq!(
            parse(&buf),
            Hello::NotHello(reason),
            "u16 at {at} = {value}"
        );
    }
    // A session id length of 255 and a compression length running past the body.
    let mut body = b.body();
    body[34] = 255;
    assert_eq!(
        parse(&frame(&handshake(&body), MAX_RECORD)),
        Hello::NotHello("bad session id")
    );
    let mut body = b.body();
    body[suites_at + 2 + b.suites.len()] = 255;
    assert_eq!(
        parse(&frame(&handshake(&body), MAX_RECORD)),
        Hello::NotHello("bad compression methods")
    );
    // A handshake length of 2^24 - 1.
    let buf = [0x16, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff];
    assert_eq!(parse(&buf), Hello::NotHello("hello too large"));
    // A record shorter than the handshake message it claims to hold: needs more records.
    let mut buf = b.record();
    let short = u16::from_be_bytes([buf[3], buf[4]]) - 1;
    buf[3..5].copy_from_slice(&short.to_be_bytes());
    assert_eq!(parse(&buf[..buf.len() - 1]), Hello::Incomplete);
    // ... and its last byte is then read as the next record's type.
    assert_eq!(
        parse(&buf),
        Hello::NotHello("non-handshake record inside the hello")
    );
    // A lone extensions byte.
    let mut body = Builder::new().body();
    body.truncate(body.len() - 1);
    assert_eq!(
        parse(&frame(&handshake(&body), MAX_RECORD)),
        Hello::NotHello("bad extensions length")
    );
}

/// A tiny deterministic fuzzer: mutated hellos never panic, prefixes agree with the
/// whole, and any name found is normalised.
#[test]
fn mutated_hellos_never_panic_and_prefixes_agree() {
    let base = frame(
        &Builder::new()
            .browser_extensions()
            .sni(b"Mutant.Example.")
            .message(),
        60,
    );
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..1500 {
        let mut buf = base.clone();
        for _ in 0..1 + next() % 4 {
            let i = (next() % buf.len() as u64) as usize;
            buf[i] = match next() % 3 {
                0 => next() as u8,
                1 => buf[i].wrapping_add(1),
                _ => 0xff,
            };
        }
        buf.truncate(buf.len() - (next() % 8) as usize);
        assert_prefixes_agree(&buf);
        assert_ne!(
            parse(&[&buf[..], &[0x16; MAX_HELLO]].concat()),
            Hello::Incomplete
        );
        if let Hello::Complete { sni: Some(name) } = parse(&buf) {
            assert!(!name.is_empty() && !name.ends_with('.'), "{name:?}");
            assert!(name.bytes().all(|b| b.is_ascii_lowercase()
                || b.is_ascii_digit()
                || matches!(b, b'-' | b'.' | b'_')));
        }
    }
}
