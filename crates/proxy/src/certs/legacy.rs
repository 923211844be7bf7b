//! OpenSSL's legacy encrypted PEM keys: a `RSA PRIVATE KEY` or `EC PRIVATE KEY` block
//! with `Proc-Type: 4,ENCRYPTED` and `DEK-Info: <cipher>,<hex IV>` headers, as
//! `openssl genrsa -des3` and `openssl rsa -aes256` wrote them (and OpenSSL 1.0's
//! mod_ssl users uploaded).
//!
//! The key is OpenSSL's `EVP_BytesToKey` with MD5 and one round (`D1 = MD5(pass‖salt)`,
//! `Di = MD5(Di−1‖pass‖salt)`, concatenated to the key's length; the salt is the IV's
//! first 8 bytes), then CBC with the IV and PKCS#7 padding. Ciphers: DES-EDE3-CBC and
//! AES-128/192/256-CBC, as pyca/cryptography. A wrong pass phrase shows as bad padding
//! or, after decryption, bytes that are not one DER `SEQUENCE`.

use cbc::cipher::block_padding::Pkcs7;
use cbc::cipher::{BlockCipher, BlockDecryptMut, KeyInit, KeyIvInit};
use md5::{Digest, Md5};
use pkcs8::der::{asn1::AnyRef, Decode, Tag, Tagged};
use zeroize::Zeroizing;

/// Why a legacy encrypted key cannot be decrypted.
#[derive(Debug, PartialEq, Eq)]
pub enum Error {
    /// A cipher other than the four supported ones (its `DEK-Info` name).
    Unsupported(String),
    /// Headers or body not as OpenSSL writes them.
    Malformed(String),
    WrongPassPhrase,
}

/// The plain DER key (PKCS#1 or SEC1) of a legacy encrypted block's body `data`,
/// encrypted as its `DEK-Info` header says.
pub fn decrypt(dek_info: &str, pass: &[u8], data: &[u8]) -> Result<Zeroizing<Vec<u8>>, Error> {
    let (cipher, iv_hex) = dek_info
        .split_once(',')
        .ok_or_else(|| Error::Malformed(format!("DEK-Info {dek_info:?} has no IV")))?;
    let cipher = cipher.trim().to_ascii_uppercase();
    let iv = hex(iv_hex.trim())
        .ok_or_else(|| Error::Malformed(format!("DEK-Info IV {iv_hex:?} is not hex")))?;
    let mut buf = Zeroizing::new(data.to_vec());
    let len = match cipher.as_str() {
        "DES-EDE3-CBC" => cbc_decrypt::<des::TdesEde3>(24, pass, &iv, &mut buf)?,
        "AES-128-CBC" => cbc_decrypt::<aes::Aes128>(16, pass, &iv, &mut buf)?,
        "AES-192-CBC" => cbc_decrypt::<aes::Aes192>(24, pass, &iv, &mut buf)?,
        "AES-256-CBC" => cbc_decrypt::<aes::Aes256>(32, pass, &iv, &mut buf)?,
        _ => return Err(Error::Unsupported(cipher)),
    };
    buf.truncate(len);
    match AnyRef::from_der(&buf) {
        Ok(any) if any.tag() == Tag::Sequence => Ok(buf),
        _ => Err(Error::WrongPassPhrase),
    }
}

/// Decrypt `buf` in place with cipher `C` (key of `key_len` bytes from the pass phrase)
/// and strip the padding: the plaintext's length.
fn cbc_decrypt<C>(key_len: usize, pass: &[u8], iv: &[u8], buf: &mut [u8]) -> Result<usize, Error>
where
    C: BlockCipher + BlockDecryptMut + KeyInit,
{
    let block = C::block_size();
    if iv.len() != block {
        return Err(Error::Malformed(format!(
            "DEK-Info IV of {} bytes (the cipher takes {block})",
            iv.len()
        )));
    }
    if buf.is_empty() || !buf.len().is_multiple_of(block) {
        return Err(Error::Malformed(format!(
            "{} encrypted bytes are not whole cipher blocks",
            buf.len()
        )));
    }
    // The salt is the IV's first 8 bytes (the IV is 8 or 16 bytes long).
    let key = bytes_to_key(pass, iv.get(..8).unwrap_or(iv), key_len);
    let dec = cbc::Decryptor::<C>::new_from_slices(&key, iv)
        .map_err(|_| Error::Malformed("key or IV of the wrong length".into()))?;
    dec.decrypt_padded_mut::<Pkcs7>(buf)
        .map(|plain| plain.len())
        .map_err(|_| Error::WrongPassPhrase)
}

/// OpenSSL's `EVP_BytesToKey(cipher, EVP_md5(), salt, pass, 1, key, NULL)`: `len` bytes.
fn bytes_to_key(pass: &[u8], salt: &[u8], len: usize) -> Zeroizing<Vec<u8>> {
    let mut key = Zeroizing::new(Vec::with_capacity(len + 16));
    let mut prev: Option<Zeroizing<[u8; 16]>> = None;
    while key.len() < len {
        let mut md = Md5::new();
        if let Some(p) = &prev {
            md.update(&p[..]);
        }
        md.update(pass);
        md.update(salt);
        let d: Zeroizing<[u8; 16]> = Zeroizing::new(md.finalize().into());
        key.extend_from_slice(&d[..]);
        prev = Some(d);
    }
    key.truncate(len);
    key
}

/// The bytes of a hex string, if it is one.
fn hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.is_empty() {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|pair| {
            let digits = std::str::from_utf8(pair).ok()?;
            u8::from_str_radix(digits, 16).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certs_legacy_evp_bytes_to_key_is_openssls() {
        // `openssl enc -aes-256-cbc -P -md md5 -S 0102030405060708 -pass pass:secret`
        let key = bytes_to_key(b"secret", &[1, 2, 3, 4, 5, 6, 7, 8], 32);
        assert_eq!(key.len(), 32);
        let first: [u8; 16] = Md5::new()
            .chain_update(b"secret")
            .chain_update([1, 2, 3, 4, 5, 6, 7, 8])
            .finalize()
            .into();
        assert_eq!(&key[..16], &first);
        let second: [u8; 16] = Md5::new()
            .chain_update(first)
            .chain_update(b"secret")
            .chain_update([1, 2, 3, 4, 5, 6, 7, 8])
            .finalize()
            .into();
        assert_eq!(&key[16..], &second);
    }

    #[test]
    fn certs_legacy_malformed_headers_and_bodies() {
        let pass = b"p";
        let sixteen = [0u8; 16];
        assert_eq!(
            decrypt("DES-CBC,0011223344556677", pass, &sixteen),
            Err(Error::Unsupported("DES-CBC".into()))
        );
        assert!(matches!(
            decrypt("AES-128-CBC", pass, &sixteen),
            Err(Error::Malformed(_))
        ));
        assert!(matches!(
            decrypt("AES-128-CBC,zz", pass, &sixteen),
            Err(Error::Malformed(_))
        ));
        // An IV of the wrong length, a body that is not whole blocks, an empty body.
        assert!(matches!(
            decrypt("AES-128-CBC,0011", pass, &sixteen),
            Err(Error::Malformed(_))
        ));
        let iv = "AES-128-CBC,00112233445566778899AABBCCDDEEFF";
        assert!(matches!(
            decrypt(iv, pass, &sixteen[..15]),
            Err(Error::Malformed(_))
        ));
        assert!(matches!(decrypt(iv, pass, &[]), Err(Error::Malformed(_))));
        assert!(matches!(
            decrypt("AES-128-CBC,é1", pass, &sixteen),
            Err(Error::Malformed(_))
        ));
    }
}
