//! The consumer against a scripted broker on 127.0.0.1: what it sends, and what it does
//! with what a broker may send (good, bad, silent, slow to be handled).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::time::{timeout, Instant};
use tokio_util::codec::Decoder;
use tokio_util::sync::CancellationToken;

use super::negotiate;
use crate::stomp::{
    consume, Command, Delivery, Frame, Handled, Handler, Limits, Settings, Status, StompCodec,
    Version,
};

const WAIT: Duration = Duration::from_secs(5);

/// The broker's side of one connection.
struct Fake {
    stream: TcpStream,
    codec: StompCodec,
    buf: BytesMut,
}

impl Fake {
    async fn accept(l: &TcpListener) -> Fake {
        let (stream, _) = timeout(WAIT, l.accept())
            .await
            .expect("no connection")
            .unwrap();
        Fake {
            stream,
            codec: StompCodec::new(Limits::default()),
            buf: BytesMut::new(),
        }
    }

    /// The client's next frame (heart-beats skipped).
    async fn frame(&mut self) -> Frame {
        loop {
            if let Some(f) = self.codec.decode(&mut self.buf).unwrap() {
                return f;
            }
            let n = timeout(WAIT, self.stream.read_buf(&mut self.buf))
                .await
                .expect("no frame from the client")
                .unwrap();
            assert!(n > 0, "client closed");
        }
    }

    /// Raw bytes the client sends during `d`.
    async fn raw_for(&mut self, d: Duration) -> Vec<u8> {
        let end = Instant::now() + d;
        let mut out = Vec::new();
        let mut b = [0u8; 256];
        while let Ok(r) = tokio::time::timeout_at(end, self.stream.read(&mut b)).await {
            let n = r.unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&b[..n]);
        }
        out
    }

    async fn write(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Stop the consumer: DISCONNECT → RECEIPT, and it ends.
    async fn bye(mut self, c: Consumer) {
        c.stop.cancel();
        let bye = self.frame().await;
        assert_eq!(bye.command, Command::Disconnect);
        let r = bye.get("receipt").expect("DISCONNECT asks for a receipt");
        self.write(format!("RECEIPT\nreceipt-id:{r}\n\n\0").as_bytes())
            .await;
        c.stopped().await;
    }

    /// [`Fake::welcome`] in STOMP 1.2 without heart-beats.
    async fn welcomed(mut self) -> Fake {
        self.welcome("1.2", "0,0").await;
        self
    }

    /// CONNECT → CONNECTED, SUBSCRIBE → RECEIPT.
    async fn welcome(&mut self, version: &str, heart_beat: &str) -> (Frame, Frame) {
        let connect = self.frame().await;
        assert_eq!(connect.command, Command::Connect);
        let c = format!("CONNECTED\nversion:{version}\nheart-beat:{heart_beat}\nserver:fake\n\n\0");
        self.write(c.as_bytes()).await;
        if version == "1.1" || version == "1.2" {
            self.codec
                .set_version(Version::parse(Some(version)).unwrap());
        }
        let subscribe = self.frame().await;
        assert_eq!(subscribe.command, Command::Subscribe);
        let receipt = subscribe
            .get("receipt")
            .expect("SUBSCRIBE asks for a receipt");
        self.write(format!("RECEIPT\nreceipt-id:{receipt}\n\n\0").as_bytes())
            .await;
        (connect, subscribe)
    }
}

/// Records deliveries; waits on `gate` (if set) before returning; counts concurrency.
struct Recorder {
    tx: mpsc::UnboundedSender<Delivery>,
    gate: Option<Arc<Semaphore>>,
    delay: Duration,
    running: AtomicUsize,
    max_running: AtomicUsize,
    done: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl Handler for Recorder {
    async fn handle(&self, d: Delivery) -> Handled {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        let id = d.message_id.clone();
        self.tx.send(d).unwrap();
        if let Some(g) = &self.gate {
            g.acquire().await.unwrap().forget();
        }
        tokio::time::sleep(self.delay).await;
        self.done.lock().unwrap().push(id);
        self.running.fetch_sub(1, Ordering::SeqCst);
        Handled::Ack
    }
}

struct Consumer {
    status: Arc<Status>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    rx: mpsc::UnboundedReceiver<Delivery>,
    rec: Arc<Recorder>,
}

impl Consumer {
    fn start(s: Settings, gate: Option<Arc<Semaphore>>, delay: Duration) -> Consumer {
        let (tx, rx) = mpsc::unbounded_channel();
        let rec = Arc::new(Recorder {
            tx,
            gate,
            delay,
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            done: Mutex::new(Vec::new()),
        });
        let status = Arc::new(Status::new());
        let stop = CancellationToken::new();
        let task = tokio::spawn(consume(s, rec.clone(), status.clone(), stop.clone()));
        Consumer {
            status,
            stop,
            task,
            rx,
            rec,
        }
    }

    async fn delivery(&mut self) -> Delivery {
        timeout(WAIT, self.rx.recv())
            .await
            .expect("no delivery")
            .unwrap()
    }

    async fn until(&self, what: &str, f: impl Fn(&Status) -> bool) {
        let end = Instant::now() + WAIT;
        while !f(&self.status) {
            assert!(Instant::now() < end, "{what}: {:?}", self.status.snapshot());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn stopped(self) {
        self.stop.cancel();
        timeout(WAIT, self.task)
            .await
            .expect("consume did not stop")
            .unwrap();
    }
}

fn settings(addr: std::net::SocketAddr) -> Settings {
    let mut s = Settings::new(addr.to_string(), "/topic/routinginfo");
    s.heartbeat = Duration::ZERO;
    s.connect_timeout = Duration::from_secs(2);
    s.max_backoff = Duration::from_millis(500);
    s
}

async fn listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").await.unwrap()
}

const MESSAGE: &[u8] = b"MESSAGE\ncontent-length:5\nexpires:0\ndestination:/topic/routinginfo\nack:ID\\cb-1\\c1\nsubscription:0\npriority:4\nmessage-id:ID\\cb-1\\c7\ncontent-type:text/plain; charset=UTF-8\npersistent:true\ntimestamp:1795861157812\n\nhello\0\n";

#[test]
fn heart_beat_agreement() {
    let s = Duration::from_secs;
    let ms = Duration::from_millis;
    assert_eq!(
        negotiate(s(2), Some("1000,2000")).unwrap(),
        (Some(s(2)), Some(s(2)))
    );
    assert_eq!(negotiate(s(1), Some("5000,0")).unwrap(), (None, Some(s(5))));
    assert_eq!(negotiate(s(1), Some("0,300")).unwrap(), (Some(s(1)), None));
    assert_eq!(negotiate(ms(100), None).unwrap(), (None, None));
    assert_eq!(
        negotiate(Duration::ZERO, Some("100,100")).unwrap(),
        (None, None)
    );
    let day = Some(s(24 * 3600));
    let max = Some("18446744073709551615,18446744073709551615");
    assert_eq!(negotiate(s(1), max).unwrap(), (day, day));
    assert_eq!(negotiate(Duration::MAX, Some("1,1")).unwrap(), (day, day));
    assert!(negotiate(s(1), Some("x,1")).is_err());
    assert!(negotiate(s(1), Some("100")).is_err());
}

#[tokio::test]
async fn subscribes_acks_and_disconnects_with_a_receipt() {
    let l = listener().await;
    let mut s = settings(l.local_addr().unwrap());
    s.login = Some("routinginfo".into());
    s.passcode = Some("pass:word".into());
    s.client_id = "router-1".into();
    s.subscription_name = Some("router-1".into());
    s.prefetch = 1;
    let mut c = Consumer::start(s, None, Duration::ZERO);
    let mut b = Fake::accept(&l).await;
    let (connect, subscribe) = b.welcome("1.2", "0,0").await;
    assert_eq!(connect.get("accept-version"), Some("1.2,1.1"));
    assert_eq!(connect.get("host"), Some("127.0.0.1"));
    assert_eq!(connect.get("login"), Some("routinginfo"));
    assert_eq!(connect.get("passcode"), Some("pass:word"));
    assert_eq!(connect.get("client-id"), Some("router-1"));
    assert_eq!(connect.get("heart-beat"), Some("0,0"));
    assert_eq!(subscribe.get("destination"), Some("/topic/routinginfo"));
    assert_eq!(subscribe.get("ack"), Some("client-individual"));
    assert_eq!(subscribe.get("activemq.prefetchSize"), Some("1"));
    assert_eq!(subscribe.get("activemq.subscriptionName"), Some("router-1"));
    assert!(subscribe.get("id").is_some());
    c.until("subscribed", |s| s.connected()).await;
    b.write(MESSAGE).await;
    let d = c.delivery().await;
    assert_eq!(d.message_id, "ID:b-1:7");
    assert_eq!(d.destination, "/topic/routinginfo");
    assert_eq!(d.timestamp_ms, Some(1795861157812));
    assert!(!d.redelivered);
    assert_eq!(&d.body[..], b"hello");
    assert_eq!(d.header("content-type"), Some("text/plain; charset=UTF-8"));
    assert_eq!(d.headers.len(), 10);
    let ack = b.frame().await;
    assert_eq!(ack.command, Command::Ack);
    assert_eq!(ack.get("id"), Some("ID:b-1:1"));
    c.until("acked", |s| s.snapshot().acked == 1).await;
    c.stop.cancel();
    let bye = b.frame().await;
    assert_eq!(bye.command, Command::Disconnect);
    let r = bye.get("receipt").expect("DISCONNECT asks for a receipt");
    b.write(format!("RECEIPT\nreceipt-id:{r}\n\n\0").as_bytes())
        .await;
    let status = c.status.clone();
    c.stopped().await;
    let r = status.snapshot();
    assert_eq!(
        (r.attempts, r.connections, r.received, r.acked),
        (1, 1, 1, 1)
    );
    assert!(!status.connected());
}

#[tokio::test]
async fn version_1_1_acks_by_message_id_and_subscription() {
    let l = listener().await;
    let mut c = Consumer::start(settings(l.local_addr().unwrap()), None, Duration::ZERO);
    let mut b = Fake::accept(&l).await;
    let (_, subscribe) = b.welcome("1.1", "0,0").await;
    b.write(b"MESSAGE\nmessage-id:m\\c1\nsubscription:0\ndestination:/topic/x\n\nbody\0")
        .await;
    assert_eq!(&c.delivery().await.body[..], b"body");
    let ack = b.frame().await;
    assert_eq!(ack.get("message-id"), Some("m:1"));
    assert_eq!(ack.get("subscription"), subscribe.get("id"));
    b.bye(c).await;
}

/// Absurd heart-beat intervals from a broker are capped, not a panic.
#[tokio::test]
async fn huge_heart_beats_are_capped() {
    let l = listener().await;
    let mut s = settings(l.local_addr().unwrap());
    s.heartbeat = Duration::from_millis(100);
    let mut c = Consumer::start(s, None, Duration::ZERO);
    let mut b = Fake::accept(&l).await;
    b.welcome("1.2", "18446744073709551615,18446744073709551615")
        .await;
    b.write(MESSAGE).await;
    c.delivery().await;
    assert_eq!(b.frame().await.command, Command::Ack);
    b.bye(c).await;
}

#[tokio::test]
async fn stomp_1_0_broker_is_refused() {
    let l = listener().await;
    let c = Consumer::start(settings(l.local_addr().unwrap()), None, Duration::ZERO);
    let mut b = Fake::accept(&l).await;
    b.frame().await;
    b.write(b"CONNECTED\nsession:x\n\n\0").await;
    c.until("error", |s| {
        s.snapshot()
            .last_error
            .is_some_and(|e| e.contains("1.2 or 1.1 is needed"))
    })
    .await;
    c.stopped().await;
}

/// Malformed frames, an oversized one and a broker ignoring the prefetch: each ends the
/// connection with an error saying so, and the consumer connects again.
#[tokio::test]
async fn bad_frames_end_the_connection_and_it_comes_back() {
    let cases: [(Vec<u8>, &str); 4] = [
        (b"BOGUS\n\n\0".to_vec(), "unknown command"),
        (b"MESSAGE\nx:a\\qb\n\n\0".to_vec(), "undefined escape"),
        (
            b"MESSAGE\ncontent-length:999999999\nmessage-id:1\n\n".to_vec(),
            "frame longer than",
        ),
        (b"MESSAGE\nack:1\n\n\0".to_vec(), "without message-id"),
    ];
    let l = listener().await;
    let c = Consumer::start(settings(l.local_addr().unwrap()), None, Duration::ZERO);
    for (i, (bytes, want)) in cases.iter().enumerate() {
        let mut b = Fake::accept(&l).await;
        b.welcome("1.2", "0,0").await;
        b.write(bytes).await;
        c.until(want, |s| {
            let r = s.snapshot();
            r.connections == i as u64 + 1
                && !s.connected()
                && r.last_error.is_some_and(|e| e.contains(want))
        })
        .await;
    }
    let mut b = Fake::accept(&l).await;
    b.welcome("1.2", "0,0").await;
    c.until("back", |s| s.connected()).await;
    b.bye(c).await;
}

#[tokio::test]
async fn messages_beyond_the_prefetch_are_a_broken_broker() {
    let l = listener().await;
    let gate = Arc::new(Semaphore::new(0));
    let c = Consumer::start(
        settings(l.local_addr().unwrap()),
        Some(gate.clone()),
        Duration::ZERO,
    );
    let mut b = Fake::accept(&l).await;
    b.welcome("1.2", "0,0").await;
    for i in 0..20 {
        b.write(format!("MESSAGE\nmessage-id:{i}\nack:{i}\n\n\0").as_bytes())
            .await;
    }
    c.until("overflow", |s| {
        s.snapshot()
            .last_error
            .is_some_and(|e| e.contains("ahead of ACKs"))
    })
    .await;
    gate.add_permits(100);
    c.stopped().await;
}

#[tokio::test]
async fn error_frame_on_connect_is_reported_and_retried_with_backoff() {
    let l = listener().await;
    let c = Consumer::start(settings(l.local_addr().unwrap()), None, Duration::ZERO);
    let mut times = Vec::new();
    for _ in 0..3 {
        let mut b = Fake::accept(&l).await;
        times.push(Instant::now());
        b.frame().await;
        b.write(b"ERROR\nmessage:User name [x] or password is invalid.\n\njava stack\0\n")
            .await;
    }
    c.until("refused", |s| {
        s.snapshot().last_error.is_some_and(|e| {
            e.contains("refused the connection: User name [x] or password is invalid. (java stack)")
        })
    })
    .await;
    // 250 ms, then 500 ms.
    assert!(
        times[1] - times[0] >= Duration::from_millis(240),
        "{times:?}"
    );
    assert!(
        times[2] - times[1] >= Duration::from_millis(490),
        "{times:?}"
    );
    assert_eq!(c.status.snapshot().connections, 0);
    c.stopped().await;
}

/// A broker that agreed to heart-beats and goes silent is dropped after 2.5 times its
/// interval; ours flow meanwhile.
#[tokio::test]
async fn silent_broker_is_dropped() {
    let l = listener().await;
    let mut s = settings(l.local_addr().unwrap());
    s.heartbeat = Duration::from_millis(100);
    let c = Consumer::start(s, None, Duration::ZERO);
    let mut b = Fake::accept(&l).await;
    let (connect, _) = b.welcome("1.2", "100,100").await;
    assert_eq!(connect.get("heart-beat"), Some("100,100"));
    let silent_from = Instant::now();
    let raw = b.raw_for(Duration::from_millis(200)).await;
    assert!(raw.len() >= 2 && raw.iter().all(|&x| x == b'\n'), "{raw:?}");
    let _b2 = Fake::accept(&l).await;
    let gone = silent_from.elapsed();
    assert!(gone >= Duration::from_millis(250), "{gone:?}");
    assert!(gone < Duration::from_millis(1500), "{gone:?}");
    let e = c.status.snapshot().last_error.unwrap();
    assert!(e.contains("broker silent for"), "{e}");
    c.stopped().await;
}

/// A handler that takes 10 heart-beat intervals: heart-beats go on both ways and the
/// connection stands.
#[tokio::test]
async fn slow_handler_keeps_the_connection() {
    let l = listener().await;
    let mut s = settings(l.local_addr().unwrap());
    s.heartbeat = Duration::from_millis(100);
    let mut c = Consumer::start(s, None, Duration::from_millis(1000));
    let mut b = Fake::accept(&l).await;
    b.welcome("1.2", "100,100").await;
    b.write(MESSAGE).await;
    c.delivery().await;
    let mut seen = Vec::new();
    let end = Instant::now() + Duration::from_millis(800);
    while Instant::now() < end {
        b.write(b"\n").await;
        seen.extend(b.raw_for(Duration::from_millis(50)).await);
    }
    assert!(
        seen.len() >= 5 && seen.iter().all(|&x| x == b'\n'),
        "{seen:?}"
    );
    assert_eq!(b.frame().await.command, Command::Ack);
    let r = c.status.snapshot();
    assert_eq!((r.attempts, r.connections, r.acked), (1, 1, 1));
    b.bye(c).await;
}

/// The connection breaks while the handler runs: the handler is let finish, nothing is
/// ACKed, and the consumer reconnects only then (two handlers never run at once).
#[tokio::test]
async fn cut_mid_handler_waits_for_it_then_reconnects() {
    let l = listener().await;
    let gate = Arc::new(Semaphore::new(0));
    let mut c = Consumer::start(
        settings(l.local_addr().unwrap()),
        Some(gate.clone()),
        Duration::ZERO,
    );
    let mut b = Fake::accept(&l).await;
    b.welcome("1.2", "0,0").await;
    b.write(MESSAGE).await;
    c.delivery().await;
    drop(b);
    c.until("disconnected while the handler runs", |s| !s.connected())
        .await;
    // No reconnection while the handler runs.
    assert!(timeout(Duration::from_millis(600), l.accept())
        .await
        .is_err());
    gate.add_permits(1);
    let mut b = Fake::accept(&l).await;
    b.welcome("1.2", "0,0").await;
    b.write(MESSAGE).await;
    gate.add_permits(1);
    assert_eq!(c.delivery().await.message_id, "ID:b-1:7");
    assert_eq!(b.frame().await.command, Command::Ack);
    let r = c.status.snapshot();
    assert_eq!((r.received, r.acked), (2, 1));
    assert_eq!(c.rec.max_running.load(Ordering::SeqCst), 1);
    b.bye(c).await;
}

/// A stop while the handler runs waits for it, ACKs, then DISCONNECTs.
#[tokio::test]
async fn stop_lets_the_handler_finish_and_acks() {
    let l = listener().await;
    let gate = Arc::new(Semaphore::new(0));
    let mut c = Consumer::start(
        settings(l.local_addr().unwrap()),
        Some(gate.clone()),
        Duration::ZERO,
    );
    let mut b = Fake::accept(&l).await;
    b.welcome("1.2", "0,0").await;
    b.write(MESSAGE).await;
    c.delivery().await;
    c.stop.cancel();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!c.task.is_finished());
    gate.add_permits(1);
    assert_eq!(b.frame().await.command, Command::Ack);
    assert_eq!(b.frame().await.command, Command::Disconnect);
    // No receipt: the consumer gives up waiting for it on its own.
    timeout(Duration::from_secs(4), c.task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.rec.done.lock().unwrap().len(), 1);
}

/// The log of a long outage stays readable: one warning when it starts (not one per
/// retry), one info line when the consumer is subscribed again.
#[tokio::test]
async fn one_warning_per_outage() {
    #[derive(Clone, Default)]
    struct Log(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Log {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let log = Log::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // tracing caches a callsite's interest when first hit, on any thread; were this
    // scoped subscriber the only dispatcher registered, tracing would ask the global one
    // (none) for the callsites other tests' threads hit first, and they would stay off
    // here. With two registered, it asks each of them.
    let _second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    let _guard = tracing::subscriber::set_default(subscriber);
    let l = listener().await;
    let mut s = settings(l.local_addr().unwrap());
    s.max_backoff = Duration::from_millis(50);
    let c = Consumer::start(s, None, Duration::ZERO);
    for _ in 0..6 {
        let mut b = Fake::accept(&l).await;
        b.frame().await;
        b.write(b"ERROR\nmessage:not now\n\n\0").await;
    }
    let b = Fake::accept(&l).await.welcomed().await;
    c.until("subscribed", |s| s.connected()).await;
    drop(b);
    for _ in 0..3 {
        let mut b = Fake::accept(&l).await;
        b.frame().await;
        b.write(b"ERROR\nmessage:not yet\n\n\0").await;
    }
    let b = Fake::accept(&l).await.welcomed().await;
    c.until("subscribed again", |s| s.snapshot().connections == 2)
        .await;
    b.bye(c).await;
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    let count = |what: &str| text.lines().filter(|l| l.contains(what)).count();
    assert_eq!(count(" WARN "), 2, "{text}");
    assert_eq!(count("cannot subscribe at the broker"), 1, "{text}");
    assert_eq!(count("connection lost"), 1, "{text}");
    assert_eq!(count("not now"), 1, "{text}");
    assert_eq!(count("STOMP consumer subscribed again"), 2, "{text}");
    assert_eq!(count("STOMP consumer stopped"), 1, "{text}");
}
