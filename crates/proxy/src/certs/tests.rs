//! `alias_cert` on the fixtures of `tests/data/alias_certs` (made once with OpenSSL 3.0
//! by its `make.sh`; pass phrase `gearlb-test`).

use super::*;
use rustls::pki_types::pem::PemObject;

macro_rules! fx {
    ($name:literal) => {
        include_str!(concat!("../../tests/data/alias_certs/", $name))
    };
}

const PASS: Option<&str> = Some("gearlb-test");
const ALIAS: &str = "www.example.org";

fn ok(cert: &str, key: &str, pass: Option<&str>) -> AliasCert {
    match alias_cert(ALIAS, cert, key, pass) {
        Ok(c) => c,
        Err(e) => panic!("refused: {e}"),
    }
}

fn refused(cert: &str, key: &str, pass: Option<&str>) -> String {
    match alias_cert(ALIAS, cert, key, pass) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => {
            assert!(e.starts_with("alias www.example.org: "), "{e}");
            e["alias www.example.org: ".len()..].to_string()
        }
    }
}

/// The returned PEM is a PKCS#8 key that rustls loads again, with the same public key.
fn reparses(c: &AliasCert) {
    assert!(c.plain_key_pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
    let der = PrivateKeyDer::from_pem_slice(c.plain_key_pem.as_bytes()).unwrap();
    assert!(matches!(der, PrivateKeyDer::Pkcs8(_)));
    let provider = rustls::crypto::ring::default_provider();
    let again = provider.key_provider.load_private_key(der).unwrap();
    assert_eq!(again.public_key(), c.key.key.public_key());
    CertifiedKey::new(c.key.cert.clone(), again)
        .keys_match()
        .unwrap();
}

#[test]
fn certs_every_rsa_key_format_gives_the_same_pkcs8_key() {
    let plain_pkcs8 = fx!("rsa.pk8.key");
    let encrypted = [
        ("PKCS#1", fx!("rsa.key")),
        ("PKCS#8", fx!("rsa.pk8.key")),
        ("legacy DES-EDE3-CBC", fx!("rsa.des3.key")),
        ("legacy AES-128-CBC", fx!("rsa.aes128.key")),
        ("legacy AES-256-CBC", fx!("rsa.aes256.key")),
        ("PBES2 AES-256-CBC HMAC-SHA256", fx!("rsa.pbes2-aes256.key")),
        (
            "PBES2 DES-EDE3-CBC HMAC-SHA1",
            fx!("rsa.pbes2-des3-sha1.key"),
        ),
    ];
    for (what, key) in encrypted {
        let c = ok(fx!("rsa.crt"), key, PASS);
        // OpenSSL's own PKCS#8 of the key, byte for byte.
        assert_eq!(c.plain_key_pem, plain_pkcs8, "{what}");
        assert_eq!(c.names, ["www.example.org", "example.org"], "{what}");
        // `openssl x509 -in rsa.crt -enddate`: Nov 25 10:21:36 2036 GMT.
        assert_eq!(c.not_after, Some(2_111_221_296), "{what}");
        // `openssl x509 -in rsa.crt -outform DER | sha256sum`.
        assert_eq!(
            c.fingerprint,
            "dc4151a5c3ec5bde6c5f7ac9b93cccda1d90696d032cc05d60362538037ef87d"
        );
        assert_eq!(c.key.cert.len(), 1);
        reparses(&c);
    }
}

#[test]
fn certs_ec_keys_plain_and_legacy_encrypted() {
    let plain = ok(fx!("ec.crt"), fx!("ec.key"), None);
    assert_eq!(plain.names, ["shop.example.net"]);
    reparses(&plain);
    for key in [fx!("ec.aes128.key"), fx!("ec.aes192.key")] {
        let c = ok(fx!("ec.crt"), key, PASS);
        assert_eq!(c.plain_key_pem, plain.plain_key_pem);
        reparses(&c);
        assert_eq!(
            refused(fx!("ec.crt"), key, Some("gearlb-tesT")),
            "wrong pass phrase for the private key"
        );
    }
}

#[test]
fn certs_ed25519_and_p384_keys_are_served_p521_is_not() {
    let ed = ok(fx!("ed25519.crt"), fx!("ed25519.key"), None);
    assert_eq!(ed.plain_key_pem, fx!("ed25519.key"));
    reparses(&ed);
    reparses(&ok(fx!("p384.crt"), fx!("p384.key"), None));
    assert_eq!(
        refused(fx!("p521.crt"), fx!("p521.key"), None),
        "EC keys on curve P-521 cannot be served (P-256 or P-384 only)"
    );
}

#[test]
fn certs_a_legacy_key_decrypts_to_what_openssl_decrypts_it_to() {
    let blocks = pem::blocks(fx!("rsa.des3.key")).unwrap();
    let b = &blocks[0];
    let dek = b.header("DEK-Info").unwrap();
    assert!(dek.starts_with("DES-EDE3-CBC,"));
    let plain = legacy::decrypt(dek, b"gearlb-test", &b.der).unwrap();
    // `openssl rsa -in rsa.des3.key -passin pass:gearlb-test -traditional -outform DER`
    assert_eq!(
        &plain[..],
        include_bytes!("../../tests/data/alias_certs/rsa.des3.der")
    );
}

#[test]
fn certs_wrong_or_missing_pass_phrases_are_refused() {
    for key in [
        fx!("rsa.des3.key"),
        fx!("rsa.aes128.key"),
        fx!("rsa.aes256.key"),
        fx!("rsa.pbes2-aes256.key"),
        fx!("rsa.pbes2-des3-sha1.key"),
        fx!("rsa.pbes2-scrypt.key"),
    ] {
        for wrong in ["gearlb-tes", "", "gearlb-test ", "x"] {
            assert_eq!(
                refused(fx!("rsa.crt"), key, Some(wrong)),
                "wrong pass phrase for the private key"
            );
        }
        assert_eq!(
            refused(fx!("rsa.crt"), key, None),
            "the private key is encrypted and no pass phrase was given"
        );
    }
    // A pass phrase for a key that is not encrypted is ignored.
    ok(fx!("rsa.crt"), fx!("rsa.key"), Some("whatever"));
    ok(fx!("ec.crt"), fx!("ec.key"), PASS);
}

#[test]
fn certs_dsa_keys_are_refused() {
    for key in [fx!("dsa.key"), fx!("dsa.pk8.key")] {
        assert_eq!(
            refused(fx!("dsa.crt"), key, PASS),
            "DSA keys cannot be served (RSA, ECDSA or Ed25519 only)"
        );
    }
}

#[test]
fn certs_a_key_that_is_not_the_certificates_is_refused() {
    for (cert, key) in [
        (fx!("rsa.crt"), fx!("other.key")),
        (fx!("ec.crt"), fx!("chain.key")),
        (fx!("rsa.crt"), fx!("ec.key")),
    ] {
        assert_eq!(
            refused(cert, key, None),
            "the private key does not match the certificate"
        );
    }
}

#[test]
fn certs_a_chain_keeps_its_certificates_leaf_first() {
    let c = ok(fx!("chain.crt"), fx!("chain.key"), None);
    assert_eq!(c.key.cert.len(), 2);
    assert_eq!(c.names, ["api.example.org"]);
    let ca = pem::blocks(fx!("ca.crt")).unwrap();
    assert_eq!(c.key.cert[1].as_ref(), &ca[0].der[..]);
    // The CA alone does not go with the leaf's key.
    assert!(alias_cert(ALIAS, fx!("ca.crt"), fx!("chain.key"), None).is_err());
}

#[test]
fn certs_crlf_and_surrounding_whitespace_are_tolerated() {
    let crlf = |s: &str| format!("\r\n  {}  \r\n\r\n", s.replace('\n', "\r\n"));
    let c = ok(&crlf(fx!("rsa.crt")), &crlf(fx!("rsa.aes128.key")), PASS);
    assert_eq!(c.plain_key_pem, fx!("rsa.pk8.key"));
    ok(&crlf(fx!("chain.crt")), &crlf(fx!("chain.key")), None);
    ok(&crlf(fx!("ec.crt")), &crlf(fx!("ec.aes192.key")), PASS);
    ok(
        &crlf(fx!("rsa.crt")),
        &crlf(fx!("rsa.pbes2-des3-sha1.key")),
        PASS,
    );
}

#[test]
fn certs_unsupported_encryptions_and_keys_are_named() {
    let des = fx!("rsa.des3.key").replace("DEK-Info: DES-EDE3-CBC,", "DEK-Info: DES-CBC,");
    assert_eq!(
        refused(fx!("rsa.crt"), &des, PASS),
        "unsupported key encryption DES-CBC (DES-EDE3-CBC or AES-128/192/256-CBC)"
    );
    let e = refused(fx!("rsa.crt"), fx!("rsa.pkcs12-3des.key"), PASS);
    assert!(
        e.starts_with("unsupported key encryption PKCS#12 pbeWithSHAAnd3-KeyTripleDES-CBC"),
        "{e}"
    );
    let e = refused(fx!("rsa.crt"), fx!("rsa.pbes2-iter.key"), PASS);
    assert_eq!(
        e,
        "unsupported key encryption PBKDF2 with 2000000 iterations (at most 1000000)"
    );
    assert_eq!(
        refused(fx!("rsa1024.crt"), fx!("rsa1024.key"), None),
        "RSA keys of 1024 bits cannot be served (2048 to 4096 bits)"
    );
    let ssh = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n";
    assert_eq!(
        refused(fx!("rsa.crt"), ssh, None),
        "unsupported private key format OPENSSH PRIVATE KEY (PEM PKCS#8, PKCS#1 or SEC1)"
    );
}

#[test]
fn certs_missing_or_garbage_input_is_refused() {
    let cert = fx!("rsa.crt");
    let key = fx!("rsa.key");
    assert_eq!(refused("", key, None), "no PEM certificate in ssl");
    assert_eq!(refused(key, key, None), "no PEM certificate in ssl");
    assert_eq!(
        refused(cert, cert, None),
        "no PEM private key in private_key"
    );
    assert_eq!(refused(cert, "", None), "no PEM private key in private_key");
    let two = format!("{key}{}", fx!("other.key"));
    assert_eq!(
        refused(cert, &two, None),
        "several private keys in private_key"
    );
    let bad_cert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    assert!(refused(bad_cert, key, None).starts_with("the first certificate in ssl is not valid"));
    assert_eq!(
        refused(&cert[..cert.len() - 30], key, None),
        "ssl: PEM block CERTIFICATE has no END line"
    );
    let bad_key = "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n";
    assert!(refused(cert, bad_key, None).starts_with("the private key is malformed"));
    let big = format!("{cert}{}", " ".repeat(MAX_PEM));
    assert!(refused(&big, key, None).starts_with("ssl is 66"));
    assert!(refused(cert, &big, None).starts_with("private_key is 66"));
}

/// Never a panic: every key fixture with bytes of its body changed, and cut short.
#[test]
fn certs_mangled_keys_never_panic() {
    let mut rng = fastrand::Rng::with_seed(7);
    let keys = [
        (fx!("rsa.key"), None),
        (fx!("ec.key"), None),
        (fx!("rsa.des3.key"), PASS),
        (fx!("ec.aes128.key"), PASS),
        (fx!("rsa.pbes2-des3-sha1.key"), PASS),
        (fx!("rsa.pk8.key"), None),
        (fx!("dsa.pk8.key"), None),
    ];
    for (key, pass) in keys {
        let blocks = pem::blocks(key).unwrap();
        let b = blocks.last().unwrap();
        let headers: String = b
            .headers
            .iter()
            .map(|(n, v)| format!("{n}: {v}\n"))
            .collect();
        for round in 0..300 {
            let mut der = b.der.to_vec();
            if round % 3 == 0 {
                der.truncate(rng.usize(..der.len()));
            } else {
                for _ in 0..rng.usize(1..4) {
                    let i = rng.usize(..der.len());
                    der[i] = rng.u8(..);
                }
            }
            let body = pem::encode(&b.label, &der);
            let text = match body.split_once('\n') {
                Some((begin, rest)) if !headers.is_empty() => format!("{begin}\n{headers}\n{rest}"),
                _ => body.to_string(),
            };
            let _ = alias_cert(ALIAS, fx!("rsa.crt"), &text, pass);
        }
    }
}
