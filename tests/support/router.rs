//! A router under test: Debian's ActiveMQ (see [`super::activemq`]) with events
//! published by origin-server's own routing plugin (or, without the mirror, the same
//! YAML bytes published directly: the plugin's harness says which), a `gearlb` with
//! `[routing_spi]` consuming them, and what a test asks of it: the certificate a name
//! gets by SNI, a steady load that counts every failure, the report.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::activemq::{yaml_of, Broker, Event, Mapping, Options, Plugin};
use super::Gearlb;

/// The platform's domain in these tests.
pub const DOMAIN: &str = "example.com";
/// The topic the plugin publishes to (its example configuration's).
pub const TOPIC: &str = "/topic/routinginfo";

/// The alias certificate fixtures of `gearlb_proxy::certs` (pass phrase `gearlb-test`).
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/proxy/tests/data/alias_certs")
        .join(name)
}

pub fn fixture_text(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap()
}

/// A broker and who publishes to it.
pub struct Source {
    pub broker: Broker,
    plugin: Option<Plugin>,
    pub destination: String,
}

impl Source {
    /// A broker (authentication and forced persistency, as documented for routers) and
    /// origin-server's plugin publishing to `destination`.
    pub fn start(destination: &str) -> Source {
        Source::start_with(destination, Options::default())
    }

    /// As [`Source::start`], with a broker set up as `opts` says (in a network namespace:
    /// the plugin runs there too).
    pub fn start_with(destination: &str, opts: Options) -> Source {
        let broker = Broker::start(opts);
        let plugin = Plugin::start_in(
            &broker.prefix(),
            &[broker.addr()],
            broker.credentials(),
            destination,
        );
        Source {
            broker,
            plugin,
            destination: destination.to_string(),
        }
    }

    /// Publish one event as the broker's plugin does.
    pub fn send(&mut self, e: Event) {
        match &mut self.plugin {
            Some(p) => p.send(&e),
            None => self.broker.publish(&self.destination, &yaml_of(&e)),
        }
    }

    /// Publish one event's bytes (as the plugin makes them) and wait until the broker
    /// took it: events sent so reach subscribers in the order sent, which the plugin
    /// does not promise (it does not wait; two in a row were seen swapped).
    pub fn send_ordered(&self, e: Event) {
        self.broker.publish(&self.destination, &yaml_of(&e));
    }

    /// Publish a body of our own (a malformed event).
    pub fn raw(&self, body: &str) {
        self.broker.publish(&self.destination, body);
    }

    /// Whether the real plugin publishes (else its YAML bytes are).
    pub fn real_plugin(&self) -> bool {
        self.plugin.is_some()
    }
}

pub fn create(app: &str) -> Event {
    Event::CreateApplication {
        app: app.into(),
        namespace: "ns1".into(),
        scalable: true,
        ha: true,
    }
}

pub fn delete(app: &str) -> Event {
    Event::DeleteApplication {
        app: app.into(),
        namespace: "ns1".into(),
        scalable: true,
        ha: true,
    }
}

/// A load-balancer endpoint of gear `gear` at `addr`.
pub fn endpoint(app: &str, gear: &str, addr: SocketAddr) -> Event {
    Event::AddPublicEndpoint {
        app: app.into(),
        namespace: "ns1".into(),
        gear_id: gear.into(),
        public_port_name: "gearlb-0.1".into(),
        public_address: addr.ip().to_string(),
        public_port: addr.port(),
        protocols: vec!["http".into(), "ws".into()],
        types: vec!["load_balancer".into()],
        mappings: vec![Mapping::new("", "")],
    }
}

pub fn unendpoint(app: &str, gear: &str, addr: SocketAddr) -> Event {
    Event::RemovePublicEndpoint {
        app: app.into(),
        namespace: "ns1".into(),
        gear_id: gear.into(),
        public_address: addr.ip().to_string(),
        public_port: addr.port(),
    }
}

pub fn alias(app: &str, name: &str) -> Event {
    Event::AddAlias {
        app: app.into(),
        namespace: "ns1".into(),
        alias: name.into(),
    }
}

pub fn ssl(app: &str, name: &str, cert: &str, key: &str, pass: Option<&str>) -> Event {
    Event::AddSsl {
        app: app.into(),
        namespace: "ns1".into(),
        alias: name.into(),
        ssl: cert.into(),
        private_key: key.into(),
        pass_phrase: pass.map(str::to_string),
    }
}

pub fn unssl(app: &str, name: &str) -> Event {
    Event::RemoveSsl {
        app: app.into(),
        namespace: "ns1".into(),
        alias: name.into(),
    }
}

/// The HA name of `app` in namespace `ns1`.
pub fn ha(app: &str) -> String {
    format!("ha-{app}-ns1.{DOMAIN}")
}

/// A router's configuration: proxy, status (and with `tls`, an HTTPS listener with the
/// wildcard certificate), its state under `dir`, consuming `source` as `id`.
pub fn config(dir: &Path, source: &Source, id: &str, tls: bool, extra: &str) -> String {
    let (user, pass) = source.broker.credentials().unwrap_or(("", ""));
    let mut s = format!(
        "[listen]\nproxy = \"127.0.0.1:0\"\nstatus = \"127.0.0.1:0\"\n{tls_listen}\
         [control]\nsocket = \"{sock}\"\n[state]\ndir = \"{data}\"\n\
         [health]\ninterval = \"300ms\"\n{tls_certs}\
         [routing_spi]\nbrokers = [\"{broker}\"]\ndestination = \"{dest}\"\n\
         username = \"{user}\"\npassword = \"{pass}\"\nclient_id = \"{id}\"\n\
         cloud_domain = \"{DOMAIN}\"\nheartbeat = \"1s\"\n",
        tls_listen = if tls { "tls = \"127.0.0.1:0\"\n" } else { "" },
        sock = dir.join("control.sock").display(),
        data = dir.join("data").display(),
        broker = source.broker.addr(),
        dest = source.destination,
        tls_certs = if tls {
            format!(
                "[tls]\ncert = \"{}\"\nkey = \"{}\"\n",
                fixture("wildcard.crt").display(),
                fixture("wildcard.key").display()
            )
        } else {
            String::new()
        },
    );
    // Later tables of `extra` come after [routing_spi]'s keys: its own keys first.
    s.push_str(extra);
    s.push('\n');
    s
}

/// The address of a balancer's HTTPS listener (its serving line's `tls=`).
pub fn tls_addr(g: &Gearlb) -> SocketAddr {
    let log = g.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("gearlb serving"))
        .expect("serving line");
    let at = line.find(" tls=").expect("tls= in the serving line") + 5;
    line[at..].split(' ').next().unwrap().parse().unwrap()
}

/// Start a router with `config` in `dir`, and wait until it is subscribed (a durable
/// subscription holds what is published from then on, not before).
pub fn router(dir: &Path, config: &str) -> Gearlb {
    let r = Gearlb::start(dir, config);
    wait_subscribed(&r);
    r
}

/// Wait (20 s at most) until the router is subscribed at its broker.
pub fn wait_subscribed(r: &Gearlb) {
    let end = Instant::now() + Duration::from_secs(20);
    while Instant::now() < end {
        if spi(r)["broker"]["connected"].is_string() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the router never subscribed: {}", r.log_text());
}

/// Wait (20 s at most) until the router took `n` events in (applied, refused or left
/// alone).
pub fn wait_taken(r: &Gearlb, n: u64) {
    let end = Instant::now() + Duration::from_secs(20);
    let taken = |r: &Gearlb| {
        let e = &spi(r)["events"];
        ["applied", "failed", "ignored"]
            .iter()
            .map(|k| e[k].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    while taken(r) < n {
        assert!(
            Instant::now() < end,
            "{} events taken, not {n}: {}",
            taken(r),
            spi(r)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The router's report of its routing SPI (`gearlb ctl spi --json`).
pub fn spi(g: &Gearlb) -> serde_json::Value {
    let (code, out, err) = g.ctl(&["spi", "--json"]);
    assert_eq!(code, 0, "ctl spi: {out}{err}");
    serde_json::from_str(&out).unwrap()
}

/// The status of a plain GET of `/` for `host` (0: no answer).
pub fn status_of(proxy: SocketAddr, host: &str) -> u16 {
    let r = super::raw(
        proxy,
        format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        Duration::from_secs(5),
    );
    r.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Wait until `host` gets `want` (`within`); how long it took.
pub fn until_status(
    proxy: SocketAddr,
    host: &str,
    want: u16,
    within: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < within {
        if status_of(proxy, host) == want {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// A TLS client that accepts any certificate, to see which one a name gets.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The leaf certificate `addr` presents to SNI `name` (DER), and the status of a GET
/// of `/` for `name` over that connection.
pub async fn sni(addr: SocketAddr, name: &str) -> (Vec<u8>, u16) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut s = connector
        .connect(
            rustls::pki_types::ServerName::try_from(name.to_string()).unwrap(),
            tcp,
        )
        .await
        .unwrap();
    let leaf = s.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (leaf, status)
}

/// The first certificate of a PEM file, DER.
pub fn der_of(pem_file: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_file_iter(fixture(pem_file))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

/// A steady load of GETs for `host` on a few connections until stopped (bounded: at
/// most `max` requests, and never past `limit`), counting every answer but a 200.
pub struct Load {
    stop: Arc<AtomicBool>,
    pub ok: Arc<AtomicU64>,
    pub failed: Arc<AtomicU64>,
    pub failures: Arc<std::sync::Mutex<Vec<String>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    pub fn start(proxy: SocketAddr, host: &str, max: u64, limit: Duration) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
        let until = Instant::now() + limit;
        let threads = (0..4)
            .map(|_| {
                let (stop, ok, failed, failures) =
                    (stop.clone(), ok.clone(), failed.clone(), failures.clone());
                let host = host.to_string();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed)
                        && Instant::now() < until
                        && ok.load(Ordering::Relaxed) + failed.load(Ordering::Relaxed) < max
                    {
                        let got = status_of(proxy, &host);
                        if got == 200 {
                            ok.fetch_add(1, Ordering::Relaxed);
                        } else {
                            failed.fetch_add(1, Ordering::Relaxed);
                            failures.lock().unwrap().push(format!("status {got}"));
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            ok,
            failed,
            failures,
            threads,
        }
    }

    /// Wait until `n` more requests succeeded (bounded by `within`).
    pub fn wait_ok(&self, n: u64, within: Duration) {
        let target = self.ok.load(Ordering::Relaxed) + n;
        let end = Instant::now() + within;
        while self.ok.load(Ordering::Relaxed) < target && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stop; (succeeded, failed).
    pub fn finish(mut self) -> (u64, u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        (
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            self.failures.lock().unwrap().clone(),
        )
    }
}
