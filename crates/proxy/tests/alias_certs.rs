//! Runtime alias certificates over real sockets: a listener whose `[tls]` default is
//! the platform's wildcard `*.example.com` gets an alias certificate for
//! `www.example.org` while it serves, and loses it again, without a restart and
//! without disturbing connections already open. Fixtures: `tests/data/alias_certs`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use gearlb_core::config::TlsConfig;
use gearlb_proxy::certs::alias_cert;
use gearlb_proxy::tls::{load_with, AliasCerts, Resumption, TlsAcceptor};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::client::TlsStream;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/alias_certs")
        .join(name)
}

fn text(name: &str) -> String {
    std::fs::read_to_string(data(name)).unwrap()
}

/// The leaf certificate of a PEM file.
fn leaf(name: &str) -> CertificateDer<'static> {
    CertificateDer::pem_file_iter(data(name))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
}

/// Any certificate is trusted, but the handshake's signature must be made with its key.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algs)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

struct Client(tokio_rustls::TlsConnector);

impl Client {
    fn new() -> Client {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        // Every connection a full handshake: a resumed one shows the old certificate.
        config.resumption = rustls::client::Resumption::disabled();
        Client(tokio_rustls::TlsConnector::from(Arc::new(config)))
    }

    /// A connection asking for `name`, and the chain the server presented.
    async fn connect(
        &self,
        addr: SocketAddr,
        name: &str,
    ) -> (TlsStream<TcpStream>, Vec<CertificateDer<'static>>) {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let tls = self
            .0
            .connect(ServerName::try_from(name.to_string()).unwrap(), tcp)
            .await
            .unwrap();
        let chain = tls.get_ref().1.peer_certificates().unwrap().to_vec();
        (tls, chain)
    }

    /// The leaf certificate presented to a client asking for `name`.
    async fn leaf_for(&self, addr: SocketAddr, name: &str) -> CertificateDer<'static> {
        self.connect(addr, name).await.1.remove(0)
    }
}

/// The connection still carries data both ways.
async fn echoes(s: &mut TlsStream<TcpStream>, msg: &[u8]) {
    s.write_all(msg).await.unwrap();
    let mut back = vec![0u8; msg.len()];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(back, msg);
}

/// Accept TLS connections on 127.0.0.1 with `acceptor` (its configuration of the
/// moment, per connection, as the listener does) and echo what each one sends.
async fn serve(acceptor: Arc<TlsAcceptor>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let tls = acceptor.acceptor();
            tokio::spawn(async move {
                let Ok(mut s) = tls.accept(tcp).await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                while let Ok(n @ 1..) = s.read(&mut buf).await {
                    if s.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alias_certs_are_served_by_sni_at_runtime_and_open_connections_keep_theirs() {
    let cfg = TlsConfig {
        cert: Some(data("wildcard.crt")),
        key: Some(data("wildcard.key")),
        dir: None,
    };
    let resumption = Resumption::new().unwrap();
    let aliases = AliasCerts::new();
    let config = load_with(&cfg, false, &resumption, &aliases).unwrap();
    let acceptor = Arc::new(TlsAcceptor::new(config, resumption, aliases));
    let addr = serve(acceptor.clone()).await;
    let client = Client::new();
    let wildcard = leaf("wildcard.crt");
    let alias = leaf("rsa.crt");

    // Before: the wildcard for its own names, and (as default) for the alias.
    assert_eq!(
        client.leaf_for(addr, "ha-app-ns.example.com").await,
        wildcard
    );
    let (mut before, chain) = client.connect(addr, "www.example.org").await;
    assert_eq!(chain[0], wildcard);
    echoes(&mut before, b"before").await;

    // The owner uploads a certificate for the alias (legacy-encrypted key).
    let cert = alias_cert(
        "www.example.org",
        &text("rsa.crt"),
        &text("rsa.aes256.key"),
        Some("gearlb-test"),
    )
    .unwrap();
    acceptor.aliases().set("WWW.Example.ORG", cert.key.clone());
    assert_eq!(acceptor.aliases().len(), 1);
    assert_eq!(client.leaf_for(addr, "www.example.org").await, alias);
    assert_eq!(client.leaf_for(addr, "WWW.EXAMPLE.ORG").await, alias);
    assert_eq!(
        client.leaf_for(addr, "ha-app-ns.example.com").await,
        wildcard
    );
    // Exact names only: another name of the alias's certificate is not an alias.
    assert_eq!(client.leaf_for(addr, "example.org").await, wildcard);
    // The connection opened before keeps working, on its certificate.
    echoes(&mut before, b"still here").await;

    // A reload of `[tls]` (SIGHUP, OCSP staples) keeps the runtime aliases.
    let reloaded = load_with(&cfg, false, acceptor.resumption(), acceptor.aliases()).unwrap();
    acceptor.replace(reloaded);
    let (mut during, chain) = client.connect(addr, "www.example.org").await;
    assert_eq!(chain[0], alias);
    echoes(&mut during, b"during").await;

    // Removed: the alias's name gets the default again; open connections go on.
    assert!(acceptor.aliases().remove("www.example.org"));
    assert!(!acceptor.aliases().remove("www.example.org"));
    assert!(acceptor.aliases().is_empty());
    assert_eq!(client.leaf_for(addr, "www.example.org").await, wildcard);
    echoes(&mut during, b"after removal").await;
    echoes(&mut before, b"and this one").await;

    // Replaced wholesale (a resync): only the new set is served, chains whole.
    let api = alias_cert(
        "api.example.org",
        &text("chain.crt"),
        &text("chain.key"),
        None,
    )
    .unwrap();
    acceptor.aliases().replace_all(HashMap::from([(
        "API.example.org".to_string(),
        api.key.clone(),
    )]));
    let (_, chain) = client.connect(addr, "api.example.org").await;
    assert_eq!(chain, api.key.cert);
    assert_eq!(chain.len(), 2);
    assert_eq!(client.leaf_for(addr, "www.example.org").await, wildcard);
    assert!(acceptor.aliases().get("Api.Example.Org").is_some());
}
