//! The PROXY protocol header (`gearlb_core::wire::proxy_protocol`): `parse` of the bytes
//! a trusted front sends before its client's (v1 text or v2 binary), and `encode` /
//! `encode_local` of the header sent to backends.
//!
//! Oracle: no panic; a `Complete` length is at most the buffer's and at most
//! `MAX_HEADER`, and the verdict depends only on those bytes (the same with what follows
//! cut off or replaced); every prefix of a `Complete` buffer shorter than its length is
//! `Incomplete`; a buffer of `MAX_HEADER` bytes or more is never `Incomplete`; `Invalid`
//! stays `Invalid` whatever follows; v1 carries no authority. `encode` → `parse`
//! round-trips for arbitrary addresses and authorities (v1: `UNKNOWN` for mixed
//! families; v2: mixed families IPv4-mapped, the authority kept when it is 1 to 255
//! bytes), and so does re-encoding what a parsed header says.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use arbitrary::Arbitrary;
use gearlb_core::wire::proxy_protocol::{
    encode, encode_local, parse, Header, Parsed, Version, MAX_HEADER,
};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    buf: Vec<u8>,
    tail: Vec<u8>,
    src: ([u8; 16], bool, u16),
    dst: ([u8; 16], bool, u16),
    authority: Option<String>,
    v2: bool,
}

fn addr((bytes, v6, port): ([u8; 16], bool, u16)) -> SocketAddr {
    let ip = if v6 {
        IpAddr::V6(Ipv6Addr::from(bytes))
    } else {
        IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]))
    };
    SocketAddr::new(ip, port)
}

fn as_v6(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V4(v4) => SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), a.port()),
        IpAddr::V6(_) => a,
    }
}

/// What `parse(encode(...))` must say.
fn expected(version: Version, s: SocketAddr, d: SocketAddr, authority: Option<&str>) -> Header {
    let same = s.is_ipv4() == d.is_ipv4();
    match version {
        Version::V1 => Header {
            addresses: same.then_some((s, d)),
            version,
            authority: None,
        },
        Version::V2 => Header {
            addresses: Some(if same { (s, d) } else { (as_v6(s), as_v6(d)) }),
            version,
            authority: authority
                .filter(|a| !a.is_empty() && a.len() <= 255)
                .map(str::to_owned),
        },
    }
}

/// Encodes, checks that it parses back to `expected`, alone and with a tail.
fn round_trip(
    version: Version,
    s: SocketAddr,
    d: SocketAddr,
    authority: Option<&str>,
    tail: &[u8],
) {
    let mut bytes = encode(version, s, d, authority);
    let n = bytes.len();
    assert!(n <= MAX_HEADER);
    let want = Parsed::Complete {
        header: expected(version, s, d, authority),
        len: n,
    };
    assert_eq!(parse(&bytes), want, "{bytes:?}");
    bytes.extend_from_slice(tail);
    assert_eq!(parse(&bytes), want, "with a tail: {bytes:?}");
}

fuzz_target!(|input: Input| {
    let buf = &input.buf;
    let verdict = parse(buf);
    match &verdict {
        Parsed::Complete { header, len } => {
            let len = *len;
            assert!(
                len <= buf.len() && len <= MAX_HEADER,
                "len {len} of {}",
                buf.len()
            );
            // Only the header's bytes decide.
            assert_eq!(parse(&buf[..len]), verdict);
            let mut other = buf[..len].to_vec();
            other.extend_from_slice(&input.tail);
            assert_eq!(parse(&other), verdict);
            for n in 0..len {
                assert_eq!(parse(&buf[..n]), Parsed::Incomplete, "prefix of {n} bytes");
            }
            if header.version == Version::V1 {
                assert_eq!(header.authority, None);
            }
            // Re-encoding what it says parses back to the same.
            if let Some((s, d)) = header.addresses {
                round_trip(
                    header.version,
                    s,
                    d,
                    header.authority.as_deref(),
                    &input.tail,
                );
            }
        }
        Parsed::Incomplete => {
            assert!(buf.len() < MAX_HEADER, "Incomplete at {} bytes", buf.len());
        }
        Parsed::Invalid(reason) => {
            assert!(!reason.is_empty());
            let mut more = buf.clone();
            more.extend_from_slice(&input.tail);
            assert!(
                matches!(parse(&more), Parsed::Invalid(_)),
                "Invalid became valid with more bytes"
            );
        }
    }

    let (s, d) = (addr(input.src), addr(input.dst));
    let version = if input.v2 { Version::V2 } else { Version::V1 };
    round_trip(version, s, d, input.authority.as_deref(), &input.tail);

    let local = encode_local();
    assert_eq!(
        parse(&local),
        Parsed::Complete {
            header: Header {
                addresses: None,
                version: Version::V2,
                authority: None,
            },
            len: 16,
        }
    );
});
