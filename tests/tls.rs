//! The HTTPS listener: proxying over TLS, forwarding headers and the Secure cookie, SNI
//! selection, certificate reload, and broken certificates in `check` and `reload`.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use support::*;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// A self-signed certificate for `names`: (certificate PEM, key PEM, certificate DER).
fn self_signed(names: &[&str]) -> (String, String, CertificateDer<'static>) {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let ck = rcgen::generate_simple_self_signed(names).unwrap();
    (
        ck.cert.pem(),
        ck.signing_key.serialize_pem(),
        ck.cert.der().clone(),
    )
}

fn write_pair(dir: &Path, name: &str, pair: &(String, String, CertificateDer<'static>)) {
    std::fs::write(dir.join(format!("{name}.pem")), &pair.0).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), &pair.1).unwrap();
}

/// The HTTPS address from the balancer's "gearlb serving" line.
fn tls_addr(g: &Gearlb) -> SocketAddr {
    let mut log = g.log_text();
    for _ in 0..100 {
        if log.contains("gearlb serving") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        log = g.log_text();
    }
    let line = log
        .lines()
        .find(|l| l.contains("gearlb serving"))
        .expect("serving line");
    let at = line.find(" tls=").expect("tls= in the serving line") + 5;
    line[at..].split(' ').next().unwrap().parse().unwrap()
}

/// A TLS connection to `addr` with SNI `name`, trusting exactly `roots`.
async fn connect(
    addr: SocketAddr,
    name: &str,
    roots: &[CertificateDer<'static>],
) -> std::io::Result<TlsStream<TcpStream>> {
    let mut store = rustls::RootCertStore::empty();
    for r in roots {
        store.add(r.clone()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await?;
    connector
        .connect(ServerName::try_from(name.to_string()).unwrap(), tcp)
        .await
}

/// The certificate the server presented.
fn presented(s: &TlsStream<TcpStream>) -> CertificateDer<'static> {
    s.get_ref().1.peer_certificates().unwrap()[0].clone()
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn http(s: TlsStream<TcpStream>) -> Sender {
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

async fn get_on(sender: &mut Sender, path: &str, headers: &[(&str, &str)]) -> Got {
    let mut req = hyper::Request::get(path).header("host", "app.example");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    sender.ready().await.unwrap();
    let resp = sender
        .send_request(req.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let (parts, body) = resp.into_parts();
    Got {
        status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}

fn tls_config(dir: &Path, backend: SocketAddr, tls: &str) -> String {
    config_text(
        dir,
        &[("web1", backend)],
        &format!(
            "[tls]\n{tls}\n[proxy]\ntrust_forwarded = false\n\
             forwarded_headers = [\"x-forwarded-for\", \"x-forwarded-proto\", \"forwarded\"]\n"
        ),
    )
    .replacen(
        "status = \"127.0.0.1:0\"\n",
        "status = \"127.0.0.1:0\"\ntls = \"127.0.0.1:0\"\n",
        1,
    )
}

/// A balancer with a TLS listener (a self-signed certificate for `localhost`) in front
/// of `backend`, with `extra` configuration: the balancer, its TLS address and the
/// certificate to trust.
fn tls_balancer(
    dir: &Path,
    backend: SocketAddr,
    extra: &str,
) -> (Gearlb, SocketAddr, CertificateDer<'static>) {
    let pair = self_signed(&["localhost"]);
    write_pair(dir, "site", &pair);
    let cfg = tls_config(dir, backend, "cert = \"site.pem\"\nkey = \"site.key\"") + extra;
    let g = Gearlb::start(dir, &cfg);
    let addr = tls_addr(&g);
    (g, addr, pair.2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_requests_are_proxied_with_https_headers_and_secure_cookie() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let pair = self_signed(&["localhost"]);
    write_pair(dir.path(), "site", &pair);
    let cfg = tls_config(
        dir.path(),
        b.addr,
        "cert = \"site.pem\"\nkey = \"site.key\"",
    );
    let g = Gearlb::start(dir.path(), &cfg);
    let s = connect(tls_addr(&g), "localhost", std::slice::from_ref(&pair.2))
        .await
        .unwrap();
    let mut sender = http(s).await;
    // A client claiming https on the plain listener is not believed (trust off); over
    // TLS the balancer says https itself.
    let got = get_on(&mut sender, "/headers", &[("x-forwarded-proto", "http")]).await;
    assert_eq!(got.status, 200, "{}", got.text());
    let seen = got.json();
    assert_eq!(seen["headers"]["x-forwarded-proto"][0], "https");
    let fwd = seen["headers"]["forwarded"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert!(fwd.ends_with(";proto=https"), "{fwd}");
    let cookie = got.headers["set-cookie"].to_str().unwrap();
    assert!(cookie.starts_with("GEAR=web1;"), "{cookie}");
    assert!(cookie.contains("; Secure"), "{cookie}");
    // Keep-alive over TLS.
    let again = get_on(&mut sender, "/x", &[]).await;
    assert_eq!(again.text(), "backend web1");

    // The plain listener still works and still says http, with no Secure cookie.
    let plain = get(g.proxy, "/headers", &[]).await.unwrap();
    assert_eq!(plain.json()["headers"]["x-forwarded-proto"][0], "http");
    assert!(!plain.headers["set-cookie"]
        .to_str()
        .unwrap()
        .contains("Secure"));
}

/// Where gearlb terminates TLS itself it says `https`, even to a trusted front's
/// claim: HAProxy sets it so too. A trusted front's address list is appended to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_proto_is_https_even_from_a_trusted_front() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let pair = self_signed(&["localhost"]);
    write_pair(dir.path(), "site", &pair);
    let cfg = tls_config(
        dir.path(),
        b.addr,
        "cert = \"site.pem\"\nkey = \"site.key\"",
    )
    .replace("trust_forwarded = false", "trust_forwarded = true");
    let g = Gearlb::start(dir.path(), &cfg);
    let s = connect(tls_addr(&g), "localhost", std::slice::from_ref(&pair.2))
        .await
        .unwrap();
    let mut sender = http(s).await;
    let got = get_on(
        &mut sender,
        "/headers",
        &[
            ("x-forwarded-proto", "http"),
            ("x-forwarded-for", "192.0.2.9"),
        ],
    )
    .await;
    let seen = got.json();
    assert_eq!(seen["headers"]["x-forwarded-proto"][0], "https", "{seen}");
    assert_eq!(
        seen["headers"]["x-forwarded-for"][0],
        "192.0.2.9, 127.0.0.1"
    );
    // On the plain listener the trusted front's word counts.
    let plain = get(g.proxy, "/headers", &[("x-forwarded-proto", "https")])
        .await
        .unwrap();
    assert_eq!(plain.json()["headers"]["x-forwarded-proto"][0], "https");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_are_chosen_by_sni_with_a_default() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let a = self_signed(&["a.example"]);
    let star = self_signed(&["x.b.example"]);
    let fallback = self_signed(&["c.example"]);
    write_pair(&certs, "a.example", &a);
    write_pair(&certs, "*.b.example", &star);
    write_pair(&certs, "default", &fallback);
    let cfg = tls_config(dir.path(), b.addr, "dir = \"certs\"");
    let g = Gearlb::start(dir.path(), &cfg);
    let addr = tls_addr(&g);
    let roots = [a.2.clone(), star.2.clone(), fallback.2.clone()];
    let s = connect(addr, "a.example", &roots).await.unwrap();
    assert_eq!(presented(&s), a.2);
    let mut sender = http(s).await;
    assert_eq!(get_on(&mut sender, "/", &[]).await.status, 200);
    let s = connect(addr, "x.b.example", &roots).await.unwrap();
    assert_eq!(presented(&s), star.2, "wildcard file name");
    let s = connect(addr, "c.example", &roots).await.unwrap();
    assert_eq!(presented(&s), fallback.2, "unknown names get the default");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_uses_new_certificates_for_new_connections_only() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let old = self_signed(&["localhost"]);
    write_pair(dir.path(), "site", &old);
    let cfg = tls_config(
        dir.path(),
        b.addr,
        "cert = \"site.pem\"\nkey = \"site.key\"",
    );
    let g = Gearlb::start(dir.path(), &cfg);
    let addr = tls_addr(&g);
    let s = connect(addr, "localhost", std::slice::from_ref(&old.2))
        .await
        .unwrap();
    let mut before = http(s).await;
    assert_eq!(get_on(&mut before, "/", &[]).await.status, 200);

    let new = self_signed(&["localhost"]);
    write_pair(dir.path(), "site", &new);
    let (code, out, err) = g.ctl(&["reload"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("TLS certificates reloaded"), "{out}");
    let s = connect(addr, "localhost", std::slice::from_ref(&new.2))
        .await
        .unwrap();
    assert_eq!(presented(&s), new.2);
    assert!(
        connect(addr, "localhost", std::slice::from_ref(&old.2))
            .await
            .is_err(),
        "the old certificate is no longer served"
    );
    // The connection opened before the reload goes on as it was.
    assert_eq!(get_on(&mut before, "/", &[]).await.status, 200);

    // A broken certificate: the reload is refused and the current one stays; SIGHUP too.
    std::fs::write(dir.path().join("site.pem"), "not a certificate\n").unwrap();
    let (code, _, err) = g.ctl(&["reload"]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("tls.cert"), "{err}");
    g.signal("HUP");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let s = connect(addr, "localhost", std::slice::from_ref(&new.2))
        .await
        .unwrap();
    let mut sender = http(s).await;
    assert_eq!(get_on(&mut sender, "/", &[]).await.status, 200);
}

#[test]
fn check_lists_unusable_certificates() {
    let dir = workdir();
    let (cert, _, _) = self_signed(&["localhost"]);
    let (_, other_key, _) = self_signed(&["localhost"]);
    let check = |tls: &str| {
        let cfg = tls_config(dir.path(), "127.0.0.1:9".parse().unwrap(), tls);
        let path = dir.path().join("check.toml");
        std::fs::write(&path, cfg).unwrap();
        let out = std::process::Command::new(bin())
            .args(["check", "--config"])
            .arg(&path)
            .current_dir(dir.path())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    std::fs::write(dir.path().join("good.pem"), &cert).unwrap();
    std::fs::write(dir.path().join("other.key"), &other_key).unwrap();
    std::fs::write(
        dir.path().join("bad.pem"),
        "-----BEGIN CERTIFICATE-----\nnope\n",
    )
    .unwrap();

    let (code, out) = check("cert = \"missing.pem\"\nkey = \"other.key\"");
    assert_eq!(code, 64, "{out}");
    assert!(
        out.contains("tls.cert") && out.contains("missing.pem"),
        "{out}"
    );

    let (code, out) = check("cert = \"bad.pem\"\nkey = \"other.key\"");
    assert_eq!(code, 64, "{out}");
    assert!(out.contains("tls.cert"), "{out}");

    let (code, out) = check("cert = \"good.pem\"\nkey = \"other.key\"");
    assert_eq!(code, 64, "a key of another certificate: {out}");
    assert!(out.contains("tls.key"), "{out}");

    let (code, out) = check("cert = \"good.pem\"");
    assert_eq!(code, 64, "{out}");
    assert!(out.contains("tls.key: required"), "{out}");

    // A pair that goes together passes.
    let pair = self_signed(&["localhost"]);
    write_pair(dir.path(), "ok", &pair);
    let (code, out) = check("cert = \"ok.pem\"\nkey = \"ok.key\"");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("https 127.0.0.1:0"), "{out}");
}

/// A connection that never completes its TLS handshake is closed at
/// `timeouts.request_header` and does not keep its slot; a real client still gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_handshakes_are_cut_at_the_request_header_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let (_g, addr, cert) = tls_balancer(
        dir.path(),
        b.addr,
        "[timeouts]\nrequest_header = \"600ms\"\n",
    );

    // One sends nothing, one the first bytes of a ClientHello and then nothing.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut partial = TcpStream::connect(addr).await.unwrap();
    partial
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    let started = std::time::Instant::now();
    for s in [&mut silent, &mut partial] {
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("closed by the balancer well before 5s")
            .unwrap_or(0);
        assert_eq!(n, 0, "closed without a response");
    }
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(400),
        "cut before the timeout: {waited:?}"
    );

    let s = connect(addr, "localhost", std::slice::from_ref(&cert))
        .await
        .unwrap();
    let mut sender = http(s).await;
    assert_eq!(get_on(&mut sender, "/", &[]).await.status, 200);
}

/// A client with its own provider (cipher-suite order, versions) and session store,
/// trusting `roots`, that records the OCSP response stapled to the handshake.
struct Client {
    config: Arc<rustls::ClientConfig>,
    ocsp: Arc<std::sync::Mutex<Vec<u8>>>,
}

#[derive(Debug)]
struct Recording {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    ocsp: Arc<std::sync::Mutex<Vec<u8>>>,
}

impl rustls::client::danger::ServerCertVerifier for Recording {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        *self.ocsp.lock().unwrap() = ocsp_response.to_vec();
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

impl Client {
    fn new(
        roots: &[CertificateDer<'static>],
        suites: Option<Vec<rustls::SupportedCipherSuite>>,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Client {
        let mut store = rustls::RootCertStore::empty();
        for r in roots {
            store.add(r.clone()).unwrap();
        }
        let mut provider = rustls::crypto::ring::default_provider();
        if let Some(s) = suites {
            provider.cipher_suites = s;
        }
        let provider = Arc::new(provider);
        let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(store),
            provider.clone(),
        )
        .build()
        .unwrap();
        let ocsp = Arc::new(std::sync::Mutex::new(Vec::new()));
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Recording {
                inner,
                ocsp: ocsp.clone(),
            }))
            .with_no_client_auth();
        Client {
            config: Arc::new(config),
            ocsp,
        }
    }

    async fn connect(&self, addr: SocketAddr, name: &str) -> TlsStream<TcpStream> {
        let connector = tokio_rustls::TlsConnector::from(self.config.clone());
        let tcp = TcpStream::connect(addr).await.unwrap();
        connector
            .connect(ServerName::try_from(name.to_string()).unwrap(), tcp)
            .await
            .unwrap()
    }
}

/// One certificate for several names is chosen by the names in it, as HAProxy does (a
/// file name still wins for its own name); exact names before wildcards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_are_chosen_by_the_names_they_carry() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let multi = self_signed(&["alpha.example", "beta.example", "*.gamma.example"]);
    let beta = self_signed(&["beta.example"]);
    let fallback = self_signed(&["default.example"]);
    write_pair(&certs, "aliases", &multi);
    write_pair(&certs, "beta.example", &beta);
    write_pair(&certs, "default", &fallback);
    let g = Gearlb::start(
        dir.path(),
        &tls_config(dir.path(), b.addr, "dir = \"certs\""),
    );
    let addr = tls_addr(&g);
    let roots = [multi.2.clone(), beta.2.clone(), fallback.2.clone()];
    for (name, want) in [
        ("alpha.example", &multi.2),
        ("x.gamma.example", &multi.2),
        ("beta.example", &beta.2),
        ("default.example", &fallback.2),
    ] {
        let s = connect(addr, name, &roots).await.unwrap();
        assert_eq!(&presented(&s), want, "{name}");
    }
}

/// The server's cipher-suite order, not the client's; sessions resume, over TLS 1.2
/// and 1.3, across a reload; an OCSP response beside a certificate is stapled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_order_resumption_across_reloads_and_ocsp_stapling() {
    use rustls::crypto::ring::cipher_suite as cs;
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let pair = self_signed(&["localhost"]);
    write_pair(dir.path(), "site", &pair);
    // A DER OCSPResponse (status 0 with no body: shape is all the balancer checks).
    let ocsp = vec![0x30, 0x03, 0x0a, 0x01, 0x00];
    std::fs::write(dir.path().join("site.pem.ocsp"), &ocsp).unwrap();
    let cfg = tls_config(
        dir.path(),
        b.addr,
        "cert = \"site.pem\"\nkey = \"site.key\"",
    );
    let g = Gearlb::start(dir.path(), &cfg);
    let addr = tls_addr(&g);
    let roots = std::slice::from_ref(&pair.2);

    // The client prefers ChaCha20; the server's order puts AES-GCM first.
    let client = Client::new(
        roots,
        Some(vec![
            cs::TLS13_CHACHA20_POLY1305_SHA256,
            cs::TLS13_AES_128_GCM_SHA256,
        ]),
        &[&rustls::version::TLS13],
    );
    let s = client.connect(addr, "localhost").await;
    assert_eq!(
        s.get_ref().1.negotiated_cipher_suite().unwrap().suite(),
        rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
    );
    assert_eq!(*client.ocsp.lock().unwrap(), ocsp, "OCSP response stapled");

    for versions in [
        &[&rustls::version::TLS13][..],
        &[&rustls::version::TLS12][..],
    ] {
        let client = Client::new(roots, None, versions);
        let resumed = |s: &TlsStream<TcpStream>| {
            s.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
        };
        // A full handshake, and a request (TLS 1.3 tickets come after the handshake).
        let s = client.connect(addr, "localhost").await;
        assert!(!resumed(&s));
        let mut sender = http(s).await;
        assert_eq!(get_on(&mut sender, "/", &[]).await.status, 200);
        drop(sender);
        let s = client.connect(addr, "localhost").await;
        assert!(resumed(&s), "{versions:?}: not resumed");
        let mut sender = http(s).await;
        assert_eq!(get_on(&mut sender, "/", &[]).await.status, 200);
        drop(sender);
        // A reload keeps what lets sessions resume.
        let (code, out, err) = g.ctl(&["reload"]);
        assert_eq!(code, 0, "{out}{err}");
        let s = client.connect(addr, "localhost").await;
        assert!(resumed(&s), "{versions:?}: not resumed after a reload");
    }
}

/// A ClientHello whose SNI is an IP address (not a valid host name) is served the
/// default certificate, and logs nothing: a client cannot flood the log with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ip_address_as_sni_logs_nothing() {
    let openssl = std::path::Path::new("/usr/bin/openssl");
    assert!(
        openssl.exists(),
        "this test needs the openssl command line: apt-get install openssl (.ci/run does)"
    );
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let pair = self_signed(&["localhost"]);
    write_pair(dir.path(), "site", &pair);
    let g = Gearlb::start(
        dir.path(),
        &tls_config(
            dir.path(),
            b.addr,
            "cert = \"site.pem\"\nkey = \"site.key\"",
        ),
    );
    let addr = tls_addr(&g);
    let before = g.log_text().lines().count();
    for _ in 0..5 {
        let out = std::process::Command::new(openssl)
            .args([
                "s_client",
                "-connect",
                &addr.to_string(),
                "-servername",
                "127.0.0.1",
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("BEGIN CERTIFICATE") || text.contains("Server certificate"),
            "{text}"
        );
    }
    // A plain request afterwards: its log line (if any) is the last thing logged.
    assert_eq!(get(g.proxy, "/", &[]).await.unwrap().status, 200);
    let log = g.log_text();
    let added: Vec<&str> = log.lines().skip(before).collect();
    assert!(
        added
            .iter()
            .all(|l| !l.contains("SNI") && !l.contains("WARN")),
        "{added:#?}"
    );
}

/// A reload builds ALPN from the new configuration: turning HTTP/2 off (`proxy.h2c =
/// false`) stops offering `h2` to new TLS connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_takes_alpn_from_the_new_configuration() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let pair = self_signed(&["localhost"]);
    write_pair(dir.path(), "site", &pair);
    let cfg = tls_config(
        dir.path(),
        b.addr,
        "cert = \"site.pem\"\nkey = \"site.key\"",
    );
    let g = Gearlb::start(dir.path(), &cfg);
    let addr = tls_addr(&g);
    let alpn = || async {
        let mut store = rustls::RootCertStore::empty();
        store.add(pair.2.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(store)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = TcpStream::connect(addr).await.unwrap();
        let s = connector
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        s.get_ref().1.alpn_protocol().map(|p| p.to_vec())
    };
    assert_eq!(alpn().await.as_deref(), Some(&b"h2"[..]));
    let off = cfg.replace("[proxy]\n", "[proxy]\nh2c = false\n");
    std::fs::write(&g.config, off).unwrap();
    let (code, out, err) = g.ctl(&["reload"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(alpn().await.as_deref(), Some(&b"http/1.1"[..]));
}

/// Balancers of one application (one `cluster.secret` and `cluster.id`) open each
/// other's session tickets: behind a router that spreads connections, a session
/// resumes on whichever balancer it reaches. Another application's balancer does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumes_on_every_balancer_of_the_application() {
    let b = TestBackend::start("web1").await;
    let pair = self_signed(&["localhost"]);
    let start = |app: &'static str| {
        let dir = workdir();
        write_pair(dir.path(), "site", &pair);
        let cfg = tls_config(
            dir.path(),
            b.addr,
            "cert = \"site.pem\"\nkey = \"site.key\"",
        )
        .replace(
            "[tls]\n",
            &format!("[cluster]\nid = \"{app}\"\nsecret = \"app-secret-0123456789\"\n[tls]\n"),
        );
        let g = Gearlb::start(dir.path(), &cfg);
        (dir, g)
    };
    let (_d1, one) = start("app1");
    let (_d2, two) = start("app1");
    let (_d3, other) = start("app2");
    let roots = std::slice::from_ref(&pair.2);
    let resumed = |s: &TlsStream<TcpStream>| {
        s.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
    };
    for versions in [
        &[&rustls::version::TLS13][..],
        &[&rustls::version::TLS12][..],
    ] {
        let client = Client::new(roots, None, versions);
        let s = client.connect(tls_addr(&one), "localhost").await;
        assert!(!resumed(&s));
        let mut sender = http(s).await;
        assert_eq!(get_on(&mut sender, "/", &[]).await.status, 200);
        drop(sender);
        let s = client.connect(tls_addr(&two), "localhost").await;
        assert!(
            resumed(&s),
            "{versions:?}: not resumed on the second balancer"
        );
        let mut sender = http(s).await;
        assert_eq!(get_on(&mut sender, "/", &[]).await.status, 200);
        drop(sender);
        // Another application's balancer cannot open them: a full handshake.
        let client = Client::new(roots, None, versions);
        let s = client.connect(tls_addr(&one), "localhost").await;
        let mut sender = http(s).await;
        assert_eq!(get_on(&mut sender, "/", &[]).await.status, 200);
        drop(sender);
        let s = client.connect(tls_addr(&other), "localhost").await;
        assert!(
            !resumed(&s),
            "{versions:?}: resumed on another application's balancer"
        );
    }
}

/// A DER OCSPResponse (structure only: the balancer does not check signatures) whose
/// single response has `next` as its `nextUpdate`.
fn ocsp_response(next: &str) -> Vec<u8> {
    fn der(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
        let body: Vec<u8> = parts.concat();
        let mut out = vec![tag, 0x82];
        out.extend((body.len() as u16).to_be_bytes());
        out.extend(body);
        out
    }
    let time = |t: &str| der(0x18, &[t.as_bytes()]);
    let alg = der(0x30, &[&[0x05, 0x00]]);
    let single = der(
        0x30,
        &[
            &der(
                0x30,
                &[
                    &alg,
                    &der(0x04, &[&[1; 20]]),
                    &der(0x04, &[&[2; 20]]),
                    &[2, 1, 7],
                ],
            ),
            &[0x80, 0x00],
            &time("20261101000000Z"),
            &der(0xa0, &[&time(next)]),
        ],
    );
    let data = der(
        0x30,
        &[
            &der(0xa2, &[&der(0x04, &[&[3; 20]])]),
            &time("20261101000000Z"),
            &der(0x30, &[&single]),
        ],
    );
    let basic = der(0x30, &[&data, &alg, &[3, 2, 0, 1]]);
    let oid: &[u8] = &[6, 9, 0x2b, 6, 1, 5, 5, 7, 48, 1, 1];
    der(
        0x30,
        &[
            &[0x0a, 1, 0],
            &der(0xa0, &[&der(0x30, &[oid, &der(0x04, &[&basic])])]),
        ],
    )
}

/// A response past its `nextUpdate` is not stapled; a new `.ocsp` file is picked up
/// without a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_ocsp_response_is_not_stapled_and_a_new_file_is_picked_up() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let pair = self_signed(&["localhost"]);
    write_pair(dir.path(), "site", &pair);
    let ocsp = dir.path().join("site.pem.ocsp");
    std::fs::write(&ocsp, ocsp_response("20200101000000Z")).unwrap();
    let cfg = tls_config(
        dir.path(),
        b.addr,
        "cert = \"site.pem\"\nkey = \"site.key\"",
    );
    let g = Gearlb::start_with(dir.path(), &cfg, &[], &[("GEARLB_OCSP_CHECK_MS", "200")]);
    let addr = tls_addr(&g);
    let roots = std::slice::from_ref(&pair.2);
    let stapled = || async {
        let client = Client::new(roots, None, &[&rustls::version::TLS13]);
        let _s = client.connect(addr, "localhost").await;
        let got = client.ocsp.lock().unwrap().clone();
        got
    };
    assert!(
        stapled().await.is_empty(),
        "an expired response was stapled"
    );
    let fresh = ocsp_response("20991231000000Z");
    std::fs::write(&ocsp, &fresh).unwrap();
    let mut picked = false;
    let end = Instant::now() + Duration::from_secs(10);
    while !picked && Instant::now() < end {
        picked = stapled().await == fresh;
        if !picked {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(picked, "the new OCSP file was not stapled");
    // And when it expires (written as expired again), stapling stops.
    std::fs::write(&ocsp, ocsp_response("20200101000000Z")).unwrap();
    let mut stopped = false;
    let end = Instant::now() + Duration::from_secs(10);
    while !stopped && Instant::now() < end {
        stopped = stapled().await.is_empty();
        if !stopped {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(stopped, "an expired response is still stapled");
}

/// The responses in `raw`, in order: (status line, body), each framed by its
/// `Content-Length`.
fn responses(mut raw: &[u8]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&raw[..end]).into_owned();
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        let body_end = (end + 4 + len).min(raw.len());
        let body = String::from_utf8_lossy(&raw[end + 4..body_end]).into_owned();
        out.push((head.lines().next().unwrap_or_default().to_string(), body));
        raw = &raw[body_end..];
    }
    out
}

/// HTTP/1.1 over TLS takes the byte path as a plain connection does: pipelined
/// requests of both paths (a small body; a chunked one, hyper's) keep their order on
/// one connection; a target with a fragment gets 400 and reaches no gear, as on the
/// plain listener; and an idle keep-alive TLS connection does not hold up the stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_over_tls_takes_the_byte_path_as_plain_http_does() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gear = Scripted::start(|req| {
        let body = req.head.split(' ').nth(1).unwrap_or("?").to_string();
        Reply::after(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
    })
    .await;
    let dir = workdir();
    let (mut g, addr, cert) = tls_balancer(dir.path(), gear.addr, "[health]\nenabled = false\n");
    let roots = std::slice::from_ref(&cert);

    let mut s = connect(addr, "localhost", roots).await.unwrap();
    s.write_all(
        b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\n\
          POST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc\
          POST /3 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nxyz\r\n0\r\n\r\n\
          GET /4 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw))
        .await
        .expect("the connection closes after the last answer")
        .ok();
    let got = responses(&raw);
    let want: Vec<(String, String)> = ["/1", "/2", "/3", "/4"]
        .iter()
        .map(|p| ("HTTP/1.1 200 OK".to_string(), p.to_string()))
        .collect();
    assert_eq!(got, want, "{}", String::from_utf8_lossy(&raw));

    let mut s = connect(addr, "localhost", roots).await.unwrap();
    s.write_all(b"GET /c#/../admin HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw))
        .await
        .expect("the connection closes after the refusal")
        .ok();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    let seen = gear.seen();
    let lines: Vec<&str> = seen
        .iter()
        .map(|r| r.head.lines().next().unwrap_or_default())
        .collect();
    assert_eq!(
        lines,
        [
            "GET /1 HTTP/1.1",
            "POST /2 HTTP/1.1",
            "POST /3 HTTP/1.1",
            "GET /4 HTTP/1.1"
        ]
    );
    assert_eq!(
        (seen[1].body.as_slice(), seen[2].body.as_slice()),
        (&b"abc"[..], &b"xyz"[..])
    );

    // An idle keep-alive connection, answered once on the byte path.
    let mut idle = connect(addr, "localhost", roots).await.unwrap();
    idle.write_all(b"GET /5 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), idle.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    let t = Instant::now();
    g.signal("TERM");
    let code = tokio::task::spawn_blocking(move || g.wait(Duration::from_secs(20)))
        .await
        .unwrap();
    assert_eq!(code, Some(0));
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "stop took {:?}",
        t.elapsed()
    );
}

/// A request over TLS that its gear never answers gets its 504 at `timeouts.server`,
/// also when it comes on a connection whose watchdog was asleep until the idle
/// deadline (`request_header`, far later): on the byte path (a GET) and on hyper's (a
/// chunked POST).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_tls_gets_its_504_at_the_server_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Connections are taken by the kernel and never answered.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = workdir();
    let (_g, addr, cert) = tls_balancer(
        dir.path(),
        silent.local_addr().unwrap(),
        "[health]\nenabled = false\n[timeouts]\nserver = \"1s\"\nrequest_header = \"20s\"\n",
    );
    for ask in [
        &b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"POST /slow HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
    ] {
        let what = String::from_utf8_lossy(&ask[..4]).into_owned();
        let mut s = connect(addr, "localhost", std::slice::from_ref(&cert))
            .await
            .unwrap();
        // Twice on one connection: the second after hyper served the first, for the
        // chunked POST.
        for round in 1..=2 {
            // Idle for a moment: the watchdog sleeps until the idle deadline.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let t = Instant::now();
            s.write_all(ask).await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(8), s.read(&mut buf))
                .await
                .unwrap_or_else(|_| panic!("{what} {round}: no answer before the idle deadline"))
                .unwrap();
            let text = String::from_utf8_lossy(&buf[..n]);
            assert!(text.starts_with("HTTP/1.1 504"), "{what} {round}: {text}");
            let took = t.elapsed();
            assert!(
                took < Duration::from_secs(6),
                "{what} {round}: 504 after {took:?}"
            );
        }
    }
}

/// Over TLS as on plain HTTP, a request that stops coming (its head, its body) is cut at
/// `request_header` and counted in `client_timeouts`; a keep-alive connection that sent
/// nothing after its response is cut at the same time and not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_stop_coming_over_tls_are_counted_idle_connections_are_not() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gear =
        Scripted::start(|_| Reply::after(&b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"[..]))
            .await;
    let dir = workdir();
    let (g, addr, cert) = tls_balancer(
        dir.path(),
        gear.addr,
        "[health]\nenabled = false\n[timeouts]\nrequest_header = \"1s\"\n",
    );
    let mut expected = 0;
    for (name, whole, rest, counted) in [
        (
            "idle after a response",
            "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            "",
            0,
        ),
        ("a head that stops", "", "GET / HTTP/1.1\r\nHost: x\r\n", 1),
        (
            "a body that stops",
            "",
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc",
            1,
        ),
        (
            "a head that stops after hyper's answer",
            "GET /h HTTP/1.1\r\nHost: x\r\nConnection: x-drop\r\n\r\n",
            "GET /next HTTP/1.1\r\n",
            1,
        ),
    ] {
        let mut s = connect(addr, "localhost", std::slice::from_ref(&cert))
            .await
            .unwrap();
        let mut got = Vec::new();
        if !whole.is_empty() {
            s.write_all(whole.as_bytes()).await.unwrap();
            let mut buf = [0u8; 4096];
            while !got.ends_with(b"ok") {
                let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
                    .await
                    .unwrap_or_else(|_| panic!("{name}: no answer"))
                    .unwrap();
                assert!(n > 0, "{name}: closed before the answer");
                got.extend_from_slice(&buf[..n]);
            }
        }
        s.write_all(rest.as_bytes()).await.unwrap();
        let t = Instant::now();
        let _ = tokio::time::timeout(Duration::from_secs(8), s.read_to_end(&mut got))
            .await
            .unwrap_or_else(|_| panic!("{name}: not closed"));
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(500) && took < Duration::from_secs(5),
            "{name}: closed after {took:?} (request_header is 1s)"
        );
        expected += counted;
        assert_eq!(
            g.status_json()["frontend"]["client_timeouts"],
            expected,
            "{name}"
        );
    }
}

/// A request the byte path refuses before its upload is read (an oversized chunk size),
/// over TLS: a client that sends its whole upload before it reads gets it all sent and
/// then reads the 400 (the lingering close), not a reset that cuts its writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_upload_over_tls_is_read_and_dropped_before_the_close() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let (_g, addr, cert) = tls_balancer(dir.path(), b.addr, "[health]\nenabled = false\n");
    let mut s = connect(addr, "localhost", std::slice::from_ref(&cert))
        .await
        .unwrap();
    // Far more than the socket buffers on both sides hold.
    let mut upload =
        b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n8000000000000000\r\n"
            .to_vec();
    upload.resize(upload.len() + (16 << 20), b'a');
    let sent = tokio::time::timeout(Duration::from_secs(30), s.write_all(&upload))
        .await
        .expect("the upload is taken")
        .map_err(|e| e.to_string());
    let _ = s.flush().await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out)).await;
    assert_eq!(sent, Ok(()), "the upload was cut");
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert_eq!(b.requests(), 0, "nothing reached the gear");
}
