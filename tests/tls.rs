//! The HTTPS listener: proxying over TLS, forwarding headers and the Secure cookie, SNI
//! selection, certificate reload, and broken certificates in `check` and `reload`.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

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
    let pair = self_signed(&["localhost"]);
    write_pair(dir.path(), "site", &pair);
    let cfg = tls_config(
        dir.path(),
        b.addr,
        "cert = \"site.pem\"\nkey = \"site.key\"",
    ) + "[timeouts]\nrequest_header = \"600ms\"\n";
    let g = Gearlb::start(dir.path(), &cfg);
    let addr = tls_addr(&g);

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

    let s = connect(addr, "localhost", std::slice::from_ref(&pair.2))
        .await
        .unwrap();
    let mut sender = http(s).await;
    assert_eq!(get_on(&mut sender, "/", &[]).await.status, 200);
}
