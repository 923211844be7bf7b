//! Encrypted PKCS#8 keys (`ENCRYPTED PRIVATE KEY`): PBES2 (RFC 8018) with PBKDF2 (HMAC
//! with SHA-1 or SHA-2) or scrypt, and AES-128/192/256-CBC or DES-EDE3-CBC, through the
//! `pkcs8` crate. That covers what OpenSSL 1.1+ writes (AES-256-CBC, HMAC-SHA256) and
//! OpenSSL 1.0's `-v2 des3` (HMAC-SHA1). PBES1 and PKCS#12 schemes (OpenSSL 1.0's
//! `openssl pkcs8 -topk8` default) are refused by name.
//!
//! The work an upload can ask for is bounded: at most [`MAX_ITERATIONS`] PBKDF2 rounds,
//! and scrypt at most [`MAX_SCRYPT_BYTES`] of memory with a parallelization of 4.

use pkcs8::der::asn1::{ObjectIdentifier, OctetStringRef};
use pkcs8::der::{Decode, Reader, SliceReader};
use pkcs8::pkcs5::pbes2::{self, Kdf};
use pkcs8::spki::AlgorithmIdentifierRef;
use zeroize::Zeroizing;

/// Most PBKDF2 iterations decrypted (OpenSSL writes 2048; about a second of work).
pub const MAX_ITERATIONS: u32 = 1_000_000;
/// Most memory scrypt may take (128 · r · N bytes); its parallelization is at most 4.
pub const MAX_SCRYPT_BYTES: u64 = 64 * 1024 * 1024;

/// Why an encrypted PKCS#8 key cannot be decrypted.
#[derive(Debug, PartialEq, Eq)]
pub enum Error {
    /// A scheme, cipher or key derivation not decrypted here, by name.
    Unsupported(String),
    Malformed(String),
    WrongPassPhrase,
}

/// The plain PKCS#8 DER of the `EncryptedPrivateKeyInfo` `der`.
pub fn decrypt(der: &[u8], pass: &[u8]) -> Result<Zeroizing<Vec<u8>>, Error> {
    let malformed = |e: pkcs8::der::Error| Error::Malformed(e.to_string());
    let mut reader = SliceReader::new(der).map_err(malformed)?;
    let (alg, data) = reader
        .sequence(|r| {
            let alg = AlgorithmIdentifierRef::decode(r)?;
            let data = OctetStringRef::decode(r)?;
            Ok((alg, data))
        })
        .map_err(malformed)?;
    reader.finish(()).map_err(malformed)?;
    if alg.oid != pbes2::PBES2_OID {
        return Err(Error::Unsupported(format!(
            "{} (only PBES2 is decrypted: convert the key with `openssl pkcs8 -topk8 -v2 aes-256-cbc`)",
            name(alg.oid)
        )));
    }
    let Some(params) = alg.parameters else {
        return Err(Error::Malformed("PBES2 without parameters".into()));
    };
    // The key derivation and the cipher by name first, for a clear refusal.
    let (kdf, cipher) = params
        .sequence(|r| {
            let kdf = AlgorithmIdentifierRef::decode(r)?;
            let cipher = AlgorithmIdentifierRef::decode(r)?;
            Ok((kdf.oid, cipher.oid))
        })
        .map_err(malformed)?;
    if kdf != pbes2::PBKDF2_OID && kdf != pbes2::SCRYPT_OID {
        return Err(Error::Unsupported(format!("PBES2 with {}", name(kdf))));
    }
    if ![
        pbes2::AES_128_CBC_OID,
        pbes2::AES_192_CBC_OID,
        pbes2::AES_256_CBC_OID,
        pbes2::DES_EDE3_CBC_OID,
    ]
    .contains(&cipher)
    {
        return Err(Error::Unsupported(name(cipher)));
    }
    let params = pbes2::Parameters::try_from(params).map_err(|e| {
        Error::Unsupported(format!(
            "PBES2 {} with {}: parameters not supported ({e})",
            name(kdf),
            name(cipher)
        ))
    })?;
    match &params.kdf {
        Kdf::Pbkdf2(p) if p.iteration_count > MAX_ITERATIONS => {
            return Err(Error::Unsupported(format!(
                "PBKDF2 with {} iterations (at most {MAX_ITERATIONS})",
                p.iteration_count
            )))
        }
        Kdf::Scrypt(s) => {
            let bytes = 128u64
                .saturating_mul(u64::from(s.block_size))
                .saturating_mul(s.cost_parameter);
            if bytes > MAX_SCRYPT_BYTES || s.parallelization > 4 {
                return Err(Error::Unsupported(format!(
                    "scrypt with N={} r={} p={} (at most {} MiB, p 4)",
                    s.cost_parameter,
                    s.block_size,
                    s.parallelization,
                    MAX_SCRYPT_BYTES >> 20
                )));
            }
        }
        _ => {}
    }
    let mut buf = Zeroizing::new(data.as_bytes().to_vec());
    let len = match params.decrypt_in_place(pass, &mut buf) {
        Ok(plain) => plain.len(),
        // Bad padding: pkcs5 0.7 reports it as `EncryptFailed`.
        Err(pkcs8::pkcs5::Error::DecryptFailed | pkcs8::pkcs5::Error::EncryptFailed) => {
            return Err(Error::WrongPassPhrase)
        }
        Err(pkcs8::pkcs5::Error::UnsupportedAlgorithm { oid }) => {
            return Err(Error::Unsupported(name(oid)))
        }
        Err(e) => return Err(Error::Unsupported(format!("PBES2: {e}"))),
    };
    buf.truncate(len);
    // Padding that happens to be right with a wrong pass phrase leaves garbage.
    match pkcs8::PrivateKeyInfo::from_der(&buf) {
        Ok(_) => Ok(buf),
        Err(_) => Err(Error::WrongPassPhrase),
    }
}

/// A readable name for the algorithm `oid`, else the OID itself.
fn name(oid: ObjectIdentifier) -> String {
    let known = match oid.to_string().as_str() {
        "1.2.840.113549.1.5.1" => "PBES1 pbeWithMD2AndDES-CBC",
        "1.2.840.113549.1.5.3" => "PBES1 pbeWithMD5AndDES-CBC",
        "1.2.840.113549.1.5.4" => "PBES1 pbeWithMD2AndRC2-CBC",
        "1.2.840.113549.1.5.6" => "PBES1 pbeWithMD5AndRC2-CBC",
        "1.2.840.113549.1.5.10" => "PBES1 pbeWithSHA1AndDES-CBC",
        "1.2.840.113549.1.5.11" => "PBES1 pbeWithSHA1AndRC2-CBC",
        "1.2.840.113549.1.12.1.1" => "PKCS#12 pbeWithSHAAnd128BitRC4",
        "1.2.840.113549.1.12.1.2" => "PKCS#12 pbeWithSHAAnd40BitRC4",
        "1.2.840.113549.1.12.1.3" => "PKCS#12 pbeWithSHAAnd3-KeyTripleDES-CBC",
        "1.2.840.113549.1.12.1.4" => "PKCS#12 pbeWithSHAAnd2-KeyTripleDES-CBC",
        "1.2.840.113549.1.12.1.5" => "PKCS#12 pbeWithSHAAnd128BitRC2-CBC",
        "1.2.840.113549.1.12.1.6" => "PKCS#12 pbeWithSHAAnd40BitRC2-CBC",
        "1.2.840.113549.1.5.12" => "PBKDF2",
        "1.3.6.1.4.1.11591.4.11" => "scrypt",
        "1.3.14.3.2.7" => "DES-CBC",
        "1.2.840.113549.3.2" => "RC2-CBC",
        "1.2.840.113549.3.7" => "DES-EDE3-CBC",
        "2.16.840.1.101.3.4.1.2" => "AES-128-CBC",
        "2.16.840.1.101.3.4.1.22" => "AES-192-CBC",
        "2.16.840.1.101.3.4.1.42" => "AES-256-CBC",
        "2.16.840.1.101.3.4.1.6" => "AES-128-GCM",
        "2.16.840.1.101.3.4.1.46" => "AES-256-GCM",
        _ => "",
    };
    if known.is_empty() {
        format!("algorithm {oid}")
    } else {
        known.to_string()
    }
}
