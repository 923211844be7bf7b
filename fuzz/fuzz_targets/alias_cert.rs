//! An alias's uploaded certificate and key: `proxy::certs::alias_cert` (PEM blocks and
//! headers, OpenSSL's legacy key encryption, encrypted PKCS#8, PKCS#1/SEC1 to PKCS#8,
//! the certificate's DER, the key match).
//!
//! Input: a first byte choosing the mode, then either the raw texts (certificate, key,
//! pass phrase, separated by NUL: even first byte), or the DER body of a key the
//! harness frames in PEM beside a fixed certificate (odd first byte: `(byte / 2) % 5`
//! picks the label; with bit 0x20, a cipher byte and an IV follow, made into legacy
//! `Proc-Type`/`DEK-Info` headers).
//!
//! Oracle: no panic, no hang; a refusal names the alias; an accepted key's plain
//! PKCS#8 PEM is accepted again without a pass phrase, giving the same key, names and
//! fingerprint.
#![no_main]

use gearlb::proxy::certs::alias_cert;
use libfuzzer_sys::fuzz_target;

const CERT: &str = include_str!("../../crates/proxy/tests/data/alias_certs/rsa.crt");
const LABELS: [&str; 5] = [
    "PRIVATE KEY",
    "RSA PRIVATE KEY",
    "EC PRIVATE KEY",
    "ENCRYPTED PRIVATE KEY",
    "DSA PRIVATE KEY",
];
const CIPHERS: [&str; 5] = [
    "DES-EDE3-CBC",
    "AES-128-CBC",
    "AES-192-CBC",
    "AES-256-CBC",
    "DES-CBC",
];

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for (i, c) in bytes.chunks(3).enumerate() {
        if i > 0 && i % 16 == 0 {
            out.push('\n');
        }
        let n = c.iter().enumerate().fold(0u32, |n, (j, b)| n | u32::from(*b) << (16 - 8 * j));
        for k in 0..4 {
            if k <= c.len() {
                out.push(char::from(A[(n >> (18 - 6 * k) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (cert, key, pass) = if mode % 2 == 0 {
        let text = String::from_utf8_lossy(rest);
        let mut parts = text.split('\0');
        let cert = parts.next().unwrap_or_default().to_string();
        let key = parts.next().unwrap_or_default().to_string();
        let pass = parts.next().map(str::to_string);
        (cert, key, pass)
    } else {
        let label = LABELS[usize::from(mode / 2) % LABELS.len()];
        // With bit 0x20: a cipher (byte), its IV (8 or 16 bytes), then the body.
        let (headers, body) = match rest.split_first() {
            Some((&c, after)) if mode & 0x20 != 0 => {
                let cipher = CIPHERS[usize::from(c) % CIPHERS.len()];
                let iv_len = if cipher.starts_with("DES") { 8 } else { 16 };
                let (iv, body) = after.split_at(iv_len.min(after.len()));
                let iv: String = iv.iter().map(|b| format!("{b:02X}")).collect();
                (format!("Proc-Type: 4,ENCRYPTED\nDEK-Info: {cipher},{iv}\n\n"), body)
            }
            _ => (String::new(), rest),
        };
        let key = format!(
            "-----BEGIN {label}-----\n{headers}{}\n-----END {label}-----\n",
            base64(body)
        );
        (CERT.to_string(), key, Some("gearlb-test".to_string()))
    };
    match alias_cert("fuzz.example.org", &cert, &key, pass.as_deref()) {
        Err(e) => assert!(e.starts_with("alias fuzz.example.org: "), "{e}"),
        Ok(c) => {
            let again = alias_cert("fuzz.example.org", &cert, &c.plain_key_pem, None)
                .expect("the plain key is accepted again");
            assert_eq!(again.plain_key_pem, c.plain_key_pem);
            assert_eq!(again.fingerprint, c.fingerprint);
            assert_eq!(again.names, c.names);
            assert_eq!(again.key.key.public_key(), c.key.key.public_key());
        }
    }
});
