//! An alias's certificate as an application owner uploaded it (the broker's `add_ssl`:
//! a PEM certificate chain, a PEM private key maybe encrypted, a pass phrase), checked
//! and made ready to serve: [`alias_cert`]. Everything is decided here, at ingest,
//! never in a handshake ([`crate::tls::AliasCerts`] serves the result by SNI).
//!
//! Keys: `PRIVATE KEY` (PKCS#8), `RSA PRIVATE KEY` (PKCS#1), `EC PRIVATE KEY` (SEC1),
//! OpenSSL's legacy encryption of the last two (`legacy`), `ENCRYPTED PRIVATE KEY`
//! (PKCS#8 PBES2, `encrypted`); what can be served is `keys`' rule (DSA is refused).
//! The key must match the leaf certificate's public key. Every refusal names the alias
//! and says what is wrong. The input comes from the network: it is bounded
//! ([`MAX_PEM`] per field, bounded key derivation), and nothing here panics.

mod encrypted;
mod keys;
mod legacy;
mod pem;
mod x509;

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// Largest PEM text accepted for the certificate chain, and for the key.
pub const MAX_PEM: usize = 64 * 1024;

/// An alias's certificate as served: the rustls key, and the key as plain PEM (PKCS#8)
/// for persistence.
#[derive(Clone)]
pub struct AliasCert {
    /// The chain (leaf first) and its signing key, for [`crate::tls::AliasCerts`].
    pub key: Arc<CertifiedKey>,
    /// The private key, decrypted, as `-----BEGIN PRIVATE KEY-----` (PKCS#8): what is
    /// served, to store (mode 0600) in place of the upload and its pass phrase.
    pub plain_key_pem: String,
    /// The DNS names (and `*.domain` wildcards) in the leaf's subject alternative
    /// names, lower-cased.
    pub names: Vec<String>,
    /// The leaf's `notAfter`, unix seconds.
    pub not_after: Option<u64>,
    /// SHA-256 of the leaf's DER, lower-case hex.
    pub fingerprint: String,
}

impl std::fmt::Debug for AliasCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AliasCert")
            .field("names", &self.names)
            .field("not_after", &self.not_after)
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

impl Drop for AliasCert {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.plain_key_pem);
    }
}

/// Check and decrypt alias `alias`'s upload: `cert_pem` (the chain, leaf first),
/// `key_pem` (maybe encrypted) and its `pass_phrase` (ignored for a plain key). The
/// error says, after `alias <alias>: `, what is wrong.
pub fn alias_cert(
    alias: &str,
    cert_pem: &str,
    key_pem: &str,
    pass_phrase: Option<&str>,
) -> Result<AliasCert, String> {
    ingest(cert_pem, key_pem, pass_phrase).map_err(|e| format!("alias {alias}: {e}"))
}

fn ingest(cert_pem: &str, key_pem: &str, pass: Option<&str>) -> Result<AliasCert, String> {
    for (what, text) in [("ssl", cert_pem), ("private_key", key_pem)] {
        if text.len() > MAX_PEM {
            return Err(format!(
                "{what} is {} bytes, more than the {MAX_PEM} accepted",
                text.len()
            ));
        }
    }
    let chain: Vec<CertificateDer<'static>> = pem::blocks(cert_pem)
        .map_err(|e| format!("ssl: {e}"))?
        .into_iter()
        .filter(|b| b.label == "CERTIFICATE")
        .map(|b| CertificateDer::from(b.der.to_vec()))
        .collect();
    let Some(leaf) = chain.first() else {
        return Err("no PEM certificate in ssl".into());
    };
    let names: Vec<String> = match webpki::EndEntityCert::try_from(leaf) {
        Ok(ee) => ee.valid_dns_names().map(str::to_ascii_lowercase).collect(),
        Err(e) => return Err(format!("the first certificate in ssl is not valid: {e:?}")),
    };
    let leaf_info = x509::read(leaf);
    let fingerprint = hex(&Sha256::digest(leaf.as_ref()));
    let pkcs8 = private_key(key_pem, pass, leaf_info.key_param)?;

    let provider = rustls::crypto::ring::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            pkcs8.to_vec(),
        )))
        .map_err(|e| format!("the private key cannot be used: {e}"))?;
    let key = CertifiedKey::new(chain, signing);
    match key.keys_match() {
        Ok(()) => {}
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            return Err("the private key does not match the certificate".into())
        }
        Err(e) => {
            return Err(format!(
                "cannot check that the private key matches the certificate: {e}"
            ))
        }
    }
    Ok(AliasCert {
        key: Arc::new(key),
        plain_key_pem: pem::encode("PRIVATE KEY", &pkcs8).to_string(),
        names,
        not_after: leaf_info.not_after,
        fingerprint,
    })
}

/// The one private key of `key_pem`, decrypted with `pass` if it must be, as PKCS#8
/// DER. `cert_curve`: the certificate's key parameter (see [`keys::to_pkcs8`]).
fn private_key(
    key_pem: &str,
    pass: Option<&str>,
    cert_curve: Option<pkcs8::der::asn1::ObjectIdentifier>,
) -> Result<Zeroizing<Vec<u8>>, String> {
    let mut blocks: Vec<pem::Block> = pem::blocks(key_pem)
        .map_err(|e| format!("private_key: {e}"))?
        .into_iter()
        .filter(|b| b.label.ends_with("PRIVATE KEY"))
        .collect();
    let block = match (blocks.pop(), blocks.is_empty()) {
        (None, _) => return Err("no PEM private key in private_key".into()),
        (Some(b), true) => b,
        (Some(_), false) => return Err("several private keys in private_key".into()),
    };
    let need_pass = || pass.ok_or("the private key is encrypted and no pass phrase was given");
    let legacy_encrypted = block
        .header("Proc-Type")
        .is_some_and(|v| v.to_ascii_uppercase().contains("ENCRYPTED"));
    let (format, plain) = match block.label.as_str() {
        "DSA PRIVATE KEY" => return Err(dsa()),
        "PRIVATE KEY" | "RSA PRIVATE KEY" | "EC PRIVATE KEY" => {
            let format = match block.label.as_str() {
                "RSA PRIVATE KEY" => keys::Format::Pkcs1,
                "EC PRIVATE KEY" => keys::Format::Sec1,
                _ => keys::Format::Pkcs8,
            };
            if legacy_encrypted {
                let dek = block
                    .header("DEK-Info")
                    .ok_or("the private key is encrypted but has no DEK-Info header")?;
                let plain =
                    legacy::decrypt(dek, need_pass()?.as_bytes(), &block.der).map_err(|e| {
                        match e {
                            legacy::Error::Unsupported(c) => {
                                format!("unsupported key encryption {c} (DES-EDE3-CBC or AES-128/192/256-CBC)")
                            }
                            legacy::Error::Malformed(m) => {
                                format!("the encrypted private key is malformed: {m}")
                            }
                            legacy::Error::WrongPassPhrase => wrong_pass(),
                        }
                    })?;
                (format, plain)
            } else {
                (format, block.der)
            }
        }
        "ENCRYPTED PRIVATE KEY" => {
            let plain =
                encrypted::decrypt(&block.der, need_pass()?.as_bytes()).map_err(|e| match e {
                    encrypted::Error::Unsupported(what) => {
                        format!("unsupported key encryption {what}")
                    }
                    encrypted::Error::Malformed(m) => {
                        format!("the encrypted private key is malformed: {m}")
                    }
                    encrypted::Error::WrongPassPhrase => wrong_pass(),
                })?;
            (keys::Format::Pkcs8, plain)
        }
        other => {
            return Err(format!(
                "unsupported private key format {other} (PEM PKCS#8, PKCS#1 or SEC1)"
            ))
        }
    };
    keys::to_pkcs8(format, &plain, cert_curve).map_err(|e| match e {
        keys::Error::Dsa => dsa(),
        keys::Error::Unservable(why) => why,
        keys::Error::Malformed(m) => format!("the private key is malformed: {m}"),
    })
}

fn dsa() -> String {
    "DSA keys cannot be served (RSA, ECDSA or Ed25519 only)".into()
}

fn wrong_pass() -> String {
    "wrong pass phrase for the private key".into()
}

/// Lower-case hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

#[cfg(test)]
mod tests;
