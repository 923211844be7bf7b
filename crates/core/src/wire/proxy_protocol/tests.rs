//! Tests of the PROXY protocol parser and encoders.

use super::*;

/// Socket address from text.
fn sa(s: &str) -> SocketAddr {
    s.parse().expect("a test address")
}

/// The header of a `Complete` verdict, with its length.
fn complete(buf: &[u8]) -> (Header, usize) {
    match parse(buf) {
        Parsed::Complete { header, len } => (header, len),
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

/// The reason of an `Invalid` verdict.
fn invalid(buf: &[u8]) -> &'static str {
    match parse(buf) {
        Parsed::Invalid(reason) => reason,
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

/// A v2 header from its parts (length computed).
fn v2(ver_cmd: u8, family: u8, body: &[u8]) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.push(ver_cmd);
    out.push(family);
    out.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A TCP4 address block 1.2.3.4:5 → 6.7.8.9:10.
const BLOCK4: [u8; 12] = [1, 2, 3, 4, 6, 7, 8, 9, 0, 5, 0, 10];

/// A v2 TCP4 PROXY header with `tlvs` after the address block and a CRC32C TLV last,
/// its value correct.
fn v2_with_crc(tlvs: &[u8]) -> Vec<u8> {
    let mut body = BLOCK4.to_vec();
    body.extend_from_slice(tlvs);
    body.extend_from_slice(&[PP2_TYPE_CRC32C, 0, 4, 0, 0, 0, 0]);
    let mut out = v2(0x21, TCP4, &body);
    let crc = crc32c(&out);
    let at = out.len() - 4;
    out[at..].copy_from_slice(&crc.to_be_bytes());
    out
}

/// Valid headers of every kind, for the prefix and trailing-data tests.
fn samples() -> Vec<Vec<u8>> {
    let (s4, d4) = (sa("192.168.0.1:56324"), sa("192.168.0.11:443"));
    let (s6, d6) = (
        sa("[2001:db8::1]:1"),
        sa("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"),
    );
    let mut out = vec![
        b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n".to_vec(),
        b"PROXY UNKNOWN\r\n".to_vec(),
        b"PROXY UNKNOWN whatever\r\n".to_vec(),
        encode_local().to_vec(),
        v2_with_crc(&[PP2_TYPE_AUTHORITY, 0, 3, b'a', b'.', b'b']),
        v2(0x21, 0x31, &[0; 216]),
    ];
    for (s, d) in [(s4, d4), (s6, d6), (s4, d6), (s6, d4)] {
        for version in [Version::V1, Version::V2] {
            out.push(encode(version, s, d, None));
            out.push(encode(version, s, d, Some("example.com")));
        }
    }
    out
}

#[test]
fn crc32c_check_value() {
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    assert_eq!(crc32c(b""), 0);
}

#[test]
fn v1_spec_examples() {
    let (h, len) = complete(b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n");
    assert_eq!(len, 47);
    assert_eq!(h.version, Version::V1);
    assert_eq!(
        h.addresses,
        Some((sa("192.168.0.1:56324"), sa("192.168.0.11:443")))
    );
    assert_eq!(h.authority, None);

    let (h, len) = complete(b"PROXY UNKNOWN\r\n");
    assert_eq!((h.addresses, len), (None, 15));

    let (h, _) = complete(b"PROXY TCP6 2001:db8::1 ::ffff:1.2.3.4 0 65535\r\n");
    assert_eq!(
        h.addresses,
        Some((sa("[2001:db8::1]:0"), sa("[::ffff:1.2.3.4]:65535")))
    );
}

#[test]
fn v1_longest_line_is_107_bytes() {
    let line = |n: usize| {
        let mut l = b"PROXY UNKNOWN ".to_vec();
        l.resize(n - 2, b'f');
        l.extend_from_slice(b"\r\n");
        l
    };
    assert_eq!(complete(&line(107)).1, 107);
    assert_eq!(invalid(&line(108)), "v1 line too long");
    // Without its end, a line already at 107 bytes cannot become valid.
    assert_eq!(invalid(&line(109)[..107]), "v1 line too long");
    assert_eq!(parse(&line(109)[..106]), Parsed::Incomplete);
    // The spec's worst case.
    let worst = format!(
        "PROXY UNKNOWN {0} {0} 65535 65535\r\n",
        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
    );
    assert_eq!(complete(worst.as_bytes()).1, 107);
}

#[test]
fn v1_line_must_end_in_crlf() {
    assert_eq!(
        invalid(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n"),
        "v1 line not ended by CRLF"
    );
    assert_eq!(
        invalid(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX"),
        "v1 line not ended by CRLF"
    );
    assert_eq!(
        invalid(b"PROXY UNKNOWN a\rb\r\n"),
        "v1 line not ended by CRLF"
    );
    assert_eq!(
        parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r"),
        Parsed::Incomplete
    );
}

#[test]
fn v1_bad_fields_are_invalid() {
    for line in [
        &b"PROXY \r\n"[..],
        b"PROXY TCP4\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
        b"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n",
        b"PROXY TCP4 1.2.3.4 ::1 1 2\r\n",
        b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
        b"PROXY TCP6 [::1] ::1 1 2\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 \r\n",
        b"PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n",
        b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n",
        b"PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n",
        b"PROXY UNKNOWNX\r\n",
        b"PROXY  UNKNOWN\r\n",
    ] {
        invalid(line);
    }
}

#[test]
fn v1_ports_may_have_leading_zeros() {
    let (h, _) = complete(b"PROXY TCP4 1.2.3.4 5.6.7.8 00080 0\r\n");
    assert_eq!(h.addresses, Some((sa("1.2.3.4:80"), sa("5.6.7.8:0"))));
}

#[test]
fn v1_cut_lines_are_rejected_as_soon_as_they_cannot_become_valid() {
    for cut in [
        &b"PROXY X"[..],
        b"PROXY TCP4X",
        b"PROXY UNKNOWNX",
        b"PROXY TCP4  ",
        b"PROXY TCP4 1.2.3.a",
        b"PROXY TCP4 ::1",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 ",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 65536",
        b"PROXY TCP6 ::1 ::g",
        b"PROXY TCP4 1.2.3.4.5 ",
    ] {
        invalid(cut);
    }
    for cut in [
        &b"PROXY TCP6 ::1 ::ffff:1.2."[..],
        b"PROXY UNKNOWN \x00\xff",
    ] {
        assert_eq!(parse(cut), Parsed::Incomplete);
    }
}

#[test]
fn not_a_proxy_header() {
    assert_eq!(invalid(b"GET / HTTP/1.1\r\n"), "no PROXY header");
    assert_eq!(invalid(b"PROXYTCP4"), "no PROXY header");
    assert_eq!(invalid(b"\x16\x03\x01"), "no PROXY header");
    assert_eq!(parse(b"P"), Parsed::Incomplete);
    assert_eq!(parse(b""), Parsed::Incomplete);
    assert_eq!(parse(&V2_SIGNATURE[..5]), Parsed::Incomplete);
}

#[test]
fn v2_bad_signature() {
    let mut h = encode_local().to_vec();
    h[11] = 0x0B;
    assert_eq!(invalid(&h), "no PROXY header");
    let mut h = encode_local().to_vec();
    h[4] = 0x01;
    assert_eq!(invalid(&h[..6]), "no PROXY header");
}

#[test]
fn every_strict_prefix_is_incomplete() {
    for full in samples() {
        let (_, len) = complete(&full);
        assert_eq!(len, full.len());
        for n in 0..len {
            assert_eq!(parse(&full[..n]), Parsed::Incomplete, "{:?}", &full[..n]);
        }
    }
}

#[test]
fn client_data_after_the_header_is_not_consumed() {
    for full in samples() {
        let (header, len) = complete(&full);
        for tail in [&b"G"[..], b"GET / HTTP/1.1\r\n\r\n", b"\r\n", &[0; 600]] {
            let mut buf = full.clone();
            buf.extend_from_slice(tail);
            assert_eq!(complete(&buf), (header.clone(), len));
        }
    }
}

#[test]
fn v1_round_trips() {
    let (s4, d4) = (sa("10.0.0.1:40000"), sa("10.0.0.2:443"));
    let (s6, d6) = (sa("[2001:db8::1]:40000"), sa("[2001:db8::2]:8443"));
    for (s, d) in [(s4, d4), (s6, d6)] {
        let h = encode(Version::V1, s, d, Some("ignored.example"));
        assert_eq!(
            complete(&h).0,
            Header {
                addresses: Some((s, d)),
                version: Version::V1,
                authority: None
            }
        );
    }
    assert_eq!(encode(Version::V1, s4, d6, None), b"PROXY UNKNOWN\r\n");
    assert_eq!(
        complete(&encode(Version::V1, s6, d4, None)).0.addresses,
        None
    );
}

#[test]
fn v2_round_trips() {
    let (s4, d4) = (sa("10.0.0.1:40000"), sa("10.0.0.2:443"));
    let (s6, d6) = (sa("[2001:db8::1]:40000"), sa("[2001:db8::2]:8443"));
    let mapped = |a: SocketAddr| SocketAddr::new(IpAddr::V6(as_v6(a.ip())), a.port());
    let long = "a".repeat(255);
    for authority in [None, Some("example.com"), Some(long.as_str())] {
        for (s, d, want) in [
            (s4, d4, (s4, d4)),
            (s6, d6, (s6, d6)),
            (s4, d6, (mapped(s4), d6)),
            (s6, d4, (s6, mapped(d4))),
        ] {
            let h = encode(Version::V2, s, d, authority);
            assert_eq!(
                h[13],
                if s.is_ipv4() && d.is_ipv4() {
                    TCP4
                } else {
                    TCP6
                }
            );
            let want = Header {
                addresses: Some(want),
                version: Version::V2,
                authority: authority.map(str::to_owned),
            };
            assert_eq!(complete(&h), (want, h.len()));
        }
    }
    // Empty and over-long authorities are left out.
    let too_long = "a".repeat(256);
    for authority in [Some(""), Some(too_long.as_str())] {
        let h = encode(Version::V2, s4, d4, authority);
        assert_eq!(h.len(), 28);
        assert_eq!(complete(&h).0.authority, None);
    }
}

#[test]
fn v2_local() {
    let h = encode_local();
    assert_eq!(
        h,
        [0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A, 0x20, 0, 0, 0]
    );
    let want = Header {
        addresses: None,
        version: Version::V2,
        authority: None,
    };
    assert_eq!(complete(&h), (want.clone(), 16));
    // LOCAL ignores its block, family included, however short or strange.
    let h = v2(0x20, TCP4, &[1, 2, 3]);
    assert_eq!(complete(&h), (want.clone(), 19));
    let h = v2(0x20, TCP6, &BLOCK4);
    assert_eq!(complete(&h), (want, 28));
}

#[test]
fn v2_bad_version_command_or_family() {
    assert_eq!(invalid(&v2(0x11, TCP4, &BLOCK4)), "v2 version not 2");
    assert_eq!(invalid(&v2(0x11, TCP4, &BLOCK4)[..13]), "v2 version not 2");
    assert_eq!(
        invalid(&v2(0x22, TCP4, &BLOCK4)),
        "v2 command neither LOCAL nor PROXY"
    );
    assert_eq!(
        invalid(&v2(0x21, 0x13, &BLOCK4)[..14]),
        "v2 unknown address family"
    );
    assert_eq!(
        invalid(&v2(0x21, 0x41, &BLOCK4)),
        "v2 unknown address family"
    );
}

#[test]
fn v2_families_without_usable_addresses() {
    for (family, len) in [
        (AF_UNSPEC, 0),
        (0x12, 12),
        (0x22, 36),
        (0x31, 216),
        (0x32, 216),
    ] {
        let (h, n) = complete(&v2(0x21, family, &vec![7; len]));
        assert_eq!((h.addresses, n), (None, 16 + len));
    }
}

#[test]
fn v2_address_block_too_short() {
    for (family, len) in [(TCP4, 11), (TCP6, 35), (0x12, 11), (0x31, 215)] {
        let h = v2(0x21, family, &vec![0; len]);
        // Known from the fixed part alone.
        assert_eq!(invalid(&h[..16]), "v2 address block too short");
    }
}

#[test]
fn v2_size_limit() {
    let h = v2(0x21, TCP4, &vec![0; MAX_HEADER - 16 + 1]);
    assert_eq!(invalid(&h[..16]), "header too large");
    // Exactly MAX_HEADER: the address block and one NOOP TLV filling the rest.
    let mut body = BLOCK4.to_vec();
    let pad = MAX_HEADER - 16 - 12 - 3;
    body.extend_from_slice(&[0x04, 0, 0]);
    body[14..15].copy_from_slice(&[u8::try_from(pad & 0xFF).unwrap()]);
    body[13] = u8::try_from(pad >> 8).unwrap();
    body.resize(MAX_HEADER - 16, 0);
    assert_eq!(complete(&v2(0x21, TCP4, &body)).1, MAX_HEADER);
}

#[test]
fn v2_tlvs_must_lie_inside_the_header() {
    let mut body = BLOCK4.to_vec();
    body.extend_from_slice(&[0x04, 0, 5, 1, 2, 3, 4]);
    assert_eq!(
        invalid(&v2(0x21, TCP4, &body)),
        "v2 TLV runs past the header"
    );
    // Even with more bytes after it: they are the client's, not the TLV's.
    let mut buf = v2(0x21, TCP4, &body);
    buf.extend_from_slice(b"client");
    assert_eq!(invalid(&buf), "v2 TLV runs past the header");
    // A TLV head cut by the header's end.
    let mut body = BLOCK4.to_vec();
    body.extend_from_slice(&[0x04, 0]);
    assert_eq!(
        invalid(&v2(0x21, TCP4, &body)),
        "v2 TLV runs past the header"
    );
    // Zero-length TLVs are fine.
    let mut body = BLOCK4.to_vec();
    body.extend_from_slice(&[0x04, 0, 0, 0xE0, 0, 0]);
    complete(&v2(0x21, TCP4, &body));
}

#[test]
fn v2_authority() {
    let with = |tlvs: &[u8]| {
        let mut body = BLOCK4.to_vec();
        body.extend_from_slice(tlvs);
        complete(&v2(0x21, TCP4, &body)).0.authority
    };
    assert_eq!(with(&[0x02, 0, 2, b'h', b'i']).as_deref(), Some("hi"));
    assert_eq!(with(&[0x02, 0, 2, 0xC3, 0x28]), None, "not UTF-8: ignored");
    assert_eq!(with(&[0x02, 0, 0]), None, "empty: no authority");
    assert_eq!(
        with(&[0x02, 0, 1, b'a', 0x02, 0, 1, b'b']).as_deref(),
        Some("a")
    );
}

#[test]
fn v2_crc32c_is_verified() {
    let good = v2_with_crc(&[PP2_TYPE_AUTHORITY, 0, 1, b'x']);
    assert_eq!(complete(&good).0.authority.as_deref(), Some("x"));
    // A corrupted checksum, address or TLV byte.
    for at in [good.len() - 1, 16, 16 + 12 + 3] {
        let mut bad = good.clone();
        bad[at] ^= 0x40;
        assert_eq!(invalid(&bad), "v2 CRC32C mismatch", "byte {at}");
    }
    // A CRC32C TLV of the wrong size, or two of them.
    let mut body = BLOCK4.to_vec();
    body.extend_from_slice(&[PP2_TYPE_CRC32C, 0, 3, 0, 0, 0]);
    assert_eq!(invalid(&v2(0x21, TCP4, &body)), "v2 CRC32C TLV not 4 bytes");
    let twice = v2_with_crc(&[PP2_TYPE_CRC32C, 0, 4, 0, 0, 0, 0]);
    assert_eq!(invalid(&twice), "v2 CRC32C TLV repeated");
}
