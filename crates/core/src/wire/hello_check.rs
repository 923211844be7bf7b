//! HAProxy's `option ssl-hello-chk`, byte for byte: the probe (an SSLv3 ClientHello
//! with no extensions, so no server name) and the verdict on the reply (at least five
//! bytes, the first a TLS handshake (0x16) or alert (0x15) record type). The check
//! proves the gear speaks TLS records on its port, not that a handshake would complete:
//! a full handshake would mark down gears HAProxy kept up (an alert passes).

/// The probe's length: one 126-byte record.
pub const PROBE_LEN: usize = 126;

/// HAProxy's random bytes: `HAPROXYSSLCHK\n` twice (28 bytes).
const RANDOM: &[u8; 28] = b"HAPROXYSSLCHK\nHAPROXYSSLCHK\n";

/// The ClientHello to send, with `unix_time` in its random's time field.
pub fn probe(unix_time: u32) -> [u8; PROBE_LEN] {
    let mut p = [0u8; PROBE_LEN];
    // Record: handshake, SSL 3.0, 121 bytes.
    p[..5].copy_from_slice(&[0x16, 0x03, 0x00, 0x00, 0x79]);
    // Handshake: ClientHello, 117 bytes, client_version 3.0.
    p[5..11].copy_from_slice(&[0x01, 0x00, 0x00, 0x75, 0x03, 0x00]);
    p[11..15].copy_from_slice(&unix_time.to_be_bytes());
    p[15..43].copy_from_slice(RANDOM);
    // No session id; 39 cipher suites (78 bytes).
    p[43..46].copy_from_slice(&[0x00, 0x00, 0x4e]);
    let mut at = 46;
    for suite in (0x0001u16..=0x001b).chain(0x002f..=0x003a) {
        p[at..at + 2].copy_from_slice(&suite.to_be_bytes());
        at += 2;
    }
    // The null compression method only.
    p[at..at + 2].copy_from_slice(&[0x01, 0x00]);
    p
}

/// What the reply read so far says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Fewer than five bytes, all plausible: read more (end of stream: down).
    Incomplete,
    /// TLS records: up (HAProxy's `L6OK`).
    Up,
    /// Something else (HAProxy's `L6RSP`).
    Down,
}

/// The verdict on the first bytes of the reply.
pub fn verdict(reply: &[u8]) -> Verdict {
    match reply.first() {
        None => Verdict::Incomplete,
        Some(0x15 | 0x16) if reply.len() >= 5 => Verdict::Up,
        Some(0x15 | 0x16) => Verdict::Incomplete,
        Some(_) => Verdict::Down,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_is_haproxys_record() {
        let p = probe(0x6000_0001);
        assert_eq!(&p[..11], &[0x16, 3, 0, 0, 0x79, 1, 0, 0, 0x75, 3, 0]);
        assert_eq!(&p[11..15], &[0x60, 0, 0, 1]);
        assert_eq!(&p[15..43], RANDOM);
        // Record length and handshake length agree with the bytes.
        assert_eq!(usize::from(p[4]) + 5, PROBE_LEN);
        assert_eq!(usize::from(p[8]) + 9, PROBE_LEN);
        assert_eq!(&p[46..48], &[0x00, 0x01], "first suite");
        assert_eq!(&p[122..124], &[0x00, 0x3a], "last suite");
        assert_eq!(&p[124..], &[1, 0], "null compression, no extensions");
    }

    #[test]
    fn alerts_and_handshakes_are_up_anything_else_down() {
        // OpenSSL's and rustls's answers to the SSLv3 probe: protocol_version alerts.
        assert_eq!(verdict(&[0x15, 3, 0, 0, 2, 2, 0x28]), Verdict::Up);
        assert_eq!(verdict(&[0x15, 3, 3, 0, 2, 2, 0x28]), Verdict::Up);
        assert_eq!(verdict(&[0x16, 3, 1, 0, 0x40]), Verdict::Up);
        assert_eq!(verdict(&[0x16, 3, 1]), Verdict::Incomplete);
        assert_eq!(verdict(&[]), Verdict::Incomplete);
        assert_eq!(verdict(b"HTTP/1.1 400 Bad Request\r\n"), Verdict::Down);
        assert_eq!(verdict(&[0x17, 3, 3, 0, 1, 0]), Verdict::Down);
    }
}
