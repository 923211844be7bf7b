//! The stapled OCSP response's validity: its `nextUpdate`, read from the DER
//! `OCSPResponse` (RFC 6960) with a small bounds-checked walk, so that a response past
//! it is not stapled (a client that checks would refuse the certificate). Only the
//! structure is read, not the signature: the file is the operator's.

/// The earliest `nextUpdate` of a response's single responses, in Unix seconds; `None`
/// when it has none (a response without `nextUpdate` never expires by itself).
pub fn next_update(der: &[u8]) -> Result<Option<u64>, &'static str> {
    // OCSPResponse ::= SEQUENCE { responseStatus ENUMERATED, responseBytes [0] EXPLICIT }
    let (resp, _) = tlv(der, 0x30)?;
    let (_, rest) = tlv(resp, 0x0a)?;
    if rest.is_empty() {
        return Err("an OCSP response without a body (not successful)");
    }
    let (explicit, _) = tlv(rest, 0xa0)?;
    // ResponseBytes ::= SEQUENCE { responseType OID, response OCTET STRING }
    let (bytes, _) = tlv(explicit, 0x30)?;
    let (_, rest) = tlv(bytes, 0x06)?;
    let (basic_der, _) = tlv(rest, 0x04)?;
    // BasicOCSPResponse ::= SEQUENCE { tbsResponseData SEQUENCE, ... }
    let (basic, _) = tlv(basic_der, 0x30)?;
    let (data, _) = tlv(basic, 0x30)?;
    // ResponseData: [0] version?, responderID ([1] or [2]), producedAt, responses.
    let mut rest = data;
    if rest.first() == Some(&0xa0) {
        rest = tlv(rest, 0xa0)?.1;
    }
    rest = match rest.first() {
        Some(0xa1) => tlv(rest, 0xa1)?.1,
        Some(0xa2) => tlv(rest, 0xa2)?.1,
        _ => return Err("no responder id"),
    };
    let (_, rest) = tlv(rest, 0x18)?;
    let (mut responses, _) = tlv(rest, 0x30)?;
    let mut earliest: Option<u64> = None;
    while !responses.is_empty() {
        // SingleResponse ::= SEQUENCE { certID, certStatus, thisUpdate, nextUpdate [0]? }
        let (single, next) = tlv(responses, 0x30)?;
        responses = next;
        let (_, r) = tlv(single, 0x30)?;
        let (_, r) = any_tlv(r)?;
        let (_, r) = tlv(r, 0x18)?;
        if r.first() == Some(&0xa0) {
            let (explicit, _) = tlv(r, 0xa0)?;
            let (time, _) = tlv(explicit, 0x18)?;
            let t = generalized_time(time)?;
            earliest = Some(earliest.map_or(t, |e| e.min(t)));
        }
    }
    Ok(earliest)
}

/// One element with tag `tag` at the start of `b`: its contents and what follows.
fn tlv(b: &[u8], tag: u8) -> Result<(&[u8], &[u8]), &'static str> {
    match b.first() {
        Some(&t) if t == tag => any_tlv(b),
        _ => Err("not an OCSP response (unexpected DER element)"),
    }
}

fn any_tlv(b: &[u8]) -> Result<(&[u8], &[u8]), &'static str> {
    const BAD: &str = "not an OCSP response (bad DER length)";
    let first = *b.get(1).ok_or(BAD)?;
    let (len, head) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return Err(BAD);
        }
        let bytes = b.get(2..2 + n).ok_or(BAD)?;
        (
            bytes.iter().fold(0usize, |a, &x| (a << 8) | usize::from(x)),
            2 + n,
        )
    };
    let end = head.checked_add(len).ok_or(BAD)?;
    let content = b.get(head..end).ok_or(BAD)?;
    Ok((content, &b[end..]))
}

/// `YYYYMMDDHHMMSS[.fff]Z` as Unix seconds.
fn generalized_time(t: &[u8]) -> Result<u64, &'static str> {
    const BAD: &str = "not an OCSP response (bad time)";
    let digits = |r: std::ops::Range<usize>| -> Result<u64, &'static str> {
        let s = t.get(r).ok_or(BAD)?;
        if !s.iter().all(u8::is_ascii_digit) {
            return Err(BAD);
        }
        Ok(s.iter().fold(0u64, |a, &d| a * 10 + u64::from(d - b'0')))
    };
    if t.last() != Some(&b'Z') || t.len() < 15 {
        return Err(BAD);
    }
    let (y, mo, d) = (digits(0..4)?, digits(4..6)?, digits(6..8)?);
    let (h, mi, s) = (digits(8..10)?, digits(10..12)?, digits(12..14)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return Err(BAD);
    }
    // Days from the civil date (Howard Hinnant's algorithm), then seconds.
    let (y, m) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468).ok_or(BAD)?;
    Ok(days * 86_400 + h * 3600 + mi * 60 + s)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn el(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        if content.len() < 0x80 {
            out.push(content.len() as u8);
        } else {
            out.push(0x82);
            out.extend((content.len() as u16).to_be_bytes());
        }
        out.extend_from_slice(content);
        out
    }

    /// A successful OCSP response (structure only, no valid signature) whose single
    /// response has `next` as `nextUpdate` when given.
    pub(crate) fn response(next: Option<&str>) -> Vec<u8> {
        let cert_id = el(
            0x30,
            &[
                el(0x30, &[0x05, 0x00]),
                el(0x04, &[1; 20]),
                el(0x04, &[2; 20]),
                el(0x02, &[7]),
            ]
            .concat(),
        );
        let mut single = [cert_id, vec![0x80, 0x00], el(0x18, b"20261101000000Z")].concat();
        if let Some(n) = next {
            single.extend(el(0xa0, &el(0x18, n.as_bytes())));
        }
        let data = [
            el(0xa2, &el(0x04, &[3; 20])),
            el(0x18, b"20261101000000Z"),
            el(0x30, &el(0x30, &single)),
        ]
        .concat();
        let basic = el(
            0x30,
            &[
                el(0x30, &data),
                el(0x30, &[0x05, 0x00]),
                el(0x03, &[0, 1, 2]),
            ]
            .concat(),
        );
        let bytes = el(
            0x30,
            &[el(0x06, &[0x2b, 6, 1, 5, 5, 7, 48, 1, 1]), el(0x04, &basic)].concat(),
        );
        el(0x30, &[el(0x0a, &[0]), el(0xa0, &bytes)].concat())
    }

    #[test]
    fn next_update_is_read_from_the_single_response() {
        assert_eq!(
            next_update(&response(Some("20261127120000Z"))),
            Ok(Some(1_795_780_800))
        );
        assert_eq!(next_update(&response(None)), Ok(None));
        // Unsuccessful (no body), truncated, or not DER at all.
        assert!(next_update(&[0x30, 0x03, 0x0a, 0x01, 0x06]).is_err());
        let whole = response(Some("20261127120000Z"));
        for n in 0..whole.len() {
            assert!(next_update(&whole[..n]).is_err(), "prefix {n}");
        }
        assert!(next_update(&response(Some("2026112712000Z"))).is_err());
        assert!(next_update(b"not der").is_err());
    }

    #[test]
    fn unix_time_of_generalized_times() {
        assert_eq!(generalized_time(b"19700101000000Z"), Ok(0));
        assert_eq!(generalized_time(b"20000301000000Z"), Ok(951_868_800));
        assert_eq!(generalized_time(b"20261127120000.5Z"), Ok(1_795_780_800));
        assert!(generalized_time(b"20261327120000Z").is_err());
    }
}
