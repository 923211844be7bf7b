//! openloop: HTTP/1.1 keep-alive load at a fixed rate, open loop, for `bench/run.sh`'s
//! `fixed_rate` scenario (the tail at half of HAProxy's peak).
//!
//! **Why not oha.** With `-q`, oha keeps every result in an unbounded channel until the
//! run ends. The channel's buffer doubles as it fills, and each doubling copies it whole
//! and faults in the new pages, on the one thread that also sends the requests: at 27 000
//! requests a second the copies at 2^18 and 2^19 results (9.7 s and 19.4 s into a 20 s
//! run) stop the load for tens to hundreds of milliseconds. Its pacer stops with it and
//! then releases the whole backlog at once, which queues behind the connections: the p99
//! of a run measured mostly whether and how long oha stopped (bench/RESULTS.md). This
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
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::net::TcpListener;

    /// A gear answering every request with `answer`; the `slow`-th request (counted from
    /// 1 over all connections) waits `delay` first.
    async fn gear(answer: &'static [u8], slow: usize, delay: Duration) -> SocketAddr {
        gear_counting(answer, slow, delay).await.0
    }

    /// `gear`, also counting the connections it accepted. An answer with `Connection:
    /// close` closes the connection after it; an answer with `|` in it is written in
    /// pieces 20 ms apart, without the `|`.
    async fn gear_counting(
        answer: &'static [u8],
        slow: usize,
        delay: Duration,
    ) -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let close = answer.windows(17).any(|w| w == b"Connection: close");
        let pieces: Vec<&'static [u8]> = answer.split(|&b| b == b'|').collect();
        let counted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let count = count.clone();
                let pieces = pieces.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                            if s.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                                return;
                            }
                        }
                        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                        buf.drain(..end);
                        if count.fetch_add(1, Ordering::SeqCst) + 1 == slow {
                            tokio::time::sleep(delay).await;
                        }
                        for (i, piece) in pieces.iter().enumerate() {
                            if i > 0 {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            if s.write_all(piece).await.is_err() {
                                return;
                            }
                        }
                        if close {
                            return;
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }

    fn args(addr: SocketAddr, connections: usize, rate: f64, secs: f64) -> Args {
        Args {
            connections,
            rate,
            duration: Duration::from_secs_f64(secs),
            grace: Duration::from_secs(5),
            url: format!("http://{addr}/x?y=1"),
        }
    }

    const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

    /// Every request answered 200, `n` of them, and no error.
    fn all_answered(report: &serde_json::Value, n: u64) {
        let want = serde_json::json!({"200": n});
        assert_eq!(report["statusCodeDistribution"], want, "{report:#}");
        assert_eq!(
            report["errorDistribution"],
            serde_json::json!({}),
            "{report:#}"
        );
    }

    #[test]
    fn durations_are_positive_seconds() {
        assert_eq!(parse_secs("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_secs("0.5"), Ok(Duration::from_millis(500)));
        for bad in ["0", "-1s", "x", "", "inf"] {
            assert!(parse_secs(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_request_names_the_path_and_the_host() {
        let t = target("http://127.0.0.1:8080/a/b?c=d").unwrap();
        assert_eq!(t.addr, "127.0.0.1:8080".parse().unwrap());
        let req = String::from_utf8(t.request).unwrap();
        assert!(
            req.starts_with("GET /a/b?c=d HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"),
            "{req}"
        );
        assert!(req.ends_with("\r\n\r\n"));
        assert!(target("127.0.0.1:8080/").is_err());
        assert!(target("https://127.0.0.1/").is_err());
        assert!(target("http:///x").is_err());
    }

    #[test]
    fn a_head_gives_its_status_length_and_whether_the_connection_stays() {
        let head = |b: &[u8]| parse_head(b).unwrap();
        assert_eq!(head(b"HTTP/1.1 200 OK\r\nContent-Len"), None);
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 16\r\nConnection: keep-alive\r\n\r\n";
        let want = |status, keep, body_len| Head {
            status,
            keep,
            head_len: ok.len(),
            body_len,
        };
        assert_eq!(head(ok), Some(want(200, true, 16)));
        let close = b"HTTP/1.1 503 Busy\r\nContent-Length: 16\r\nConnection: x, Close\r\n\r\n";
        assert_eq!(head(close).map(|h| (h.status, h.keep)), Some((503, false)));
        let old = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(head(old).map(|h| h.keep), Some(false));
        let not_modified = b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n";
        assert_eq!(head(not_modified).map(|h| h.body_len), Some(0));
        for bad in [
            &b"HTTP/1.1 101 Switching Protocols\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
        ] {
            assert!(parse_head(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_request_released_is_answered_and_counted_once() {
        let addr = gear(OK, 0, Duration::ZERO).await;
        let report = run(args(addr, 4, 2000.0, 0.5)).await.unwrap();
        // Requests 0..1000 are due before the end (i / 2000 s < 0.5 s).
        all_answered(&report, 1000);
        assert_eq!(report["summary"]["requestsPerSec"], 2000.0);
        let p = &report["latencyPercentiles"];
        let (p50, p99) = (p["p50"].as_f64().unwrap(), p["p99"].as_f64().unwrap());
        assert!(p50 > 0.0 && p50 <= p99, "{report:#}");
        // The end wakes the idle connections: the run does not wait out the grace (5 s).
        let elapsed = report["openloop"]["elapsed"].as_f64().unwrap();
        assert!(elapsed < 2.0, "{report:#}");
        assert_eq!(report["openloop"]["released"], 1000, "{report:#}");
        let late = &report["openloop"]["releaseLate"];
        assert!(
            late["p50"].as_f64().unwrap() <= late["max"].as_f64().unwrap(),
            "{report:#}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_unanswered_within_the_grace_are_errors() {
        // The first answer takes 10 s; the nine requests behind it on the one connection
        // are never sent.
        let addr = gear(OK, 1, Duration::from_secs(10)).await;
        let mut a = args(addr, 1, 100.0, 0.1);
        a.grace = Duration::from_millis(300);
        let report = run(a).await.unwrap();
        assert_eq!(
            report["statusCodeDistribution"],
            serde_json::json!({}),
            "{report:#}"
        );
        let errors = report["errorDistribution"].as_object().unwrap();
        assert_eq!(errors.len(), 1, "{report:#}");
        let (what, n) = errors.iter().next().unwrap();
        assert!(what.contains("grace") && n == 10, "{report:#}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_split_over_reads_is_read_whole() {
        let answer = b"HTTP/1.1 200 OK\r\nContent-|Length: 10\r\n\r\nhello|world";
        let addr = gear(answer, 0, Duration::ZERO).await;
        let report = run(args(addr, 2, 100.0, 0.2)).await.unwrap();
        all_answered(&report, 20);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stall_counts_against_every_request_due_during_it() {
        // One connection, 200 requests a second; the gear holds the 20th answer 300 ms.
        // The ~60 requests due meanwhile wait for the connection, and their latency
        // counts from when they were due: a closed-loop count would show one slow request.
        let addr = gear(OK, 20, Duration::from_millis(300)).await;
        let report = run(args(addr, 1, 200.0, 1.0)).await.unwrap();
        assert_eq!(report["statusCodeDistribution"]["200"], 200, "{report:#}");
        let p = &report["latencyPercentiles"];
        assert!(p["p90"].as_f64().unwrap() >= 0.1, "{report:#}");
        assert!(
            report["summary"]["slowest"].as_f64().unwrap() >= 0.3,
            "{report:#}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answers_it_cannot_read_are_errors_not_latencies() {
        for (answer, error) in [
            (
                &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"[..],
                "Transfer-Encoding",
            ),
            (b"HTTP/1.1 200 OK\r\n\r\nok", "without Content-Length"),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA",
                "bytes after the response",
            ),
        ] {
            let addr = gear(answer, 0, Duration::ZERO).await;
            let report = run(args(addr, 1, 100.0, 0.1)).await.unwrap();
            assert_eq!(
                report["statusCodeDistribution"],
                serde_json::json!({}),
                "{report:#}"
            );
            let errors = report["errorDistribution"].as_object().unwrap();
            assert_eq!(
                errors.values().map(|v| v.as_u64().unwrap()).sum::<u64>(),
                10,
                "{report:#}"
            );
            assert!(errors.keys().all(|k| k.contains(error)), "{report:#}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_interim_answer_is_passed_over() {
        let answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        let addr = gear(answer, 0, Duration::ZERO).await;
        let report = run(args(addr, 1, 100.0, 0.1)).await.unwrap();
        all_answered(&report, 10);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_closing_gear_is_reconnected_to() {
        let (addr, accepted) = gear_counting(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
            0,
            Duration::ZERO,
        )
        .await;
        let report = run(args(addr, 2, 200.0, 0.2)).await.unwrap();
        all_answered(&report, 40);
        // Two opened before the start, then one for every answer but the last of each.
        assert_eq!(accepted.load(Ordering::SeqCst), 40, "{report:#}");
    }
}
