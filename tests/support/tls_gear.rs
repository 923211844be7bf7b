//! TLS gears for TCP mode's tests: servers that hold their own certificate (as the
//! gears behind an `SSL_TO_GEAR` balancer do), the clients that reach them through the
//! balancer, and a recorder of raw bytes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// A TLS server with a self-signed certificate for `names`. After the handshake it
/// writes `<name>\n`, then echoes lines. A server that wants the PROXY protocol reads a
/// v2 header first and records it.
pub struct TlsGear {
    pub name: String,
    pub addr: SocketAddr,
    pub cert: CertificateDer<'static>,
    /// Handshakes completed.
    pub handshakes: Arc<AtomicU64>,
    /// Connections open now (handshake done, not yet closed).
    pub open: Arc<AtomicU64>,
    /// PROXY v2 headers received, whole.
    pub proxy_headers: Arc<Mutex<Vec<Vec<u8>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsGear {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn server_config(names: &[&str]) -> (Arc<rustls::ServerConfig>, CertificateDer<'static>) {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let ck = rcgen::generate_simple_self_signed(names).unwrap();
    let cert = ck.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    (Arc::new(cfg), cert)
}

/// Read a PROXY v2 header (signature, 16 bytes, then its length); `None` on anything
/// else.
async fn read_v2(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut head = [0u8; 16];
    s.read_exact(&mut head).await.ok()?;
    if head[..12] != *b"\r\n\r\n\0\r\nQUIT\n" {
        return None;
    }
    let len = u16::from_be_bytes([head[14], head[15]]) as usize;
    let mut rest = vec![0u8; len];
    s.read_exact(&mut rest).await.ok()?;
    let mut all = head.to_vec();
    all.extend(rest);
    Some(all)
}

impl TlsGear {
    pub async fn start(name: &str, bind: SocketAddr, names: &[&str], proxy_v2: bool) -> TlsGear {
        let (cfg, cert) = server_config(names);
        let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
        let l = TcpListener::bind(bind).await.unwrap();
        let addr = l.local_addr().unwrap();
        let handshakes = Arc::new(AtomicU64::new(0));
        let open = Arc::new(AtomicU64::new(0));
        let proxy_headers = Arc::new(Mutex::new(Vec::new()));
        let (h, o, p, n) = (
            handshakes.clone(),
            open.clone(),
            proxy_headers.clone(),
            name.to_string(),
        );
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let (acceptor, h, o, p, n) =
                    (acceptor.clone(), h.clone(), o.clone(), p.clone(), n.clone());
                tokio::spawn(async move {
                    if proxy_v2 {
                        match read_v2(&mut s).await {
                            Some(header) => p.lock().unwrap().push(header),
                            None => return,
                        }
                    }
                    let Ok(tls) = acceptor.accept(s).await else {
                        return;
                    };
                    h.fetch_add(1, Ordering::Relaxed);
                    o.fetch_add(1, Ordering::Relaxed);
                    let (r, mut w) = tokio::io::split(tls);
                    let mut r = BufReader::new(r);
                    if w.write_all(format!("{n}\n").as_bytes()).await.is_ok() {
                        let mut line = String::new();
                        while matches!(r.read_line(&mut line).await, Ok(k) if k > 0) {
                            if w.write_all(line.as_bytes()).await.is_err() {
                                break;
                            }
                            line.clear();
                        }
                    }
                    o.fetch_sub(1, Ordering::Relaxed);
                });
            }
        });
        TlsGear {
            name: name.to_string(),
            addr,
            cert,
            handshakes,
            open,
            proxy_headers,
            task,
        }
    }
}

/// A TLS client connection, trusting exactly `roots`.
pub type TlsClient = tokio_rustls::client::TlsStream<TcpStream>;

pub fn client_config(roots: &[CertificateDer<'static>]) -> Arc<rustls::ClientConfig> {
    let mut store = rustls::RootCertStore::empty();
    for r in roots {
        store.add(r.clone()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(store)
            .with_no_client_auth(),
    )
}

/// A TLS handshake with `name` as SNI over `tcp`, then the gear's first line (its
/// name).
pub async fn tls_hello<S>(
    tcp: S,
    name: &str,
    roots: &[CertificateDer<'static>],
) -> std::io::Result<(tokio_rustls::client::TlsStream<S>, String)>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let connector = tokio_rustls::TlsConnector::from(client_config(roots));
    let server = ServerName::try_from(name.to_string())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut tls = tokio::time::timeout(Duration::from_secs(10), connector.connect(server, tcp))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "handshake"))??;
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while got.len() < 256 {
        let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut b))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "first line"))??;
        if n == 0 || b[0] == b'\n' {
            break;
        }
        got.push(b[0]);
    }
    Ok((tls, String::from_utf8_lossy(&got).into_owned()))
}

/// Connect to `addr` and complete a TLS handshake with `name`; the gear's name.
pub async fn through(
    addr: SocketAddr,
    name: &str,
    roots: &[CertificateDer<'static>],
) -> std::io::Result<(TlsClient, String)> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    tls_hello(tcp, name, roots).await
}

/// A server recording the bytes of each connection until it closes.
pub struct Recorder {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Vec<u8>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Recorder {
    pub async fn start() -> Recorder {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let seen = s2.clone();
                tokio::spawn(async move {
                    let mut all = Vec::new();
                    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut all))
                        .await;
                    seen.lock().unwrap().push(all);
                });
            }
        });
        Recorder { addr, seen, task }
    }
}

/// A write side that sends at most `chunk` bytes per write, each flushed (on a socket
/// with `TCP_NODELAY`, one segment each): a ClientHello split over many packets.
pub struct Dribble<S> {
    pub inner: S,
    pub chunk: usize,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Dribble<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Dribble<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let n = buf.len().min(self.chunk);
        std::pin::Pin::new(&mut self.inner).poll_write(cx, &buf[..n])
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
