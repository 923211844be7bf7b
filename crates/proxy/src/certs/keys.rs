//! A decrypted private key made PKCS#8 (what is served and persisted), and which keys
//! can be served: what ring signs with, RSA of 2048 to 4096 bits with an exponent of
//! 65537 or more, ECDSA on P-256 or P-384, and Ed25519. DSA (which the broker
//! accepted) and anything else is refused by name, before rustls sees it.
//!
//! PKCS#1 (`RSA PRIVATE KEY`) and SEC1 (`EC PRIVATE KEY`) keys are wrapped in a PKCS#8
//! `PrivateKeyInfo` as rustls does itself (RFC 5208, RFC 5915 §2): the algorithm
//! identifier outside, the key as it is inside.

use pkcs8::der::asn1::{AnyRef, ObjectIdentifier, OctetStringRef, UintRef};
use pkcs8::der::{Decode, Encode, Reader, SliceReader, Tag, TagNumber};
use pkcs8::spki::AlgorithmIdentifierRef;
use pkcs8::PrivateKeyInfo;
use zeroize::Zeroizing;

const RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
const EC: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");
const DSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10040.4.1");
const P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");

/// How a plain key is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `PRIVATE KEY`
    Pkcs8,
    /// `RSA PRIVATE KEY`
    Pkcs1,
    /// `EC PRIVATE KEY`
    Sec1,
}

/// Why a key cannot be served.
#[derive(Debug, PartialEq, Eq)]
pub enum Error {
    Dsa,
    /// A key of a kind, size or curve that cannot be served: why.
    Unservable(String),
    /// Not a key in the format its label says.
    Malformed(String),
}

/// `der` (a plain key in `format`) as PKCS#8 DER, if it can be served. `cert_curve`
/// (the certificate's) names the curve of a SEC1 key that does not name its own.
pub fn to_pkcs8(
    format: Format,
    der: &[u8],
    cert_curve: Option<ObjectIdentifier>,
) -> Result<Zeroizing<Vec<u8>>, Error> {
    let malformed = |what: &str, e: pkcs8::der::Error| Error::Malformed(format!("{what}: {e}"));
    match format {
        Format::Pkcs8 => {
            let pki = PrivateKeyInfo::from_der(der)
                .map_err(|e| Error::Malformed(format!("not a PKCS#8 private key: {e}")))?;
            let alg = pki.algorithm;
            if alg.oid == RSA {
                rsa_check(pki.private_key)?;
            } else if alg.oid == EC {
                let curve = alg
                    .parameters
                    .and_then(|p| p.decode_as::<ObjectIdentifier>().ok());
                curve_check(curve)?;
            } else if alg.oid == DSA {
                return Err(Error::Dsa);
            } else if alg.oid != ED25519 {
                return Err(Error::Unservable(format!(
                    "keys of algorithm {} cannot be served (RSA, ECDSA or Ed25519 only)",
                    alg.oid
                )));
            }
            Ok(Zeroizing::new(der.to_vec()))
        }
        Format::Pkcs1 => {
            rsa_check(der)?;
            wrap(RSA, Some(AnyRef::NULL), der)
        }
        Format::Sec1 => {
            let own = sec1_curve(der).map_err(|e| malformed("not an EC private key", e))?;
            let curve = match own {
                Sec1Curve::Named(c) => Some(c),
                Sec1Curve::Explicit => {
                    return Err(Error::Unservable(
                        "EC keys with explicit curve parameters cannot be served (named curves P-256 or P-384 only)".into(),
                    ))
                }
                Sec1Curve::Absent => cert_curve,
            };
            let curve = curve_check(curve)?;
            let param = AnyRef::new(Tag::ObjectIdentifier, curve.as_bytes())
                .map_err(|e| malformed("EC curve", e))?;
            wrap(EC, Some(param), der)
        }
    }
}

/// A PKCS#8 `PrivateKeyInfo` of algorithm `oid` around `key`.
fn wrap(
    oid: ObjectIdentifier,
    parameters: Option<AnyRef<'_>>,
    key: &[u8],
) -> Result<Zeroizing<Vec<u8>>, Error> {
    let pki = PrivateKeyInfo {
        algorithm: AlgorithmIdentifierRef { oid, parameters },
        private_key: key,
        public_key: None,
    };
    pki.to_der()
        .map(Zeroizing::new)
        .map_err(|e| Error::Malformed(format!("cannot encode as PKCS#8: {e}")))
}

/// An RSA key (PKCS#1 `RSAPrivateKey`) that ring can sign with.
fn rsa_check(pkcs1: &[u8]) -> Result<(), Error> {
    let read = |der: &[u8]| -> pkcs8::der::Result<(usize, u64)> {
        let mut r = SliceReader::new(der)?;
        let ne = r.sequence(|key| {
            UintRef::decode(key)?; // version
            let n = UintRef::decode(key)?;
            let e = UintRef::decode(key)?;
            while !key.is_finished() {
                key.tlv_bytes()?;
            }
            Ok((n, e))
        })?;
        let (n, e) = r.finish(ne)?;
        let n = n.as_bytes();
        let bits = match n.first() {
            Some(top) => n.len() * 8 - top.leading_zeros() as usize,
            None => 0,
        };
        let e = e
            .as_bytes()
            .iter()
            .try_fold(0u64, |acc, b| {
                acc.checked_mul(256).map(|a| a | u64::from(*b))
            })
            .unwrap_or(u64::MAX);
        Ok((bits, e))
    };
    let (bits, e) =
        read(pkcs1).map_err(|e| Error::Malformed(format!("not an RSA private key: {e}")))?;
    if !(2048..=4096).contains(&bits) {
        return Err(Error::Unservable(format!(
            "RSA keys of {bits} bits cannot be served (2048 to 4096 bits)"
        )));
    }
    if e < 65537 {
        return Err(Error::Unservable(format!(
            "RSA keys with public exponent {e} cannot be served (65537 or more)"
        )));
    }
    Ok(())
}

/// `curve` if ring signs on it.
fn curve_check(curve: Option<ObjectIdentifier>) -> Result<ObjectIdentifier, Error> {
    match curve {
        Some(c) if c == P256 || c == P384 => Ok(c),
        Some(c) => Err(Error::Unservable(format!(
            "EC keys on curve {} cannot be served (P-256 or P-384 only)",
            curve_name(c)
        ))),
        None => Err(Error::Unservable(
            "the EC key names no curve, nor does the certificate".into(),
        )),
    }
}

fn curve_name(c: ObjectIdentifier) -> String {
    match c.to_string().as_str() {
        "1.3.132.0.35" => "P-521".into(),
        "1.3.132.0.10" => "secp256k1".into(),
        "1.2.840.10045.3.1.1" => "P-192".into(),
        "1.3.132.0.33" => "P-224".into(),
        other => other.into(),
    }
}

enum Sec1Curve {
    Named(ObjectIdentifier),
    Explicit,
    Absent,
}

/// The curve a SEC1 `ECPrivateKey` names in its `[0] parameters`.
fn sec1_curve(der: &[u8]) -> pkcs8::der::Result<Sec1Curve> {
    let mut r = SliceReader::new(der)?;
    let curve = r.sequence(|key| {
        UintRef::decode(key)?; // version 1
        OctetStringRef::decode(key)?; // the private key
        let mut curve = Sec1Curve::Absent;
        while !key.is_finished() {
            let tag = key.peek_tag()?;
            let field = AnyRef::decode(key)?;
            let params = Tag::ContextSpecific {
                constructed: true,
                number: TagNumber::N0,
            };
            if tag == params {
                curve = match ObjectIdentifier::from_der(field.value()) {
                    Ok(oid) => Sec1Curve::Named(oid),
                    Err(_) => Sec1Curve::Explicit,
                };
            }
        }
        Ok(curve)
    })?;
    r.finish(curve)
}
