//! `gearlb::stomp::consume` against Debian's ActiveMQ 5.17, fed by origin-server's own
//! routing plugin (Ruby) where its source is at hand, else by the same bytes
//! ([`yaml_of`]) published the way it publishes them.
//!
//! Each test starts its own broker(s) (`support::activemq::Broker`: ports from
//! `free_port`, a directory each) and waits for conditions with deadlines. ActiveMQ must
//! be installed (`apt-get install activemq`; the tests fail saying so otherwise), and
//! `ruby` with `ruby-stomp` for the plugin. The `yaml_of_*` test checks [`yaml_of`]
//! against Ruby's Psych directly.

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gearlb::stomp::{consume, Delivery, Handled, Handler, Settings, Status};
use support::activemq::{yaml_of, Broker, Event, Mapping, Options, Plugin, Relay, PASSWORD, USER};
use tokio::sync::Semaphore;
use tokio::task::{block_in_place, JoinHandle};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const TOPIC: &str = "/topic/routinginfo";
const WAIT: Duration = Duration::from_secs(20);

/// Records each delivery, then (when gated) waits for a permit before returning.
#[derive(Default)]
struct Recorder {
    got: Mutex<Vec<Delivery>>,
    gate: Option<Arc<Semaphore>>,
    /// Deliveries kept unacknowledged (`Handled::Keep`) before the others are taken.
    keep: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl Handler for Recorder {
    async fn handle(&self, d: Delivery) -> Handled {
        self.got.lock().unwrap().push(d);
        if let Some(g) = &self.gate {
            g.acquire().await.unwrap().forget();
        }
        use std::sync::atomic::Ordering::SeqCst;
        match self.keep.fetch_update(SeqCst, SeqCst, |k| k.checked_sub(1)) {
            Ok(_) => Handled::Keep,
            Err(_) => Handled::Ack,
        }
    }
}

impl Recorder {
    fn bodies(&self) -> Vec<String> {
        let got = self.got.lock().unwrap();
        got.iter()
            .map(|d| String::from_utf8_lossy(&d.body).into_owned())
            .collect()
    }
}

/// A running `consume`.
struct Consumer {
    status: Arc<Status>,
    stop: CancellationToken,
    task: JoinHandle<()>,
    rec: Arc<Recorder>,
}

impl Consumer {
    fn start(s: Settings, gate: Option<Arc<Semaphore>>) -> Consumer {
        Self::start_keeping(s, gate, 0)
    }

    /// As `start`, the first `keep` deliveries kept unacknowledged.
    fn start_keeping(s: Settings, gate: Option<Arc<Semaphore>>, keep: usize) -> Consumer {
        let rec = Arc::new(Recorder {
            got: Mutex::default(),
            gate,
            keep: keep.into(),
        });
        let status = Arc::new(Status::new());
        let stop = CancellationToken::new();
        let task = tokio::spawn(consume(s, rec.clone(), status.clone(), stop.clone()));
        Consumer {
            status,
            stop,
            task,
            rec,
        }
    }

    async fn until(&self, what: &str, f: impl Fn(&Consumer) -> bool) {
        let end = Instant::now() + WAIT;
        while !f(self) {
            assert!(
                Instant::now() < end,
                "{what}: not within {WAIT:?}; status {:?}; bodies {:?}",
                self.status.snapshot(),
                self.rec.bodies()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn until_received(&self, n: usize) {
        self.until(&format!("{n} received"), |c| c.rec.bodies().len() >= n)
            .await;
    }

    async fn stopped(self) -> Arc<Recorder> {
        self.stop.cancel();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("consume did not stop")
            .unwrap();
        self.rec
    }
}

fn settings(brokers: &[String], destination: &str, client_id: &str, durable: bool) -> Settings {
    Settings {
        brokers: brokers.to_vec(),
        destination: destination.to_string(),
        login: Some(USER.into()),
        passcode: Some(PASSWORD.into()),
        client_id: client_id.to_string(),
        subscription_name: durable.then(|| client_id.to_string()),
        heartbeat: Duration::from_secs(1),
        prefetch: 1,
        connect_timeout: Duration::from_secs(3),
        max_backoff: Duration::from_secs(1),
    }
}

fn alias(i: usize) -> Event {
    Event::AddAlias {
        app: "myapp".into(),
        namespace: "ns1".into(),
        alias: format!("www{i}.example.org"),
    }
}

/// Every kind of event, with the values of origin-server's tests and awkward ones.
fn all_events() -> Vec<Event> {
    let (app, ns) = (|| "myapp".to_string(), || "ns1".to_string());
    let cert = "-----BEGIN CERTIFICATE-----\nMIIDFTCCAf2gAwIBAgIUTGitOmuVCbInX8VHjCnkfl79e2owDQYJKoZIhvcNAQEL\n-----END CERTIFICATE-----\n";
    let key = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: DES-EDE3-CBC,B6FFDDE852F37B90\n\n5dli8lJhWXWQDCGFT4szyQ+pPuqRq7ppI0Yahwh1xClda6ZfTaQpWkLIVZ17H3qf\n-----END RSA PRIVATE KEY-----\n";
    let endpoint = |gear: &str, port: u16, mappings: Vec<Mapping>| Event::AddPublicEndpoint {
        app: app(),
        namespace: ns(),
        gear_id: gear.into(),
        public_port_name: "haproxy-1.4".into(),
        public_address: "10.0.0.11".into(),
        public_port: port,
        protocols: vec!["http".into(), "ws".into()],
        types: vec!["load_balancer".into()],
        mappings,
    };
    let ssl = |pass: Option<&str>, key: &str| Event::AddSsl {
        app: app(),
        namespace: ns(),
        alias: "www.example.org".into(),
        ssl: cert.into(),
        private_key: key.into(),
        pass_phrase: pass.map(str::to_string),
    };
    vec![
        Event::CreateApplication {
            app: app(),
            namespace: ns(),
            scalable: true,
            ha: true,
        },
        endpoint(
            "53f7c8a5e4b0a1b2c3d4e5f6",
            35541,
            vec![
                Mapping::new("", ""),
                Mapping::new("/health", "configuration/health"),
            ],
        ),
        endpoint("123456", 35542, vec![]),
        Event::AddAlias {
            app: app(),
            namespace: ns(),
            alias: "www.example.org".into(),
        },
        ssl(Some("s3cret"), key),
        ssl(
            None,
            "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----",
        ),
        ssl(Some("a: b \"quoted\" it's\ttabbed -é"), key),
        ssl(Some(&"long pass phrase with spaces ".repeat(5)), key),
        Event::RemoveSsl {
            app: app(),
            namespace: ns(),
            alias: "www.example.org".into(),
        },
        Event::RemoveAlias {
            app: app(),
            namespace: ns(),
            alias: "www.example.org".into(),
        },
        Event::RemovePublicEndpoint {
            app: app(),
            namespace: ns(),
            gear_id: "53f7c8a5e4b0a1b2c3d4e5f6".into(),
            public_address: "10.0.0.11".into(),
            public_port: 35541,
        },
        Event::DeleteApplication {
            app: app(),
            namespace: ns(),
            scalable: false,
            ha: false,
        },
    ]
}

/// Publishes as the plugin does: the plugin itself where it can be had.
struct Publisher {
    plugin: Option<Plugin>,
    addr: SocketAddr,
    destination: String,
}

impl Publisher {
    fn new(broker: &Broker, destination: &str) -> Publisher {
        Publisher {
            plugin: Plugin::start(&[broker.addr()], broker.credentials(), destination),
            addr: broker.addr(),
            destination: destination.to_string(),
        }
    }

    fn send(&mut self, e: &Event) {
        block_in_place(|| match &mut self.plugin {
            Some(p) => p.send(e),
            None => support::activemq::publish(
                self.addr,
                Some((USER, PASSWORD)),
                &self.destination,
                &yaml_of(e),
            )
            .unwrap(),
        })
    }
}

/// (a) Every kind of event, published by the real plugin, arrives with exactly the
/// bytes of `yaml_of`, in order, each ACKed; with prefetch 1 the next one comes only
/// after the ACK (an observer subscriber has them all while the gated consumer holds 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_events_arrive_in_order_one_at_a_time() {
    let broker = block_in_place(|| Broker::start(Options::default()));
    let gate = Arc::new(Semaphore::new(0));
    let c = Consumer::start(
        settings(&[broker.address()], TOPIC, "router-a", false),
        Some(gate.clone()),
    );
    c.until("subscribed", |c| c.status.connected()).await;
    let mut observer = block_in_place(|| broker.observe(TOPIC));
    let mut publisher = Publisher::new(&broker, TOPIC);
    let events = all_events();
    for e in &events {
        publisher.send(e);
        // One at a time, so that the order is the publishing order (the plugin's
        // connection per event does not guarantee it).
        let seen = block_in_place(|| observer.next(WAIT)).expect("the observer got nothing");
        assert_eq!(seen.text(), yaml_of(e), "what the plugin published");
        assert_eq!(seen.get("content-type"), Some("text/plain; charset=UTF-8"));
    }
    c.until_received(1).await;
    // The broker dispatched them all, the consumer has one, unACKed: no more comes.
    // And while the handler holds it for over 2.5 heart-beats (what ActiveMQ allows a
    // silent client), the consumer's heart-beats keep the connection.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let r = c.status.snapshot();
    assert_eq!((r.received, r.attempts, r.connections), (1, 1, 1), "{r:?}");
    assert!(c.status.connected());
    for k in 1..=events.len() {
        gate.add_permits(1);
        c.until("acked", |c| c.status.snapshot().acked == k as u64)
            .await;
        let r = c.status.snapshot();
        assert!(
            r.received <= k as u64 + 1,
            "{k} acked, {} received",
            r.received
        );
        if k < events.len() {
            c.until_received(k + 1).await;
        }
    }
    let want: Vec<String> = events.iter().map(yaml_of).collect();
    assert_eq!(c.rec.bodies(), want);
    for d in c.rec.got.lock().unwrap().iter() {
        assert_eq!(d.destination, TOPIC);
        assert!(
            d.message_id.starts_with("ID:") && d.message_id.contains(':'),
            "{d:?}"
        );
        assert!(d.timestamp_ms.is_some());
        assert_eq!(d.header("persistent"), Some("true"), "forced persistent");
        assert_eq!(d.header("content-type"), Some("text/plain; charset=UTF-8"));
    }
    let rec = c.stopped().await;
    assert_eq!(rec.bodies().len(), events.len());
}

/// (b) A durable subscription keeps what is published while the consumer is away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_subscription_keeps_messages_while_away() {
    let broker = block_in_place(|| Broker::start(Options::default()));
    let s = settings(&[broker.address()], TOPIC, "router-b", true);
    let c = Consumer::start(s.clone(), None);
    c.until("subscribed", |c| c.status.connected()).await;
    c.stopped().await;
    let events: Vec<Event> = (0..5).map(alias).collect();
    block_in_place(|| {
        events
            .iter()
            .for_each(|e| broker.publish(TOPIC, &yaml_of(e)))
    });
    let c = Consumer::start(s, None);
    c.until_received(5).await;
    c.until("acked", |c| c.status.snapshot().acked == 5).await;
    let want: Vec<String> = events.iter().map(yaml_of).collect();
    // ActiveMQ answers DISCONNECT's receipt: no wait for it to time out (2 s).
    let stopping = Instant::now();
    assert_eq!(c.stopped().await.bodies(), want);
    assert!(
        stopping.elapsed() < Duration::from_millis(1500),
        "{:?}",
        stopping.elapsed()
    );
}

/// A message the handler keeps (it could not save it) is not acknowledged: the
/// consumer reconnects and the broker delivers it again, before the ones behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_message_is_delivered_again() {
    let broker = block_in_place(|| Broker::start(Options::default()));
    let s = settings(&[broker.address()], TOPIC, "router-k", true);
    let c = Consumer::start_keeping(s, None, 1);
    c.until("subscribed", |c| c.status.connected()).await;
    let events: Vec<Event> = (0..2).map(alias).collect();
    block_in_place(|| {
        events
            .iter()
            .for_each(|e| broker.publish(TOPIC, &yaml_of(e)))
    });
    c.until_received(3).await;
    c.until("acked", |c| c.status.snapshot().acked == 2).await;
    let rec = c.stopped().await;
    let want: Vec<String> = [0, 0, 1].iter().map(|&i| yaml_of(&events[i])).collect();
    assert_eq!(rec.bodies(), want);
}

/// (c) A message whose handler had not returned when the connection was lost is
/// redelivered, and nothing is lost: when the connection is cut (the consumer goes on
/// and reconnects), and when the consumer itself goes away mid-handler (a crash).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_unacked_when_cut_is_redelivered() {
    let broker = block_in_place(|| Broker::start(Options::default()));
    let relay = Relay::start(broker.addr()).await;
    let events: Vec<Event> = (0..3).map(alias).collect();
    let body = |i: usize| yaml_of(&events[i]);
    let gate = Arc::new(Semaphore::new(0));
    let s = settings(&[relay.addr.to_string()], TOPIC, "router-c", true);
    let c = Consumer::start(s.clone(), Some(gate.clone()));
    c.until("subscribed", |c| c.status.connected()).await;
    block_in_place(|| {
        events
            .iter()
            .for_each(|e| broker.publish(TOPIC, &yaml_of(e)))
    });
    c.until_received(1).await;
    relay.cut();
    c.until("disconnected", |c| !c.status.connected()).await;
    // The handler returns after the cut: its ACK cannot go; the broker sends it again.
    gate.add_permits(1);
    c.until_received(2).await;
    assert_eq!(c.rec.bodies(), [body(0), body(0)]);
    let redelivered = c.rec.got.lock().unwrap()[1].redelivered;
    eprintln!("redelivered after a cut connection: `redelivered` header {redelivered}");
    gate.add_permits(1);
    c.until_received(3).await;
    // The consumer goes away while handling the second message: dropped, not stopped.
    c.task.abort();
    let _ = c.task.await;
    assert_eq!(c.status.snapshot().acked, 1);
    let c = Consumer::start(s, None);
    c.until_received(2).await;
    assert_eq!(c.rec.bodies(), [body(1), body(2)]);
    c.until("acked", |c| c.status.snapshot().acked == 2).await;
    c.stopped().await;
}

/// (d) The broker restarts (store kept, persistency forced): the consumer comes back by
/// itself and gets what was pending before and what was published meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_restart_loses_nothing() {
    let mut broker = block_in_place(|| Broker::start(Options::default()));
    let events: Vec<Event> = (0..4).map(alias).collect();
    let gate = Arc::new(Semaphore::new(0));
    let c = Consumer::start(
        settings(&[broker.address()], TOPIC, "router-d", true),
        Some(gate.clone()),
    );
    c.until("subscribed", |c| c.status.connected()).await;
    block_in_place(|| {
        events[..3]
            .iter()
            .for_each(|e| broker.publish(TOPIC, &yaml_of(e)))
    });
    c.until_received(1).await;
    block_in_place(|| broker.restart());
    block_in_place(|| broker.publish(TOPIC, &yaml_of(&events[3])));
    // The handler has held the first message through the restart.
    gate.add_permits(100);
    c.until_received(5).await;
    c.until("acked", |c| c.status.snapshot().acked == 4).await;
    let b: Vec<String> = events.iter().map(yaml_of).collect();
    assert_eq!(
        c.rec.bodies(),
        [&b[0], &b[0], &b[1], &b[2], &b[3]].map(String::clone)
    );
    let r = c.status.snapshot();
    assert!(r.connections >= 2 && r.last_error.is_some(), "{r:?}");
    c.stopped().await;
}

/// (e) A broker that stops answering (SIGSTOP) is noticed by heart-beat within three
/// heart-beats, and the consumer moves to the next broker of its list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_broker_is_left_for_the_next() {
    let (a, b) = block_in_place(|| Broker::start_two(Options::default()));
    let s = settings(&[a.address(), b.address()], TOPIC, "router-e", false);
    let c = Consumer::start(s, None);
    c.until("on a", |c| c.status.broker() == Some(a.address()))
        .await;
    block_in_place(|| a.publish(TOPIC, &yaml_of(&alias(1))));
    c.until_received(1).await;
    let paused = Instant::now();
    a.pause();
    c.until("a declared dead", |c| {
        c.status
            .snapshot()
            .last_error
            .is_some_and(|e| e.contains("silent"))
    })
    .await;
    let noticed = paused.elapsed();
    eprintln!("a paused broker noticed after {noticed:?} (heart-beat 1 s)");
    assert!(
        // 2.5 heart-beats after the broker's last one, and the timer's slack.
        noticed < Duration::from_millis(3500),
        "noticed after {noticed:?}"
    );
    c.until("on b", |c| c.status.broker() == Some(b.address()))
        .await;
    block_in_place(|| b.publish(TOPIC, &yaml_of(&alias(2))));
    c.until_received(2).await;
    a.resume();
    c.stopped().await;
}

/// (f) A virtual topic: published to the topic, consumed from this router's queue,
/// which keeps what comes while the consumer is away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtual_topic_queue() {
    let broker = block_in_place(|| Broker::start(Options::default()));
    let queue = "/queue/Consumer.r1.VirtualTopic.routinginfo";
    let topic = "/topic/VirtualTopic.routinginfo";
    let s = settings(&[broker.address()], queue, "r1", false);
    let c = Consumer::start(s.clone(), None);
    c.until("subscribed", |c| c.status.connected()).await;
    let mut publisher = Publisher::new(&broker, topic);
    let events: Vec<Event> = (0..3).map(alias).collect();
    for (i, e) in events[..2].iter().enumerate() {
        publisher.send(e);
        c.until_received(i + 1).await;
    }
    let rec = c.stopped().await;
    eprintln!(
        "a virtual topic's message says destination {:?}",
        rec.got.lock().unwrap()[0].destination
    );
    block_in_place(|| broker.publish(topic, &yaml_of(&events[2])));
    let c = Consumer::start(s, None);
    c.until_received(1).await;
    assert_eq!(c.rec.bodies(), [yaml_of(&events[2])]);
    let mut all = rec.bodies();
    all.extend(c.stopped().await.bodies());
    assert_eq!(all, events.iter().map(yaml_of).collect::<Vec<_>>());
}

/// (g) Refused credentials: a clear error in the status, retries spaced by the backoff,
/// no connection, and a prompt stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_password_is_reported_and_retried_with_backoff() {
    let broker = block_in_place(|| Broker::start(Options::default()));
    let mut s = settings(&[broker.address()], TOPIC, "router-g", false);
    s.passcode = Some("wrong".into());
    let c = Consumer::start(s, None);
    c.until("first attempt", |c| c.status.snapshot().attempts >= 1)
        .await;
    let first = Instant::now();
    c.until("refused 4 times", |c| c.status.snapshot().attempts >= 4)
        .await;
    // 250 ms, 500 ms, then 1 s (the maximum) between attempts.
    assert!(
        first.elapsed() >= Duration::from_millis(1700),
        "{:?}",
        first.elapsed()
    );
    let r = c.status.snapshot();
    let e = r.last_error.clone().unwrap_or_default();
    assert!(
        e.contains("refused") && e.contains("password is invalid"),
        "{e}"
    );
    assert_eq!(r.connections, 0);
    assert!(!c.status.connected());
    c.stopped().await;
}

/// `yaml_of` writes strings as Psych does: the same hash through Ruby's `to_yaml`.
#[test]
fn yaml_of_matches_psych_for_awkward_strings() {
    let strings = [
        "",
        "myapp",
        "123456",
        "0777",
        "089",
        "1_000",
        "1.5",
        "1e5",
        "10.0.0.11",
        "true",
        "Yes",
        "off",
        "null",
        "~",
        "y",
        "n",
        "12:30",
        "2014-01-01",
        "2014-02-30",
        "/health",
        "-dash",
        "- dash",
        "a: b",
        "a #b",
        "a:",
        "trailing ",
        " leading",
        "with\"quote",
        "it's",
        "é",
        "pässwörd",
        "tab\there",
        "ctrl\u{1}",
        "a,b[c]{d}",
        "?a",
        "---x",
        ":sym",
        "a\"b:",
        "%p",
        "line\nbreaks\n",
        "no trailing\nbreak",
        "\nleading break\n",
        " indented\nblock\n",
        "space \nbreak\n",
        "x\r\ny",
        "\u{1F600}",
        "\u{a0}nbsp",
    ];
    let mut long = vec!["word ".repeat(20).trim().to_string(), "x".repeat(100)];
    long.push(format!("{} {}", "y".repeat(79), "z"));
    long.push(format!(
        "\"{}  two  spaces {}\"",
        "q ".repeat(40),
        "r ".repeat(10)
    ));
    long.push(format!("'{}", "s ".repeat(50)));
    let all: Vec<String> = strings.iter().map(|s| s.to_string()).chain(long).collect();
    let ruby = r#"
        require 'json'; require 'yaml'
        JSON.parse($stdin.read).each do |p|
          print({ :action => :add_ssl, :app_name => 'myapp', :namespace => 'ns1',
                  :alias => 'www.example.org', :ssl => 'c', :private_key => 'k',
                  :pass_phrase => p }.to_yaml)
          print "\0"
        end
    "#;
    let mut child = std::process::Command::new("ruby")
        .args(["-e", ruby])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("ruby (apt-get install ruby)");
    use std::io::Write;
    let json = serde_json::to_string(&all).unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let psych: Vec<&str> = text.split_terminator('\0').collect();
    assert_eq!(psych.len(), all.len());
    for (s, want) in all.iter().zip(psych) {
        let e = Event::AddSsl {
            app: "myapp".into(),
            namespace: "ns1".into(),
            alias: "www.example.org".into(),
            ssl: "c".into(),
            private_key: "k".into(),
            pass_phrase: Some(s.clone()),
        };
        assert_eq!(yaml_of(&e), want, "for {s:?}");
    }
}
