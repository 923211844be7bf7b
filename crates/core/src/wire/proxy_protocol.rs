//! The PROXY protocol, v1 (text) and v2 (binary), as HAProxy's `doc/proxy-protocol.txt`
//! defines it: this module owns both directions of the format and nothing else.
//!
//! - Sending ([`encode`], [`encode_local`]): the header TCP mode writes to a backend that
//!   asks for it (`send-proxy`, `send-proxy-v2`) before the client's first byte, and the
//!   v2 `LOCAL` header its health checks send.
//! - Accepting ([`parse`]): the header a trusted front (`accept-proxy`) writes before its
//!   client's bytes. The proxy reads into a buffer and calls [`parse`] after each read
//!   until the verdict is [`Parsed::Complete`] (the header's length tells where the
//!   client's data starts) or [`Parsed::Invalid`] (the connection is closed).
//!
//! Parsing is strict and bounded: never more than [`MAX_HEADER`] bytes are looked at, a
//! buffer is answered [`Parsed::Incomplete`] only while it can still become a valid
//! header, every v2 TLV must lie inside the header and a CRC32C TLV is verified. No I/O.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Largest header accepted (v2 with TLVs); more is refused.
pub const MAX_HEADER: usize = 536;

/// The longest v1 line, `\r\n` included (the spec's worst case).
const V1_MAX: usize = 107;
/// What every v1 header starts with.
const V1_PREFIX: &[u8] = b"PROXY ";
/// What every v2 header starts with.
const V2_SIGNATURE: [u8; 12] = [
    0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A,
];
/// The fixed part of a v2 header: signature, version/command, family, length.
const V2_FIXED: usize = 16;
/// v2 version 2 with the `LOCAL` command.
const V2_LOCAL: u8 = 0x20;
/// v2 version 2 with the `PROXY` command.
const V2_PROXY: u8 = 0x21;
/// v2 family/transport bytes.
const AF_UNSPEC: u8 = 0x00;
/// TCP over IPv4.
const TCP4: u8 = 0x11;
/// TCP over IPv6.
const TCP6: u8 = 0x21;
/// v2 TLV type of the authority (the host name the client asked for, e.g. its SNI).
const PP2_TYPE_AUTHORITY: u8 = 0x02;
/// v2 TLV type of the CRC32C of the whole header.
const PP2_TYPE_CRC32C: u8 = 0x03;
/// A TLV's type byte and big-endian length.
const TLV_HEAD: usize = 3;

/// Which PROXY protocol version a header is (or is to be) written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The human-readable line: `PROXY TCP4 src dst sport dport\r\n`.
    V1,
    /// The binary header with its 12-byte signature, optionally carrying TLVs.
    V2,
}

/// What a PROXY header says about the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The client's and the front's addresses, `(source, destination)`; `None` for v1
    /// `UNKNOWN`, v2 `LOCAL`, and the v2 UNSPEC, UNIX and UDP families (the connection's
    /// own addresses are used then).
    pub addresses: Option<(SocketAddr, SocketAddr)>,
    /// The version the header was written in.
    pub version: Version,
    /// The v2 AUTHORITY TLV (0x02) if present, non-empty and valid UTF-8 (the SNI the
    /// front saw); the first one if there are several. Always `None` for v1.
    pub authority: Option<String>,
}

/// The verdict on the bytes read so far from a connection that must start with a PROXY
/// header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes needed (a strict prefix of a possibly valid header).
    Incomplete,
    /// Not a valid PROXY header: the connection is closed. Short static reason.
    Invalid(&'static str),
    /// A complete header of `len` bytes at the start of the buffer; what follows is the
    /// client's data.
    Complete {
        /// What the header says.
        header: Header,
        /// The header's length in bytes (never more than [`MAX_HEADER`]).
        len: usize,
    },
}

/// Reads the PROXY header (v1 or v2) at the start of `buf`, which holds everything read
/// from the connection so far. Looks at no more than [`MAX_HEADER`] bytes.
pub fn parse(buf: &[u8]) -> Parsed {
    if buf.starts_with(V1_PREFIX) {
        parse_v1(buf)
    } else if buf.starts_with(&V2_SIGNATURE) {
        parse_v2(buf)
    } else if V1_PREFIX.starts_with(buf) || V2_SIGNATURE.starts_with(buf) {
        Parsed::Incomplete
    } else {
        Parsed::Invalid("no PROXY header")
    }
}

/// The header to send before the client's bytes.
///
/// v1: `TCP4` or `TCP6` after the addresses' family (`UNKNOWN` if the two families
/// differ); `authority` is not representable and ignored. v2: the `PROXY` command with
/// TCP4 when both addresses are IPv4, TCP6 otherwise (an IPv4 address paired with an
/// IPv6 one is sent IPv4-mapped, `::ffff:a.b.c.d`), and an AUTHORITY TLV when
/// `authority` is `Some`, non-empty and at most 255 bytes (else it is omitted). IPv6
/// flow labels and scope ids are not carried.
pub fn encode(
    version: Version,
    source: SocketAddr,
    destination: SocketAddr,
    authority: Option<&str>,
) -> Vec<u8> {
    match version {
        Version::V1 => encode_v1(source, destination),
        Version::V2 => encode_v2(source, destination, authority),
    }
}

/// The v2 LOCAL header health checks send (no addresses; family UNSPEC, length 0):
/// exactly 16 bytes.
pub fn encode_local() -> [u8; 16] {
    let mut out = [0u8; V2_FIXED];
    out[..12].copy_from_slice(&V2_SIGNATURE);
    out[12] = V2_LOCAL;
    out[13] = AF_UNSPEC;
    out
}

/// `PROXY TCP4|TCP6 src dst sport dport\r\n`, or `PROXY UNKNOWN\r\n` for mixed families.
fn encode_v1(source: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let proto = match (source, destination) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) => "TCP4",
        (SocketAddr::V6(_), SocketAddr::V6(_)) => "TCP6",
        _ => return b"PROXY UNKNOWN\r\n".to_vec(),
    };
    format!(
        "PROXY {proto} {} {} {} {}\r\n",
        source.ip(),
        destination.ip(),
        source.port(),
        destination.port()
    )
    .into_bytes()
}

/// The v2 `PROXY` header: TCP4 or TCP6 address block, then the optional AUTHORITY TLV.
fn encode_v2(source: SocketAddr, destination: SocketAddr, authority: Option<&str>) -> Vec<u8> {
    let mut out = Vec::with_capacity(V2_FIXED + 36 + TLV_HEAD + 255);
    out.extend_from_slice(&V2_SIGNATURE);
    out.push(V2_PROXY);
    match (source.ip(), destination.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.push(TCP4);
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (s, d) => {
            out.push(TCP6);
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&as_v6(s).octets());
            out.extend_from_slice(&as_v6(d).octets());
        }
    }
    out.extend_from_slice(&source.port().to_be_bytes());
    out.extend_from_slice(&destination.port().to_be_bytes());
    if let Some(a) = authority.filter(|a| !a.is_empty()) {
        if let Ok(n) = u8::try_from(a.len()) {
            out.push(PP2_TYPE_AUTHORITY);
            out.extend_from_slice(&u16::from(n).to_be_bytes());
            out.extend_from_slice(a.as_bytes());
        }
    }
    // At most 36 + 3 + 255 bytes after the fixed part: always fits the u16.
    let len = u16::try_from(out.len() - V2_FIXED).unwrap_or(u16::MAX);
    out[14..V2_FIXED].copy_from_slice(&len.to_be_bytes());
    out
}

/// An address as IPv6 (IPv4 ones mapped).
fn as_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// A v1 header (`buf` starts with `PROXY `).
fn parse_v1(buf: &[u8]) -> Parsed {
    let window = &buf[..buf.len().min(V1_MAX)];
    let end = window.iter().position(|&b| b == b'\r' || b == b'\n');
    let body_start = V1_PREFIX.len();
    match end {
        Some(i) if window[i] == b'\n' => Parsed::Invalid("v1 line not ended by CRLF"),
        Some(i) if i + 1 >= V1_MAX => Parsed::Invalid("v1 line too long"),
        Some(i) => match buf.get(i + 1) {
            None => partial_v1(&buf[body_start..i]),
            Some(b'\n') => match v1_body(&buf[body_start..i], true) {
                Ok(addresses) => Parsed::Complete {
                    header: Header {
                        addresses,
                        version: Version::V1,
                        authority: None,
                    },
                    len: i + 2,
                },
                Err(reason) => Parsed::Invalid(reason),
            },
            Some(_) => Parsed::Invalid("v1 line not ended by CRLF"),
        },
        None if window.len() >= V1_MAX => Parsed::Invalid("v1 line too long"),
        None => partial_v1(&buf[body_start..]),
    }
}

/// The verdict on a v1 line whose end has not arrived yet.
fn partial_v1(body: &[u8]) -> Parsed {
    match v1_body(body, false) {
        Ok(_) => Parsed::Incomplete,
        Err(reason) => Parsed::Invalid(reason),
    }
}

/// The fields of a v1 line after `PROXY `, without the CRLF. With `complete` false the
/// body may stop anywhere and it is only checked that more bytes could still make it
/// valid (the `Ok` value then means nothing).
fn v1_body(body: &[u8], complete: bool) -> Result<Option<(SocketAddr, SocketAddr)>, &'static str> {
    let mut fields = body.split(|&b| b == b' ');
    let proto = fields.next().unwrap_or_default();
    let v6 = match proto {
        b"TCP4" => false,
        b"TCP6" => true,
        // The rest of an UNKNOWN line is ignored, whatever it holds.
        b"UNKNOWN" => return Ok(None),
        p if !complete
            && body.len() == p.len()
            && [&b"TCP4"[..], b"TCP6", b"UNKNOWN"]
                .iter()
                .any(|k| k.starts_with(p)) =>
        {
            return Ok(None)
        }
        _ => return Err("v1 protocol not TCP4, TCP6 or UNKNOWN"),
    };
    let rest: Vec<&[u8]> = fields.take(5).collect();
    if rest.len() > 4 {
        return Err("v1 line has too many fields");
    }
    if !complete {
        // Every field but the last is whole; the last may be cut anywhere.
        for (k, field) in rest.iter().enumerate() {
            let last = k + 1 == rest.len();
            let ok = match (k < 2, last) {
                (true, false) => v1_ip(field, v6).is_some(),
                (false, false) => v1_port(field).is_some(),
                (true, true) => v1_ip_prefix(field, v6),
                (false, true) => v1_port_prefix(field),
            };
            if !ok {
                return Err(if k < 2 {
                    "v1 bad address"
                } else {
                    "v1 bad port"
                });
            }
        }
        return Ok(None);
    }
    let [src, dst, sport, dport] = rest[..] else {
        return Err("v1 line has too few fields");
    };
    let (Some(src), Some(dst)) = (v1_ip(src, v6), v1_ip(dst, v6)) else {
        return Err("v1 bad address");
    };
    let (Some(sport), Some(dport)) = (v1_port(sport), v1_port(dport)) else {
        return Err("v1 bad port");
    };
    Ok(Some((
        SocketAddr::new(src, sport),
        SocketAddr::new(dst, dport),
    )))
}

/// A whole v1 address: an IPv4 dotted quad for TCP4, an IPv6 address for TCP6.
fn v1_ip(field: &[u8], v6: bool) -> Option<IpAddr> {
    let text = std::str::from_utf8(field).ok()?;
    if v6 {
        text.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
    } else {
        text.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
    }
}

/// Whether a cut v1 address could still become a valid one (characters and length).
fn v1_ip_prefix(field: &[u8], v6: bool) -> bool {
    if v6 {
        // The longest: ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255
        field.len() <= 45
            && field
                .iter()
                .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
    } else {
        field.len() <= 15 && field.iter().all(|&b| b.is_ascii_digit() || b == b'.')
    }
}

/// A whole v1 port: decimal digits only (leading zeros accepted), 0..=65535.
fn v1_port(field: &[u8]) -> Option<u16> {
    if field.is_empty() || !field.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = field.iter().fold(0u32, |acc, &b| {
        acc.saturating_mul(10).saturating_add(u32::from(b - b'0'))
    });
    u16::try_from(value).ok()
}

/// Whether a cut v1 port could still become a valid one.
fn v1_port_prefix(field: &[u8]) -> bool {
    field.is_empty() || v1_port(field).is_some()
}

/// A v2 header (`buf` starts with the signature).
fn parse_v2(buf: &[u8]) -> Parsed {
    let Some(&ver_cmd) = buf.get(12) else {
        return Parsed::Incomplete;
    };
    if ver_cmd >> 4 != 2 {
        return Parsed::Invalid("v2 version not 2");
    }
    let proxy = match ver_cmd & 0x0F {
        0 => false,
        1 => true,
        _ => return Parsed::Invalid("v2 command neither LOCAL nor PROXY"),
    };
    let Some(&family) = buf.get(13) else {
        return Parsed::Incomplete;
    };
    let address_len = match family {
        AF_UNSPEC => 0,
        0x11 | 0x12 => 12,
        0x21 | 0x22 => 36,
        0x31 | 0x32 => 216,
        _ => return Parsed::Invalid("v2 unknown address family"),
    };
    let Some(&[hi, lo]) = buf.get(14..V2_FIXED) else {
        return Parsed::Incomplete;
    };
    let len = V2_FIXED + usize::from(u16::from_be_bytes([hi, lo]));
    if len > MAX_HEADER {
        return Parsed::Invalid("header too large");
    }
    if proxy && len < V2_FIXED + address_len {
        return Parsed::Invalid("v2 address block too short");
    }
    let Some(header) = buf.get(..len) else {
        return Parsed::Incomplete;
    };
    if !proxy {
        // LOCAL: the spec has the receiver discard the whole block, family included.
        return complete_v2(None, None, len);
    }
    let block = &header[V2_FIXED..];
    let addresses = match family {
        TCP4 => v2_addresses(block, 4),
        TCP6 => v2_addresses(block, 16),
        _ => None,
    };
    match v2_tlvs(header, V2_FIXED + address_len) {
        Ok(authority) => complete_v2(addresses, authority, len),
        Err(reason) => Parsed::Invalid(reason),
    }
}

/// A complete v2 verdict.
fn complete_v2(
    addresses: Option<(SocketAddr, SocketAddr)>,
    authority: Option<String>,
    len: usize,
) -> Parsed {
    Parsed::Complete {
        header: Header {
            addresses,
            version: Version::V2,
            authority,
        },
        len,
    }
}

/// The TCP4 (`width` 4) or TCP6 (`width` 16) address block: source and destination
/// addresses, then source and destination ports.
fn v2_addresses(block: &[u8], width: usize) -> Option<(SocketAddr, SocketAddr)> {
    let ip = |at: usize| -> Option<IpAddr> {
        let bytes = block.get(at..at + width)?;
        Some(match width {
            4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?)),
            _ => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        })
    };
    let port = |at: usize| -> Option<u16> {
        let &[hi, lo] = block.get(at..at + 2)? else {
            return None;
        };
        Some(u16::from_be_bytes([hi, lo]))
    };
    let (src, dst) = (ip(0)?, ip(width)?);
    let (sport, dport) = (port(2 * width)?, port(2 * width + 2)?);
    Some((SocketAddr::new(src, sport), SocketAddr::new(dst, dport)))
}

/// Walks the TLVs of a whole v2 `header` from `start`: each must lie inside the header;
/// a CRC32C TLV (at most one, 4 bytes) must match. Returns the first usable authority.
fn v2_tlvs(header: &[u8], start: usize) -> Result<Option<String>, &'static str> {
    let mut authority = None;
    let mut crc_at = None;
    let mut at = start;
    while at < header.len() {
        let Some(&[kind, hi, lo]) = header.get(at..at + TLV_HEAD) else {
            return Err("v2 TLV runs past the header");
        };
        let value_at = at + TLV_HEAD;
        let end = value_at + usize::from(u16::from_be_bytes([hi, lo]));
        let Some(value) = header.get(value_at..end) else {
            return Err("v2 TLV runs past the header");
        };
        match kind {
            PP2_TYPE_AUTHORITY if authority.is_none() && !value.is_empty() => {
                authority = std::str::from_utf8(value).ok().map(str::to_owned);
            }
            PP2_TYPE_CRC32C if value.len() != 4 => return Err("v2 CRC32C TLV not 4 bytes"),
            PP2_TYPE_CRC32C if crc_at.is_some() => return Err("v2 CRC32C TLV repeated"),
            PP2_TYPE_CRC32C => crc_at = Some(value_at),
            _ => {}
        }
        at = end;
    }
    if let Some(i) = crc_at {
        let Some(&[a, b, c, d]) = header.get(i..i + 4) else {
            return Err("v2 TLV runs past the header");
        };
        let expected = u32::from_be_bytes([a, b, c, d]);
        let (before, after) = (&header[..i], header.get(i + 4..).unwrap_or_default());
        let crc = crc32c_update(crc32c_update(crc32c_update(!0, before), &[0; 4]), after);
        if !crc != expected {
            return Err("v2 CRC32C mismatch");
        }
    }
    Ok(authority)
}

/// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), one byte at a time.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
            k += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
};

/// Feeds `bytes` into a running CRC32C register (start with `!0`, finish with `!`).
fn crc32c_update(mut crc: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        crc = CRC32C_TABLE[usize::from((crc as u8) ^ b)] ^ (crc >> 8);
    }
    crc
}

/// The CRC32C of `bytes`.
#[cfg(test)]
fn crc32c(bytes: &[u8]) -> u32 {
    !crc32c_update(!0, bytes)
}

#[cfg(test)]
mod tests;
