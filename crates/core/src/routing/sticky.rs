//! The sticky-session cookie (HAProxy `cookie GEAR insert indirect nocache`).
//!
//! Owns finding and stripping the cookie in a request (other cookies are left byte for
//! byte), decoding its value, and writing `Set-Cookie`. A value is only ever looked up
//! among the current backends' sticky values; it is never turned into an address, so a
//! forged value can at worst name a gear the client could have been sent to anyway.
//!
//! Plain values are `<gearname>-<ns>`: the same on every balancer by construction. The
//! sealed form (`sticky.seal`) is `base64url(nonce ‖ XChaCha20-Poly1305(value ‖ expiry))`
//! under a key derived (HKDF-SHA256) from the cluster secret, so every balancer of the
//! application can open any balancer's cookie, and clients can neither read the gear
//! name nor keep a cookie past its expiry.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bytes::BufMut;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use http::header::{self, HeaderMap, HeaderValue};

/// Longest cookie value looked at; longer values are ignored (and replaced).
pub const MAX_VALUE_LEN: usize = 512;
/// Longest plain value: a gear label is at most a DNS label (63) but backend names may
/// be up to 128.
const MAX_PLAIN_LEN: usize = 128;
const NONCE_LEN: usize = 24;

/// Cookie settings and, for sealed values, the key.
#[derive(Clone)]
pub struct Sticky {
    name: String,
    seal: Option<Sealer>,
    max_age_secs: u64,
}

#[derive(Clone)]
struct Sealer(XChaCha20Poly1305);

impl std::fmt::Debug for Sticky {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sticky")
            .field("name", &self.name)
            .field("sealed", &self.seal.is_some())
            .finish()
    }
}

impl Sticky {
    /// Plain cookie named `name`.
    pub fn plain(name: &str) -> Self {
        Sticky {
            name: name.to_string(),
            seal: None,
            max_age_secs: 0,
        }
    }

    /// Sealed cookie; the key is derived from the cluster `secret`.
    pub fn sealed(name: &str, secret: &[u8], max_age_secs: u64) -> Self {
        let hk = hkdf::Hkdf::<sha2::Sha256>::new(Some(b"gearlb"), secret);
        let mut key = [0u8; 32];
        // 32 bytes is far below HKDF-SHA256's 8160-byte limit: expand cannot fail.
        hk.expand(b"gearlb sticky cookie v1", &mut key)
            .expect("32-byte HKDF output");
        Sticky {
            name: name.to_string(),
            seal: Some(Sealer(XChaCha20Poly1305::new(&key.into()))),
            max_age_secs,
        }
    }

    /// The same cookie (sealed or not, same key and age) under another name: a
    /// service's own.
    pub fn renamed(&self, name: &str) -> Self {
        Sticky {
            name: name.to_string(),
            ..self.clone()
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sealed values (they carry an expiry: encoding and decoding need the time).
    pub fn is_sealed(&self) -> bool {
        self.seal.is_some()
    }

    /// Remove every occurrence of the cookie from the request's `Cookie` headers and
    /// return the first value found (raw bytes: it may not even be text).
    pub fn take(&self, headers: &mut HeaderMap) -> Option<Vec<u8>> {
        if !headers.contains_key(header::COOKIE) {
            return None;
        }
        let mut found = None;
        let mut kept: Vec<HeaderValue> = Vec::new();
        let mut touched = false;
        for v in headers.get_all(header::COOKIE) {
            match strip(v.as_bytes(), self.name.as_bytes()) {
                None => kept.push(v.clone()),
                Some((value, rest)) => {
                    touched = true;
                    if found.is_none() {
                        found = Some(value);
                    }
                    if !rest.is_empty() {
                        // `rest` is made of byte ranges of a valid header value.
                        if let Ok(hv) = HeaderValue::from_bytes(&rest) {
                            kept.push(hv);
                        }
                    }
                }
            }
        }
        if touched {
            headers.remove(header::COOKIE);
            for v in kept {
                headers.append(header::COOKIE, v);
            }
        }
        found
    }

    /// One `Cookie` field's value without the cookie: its value (the first found) and
    /// the field's other pairs (empty when nothing else is left); `None` when the field
    /// does not carry it. What [`Sticky::take`] does to each field, for heads kept as
    /// bytes.
    pub fn take_from(&self, field: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
        strip(field, self.name.as_bytes())
    }

    /// The sticky value a cookie carries, if well formed (and, sealed, authentic and
    /// not expired at `now`, Unix seconds).
    pub fn decode(&self, raw: &[u8], now: u64) -> Option<String> {
        if raw.is_empty() || raw.len() > MAX_VALUE_LEN {
            return None;
        }
        match &self.seal {
            None => {
                let ok = raw.len() <= MAX_PLAIN_LEN
                    && raw
                        .iter()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
                ok.then(|| String::from_utf8_lossy(raw).into_owned())
            }
            Some(Sealer(aead)) => {
                let bytes = URL_SAFE_NO_PAD.decode(raw).ok()?;
                if bytes.len() <= NONCE_LEN {
                    return None;
                }
                let (nonce, sealed) = bytes.split_at(NONCE_LEN);
                let plain = aead.decrypt(XNonce::from_slice(nonce), sealed).ok()?;
                if plain.len() < 8 {
                    return None;
                }
                let (value, expiry) = plain.split_at(plain.len() - 8);
                let expiry = u64::from_be_bytes(expiry.try_into().ok()?);
                if now > expiry {
                    return None;
                }
                String::from_utf8(value.to_vec()).ok()
            }
        }
    }

    /// The cookie value for a backend's sticky value at `now`.
    pub fn encode(&self, value: &str, now: u64) -> String {
        match &self.seal {
            None => value.to_string(),
            Some(Sealer(aead)) => {
                let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
                let mut plain = value.as_bytes().to_vec();
                plain.extend_from_slice(&(now + self.max_age_secs).to_be_bytes());
                // Encryption with a valid key and nonce only fails for inputs over
                // ~256 GiB: not reachable with a sticky value.
                let sealed = aead
                    .encrypt(&nonce, plain.as_slice())
                    .expect("sealing a short value");
                let mut out = nonce.to_vec();
                out.extend_from_slice(&sealed);
                URL_SAFE_NO_PAD.encode(out)
            }
        }
    }

    /// `Set-Cookie` for a backend: session cookie, path `/`, HttpOnly, and Secure when
    /// the client came over HTTPS.
    pub fn set_cookie(&self, value: &str, secure: bool, now: u64) -> Option<HeaderValue> {
        // Sent with most first responses: one buffer, handed to the header as is.
        let mut s = Vec::with_capacity(self.name.len() + value.len() + 32);
        if !self.put_set_cookie(value, secure, now, &mut s) {
            return None;
        }
        HeaderValue::from_maybe_shared(bytes::Bytes::from(s)).ok()
    }

    /// The value of [`Sticky::set_cookie`] written at the end of `out`, for a head
    /// written as bytes: no allocation for a plain cookie. `false`, with nothing
    /// written, when it would not be a field value (a control byte in the name or the
    /// backend's value), where `set_cookie` gives `None`.
    pub fn put_set_cookie(
        &self,
        value: &str,
        secure: bool,
        now: u64,
        out: &mut impl BufMut,
    ) -> bool {
        let sealed;
        let value = match self.seal {
            None => value,
            Some(_) => {
                sealed = self.encode(value, now);
                &sealed
            }
        };
        // What `HeaderValue` accepts: tab, and every byte but the other controls.
        let ok = |b: &u8| *b == b'\t' || (*b >= 0x20 && *b != 0x7f);
        if !(self.name.bytes().all(|b| ok(&b)) && value.as_bytes().iter().all(ok)) {
            return false;
        }
        out.put_slice(self.name.as_bytes());
        out.put_u8(b'=');
        out.put_slice(value.as_bytes());
        out.put_slice(b"; path=/; HttpOnly");
        if secure {
            out.put_slice(b"; Secure");
        }
        true
    }

    /// Remove a backend's own `Set-Cookie` for our cookie name (HAProxy does the same
    /// in insert mode): the balancer owns that cookie.
    pub fn strip_set_cookie(&self, headers: &mut HeaderMap) {
        if !headers.contains_key(header::SET_COOKIE) {
            return;
        }
        let prefix = format!("{}=", self.name);
        let kept: Vec<HeaderValue> = headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter(|v| {
                !v.as_bytes()
                    .trim_ascii_start()
                    .starts_with(prefix.as_bytes())
            })
            .cloned()
            .collect();
        headers.remove(header::SET_COOKIE);
        for v in kept {
            headers.append(header::SET_COOKIE, v);
        }
    }
}

/// Find cookie `name` in one `Cookie` header value. Returns its value and the header
/// without it (every other pair's bytes unchanged), or `None` when absent.
fn strip(header: &[u8], name: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut found: Option<Vec<u8>> = None;
    let mut kept: Vec<&[u8]> = Vec::new();
    for pair in header.split(|&b| b == b';') {
        let trimmed = pair.trim_ascii();
        let (k, v) = match trimmed.iter().position(|&b| b == b'=') {
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => (trimmed, &b""[..]),
        };
        if k.trim_ascii() == name {
            if found.is_none() {
                let v = v.trim_ascii();
                let v = v
                    .strip_prefix(b"\"")
                    .and_then(|v| v.strip_suffix(b"\""))
                    .unwrap_or(v);
                found = Some(v.to_vec());
            }
        } else if !trimmed.is_empty() {
            kept.push(trimmed);
        }
    }
    let value = found?;
    Some((value, kept.join(&b"; "[..])))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cookies(h: &HeaderMap) -> Vec<String> {
        h.get_all(header::COOKIE)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect()
    }

    #[test]
    fn take_strips_only_ours() {
        let s = Sticky::plain("GEAR");
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; GEAR=web1-ns; b=\"x y\""),
        );
        h.append(header::COOKIE, HeaderValue::from_static("c=3"));
        assert_eq!(s.take(&mut h).unwrap(), b"web1-ns");
        assert_eq!(cookies(&h), vec!["a=1; b=\"x y\"", "c=3"]);

        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("GEAR=only"));
        assert_eq!(s.take(&mut h).unwrap(), b"only");
        assert!(
            h.get(header::COOKIE).is_none(),
            "empty Cookie header removed"
        );

        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("GEARX=1; XGEAR=2"));
        assert!(s.take(&mut h).is_none());
        assert_eq!(
            cookies(&h),
            vec!["GEARX=1; XGEAR=2"],
            "untouched when absent"
        );
    }

    #[test]
    fn duplicates_all_stripped_first_wins() {
        let s = Sticky::plain("GEAR");
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("GEAR=one; k=v; GEAR=two"),
        );
        assert_eq!(s.take(&mut h).unwrap(), b"one");
        assert_eq!(cookies(&h), vec!["k=v"]);
    }

    #[test]
    fn non_utf8_cookie_headers_are_handled() {
        let s = Sticky::plain("GEAR");
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_bytes(b"GEAR=\xff\xfe; z=\xe9").unwrap(),
        );
        let v = s.take(&mut h).unwrap();
        assert_eq!(v, b"\xff\xfe");
        assert_eq!(s.decode(&v, 0), None);
        assert_eq!(h.get(header::COOKIE).unwrap().as_bytes(), b"z=\xe9");
    }

    #[test]
    fn plain_decode_rejects_forgeries() {
        let s = Sticky::plain("GEAR");
        assert_eq!(s.decode(b"web1-ns", 0).as_deref(), Some("web1-ns"));
        for bad in [
            &b""[..],
            b"../etc/passwd",
            b"a b",
            b"web1;x",
            b"127.0.0.1:80",
        ] {
            assert_eq!(s.decode(bad, 0), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(s.decode(&vec![b'a'; 10 * 1024], 0), None);
    }

    #[test]
    fn sealed_round_trip_expiry_and_other_keys() {
        let secret = b"app-secret-0123456789";
        let s = Sticky::sealed("GEAR", secret, 3600);
        let v = s.encode("web1-ns", 1000);
        assert!(!v.contains("web1"), "sealed value must not show the gear");
        assert_eq!(s.decode(v.as_bytes(), 1000).as_deref(), Some("web1-ns"));
        // Any balancer with the same secret opens it.
        let peer = Sticky::sealed("GEAR", secret, 3600);
        assert_eq!(peer.decode(v.as_bytes(), 4600).as_deref(), Some("web1-ns"));
        assert_eq!(s.decode(v.as_bytes(), 4601), None, "expired");
        let other = Sticky::sealed("GEAR", b"another-secret-0123456", 3600);
        assert_eq!(other.decode(v.as_bytes(), 1000), None);
        // Tampering breaks authentication.
        let mut t = v.clone().into_bytes();
        let last = t.len() - 3;
        t[last] = if t[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(s.decode(&t, 1000), None);
        // Two encodings of the same value differ (random nonce).
        assert_ne!(s.encode("web1-ns", 1000), s.encode("web1-ns", 1000));
        assert_eq!(
            s.decode(b"web1-ns", 1000),
            None,
            "plain values are not accepted when sealed"
        );
    }

    #[test]
    fn set_cookie_attributes() {
        let s = Sticky::plain("GEAR");
        assert_eq!(
            s.set_cookie("web1-ns", false, 0).unwrap(),
            "GEAR=web1-ns; path=/; HttpOnly"
        );
        assert_eq!(
            s.set_cookie("web1-ns", true, 0).unwrap(),
            "GEAR=web1-ns; path=/; HttpOnly; Secure"
        );
    }

    #[test]
    fn set_cookie_written_as_bytes_is_the_header_value() {
        let plain = Sticky::plain("GEAR");
        let sealed = Sticky::sealed("GEAR", b"secret", 3600);
        for secure in [false, true] {
            let mut out = b"set-cookie: ".to_vec();
            assert!(plain.put_set_cookie("web1-ns", secure, 7, &mut out));
            let v = plain.set_cookie("web1-ns", secure, 7).unwrap();
            assert_eq!(&out[12..], v.as_bytes());
            // A sealed value has a fresh nonce each time: it must still open.
            let mut out = Vec::new();
            assert!(sealed.put_set_cookie("web1-ns", secure, 7, &mut out));
            let text = std::str::from_utf8(&out).unwrap();
            let value = text
                .strip_prefix("GEAR=")
                .unwrap()
                .split(';')
                .next()
                .unwrap();
            assert_eq!(
                sealed.decode(value.as_bytes(), 8).as_deref(),
                Some("web1-ns")
            );
            assert_eq!(text.ends_with("; Secure"), secure);
        }
        // What a header value cannot carry is not written, as set_cookie refuses it.
        let mut out = b"x".to_vec();
        assert!(!plain.put_set_cookie("web\r\n1", false, 0, &mut out));
        assert!(plain.set_cookie("web\r\n1", false, 0).is_none());
        assert!(!Sticky::plain("G\x01").put_set_cookie("web1", false, 0, &mut out));
        assert_eq!(out, b"x");
    }

    #[test]
    fn backend_set_cookie_for_our_name_is_removed() {
        let s = Sticky::plain("GEAR");
        let mut h = HeaderMap::new();
        h.append(
            header::SET_COOKIE,
            HeaderValue::from_static("GEAR=evil; path=/"),
        );
        h.append(header::SET_COOKIE, HeaderValue::from_static("session=abc"));
        s.strip_set_cookie(&mut h);
        let left: Vec<_> = h.get_all(header::SET_COOKIE).iter().collect();
        assert_eq!(left, vec!["session=abc"]);
    }
}
