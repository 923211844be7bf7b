//! openloop: HTTP/1.1 keep-alive load at a fixed rate, open loop, for `bench/run.sh`'s
//! `fixed_rate` scenario (the tail at half of HAProxy's peak).
//!
//! **Why not oha.** With `-q`, oha keeps every result in an unbounded channel until the
//! run ends. The channel's buffer doubles as it fills, and each doubling copies it whole
//! and faults in the new pages, on the one thread that also sends the requests: at 27 000
//! requests a second the copies at 2^18 and 2^19 results (9.7 s and 19.4 s into a 20 s
//! run) stop the load for tens to hundreds of milliseconds. Its pacer stops with it and
//! then releases the whole backlog at once, which queues behind the connections: the p99
//! of a run measured mostly whether and how long oha stopped (bench/history/2026-11-27.md). This
//! tool records into histograms of fixed size and allocates nothing per request once the
//! run has started.
//!
//! **Model** (oha's `--latency-correction`): a pacer releases request *i* at
//! `start + i / rate`. tokio's timer ticks every millisecond, so the requests due in a
//! tick are released together, each stamped with the moment it was released (up to a
//! tick after it was due). Each of the connections, all opened before the start, takes
//! the oldest released request, sends it and reads the whole answer. Its latency counts
//! from its stamp, so the time it waited for a free connection counts too (coordinated
//! omission corrected). Requests still in flight at the end may finish within `--grace`;
//! the rest are counted as errors.
//!
//! **Its own delay.** A release stamped late because this thread was not run (its CPU
//! busy with others) hides that delay from the latencies, as in oha. So the pacer records
//! how late each release was against its due time, in a histogram of its own, reported as
//! `openloop.releaseLate`: a tick (1 ms) and a little is the timer; more is this tool
//! held up, and the latencies of that run are to be read with it.
//!
//! The output is JSON with the fields of oha's that the harness reads
//! (`summary.requestsPerSec`: answered requests a second, `summary.slowest`,
//! `latencyPercentiles`, `statusCodeDistribution`, `errorDistribution`); times in seconds.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

#[derive(Parser)]
#[command(
    about = "HTTP/1.1 keep-alive load at a fixed rate, open loop: latency from each request's release"
)]
struct Args {
    /// Connections (keep-alive), all opened before the run starts.
    #[arg(short = 'c', default_value_t = 64)]
    connections: usize,
    /// Requests per second.
    #[arg(short = 'q')]
    rate: f64,
    /// How long to release requests: seconds, as "20" or "20s".
    #[arg(short = 'z', value_parser = parse_secs)]
    duration: Duration,
    /// How long the requests released before the end may still take; later ones are errors.
    #[arg(long, default_value = "2s", value_parser = parse_secs)]
    grace: Duration,
    /// http://HOST:PORT/PATH (plain HTTP/1.1 only).
    url: String,
}

fn parse_secs(s: &str) -> Result<Duration, String> {
    let n = s.strip_suffix('s').unwrap_or(s);
    match n.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!("'{s}' is not a positive number of seconds")),
    }
}

/// The target: where to connect, and the request every connection sends.
struct Target {
    addr: SocketAddr,
    request: Vec<u8>,
}

fn target(url: &str) -> Result<Target> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("'{url}': only http:// URLs"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        bail!("'{url}' has no host");
    }
    let with_port = if authority.contains(':') {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let addr = with_port
        .to_socket_addrs()
        .with_context(|| format!("resolving {with_port}"))?
        .next()
        .with_context(|| format!("{with_port} has no address"))?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: openloop\r\nAccept: */*\r\n\r\n"
    )
    .into_bytes();
    Ok(Target { addr, request })
}

/// What the pacer and the connections share (one thread: `Rc`, `Cell`, `RefCell`).
struct Shared {
    /// Released requests not yet taken: the moment each was released.
    released: RefCell<VecDeque<Instant>>,
    ready: Notify,
    pacing_done: Cell<bool>,
    in_flight: Cell<u64>,
    latency_ns: RefCell<Histogram<u64>>,
    /// How late each release was against its due time.
    release_late_ns: RefCell<Histogram<u64>>,
    statuses: RefCell<BTreeMap<u16, u64>>,
    errors: RefCell<BTreeMap<String, u64>>,
}

impl Shared {
    fn errors(&self, what: String, n: u64) {
        *self.errors.borrow_mut().entry(what).or_insert(0) += n;
    }
}

/// A histogram of nanoseconds up to an hour, 3 significant digits: its size is fixed.
fn histogram() -> Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 3_600_000_000_000, 3)?)
}

/// Releases request i at `start + i / rate` until `end`, stamping each with the moment the
/// timer let it go.
async fn pace(shared: Rc<Shared>, start: Instant, end: Instant, rate: f64) {
    let due = |i: u64| start + Duration::from_secs_f64(i as f64 / rate);
    let mut i: u64 = 0;
    loop {
        let next = due(i);
        if next >= end {
            break;
        }
        tokio::time::sleep_until(next.into()).await;
        let now = Instant::now();
        let mut n = 0;
        {
            let mut released = shared.released.borrow_mut();
            let mut late = shared.release_late_ns.borrow_mut();
            while due(i) <= now && due(i) < end {
                released.push_back(now);
                late.saturating_record(nanos(now - due(i)).max(1));
                i += 1;
                n += 1;
            }
        }
        for _ in 0..n {
            shared.ready.notify_one();
        }
    }
    shared.pacing_done.set(true);
    shared.ready.notify_waiters();
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// One keep-alive connection and its read buffer.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Result<Conn> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(16 * 1024),
        })
    }

    /// Sends the request and reads its whole answer: (status, whether the connection
    /// stays open). Interim (1xx) answers before it are read and passed over.
    async fn exchange(&mut self, request: &[u8]) -> Result<(u16, bool)> {
        self.stream.write_all(request).await.context("sending")?;
        self.buf.clear();
        let head = loop {
            match parse_head(&self.buf)? {
                None => self.read_more("a response head").await?,
                Some(h) if (100..200).contains(&h.status) => {
                    self.buf.drain(..h.head_len);
                }
                Some(h) => break h,
            }
        };
        let total = head.head_len + head.body_len;
        while self.buf.len() < total {
            self.read_more("a response body").await?;
        }
        if self.buf.len() > total {
            bail!("bytes after the response");
        }
        Ok((head.status, head.keep))
    }

    async fn read_more(&mut self, what: &str) -> Result<()> {
        let n = self.stream.read_buf(&mut self.buf).await;
        if n.with_context(|| format!("reading {what}"))? == 0 {
            bail!("connection closed within {what}");
        }
        Ok(())
    }
}

/// What `exchange` needs of a response head.
#[derive(Debug, PartialEq)]
struct Head {
    status: u16,
    keep: bool,
    head_len: usize,
    body_len: usize,
}

/// Parses the response head at the start of `buf`: `None` while it is incomplete. Reads
/// `Content-Length` bodies only (the bench's nginx answers with a length); allocates
/// nothing.
fn parse_head(buf: &[u8]) -> Result<Option<Head>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(buf).context("parsing the response head")? {
        httparse::Status::Partial => return Ok(None),
        httparse::Status::Complete(n) => n,
    };
    let status = response.code.unwrap_or(0);
    if status == 101 {
        bail!("a 101 answer to a request that asked for no upgrade");
    }
    let mut keep = response.version == Some(1);
    let mut length = None;
    for h in response.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok());
            length = Some(n.context("a Content-Length that is not a number")?);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            bail!("a Transfer-Encoding response (openloop reads Content-Length bodies only)");
        } else if h.name.eq_ignore_ascii_case("connection") {
            let mut tokens = h.value.split(|&b| b == b',').map(|t| t.trim_ascii());
            if tokens.any(|t| t.eq_ignore_ascii_case(b"close")) {
                keep = false;
            }
        }
    }
    let body_len = match (status, length) {
        (100..=199 | 204 | 304, _) => 0,
        (_, Some(n)) => n,
        (_, None) => bail!("a {status} response without Content-Length"),
    };
    Ok(Some(Head {
        status,
        keep,
        head_len,
        body_len,
    }))
}

/// One connection's loop: take the oldest released request, send it, record its latency.
async fn work(shared: Rc<Shared>, target: Rc<Target>, mut conn: Option<Conn>) {
    loop {
        let stamp = loop {
            if let Some(stamp) = shared.released.borrow_mut().pop_front() {
                break Some(stamp);
            }
            if shared.pacing_done.get() {
                break None;
            }
            shared.ready.notified().await;
        };
        let Some(stamp) = stamp else { return };
        shared.in_flight.set(shared.in_flight.get() + 1);
        let result = async {
            let c = match conn.as_mut() {
                Some(c) => c,
                None => conn.insert(Conn::open(target.addr).await?),
            };
            c.exchange(&target.request).await
        }
        .await;
        shared.in_flight.set(shared.in_flight.get() - 1);
        match result {
            Ok((status, keep)) => {
                let ns = nanos(stamp.elapsed());
                shared.latency_ns.borrow_mut().saturating_record(ns.max(1));
                *shared.statuses.borrow_mut().entry(status).or_insert(0) += 1;
                if !keep {
                    conn = None;
                }
            }
            Err(e) => {
                shared.errors(format!("{e:#}"), 1);
                conn = None;
            }
        }
    }
}

async fn run(args: Args) -> Result<serde_json::Value> {
    if !(args.rate.is_finite() && args.rate > 0.0) {
        bail!("-q must be a positive number of requests per second");
    }
    if args.connections == 0 {
        bail!("-c must be at least 1");
    }
    let target = Rc::new(target(&args.url)?);
    let mut conns = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        conns.push(Conn::open(target.addr).await?);
    }
    // Room for two seconds of released requests before the queue would grow.
    let room = ((args.rate * 2.0) as usize).max(1024);
    let shared = Rc::new(Shared {
        released: RefCell::new(VecDeque::with_capacity(room)),
        ready: Notify::new(),
        pacing_done: Cell::new(false),
        in_flight: Cell::new(0),
        latency_ns: RefCell::new(histogram()?),
        release_late_ns: RefCell::new(histogram()?),
        statuses: RefCell::new(BTreeMap::new()),
        errors: RefCell::new(BTreeMap::new()),
    });
    let start = Instant::now() + Duration::from_millis(10);
    let end = start + args.duration;
    let local = tokio::task::LocalSet::new();
    local.spawn_local(pace(shared.clone(), start, end, args.rate));
    let workers: Vec<_> = conns
        .into_iter()
        .map(|c| local.spawn_local(work(shared.clone(), target.clone(), Some(c))))
        .collect();
    let all_done = async {
        for w in workers {
            let _ = w.await;
        }
    };
    let finished = local
        .run_until(async {
            tokio::time::timeout_at((end + args.grace).into(), all_done)
                .await
                .is_ok()
        })
        .await;
    let elapsed = start.elapsed().as_secs_f64();
    let left = shared.in_flight.get() + shared.released.borrow().len() as u64;
    if !finished && left > 0 {
        let what = format!(
            "not answered within the grace ({:?}) after the end",
            args.grace
        );
        shared.errors(what, left);
    }
    let h = shared.latency_ns.borrow();
    let secs = |ns: u64| ns as f64 / 1e9;
    let completed = h.len();
    let percentiles: serde_json::Map<String, serde_json::Value> = [
        ("p50", 50.0),
        ("p90", 90.0),
        ("p99", 99.0),
        ("p99.9", 99.9),
        ("p99.99", 99.99),
    ]
    .iter()
    .map(|(k, q)| {
        (
            k.to_string(),
            serde_json::json!(secs(h.value_at_quantile(q / 100.0))),
        )
    })
    .collect();
    let total = args.duration.as_secs_f64();
    let late = shared.release_late_ns.borrow();
    Ok(serde_json::json!({
        "summary": {
            "total": total,
            "requestsPerSec": completed as f64 / total,
            "slowest": if completed > 0 { secs(h.max()) } else { 0.0 },
            "fastest": if completed > 0 { secs(h.min()) } else { 0.0 },
            "average": if completed > 0 { h.mean() / 1e9 } else { 0.0 },
        },
        "latencyPercentiles": percentiles,
        // Maps with number keys serialize with the numbers as strings, as oha writes them.
        "statusCodeDistribution": &*shared.statuses.borrow(),
        "errorDistribution": &*shared.errors.borrow(),
        "openloop": {
            "rate": args.rate,
            "connections": args.connections,
            "released": late.len(),
            "completed": completed,
            "elapsed": elapsed,
            "releaseLate": {
                "p50": secs(late.value_at_quantile(0.5)),
                "p99": secs(late.value_at_quantile(0.99)),
                "max": secs(late.max()),
            },
        },
    }))
}

fn main() {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("openloop: starting the runtime: {e}");
            std::process::exit(1);
        }
    };
    match rt.block_on(run(args)) {
        Ok(report) => println!("{report:#}"),
        Err(e) => {
            eprintln!("openloop: {e:#}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests;
