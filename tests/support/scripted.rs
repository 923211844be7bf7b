//! A web gear that speaks raw HTTP/1 from a script: each request head is handed to a
//! closure that says what bytes to answer, whether to read the body first, and what to
//! do with the connection afterwards. For what a well-behaved server never sends (a
//! `101` nobody asked for, odd framings, interim responses, trailers) and never does
//! (answer before reading an upload, then stop reading).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request as the gear read it.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// Which connection (1, 2, … in accept order).
    pub conn: u64,
    /// The head as received, without its blank line.
    pub head: String,
    /// The body, de-chunked; empty until it has been read.
    pub body: Vec<u8>,
    /// The trailer section of a chunked body, as received.
    pub trailers: String,
    /// The body arrived whole.
    pub complete: bool,
}

impl Seen {
    /// The first value of header `name` (case-insensitive), trimmed.
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }

    /// Every `name: value` line of header `name`.
    pub fn headers(&self, name: &str) -> Vec<String> {
        self.head
            .lines()
            .skip(1)
            .filter_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_string())
            })
            .collect()
    }
}

/// When the answer goes out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// Once the body was read to its end.
    AfterBody,
    /// As soon as the head arrived, the body unread.
    BeforeBody,
}

/// What happens to the connection after the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    /// Read the rest of the body if it was not read, then the next request.
    KeepAlive,
    /// Close at once.
    Close,
    /// Keep the connection open, reading nothing more, for this long; then close.
    Hold(Duration),
    /// Record every byte that still comes (a tunnel), until the peer closes.
    Tunnel,
}

/// The script's answer to one request head.
#[derive(Clone, Debug)]
pub struct Reply {
    pub bytes: Vec<u8>,
    /// More bytes written this long after `bytes` (an interim response, then the final).
    pub later: Option<(Duration, Vec<u8>)>,
    pub when: When,
    pub then: Then,
}

impl Reply {
    /// `bytes` once the body is read, then the next request.
    pub fn after(bytes: impl Into<Vec<u8>>) -> Reply {
        Reply {
            bytes: bytes.into(),
            later: None,
            when: When::AfterBody,
            then: Then::KeepAlive,
        }
    }

    /// And `bytes` after `wait`.
    pub fn and_later(mut self, wait: Duration, bytes: impl Into<Vec<u8>>) -> Reply {
        self.later = Some((wait, bytes.into()));
        self
    }

    pub fn then(mut self, then: Then) -> Reply {
        self.then = then;
        self
    }

    pub fn before_body(mut self) -> Reply {
        self.when = When::BeforeBody;
        self
    }
}

type Script = dyn Fn(&Seen) -> Reply + Send + Sync;

/// See the module docs.
pub struct Scripted {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    pub connections: Arc<AtomicU64>,
    /// Bytes received on connections after a [`Then::Tunnel`] answer.
    pub tunnel: Arc<Mutex<Vec<u8>>>,
    /// Connections the peer (the balancer) closed.
    pub closed: Arc<AtomicU64>,
}

impl Scripted {
    pub async fn start(script: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Scripted {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let g = Scripted {
            addr,
            seen: Arc::default(),
            connections: Arc::default(),
            tunnel: Arc::default(),
            closed: Arc::default(),
        };
        let script: Arc<Script> = Arc::new(script);
        let (seen, conns, tunnel, closed) = (
            g.seen.clone(),
            g.connections.clone(),
            g.tunnel.clone(),
            g.closed.clone(),
        );
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let n = conns.fetch_add(1, Ordering::SeqCst) + 1;
                let (script, seen, tunnel, closed) =
                    (script.clone(), seen.clone(), tunnel.clone(), closed.clone());
                tokio::spawn(async move {
                    if serve(s, n, &*script, &seen, &tunnel).await {
                        closed.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        g
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn tunnel_bytes(&self) -> Vec<u8> {
        self.tunnel.lock().unwrap().clone()
    }
}

/// Serve one connection; true when the peer closed it (rather than the script).
async fn serve(
    mut s: TcpStream,
    conn: u64,
    script: &Script,
    seen: &Mutex<Vec<Seen>>,
    tunnel: &Mutex<Vec<u8>>,
) -> bool {
    let mut buf = Vec::new();
    loop {
        let Some(end) = read_until(&mut s, &mut buf, |b| find(b, b"\r\n\r\n")).await else {
            return true;
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end + 4);
        let mut req = Seen {
            conn,
            head,
            ..Seen::default()
        };
        let reply = script(&req);
        let i = {
            let mut v = seen.lock().unwrap();
            v.push(req.clone());
            v.len() - 1
        };
        if reply.when == When::AfterBody {
            if !read_body(&mut s, &mut buf, &mut req).await {
                seen.lock().unwrap()[i] = req;
                return true;
            }
            seen.lock().unwrap()[i] = req.clone();
        }
        if s.write_all(&reply.bytes).await.is_err() {
            return true;
        }
        if let Some((wait, bytes)) = &reply.later {
            tokio::time::sleep(*wait).await;
            if s.write_all(bytes).await.is_err() {
                return true;
            }
        }
        match reply.then {
            Then::Close => return false,
            Then::Hold(d) => {
                tokio::time::sleep(d).await;
                return false;
            }
            Then::Tunnel => {
                tunnel.lock().unwrap().extend_from_slice(&buf);
                let mut chunk = [0u8; 4096];
                loop {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return true,
                        Ok(n) => tunnel.lock().unwrap().extend_from_slice(&chunk[..n]),
                    }
                }
            }
            Then::KeepAlive => {
                if reply.when == When::BeforeBody {
                    let ok = read_body(&mut s, &mut buf, &mut req).await;
                    seen.lock().unwrap()[i] = req;
                    if !ok {
                        return true;
                    }
                }
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Read into `buf` until `done` finds what it looks for; `None` when the peer closed
/// first (or after 64 MiB: a bound, not a case).
async fn read_until(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    done: impl Fn(&[u8]) -> Option<usize>,
) -> Option<usize> {
    let mut chunk = vec![0u8; 64 * 1024];
    while buf.len() < 64 << 20 {
        if let Some(i) = done(buf) {
            return Some(i);
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    None
}

/// Read the body `req`'s head announces (Content-Length or chunked); false when the
/// peer closed first.
async fn read_body(s: &mut TcpStream, buf: &mut Vec<u8>, req: &mut Seen) -> bool {
    let chunked = req
        .header("transfer-encoding")
        .is_some_and(|te| te.to_ascii_lowercase().ends_with("chunked"));
    if chunked {
        loop {
            let Some(line) = read_until(s, buf, |b| find(b, b"\r\n")).await else {
                return false;
            };
            let size_line = String::from_utf8_lossy(&buf[..line]).into_owned();
            buf.drain(..line + 2);
            let hex = size_line.split(';').next().unwrap_or("").trim();
            let Ok(size) = usize::from_str_radix(hex, 16) else {
                return false;
            };
            if size == 0 {
                // Trailer fields, then the blank line.
                loop {
                    let Some(end) = read_until(s, buf, |b| find(b, b"\r\n")).await else {
                        return false;
                    };
                    let line = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end + 2);
                    if line.is_empty() {
                        req.complete = true;
                        return true;
                    }
                    req.trailers.push_str(&line);
                    req.trailers.push_str("\r\n");
                }
            }
            if read_until(s, buf, |b| (b.len() >= size + 2).then_some(size))
                .await
                .is_none()
            {
                return false;
            }
            req.body.extend_from_slice(&buf[..size]);
            buf.drain(..size + 2);
        }
    }
    let len: usize = req
        .header("content-length")
        .and_then(|v| v.split(',').next()?.trim().parse().ok())
        .unwrap_or(0);
    if read_until(s, buf, |b| (b.len() >= len).then_some(len))
        .await
        .is_none()
    {
        return false;
    }
    req.body.extend(buf.drain(..len));
    req.complete = true;
    true
}
