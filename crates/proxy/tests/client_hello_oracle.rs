//! gearlb's ClientHello parser (`gearlb_core::wire::client_hello`, which TCP mode routes
//! on without terminating TLS) against rustls, on the hellos rustls's own client writes:
//! for each, the name `parse` finds is the one `rustls::server::Acceptor` finds, whether
//! the hello arrives whole, one byte at a time, or re-framed into several records.
//! gearlb-core cannot depend on rustls, hence this test lives here.

use std::sync::Arc;

use gearlb_core::wire::client_hello::{parse, Hello, MAX_HELLO};
use rustls::crypto::{ring, ActiveKeyExchange, CryptoProvider, SharedSecret, SupportedKxGroup};
use rustls::pki_types::ServerName;
use rustls::server::Acceptor;
use rustls::{ClientConfig, ClientConnection, NamedGroup, RootCertStore};

/// A client configuration (ring, the default protocol versions, no roots: only the hello
/// is wanted), adjusted by `adjust`.
fn config_with(
    provider: CryptoProvider,
    adjust: impl FnOnce(&mut ClientConfig),
) -> Arc<ClientConfig> {
    let mut config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default versions")
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    adjust(&mut config);
    Arc::new(config)
}

fn config(adjust: impl FnOnce(&mut ClientConfig)) -> Arc<ClientConfig> {
    config_with(ring::default_provider(), adjust)
}

/// The bytes a rustls client sends first, connecting to `name`.
fn hello(config: Arc<ClientConfig>, name: &str) -> Vec<u8> {
    let name = ServerName::try_from(name.to_owned()).expect("a valid server name");
    let mut client = ClientConnection::new(config, name).expect("a client");
    let mut out = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut out).expect("writes to a Vec");
    }
    out
}

/// rustls's server-side verdict on `bytes`: `None` while it wants more, else the SNI it
/// reports (lowercased by rustls) or its error.
fn rustls_sni(bytes: &[u8]) -> Option<Result<Option<String>, rustls::Error>> {
    let mut acceptor = Acceptor::default();
    let mut rest = bytes;
    while !rest.is_empty() {
        acceptor.read_tls(&mut rest).expect("the Acceptor reads");
    }
    match acceptor.accept() {
        Ok(None) => None,
        Ok(Some(accepted)) => Some(Ok(accepted.client_hello().server_name().map(str::to_owned))),
        Err((e, _alert)) => Some(Err(e)),
    }
}

/// The payloads of `records` (all handshake records).
fn payloads(records: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = records;
    while !rest.is_empty() {
        assert_eq!(rest[0], 0x16, "a handshake record");
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        out.push(&rest[5..5 + len]);
        rest = &rest[5 + len..];
    }
    out
}

/// The handshake payload of `records` re-framed into `n` records of about equal size.
fn reframe(records: &[u8], n: usize) -> Vec<u8> {
    let payload = payloads(records).concat();
    let mut out = Vec::new();
    for piece in payload.chunks(payload.len().div_ceil(n)) {
        let len = u16::try_from(piece.len()).unwrap().to_be_bytes();
        out.extend_from_slice(&[0x16, 3, 1, len[0], len[1]]);
        out.extend_from_slice(piece);
    }
    out
}

/// Both parsers agree on `bytes`, whole and re-framed, and on every prefix neither
/// decides; gearlb's name is `expected`.
fn assert_agree(bytes: &[u8], expected: Option<&str>) {
    let want = Hello::Complete {
        sni: expected.map(str::to_owned),
    };
    assert_eq!(parse(bytes), want);
    assert_eq!(
        rustls_sni(bytes)
            .expect("rustls decides")
            .expect("rustls accepts"),
        expected.map(str::to_owned)
    );
    for n in 0..bytes.len() {
        assert_eq!(parse(&bytes[..n]), Hello::Incomplete, "gearlb, prefix {n}");
        assert!(rustls_sni(&bytes[..n]).is_none(), "rustls, prefix {n}");
    }
    let seven = reframe(bytes, 7);
    assert_eq!(payloads(&seven).len(), 7);
    assert_eq!(parse(&seven), want, "seven records");
    assert_eq!(
        rustls_sni(&seven)
            .expect("rustls decides")
            .expect("rustls accepts"),
        expected.map(str::to_owned),
        "seven records"
    );
    for n in (0..seven.len()).step_by(13) {
        assert_eq!(
            parse(&seven[..n]),
            Hello::Incomplete,
            "seven records, prefix {n}"
        );
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn upper_case_name_is_sent_as_is_and_both_lowercase_it() {
    let bytes = hello(config(|_| {}), "App.Example.COM");
    assert!(
        contains(&bytes, b"App.Example.COM"),
        "rustls keeps the case on the wire"
    );
    assert_agree(&bytes, Some("app.example.com"));
}

#[test]
fn trailing_dot_is_removed_by_the_rustls_client() {
    let bytes = hello(config(|_| {}), "app.example.com.");
    assert!(
        !contains(&bytes, b"app.example.com."),
        "rustls strips the dot"
    );
    assert_agree(&bytes, Some("app.example.com"));
}

#[test]
fn no_name_without_sni() {
    let bytes = hello(config(|c| c.enable_sni = false), "app.example.com");
    assert_agree(&bytes, None);
    // rustls never sends an IP address as a server name.
    let bytes = hello(config(|_| {}), "192.0.2.7");
    assert_agree(&bytes, None);
}

#[test]
fn tls12_only_and_alpn_hellos_agree() {
    let tls12 = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS12])
        .expect("ring supports TLS 1.2")
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    assert_agree(&hello(Arc::new(tls12), "old.example"), Some("old.example"));
    let alpn = config(|c| c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
    assert_agree(&hello(alpn, "h2.example"), Some("h2.example"));
}

#[test]
fn hello_fragmented_by_rustls_itself_agrees() {
    let bytes = hello(
        config(|c| c.max_fragment_size = Some(64)),
        "frag.example.org",
    );
    let records = payloads(&bytes).len();
    assert!(records > 3, "{records} records");
    assert_agree(&bytes, Some("frag.example.org"));
}

/// A stand-in for X25519MLKEM768 (which rustls's ring provider does not offer): the
/// same group id and a key share of the real size (1184 + 32 bytes), so the hello has
/// the size post-quantum hybrids give it, more than one TCP segment.
#[derive(Debug)]
struct FakeMlKem;

struct FakeShare(Vec<u8>);

impl SupportedKxGroup for FakeMlKem {
    fn start(&self) -> Result<Box<dyn ActiveKeyExchange>, rustls::Error> {
        Ok(Box::new(FakeShare(vec![0x42; 1184 + 32])))
    }

    fn name(&self) -> NamedGroup {
        NamedGroup::X25519MLKEM768
    }
}

impl ActiveKeyExchange for FakeShare {
    fn complete(self: Box<Self>, _peer: &[u8]) -> Result<SharedSecret, rustls::Error> {
        Err(rustls::Error::General("a stand-in key exchange".into()))
    }

    fn pub_key(&self) -> &[u8] {
        &self.0
    }

    fn group(&self) -> NamedGroup {
        NamedGroup::X25519MLKEM768
    }
}

#[test]
fn post_quantum_sized_hello_agrees() {
    assert!(
        !ring::default_provider()
            .kx_groups
            .iter()
            .any(|g| g.name() == NamedGroup::X25519MLKEM768),
        "ring now offers X25519MLKEM768: use it instead of the stand-in"
    );
    static FAKE: FakeMlKem = FakeMlKem;
    let mut provider = ring::default_provider();
    provider.kx_groups.insert(0, &FAKE);
    let bytes = hello(config_with(provider, |_| {}), "pq.example.net");
    assert!(
        bytes.len() > 1400 && bytes.len() < MAX_HELLO,
        "{} bytes",
        bytes.len()
    );
    assert_agree(&bytes, Some("pq.example.net"));
}

/// Mutated rustls hellos: whenever both gearlb and rustls accept one, they read the same
/// name (rustls keeps a trailing dot, gearlb removes it), so TCP mode never routes on a
/// name other than the one a TLS backend sees. Elsewhere they may differ: gearlb decides
/// once the hello's last byte is in (rustls waits for the end of its record), checks no
/// extension but server_name, and refuses some hellos rustls takes (a client version
/// whose major is not 3, bytes after the host name it cannot frame).
#[test]
fn mutated_hellos_never_yield_another_name_than_rustls_reads() {
    let base = hello(config(|_| {}), "App.Example.COM");
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut both = 0;
    for _ in 0..20_000 {
        let mut buf = base.clone();
        for _ in 0..1 + next() % 3 {
            let i = (next() % buf.len() as u64) as usize;
            buf[i] = match next() % 3 {
                0 => next() as u8,
                1 => buf[i].wrapping_add(1),
                _ => buf[i].wrapping_sub(1),
            };
        }
        if let (Some(Ok(theirs)), Hello::Complete { sni: ours }) = (rustls_sni(&buf), parse(&buf)) {
            let theirs = theirs.map(|n| n.strip_suffix('.').unwrap_or(&n).to_owned());
            assert_eq!(ours, theirs, "{buf:02x?}");
            both += 1;
        }
    }
    assert!(both > 1000, "only {both} mutants accepted by both");
}
