//! Test support: small backend servers, a `gearlb` process wrapper and HTTP helpers.
//! Everything listens on 127.0.0.1 with ports chosen by the kernel, but the few a test
//! must know before a process binds them ([`free_port`]). [`activemq`]: Debian's ActiveMQ
//! and origin-server's routing plugin, for the STOMP consumer's tests.

#![allow(dead_code)]

pub mod activemq;
pub mod router;
mod scripted;
pub mod tls_gear;
#[allow(unused_imports)]
pub use scripted::{Reply, Scripted, Seen as SeenRequest, Then, When};

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

pub type BoxBody = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

pub fn full(s: impl Into<Bytes>) -> BoxBody {
    Full::new(s.into()).map_err(|never| match never {}).boxed()
}

/// A web gear for tests. Routes:
/// - `/headers`: JSON `{method, uri, headers}` of what it received;
/// - `/slow?ms=N`: answers after N ms;
/// - `/download?bytes=N`: N bytes, generated in 64 KiB chunks;
/// - `/upload`: reads the body and answers its length;
/// - anything else: `backend <name>`.
pub struct TestBackend {
    pub name: String,
    pub addr: SocketAddr,
    /// Requests served, health checks excluded.
    pub requests: Arc<AtomicU64>,
    pub connections: Arc<AtomicU64>,
    /// `Host` of every health check received.
    pub checks: Arc<Mutex<Vec<String>>>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl TestBackend {
    pub async fn start(name: &str) -> TestBackend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(name, listener)
    }

    /// Serve on a given address (to bring a killed backend back on its port).
    pub async fn start_on(name: &str, addr: SocketAddr) -> TestBackend {
        let listener = TcpListener::bind(addr).await.unwrap();
        Self::serve(name, listener)
    }

    /// Serve on `addr` in network namespace `ns` (see [`in_netns`]); within a runtime.
    pub fn start_in(name: &str, ns: &str, addr: SocketAddr) -> TestBackend {
        let l = in_netns(ns, move || std::net::TcpListener::bind(addr))
            .unwrap_or_else(|e| panic!("bind {addr} in {ns}: {e}"));
        l.set_nonblocking(true).unwrap();
        Self::serve(name, TcpListener::from_std(l).unwrap())
    }

    fn serve(name: &str, listener: TcpListener) -> TestBackend {
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicU64::new(0));
        let connections = Arc::new(AtomicU64::new(0));
        let checks = Arc::new(Mutex::new(Vec::new()));
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let (n, r, c, k) = (
            name.to_string(),
            requests.clone(),
            connections.clone(),
            checks.clone(),
        );
        tokio::spawn(async move {
            loop {
                let (stream, _) = tokio::select! {
                    a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
                    _ = stopped.changed() => break,
                };
                c.fetch_add(1, Ordering::Relaxed);
                let (n, r, k) = (n.clone(), r.clone(), k.clone());
                let mut stopped = stopped.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let is_check = req
                            .headers()
                            .get("user-agent")
                            .is_some_and(|v| v == "gearlb-health-check");
                        if is_check {
                            let host = req
                                .headers()
                                .get("host")
                                .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned());
                            k.lock().unwrap().push(host.unwrap_or_default());
                        } else {
                            r.fetch_add(1, Ordering::Relaxed);
                        }
                        let n = n.clone();
                        async move { Ok::<_, Infallible>(route(&n, req).await) }
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .with_upgrades();
                    tokio::select! {
                        _ = conn => {}
                        _ = stopped.changed() => {}
                    }
                });
            }
        });
        TestBackend {
            name: name.to_string(),
            addr,
            requests,
            connections,
            checks,
            stop,
        }
    }

    /// Stop listening and cut every open connection (like a killed gear).
    pub fn kill(&self) {
        let _ = self.stop.send(true);
    }

    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

impl Drop for TestBackend {
    fn drop(&mut self) {
        self.kill();
    }
}

fn query_num(req: &Request<Incoming>, key: &str) -> u64 {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

async fn route(name: &str, mut req: Request<Incoming>) -> Response<BoxBody> {
    match req.uri().path() {
        "/ws" => {
            use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
            use tokio_tungstenite::tungstenite::protocol::Role;
            let Some(key) = req.headers().get("sec-websocket-key") else {
                return Response::builder()
                    .status(400)
                    .body(full("no key"))
                    .unwrap();
            };
            let accept = derive_accept_key(key.as_bytes());
            let upgrade = hyper::upgrade::on(&mut req);
            let name = name.to_string();
            tokio::spawn(async move {
                let Ok(io) = upgrade.await else { return };
                let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
                    TokioIo::new(io),
                    Role::Server,
                    None,
                )
                .await;
                use futures_util::{SinkExt, StreamExt};
                while let Some(Ok(msg)) = ws.next().await {
                    if msg.is_text() {
                        let reply = format!("{name}: {}", msg.into_text().unwrap());
                        if ws.send(reply.into()).await.is_err() {
                            break;
                        }
                    } else if msg.is_close() {
                        break;
                    }
                }
            });
            Response::builder()
                .status(101)
                .header("connection", "upgrade")
                .header("upgrade", "websocket")
                .header("sec-websocket-accept", accept)
                .body(full(""))
                .unwrap()
        }
        p if p.starts_with("/headers") => {
            let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (k, v) in req.headers() {
                headers
                    .entry(k.as_str().to_string())
                    .or_default()
                    .push(String::from_utf8_lossy(v.as_bytes()).into_owned());
            }
            let body = serde_json::json!({
                "backend": name,
                "method": req.method().as_str(),
                "uri": req.uri().to_string(),
                "version": format!("{:?}", req.version()),
                "headers": headers,
            });
            Response::builder()
                .header("content-type", "application/json")
                .header("connection", "x-resp-hop")
                .header("x-resp-hop", "secret")
                .header("keep-alive", "timeout=5")
                .body(full(body.to_string()))
                .unwrap()
        }
        "/slow" => {
            tokio::time::sleep(Duration::from_millis(query_num(&req, "ms"))).await;
            Response::new(full(format!("slow done by {name}")))
        }
        "/download" => {
            let total = query_num(&req, "bytes");
            let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
            Response::builder()
                .header("content-length", total.to_string())
                .body(GenBody { left: total, chunk }.boxed())
                .unwrap()
        }
        "/upload" => {
            let mut body = req.into_body();
            let mut n: u64 = 0;
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(f) => n += f.data_ref().map_or(0, |d| d.len() as u64),
                    Err(_) => break,
                }
            }
            Response::new(full(n.to_string()))
        }
        _ => Response::new(full(format!("backend {name}"))),
    }
}

/// A body of `left` bytes in `chunk`-sized frames, generated lazily.
struct GenBody {
    left: u64,
    chunk: Bytes,
}

impl hyper::body::Body for GenBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        let n = self.left.min(self.chunk.len() as u64) as usize;
        self.left -= n as u64;
        std::task::Poll::Ready(Some(Ok(Frame::data(self.chunk.slice(..n)))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }
}

/// Send a body of `len` bytes, generated lazily (for uploads).
pub fn gen_body(len: u64) -> BoxBody {
    GenBody {
        left: len,
        chunk: Bytes::from(vec![b'u'; 64 * 1024]),
    }
    .boxed()
}

/// A simple HTTP/1.1 response, fully read.
#[derive(Debug)]
pub struct Got {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Got {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// The tests' HTTP client.
pub type TestClient =
    hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, BoxBody>;

/// A keep-alive HTTP client (one pool per test).
pub fn client() -> TestClient {
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(2))
        .build_http()
}

/// GET `path` from `addr` with extra headers.
pub async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Result<Got, String> {
    let mut req = Request::get(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send(&client(), req.body(full("")).unwrap()).await
}

pub async fn send(c: &TestClient, req: Request<BoxBody>) -> Result<Got, String> {
    let resp = c.request(req).await.map_err(|e| format!("{e:?}"))?;
    let status = resp.status().as_u16();
    let (parts, body) = resp.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    Ok(Got {
        status,
        headers: parts.headers,
        body,
    })
}

/// Raw bytes in, raw bytes out (until the server closes or `wait` passes).
pub fn raw(addr: SocketAddr, request: &[u8], wait: Duration) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gearlb"))
}

/// A `gearlb run` process with its own directory; killed when dropped.
pub struct Gearlb {
    pub dir: PathBuf,
    pub config: PathBuf,
    pub child: Child,
    pub proxy: SocketAddr,
    pub status: SocketAddr,
    /// Advertised gossip address, when gossip is on.
    pub gossip: Option<SocketAddr>,
    pub log: Arc<Mutex<Vec<String>>>,
}

/// A fresh working directory for one balancer.
pub fn workdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("gearlb-test")
        .tempdir()
        .unwrap()
}

/// A port for a process the test starts later and must know in advance (a gossip
/// address its peers are given, a restarted balancer found where it was, etcd).
///
/// A port the kernel picks with `bind(0)` is a poor choice: once the probe lets it go,
/// it is back in the ephemeral range, and any outgoing connection on the machine (other
/// tests' gossip, health checks, clients) may take it as its source port before the
/// child binds it: "Address already in use". So the port comes from below the kernel's
/// ephemeral range, which neither `bind(0)` nor `connect` ever hands out. It is tried
/// with a TCP and a UDP bind on `ip` (gossip may use either), and this process never
/// gives the same port twice; the start point depends on the process id, so two test
/// binaries running at once walk different ports.
pub fn free_port(ip: &str) -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (low, high) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|n| n.parse::<u32>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999));
    // The widest span outside the ephemeral range, above the privileged ports.
    let (base, span) = if low.saturating_sub(10_000) >= 65_535 - high {
        (10_000, low.saturating_sub(10_000))
    } else {
        (high + 1, 65_535 - high)
    };
    assert!(
        span >= 1000,
        "no room outside the ephemeral range {low}-{high}"
    );
    let start = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (base + (start + n) % span) as u16;
        let tcp = std::net::TcpListener::bind((ip, port));
        let udp = std::net::UdpSocket::bind((ip, port));
        if tcp.is_ok() && udp.is_ok() {
            return port;
        }
    }
    panic!("no free port on {ip} outside the ephemeral range {low}-{high}");
}

/// [`free_port`] on 127.0.0.1, as an address.
pub fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port("127.0.0.1")))
}

/// A config file body with the given `[[backends]]` and extra TOML; listeners on port 0.
pub fn config_text(dir: &Path, backends: &[(&str, SocketAddr)], extra: &str) -> String {
    let mut s = format!(
        "[listen]\nproxy = \"127.0.0.1:0\"\nstatus = \"127.0.0.1:0\"\n[control]\nsocket = \"{}\"\n[state]\ndir = \"{}\"\n",
        dir.join("control.sock").display(),
        dir.join("data").display()
    );
    s.push_str(extra);
    s.push('\n');
    for (name, addr) in backends {
        s.push_str(&format!(
            "[[backends]]\nname = \"{name}\"\naddr = \"{addr}\"\n"
        ));
    }
    s
}

impl Gearlb {
    /// Write `config` into `dir/gearlb.toml` and start; waits until it serves.
    pub fn start(dir: &Path, config: &str) -> Gearlb {
        let path = dir.join("gearlb.toml");
        std::fs::write(&path, config).unwrap();
        Self::start_file(dir, &path)
    }

    pub fn start_file(dir: &Path, config: &Path) -> Gearlb {
        Self::start_file_with(dir, config, &[], &[])
    }

    /// Start through a command prefix (e.g. `ip netns exec NAME`).
    pub fn start_in(dir: &Path, config: &Path, prefix: &[&str]) -> Gearlb {
        Self::launch(dir, config, prefix, &[], &[])
    }

    /// Through a command prefix, with environment variables (a gear in a namespace).
    pub fn start_in_with(
        dir: &Path,
        config: &Path,
        prefix: &[&str],
        env: &[(&str, &str)],
    ) -> Gearlb {
        Self::launch(dir, config, prefix, &[], env)
    }

    /// As [`Gearlb::start`], with more `gearlb run` arguments and environment variables.
    pub fn start_with(dir: &Path, config: &str, args: &[&str], env: &[(&str, &str)]) -> Gearlb {
        let path = dir.join("gearlb.toml");
        std::fs::write(&path, config).unwrap();
        Self::start_file_with(dir, &path, args, env)
    }

    pub fn start_file_with(
        dir: &Path,
        config: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Gearlb {
        Self::launch(dir, config, &[], args, env)
    }

    fn launch(
        dir: &Path,
        config: &Path,
        prefix: &[&str],
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Gearlb {
        let mut cmd = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin());
                c
            }
            None => Command::new(bin()),
        };
        let mut child = cmd
            .args(["run", "--config"])
            .arg(config)
            .args(args)
            .envs(env.iter().copied())
            .current_dir(dir)
            .env("GEARLB_LOG", "info")
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let l = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("gearlb serving") {
                    let _ = tx.send(line.clone());
                }
                l.lock().unwrap().push(line);
            }
        });
        let l = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        let line = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                panic!("gearlb did not start:\n{}", log.lock().unwrap().join("\n"));
            }
        };
        // `key=value` in text logs, `"key":"value"` in JSON logs.
        let field = |key: &str| -> Option<SocketAddr> {
            let (start, end) = match line.find(&format!(" {key}=")) {
                Some(i) => (i + key.len() + 2, " "),
                None => (line.find(&format!("\"{key}\":\""))? + key.len() + 4, "\""),
            };
            line[start..].split(end).next()?.parse().ok()
        };
        Gearlb {
            dir: dir.to_path_buf(),
            config: config.to_path_buf(),
            proxy: field("proxy").expect("proxy address in the log"),
            status: field("status").expect("status address in the log"),
            gossip: field("gossip"),
            child,
            log,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} failed");
    }

    /// Wait for exit; returns the exit code.
    pub fn wait(&mut self, limit: Duration) -> Option<i32> {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Run `gearlb ctl --socket … ARGS`; returns (exit code, stdout, stderr).
    pub fn ctl(&self, args: &[&str]) -> (i32, String, String) {
        ctl(&self.dir.join("control.sock"), args)
    }

    /// Backend names in the balancer's status, in order.
    pub fn backend_names(&self) -> Vec<String> {
        let (code, out, err) = self.ctl(&["status", "--json"]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["backends"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// The cluster view (`ctl peers --json`).
    pub fn peers(&self) -> serde_json::Value {
        let (code, out, err) = self.ctl(&["peers", "--json"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap()
    }

    /// Ids of the live balancers this one sees (itself included).
    pub fn live(&self) -> Vec<String> {
        self.peers()["live"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    }

    /// The status report (`ctl status --json`).
    pub fn status_json(&self) -> serde_json::Value {
        let (code, out, err) = self.ctl(&["status", "--json"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap()
    }

    /// Resident memory of the process now and at its peak, in KiB.
    pub fn rss_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let get = |key: &str| {
            status
                .lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (get("VmRSS:"), get("VmHWM:"))
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Gearlb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn ctl(socket: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin())
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Poll `f` until it is true or `limit` passes.
pub async fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

pub const SECRET: &str = "test-cluster-secret-0123456789";

/// Config for a gossiping balancer `id` of application `app1` (100 ms gossip).
pub fn cluster_config(dir: &Path, id: &str, secret: &str, extra: &str) -> String {
    config_text(
        dir,
        &[],
        &format!(
            "[cluster]\nnode_id = \"{id}\"\nid = \"app1\"\ntransport = \"http\"\nsecret = \"{secret}\"\ngossip_interval = \"100ms\"\n[health]\ninterval = \"300ms\"\n{extra}"
        ),
    )
}

/// As [`cluster_config`], with gossip on a TCP port of its own (`cluster.listen`)
/// instead of the proxy port.
pub fn cluster_config_tcp(dir: &Path, id: &str, secret: &str, extra: &str) -> String {
    cluster_config(dir, id, secret, extra).replace(
        "transport = \"http\"\n",
        "transport = \"tcp\"\nlisten = \"127.0.0.1:0\"\n",
    )
}

/// `set-peers` argument in the subscriber hook's format for these balancers.
pub fn peer_list(lbs: &[(&str, &Gearlb)]) -> String {
    lbs.iter()
        .map(|(id, lb)| format!("'{id}'='{id}|{}'", lb.gossip.unwrap()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `n` gossiping balancers `lb1..lbn` that know each other and `gears`, all live.
pub async fn cluster_of(
    n: usize,
    gears: &[&TestBackend],
    extra: &str,
) -> (Vec<tempfile::TempDir>, Vec<Gearlb>) {
    let dirs: Vec<_> = (0..n).map(|_| workdir()).collect();
    let lbs: Vec<Gearlb> = (0..n)
        .map(|i| {
            Gearlb::start(
                dirs[i].path(),
                &cluster_config(dirs[i].path(), &format!("lb{}", i + 1), SECRET, extra),
            )
        })
        .collect();
    let ids: Vec<String> = (1..=n).map(|i| format!("lb{i}")).collect();
    let pairs: Vec<(&str, &Gearlb)> = ids.iter().map(String::as_str).zip(lbs.iter()).collect();
    let list = peer_list(&pairs);
    let entries: Vec<String> = gears
        .iter()
        .map(|g| format!("{}-ns.example.com|{}", g.name, g.addr))
        .collect();
    let entries = entries.join(" ");
    for lb in &lbs {
        assert_eq!(lb.ctl(&["set-peers", &list]).0, 0);
        assert_eq!(lb.ctl(&["update-cluster", &entries]).0, 0);
    }
    let all_live = eventually(Duration::from_secs(10), || {
        lbs.iter().all(|lb| lb.live() == ids)
    })
    .await;
    assert!(all_live, "balancers did not form a cluster");
    (dirs, lbs)
}

/// The state a balancer reports for a backend.
pub fn backend_state(lb: &Gearlb, name: &str) -> String {
    lb.status_json()["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .map(|b| b["state"].as_str().unwrap().to_string())
        .unwrap_or_else(|| "absent".into())
}

/// A broker for the scaler: HTTPS on 127.0.0.1 with a test CA. It checks the broker key
/// where the real broker reads it, in the request's body (`broker_key.rb`: the body's
/// parameters), for the GET of the scale limits as for events, and refuses a key in
/// the URL; records `scale-up`/`scale-down` events with the `X-Gearlb-Node` that sent
/// them, and answers 422 once the application would go past `scale_max` gears.
pub struct TestBroker {
    pub addr: SocketAddr,
    /// PEM of the CA that signed the broker's certificate.
    pub ca_file: PathBuf,
    pub events: Arc<Mutex<Vec<(String, String)>>>,
    /// Scale limits served (key accepted).
    pub limit_reads: Arc<AtomicU64>,
    /// Requests that carried a broker key in their URL (refused with 400).
    pub keys_in_url: Arc<AtomicU64>,
    /// While set, the GET of the scale limits answers 503 with a broker error message.
    pub fail_limits: Arc<AtomicBool>,
    _dir: tempfile::TempDir,
    stop: tokio::sync::watch::Sender<bool>,
}

pub const BROKER_TOKEN: &str = "test-broker-token";
pub const BROKER_IV: &str = "test-broker-iv";

impl TestBroker {
    pub async fn start(gears: usize, scale_max: usize) -> TestBroker {
        Self::start_on("127.0.0.1:0".parse().unwrap(), gears, scale_max).await
    }

    pub async fn start_on(bind: SocketAddr, gears: usize, scale_max: usize) -> TestBroker {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};
        let dir = tempfile::tempdir().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let mut leaf = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        leaf.subject_alt_names.push(SanType::IpAddress(bind.ip()));
        let leaf_key = KeyPair::generate().unwrap();
        let cert = leaf.signed_by(&leaf_key, &ca).unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind(bind).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let gears = Arc::new(AtomicU64::new(gears as u64));
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let ev = events.clone();
        let counters = BrokerCounters {
            limit_reads: Arc::default(),
            keys_in_url: Arc::default(),
            fail_limits: Arc::default(),
        };
        let shared = counters.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = tokio::select! {
                    a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
                    _ = stopped.changed() => break,
                };
                let (acceptor, ev, gears) = (acceptor.clone(), ev.clone(), gears.clone());
                let counters = shared.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (ev, gears, counters) = (ev.clone(), gears.clone(), counters.clone());
                        async move {
                            Ok::<_, Infallible>(
                                broker_route(req, &ev, &gears, scale_max as u64, &counters).await,
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        TestBroker {
            addr,
            ca_file,
            events,
            limit_reads: counters.limit_reads,
            keys_in_url: counters.keys_in_url,
            fail_limits: counters.fail_limits,
            _dir: dir,
            stop,
        }
    }

    /// Events received: (event, node).
    pub fn events(&self) -> Vec<(String, String)> {
        self.events.lock().unwrap().clone()
    }

    /// Environment and config for a balancer of application `app` in namespace `ns`
    /// scaling through this broker: writes the broker key files under `home`.
    pub fn gear_env(&self, home: &Path) -> Vec<(String, String)> {
        std::fs::create_dir_all(home.join(".auth")).unwrap();
        std::fs::write(home.join(".auth/token"), format!("{BROKER_TOKEN}\n")).unwrap();
        std::fs::write(home.join(".auth/iv"), format!("{BROKER_IV}\n")).unwrap();
        vec![
            ("OPENSHIFT_NAMESPACE".into(), "ns".into()),
            ("OPENSHIFT_APP_NAME".into(), "app".into()),
            ("OPENSHIFT_HOMEDIR".into(), home.display().to_string()),
            (
                "OPENSHIFT_REPO_DIR".into(),
                home.join("repo").display().to_string(),
            ),
            ("OPENSHIFT_BROKER_HOST".into(), self.addr.to_string()),
        ]
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

#[derive(Clone)]
struct BrokerCounters {
    limit_reads: Arc<AtomicU64>,
    keys_in_url: Arc<AtomicU64>,
    fail_limits: Arc<AtomicBool>,
}

async fn broker_route(
    req: Request<Incoming>,
    events: &Mutex<Vec<(String, String)>>,
    gears: &AtomicU64,
    scale_max: u64,
    counters: &BrokerCounters,
) -> Response<BoxBody> {
    let node = req
        .headers()
        .get("x-gearlb-node")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let method = req.method().clone();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let form = String::from_utf8_lossy(&body).into_owned();
    let field = |s: &str, k: &str| -> Option<String> {
        s.split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(key, _)| *key == k)
            .map(|(_, v)| v.to_string())
    };
    if query.contains("broker_auth") {
        counters.keys_in_url.fetch_add(1, Ordering::Relaxed);
        return Response::builder()
            .status(400)
            .body(full("broker key in the URL"))
            .unwrap();
    }
    if field(&form, "broker_auth_key").as_deref() != Some(BROKER_TOKEN)
        || field(&form, "broker_auth_iv").as_deref() != Some(BROKER_IV)
    {
        return Response::builder()
            .status(401)
            .body(full("bad broker key"))
            .unwrap();
    }
    match (method, path.as_str()) {
        (hyper::Method::GET, "/broker/rest/domains/ns/applications/app")
            if counters.fail_limits.load(Ordering::Relaxed) =>
        {
            Response::builder()
                .status(503)
                .body(full(
                    r#"{"messages":[{"text":"The broker is down for maintenance","severity":"error"}]}"#,
                ))
                .unwrap()
        }
        (hyper::Method::GET, "/broker/rest/domains/ns/applications/app") => {
            counters.limit_reads.fetch_add(1, Ordering::Relaxed);
            Response::new(full(
                serde_json::json!({"data": {"scale_min": 1, "scale_max": scale_max}}).to_string(),
            ))
        }
        (hyper::Method::POST, "/broker/rest/domains/ns/applications/app/events") => {
            let event = field(&form, "event").unwrap_or_default();
            events.lock().unwrap().push((event.clone(), node));
            match event.as_str() {
                "scale-up" if gears.load(Ordering::Relaxed) >= scale_max => Response::builder()
                    .status(422)
                    .body(full("at max"))
                    .unwrap(),
                "scale-up" => {
                    gears.fetch_add(1, Ordering::Relaxed);
                    Response::new(full("{}"))
                }
                "scale-down" => {
                    gears.fetch_sub(1, Ordering::Relaxed);
                    Response::new(full("{}"))
                }
                _ => Response::builder()
                    .status(400)
                    .body(full("bad event"))
                    .unwrap(),
            }
        }
        _ => Response::builder().status(404).body(full("")).unwrap(),
    }
}

/// Run `ip ARGS…` (iproute2); panics with its error output on failure.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("the `ip` command (iproute2)");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Run `f` on a thread that entered network namespace `ns` (`/run/netns/<ns>`, made by
/// `ip netns add`): the sockets it makes live there, and stay there.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    use std::os::fd::AsFd;
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        rustix::thread::move_into_link_name_space(
            fd.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .expect("setns into the test's namespace");
        f()
    })
    .join()
    .unwrap()
}

/// Network-namespace tests need root; CI runs as root, so not being root is a failure.
pub fn require_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test needs root (network namespaces); CI runs as root"
    );
}

/// One response (head and `Content-Length` body) from `s`; what follows stays in `rest`.
pub fn read_head_and_body(s: &mut std::net::TcpStream, rest: &mut Vec<u8>) -> (String, String) {
    use std::io::Read;
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&rest[..end]).into_owned();
            let len = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if rest.len() >= end + 4 + len {
                let body = String::from_utf8_lossy(&rest[end + 4..end + 4 + len]).into_owned();
                rest.drain(..end + 4 + len);
                return (head, body);
            }
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(rest));
        rest.extend_from_slice(&chunk[..n]);
    }
}
