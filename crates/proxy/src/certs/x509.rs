//! What an alias certificate tells beyond its names (those come from webpki): when it
//! expires, and the curve of its EC key (for an EC key that does not name its own).
//! A walk over the leaf's DER with the `der` crate; anything unexpected is `None`.

use pkcs8::der::asn1::{AnyRef, GeneralizedTime, ObjectIdentifier, UtcTime};
use pkcs8::der::{Decode, Reader, SliceReader, Tag, TagNumber, Tagged};
use pkcs8::spki::AlgorithmIdentifierRef;

/// The leaf certificate's `notAfter` (unix seconds) and its key's algorithm parameter
/// when that is an OID (an EC key's named curve).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Leaf {
    pub not_after: Option<u64>,
    pub key_param: Option<ObjectIdentifier>,
}

/// Read `der`, a certificate; `Leaf::default()` when it is not one.
pub fn read(der: &[u8]) -> Leaf {
    walk(der).unwrap_or_default()
}

fn walk(der: &[u8]) -> pkcs8::der::Result<Leaf> {
    let mut reader = SliceReader::new(der)?;
    let leaf = reader.sequence(|cert| {
        let leaf = cert.sequence(|tbs| {
            let v0 = Tag::ContextSpecific {
                constructed: true,
                number: TagNumber::N0,
            };
            if tbs.peek_tag()? == v0 {
                tbs.tlv_bytes()?; // version
            }
            tbs.tlv_bytes()?; // serialNumber
            tbs.tlv_bytes()?; // signature
            tbs.tlv_bytes()?; // issuer
            let not_after = tbs.sequence(|validity| {
                validity.tlv_bytes()?; // notBefore
                let t = AnyRef::decode(validity)?;
                Ok(match t.tag() {
                    Tag::UtcTime => UtcTime::try_from(t).ok().map(|t| t.to_unix_duration()),
                    Tag::GeneralizedTime => GeneralizedTime::try_from(t)
                        .ok()
                        .map(|t| t.to_unix_duration()),
                    _ => None,
                }
                .map(|d| d.as_secs()))
            })?;
            tbs.tlv_bytes()?; // subject
            let key_param = tbs.sequence(|spki| {
                let alg = AlgorithmIdentifierRef::decode(spki)?;
                spki.tlv_bytes()?; // subjectPublicKey
                Ok(alg
                    .parameters
                    .and_then(|p| p.decode_as::<ObjectIdentifier>().ok()))
            })?;
            while !tbs.is_finished() {
                tbs.tlv_bytes()?; // unique ids, extensions
            }
            Ok(Leaf {
                not_after,
                key_param,
            })
        })?;
        while !cert.is_finished() {
            cert.tlv_bytes()?; // signatureAlgorithm, signatureValue
        }
        Ok(leaf)
    })?;
    reader.finish(leaf)
}
