//! `gearlb demo`: the whole system on one machine, nothing to configure.
//!
//! Owns the showcase: three web gears (a small built-in web app that says which gear
//! answered), two balancers that gossip, rotate and elect a scaler exactly as in
//! production, and an embedded broker that really adds a web gear on `scale-up` (and
//! removes one on `scale-down`) and announces the new set to both balancers with
//! `update-cluster`. Everything runs in this one process on 127.0.0.1 and stops on
//! Ctrl-C: no child process, nothing left behind (its files live in a temporary
//! directory).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::app::{App, Server};
use crate::config::Config;

/// A web gear of the demo.
struct WebGear {
    name: String,
    addr: SocketAddr,
    requests: Arc<AtomicU64>,
    stop: CancellationToken,
}

async fn start_gear(name: String) -> std::io::Result<WebGear> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let requests = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let (n, r, s) = (name.clone(), requests.clone(), stop.clone());
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                _ = s.cancelled() => return,
                a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
            };
            let (n, r, s) = (n.clone(), r.clone(), s.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let (n, r) = (n.clone(), r.clone());
                    async move { Ok::<_, Infallible>(gear_page(&n, &r, req).await) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc);
                tokio::select! { _ = conn => {}, _ = s.cancelled() => {} }
            });
        }
    });
    Ok(WebGear {
        name,
        addr,
        requests,
        stop,
    })
}

/// The demo web app: `/slow?ms=N` waits (to make load), everything else says hello.
async fn gear_page(
    name: &str,
    requests: &AtomicU64,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let is_check = req
        .headers()
        .get(http::header::USER_AGENT)
        .is_some_and(|v| v == "gearlb-health-check");
    if !is_check {
        requests.fetch_add(1, Ordering::Relaxed);
    }
    if req.uri().path() == "/slow" {
        let ms: u64 = req
            .uri()
            .query()
            .and_then(|q| q.strip_prefix("ms="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000)
            .min(30_000);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let cookie = req
        .headers()
        .get(http::header::COOKIE)
        .and_then(|c| c.to_str().ok())
        .unwrap_or("-");
    Response::new(Full::new(Bytes::from(format!(
        "Hello from web gear {name}\nyour cookies as this gear sees them: {cookie}\n"
    ))))
}

/// The embedded broker: scale events really change the set of web gears.
struct DemoBroker {
    gears: Mutex<Vec<WebGear>>,
    balancers: Vec<Arc<App>>,
    events: Mutex<Vec<String>>,
    next: AtomicU64,
    min: usize,
    max: usize,
}

impl DemoBroker {
    fn entries(&self) -> Vec<String> {
        self.gears
            .lock()
            .map(|g| {
                g.iter()
                    .map(|w| format!("{}-demo.example.com|{}", w.name, w.addr))
                    .collect()
            })
            .unwrap_or_default()
    }

    async fn announce(&self) {
        let entries = self.entries();
        for b in &self.balancers {
            b.update_cluster(&entries).await;
        }
    }

    fn note(&self, line: String) {
        if let Ok(mut e) = self.events.lock() {
            e.push(line);
        }
    }

    async fn event(&self, event: &str, node: &str) -> u16 {
        let count = self.gears.lock().map(|g| g.len()).unwrap_or(0);
        match event {
            "scale-up" if count >= self.max => {
                self.note(format!(
                    "broker: scale-up from {node} refused (already {count} gears, the maximum)"
                ));
                422
            }
            "scale-up" => {
                let n = self.next.fetch_add(1, Ordering::Relaxed);
                let Ok(g) = start_gear(format!("gear{n}")).await else {
                    return 500;
                };
                let name = g.name.clone();
                if let Ok(mut gears) = self.gears.lock() {
                    gears.push(g);
                }
                self.announce().await;
                self.note(format!(
                    "broker: scale-up from {node}: added web gear {name} ({} gears)",
                    count + 1
                ));
                200
            }
            "scale-down" if count <= self.min => 422,
            "scale-down" => {
                let gone = self.gears.lock().ok().and_then(|mut g| g.pop());
                self.announce().await;
                if let Some(g) = gone {
                    // Give requests in flight a moment, then stop it.
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    g.stop.cancel();
                    self.note(format!(
                        "broker: scale-down from {node}: removed web gear {} ({} gears)",
                        g.name,
                        count - 1
                    ));
                }
                200
            }
            _ => 400,
        }
    }
}

async fn serve_broker(broker: Arc<DemoBroker>, listener: TcpListener, stop: CancellationToken) {
    loop {
        let (stream, _) = tokio::select! {
            _ = stop.cancelled() => return,
            a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
        };
        let broker = broker.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let broker = broker.clone();
                async move {
                    let node = req
                        .headers()
                        .get("x-gearlb-node")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("?")
                        .to_string();
                    let get = req.method() == http::Method::GET;
                    let body = req
                        .into_body()
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    let form = String::from_utf8_lossy(&body).into_owned();
                    let (status, text) = if get {
                        (
                            200,
                            format!(
                                "{{\"data\":{{\"scale_min\":{},\"scale_max\":{}}}}}",
                                broker.min, broker.max
                            ),
                        )
                    } else {
                        let event = form
                            .split('&')
                            .find_map(|kv| kv.strip_prefix("event="))
                            .unwrap_or("")
                            .to_string();
                        (broker.event(&event, &node).await, "{}".to_string())
                    };
                    let mut r = Response::new(Full::new(Bytes::from(text)));
                    *r.status_mut() =
                        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
                    Ok::<_, Infallible>(r)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// Configuration of demo balancer `i`.
fn balancer_config(
    dir: &Path,
    i: usize,
    secret: &str,
    broker: SocketAddr,
    peers: &[String],
) -> Config {
    let mut c = Config::default();
    c.listen.proxy = "127.0.0.1:0".parse().expect("literal");
    c.listen.status = "127.0.0.1:0".parse().expect("literal");
    c.control.socket = dir.join(format!("lb{i}.sock"));
    c.control.stats_socket = Some(dir.join(format!("lb{i}.stats")));
    c.state.dir = dir.join(format!("lb{i}-data"));
    // Gossip rides each balancer's proxy port, as in a gear.
    c.cluster.transport = crate::cluster::transport::Carrier::Http;
    c.cluster.node_id = Some(format!("lb{i}"));
    c.cluster.id = "demo".into();
    c.cluster.secret = Some(secret.to_string());
    c.cluster.peers = peers.iter().filter_map(|p| p.parse().ok()).collect();
    c.health.interval = Duration::from_secs(1);
    c.scaler.broker_url = Some(format!("http://{broker}"));
    c.scaler.check_interval = Duration::from_secs(1);
    c.scaler.average_window = Duration::from_secs(5);
    c.scaler.max_sessions_per_gear = 2.0;
    c.scaler.up_cooldown = Duration::from_secs(8);
    c.scaler.flap_protection = Duration::from_secs(45);
    c.scaler.down_checks = 15;
    c.scaler.error_backoff = Duration::from_secs(30);
    c.gear.namespace = Some("demo".into());
    c.gear.app_name = Some("demo".into());
    c.gear.name = Some(format!("lb{i}"));
    c.gear.homedir = Some(dir.join("home"));
    c.timeouts.shutdown_grace = Duration::from_secs(5);
    c
}

/// Run the demo until Ctrl-C (or `stop`). Returns the process exit code.
pub async fn run(stop: CancellationToken) -> anyhow::Result<()> {
    let tmp = tempfile_dir()?;
    let dir = tmp.path.clone();
    std::fs::create_dir_all(dir.join("home/.auth"))?;
    std::fs::write(dir.join("home/.auth/token"), "demo-token\n")?;
    std::fs::write(dir.join("home/.auth/iv"), "demo-iv\n")?;
    let secret = format!("demo-{:032x}", fastrand::u128(..));

    let mut gears = Vec::new();
    for n in 1..=3 {
        gears.push(start_gear(format!("gear{n}")).await?);
    }
    let broker_listener = TcpListener::bind("127.0.0.1:0").await?;
    let broker_addr = broker_listener.local_addr()?;

    // Two balancers that know each other: the second learns the first's gossip address.
    let s1 = Server::bind(balancer_config(&dir, 1, &secret, broker_addr, &[])).await?;
    let g1 = s1.app().cluster_view().advertise;
    let s2 = Server::bind(balancer_config(
        &dir,
        2,
        &secret,
        broker_addr,
        std::slice::from_ref(&g1),
    ))
    .await?;
    let g2 = s2.app().cluster_view().advertise;
    let (a1, a2) = (s1.app(), s2.app());
    a1.set_peers(&[format!("'lb1'='lb1|{g1}' 'lb2'='lb2|{g2}'")])
        .await;
    a2.set_peers(&[format!("'lb1'='lb1|{g1}' 'lb2'='lb2|{g2}'")])
        .await;
    let urls = [
        (s1.proxy_addr(), s1.status_addr()),
        (s2.proxy_addr(), s2.status_addr()),
    ];
    let broker = Arc::new(DemoBroker {
        gears: Mutex::new(gears),
        balancers: vec![a1.clone(), a2.clone()],
        events: Mutex::new(Vec::new()),
        next: AtomicU64::new(4),
        min: 1,
        max: 6,
    });
    broker.announce().await;
    let stop1 = stop.child_token();
    let stop2 = stop.child_token();
    let t1 = tokio::spawn(s1.run(stop1.clone()));
    let t2 = tokio::spawn(s2.run(stop2.clone()));
    tokio::spawn(serve_broker(
        broker.clone(),
        broker_listener,
        stop.child_token(),
    ));

    let (p1, st1) = urls[0];
    let (p2, st2) = urls[1];
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "gearlb".into());
    let sock1 = dir.join("lb1.sock");
    println!(
        "gearlb demo: 3 web gears behind 2 gossiping balancers, with a broker that really scales.\n\
         \n  balancer lb1: http://{p1}/   status page http://{st1}/gearlb-status\n  \
         balancer lb2: http://{p2}/   status page http://{st2}/gearlb-status\n\
         \nThings to try (in another terminal):\n  \
         curl -si http://{p1}/                         # which gear answered, and its Set-Cookie: GEAR=...\n  \
         curl -s -c /tmp/gear.txt -b /tmp/gear.txt http://{p1}/    # repeat: same gear every time\n  \
         seq 300 | xargs -P 12 -I{{}} curl -s -o /dev/null \"http://{p1}/slow?ms=500\"   # load: watch a scale-up\n  \
         {exe} ctl --socket {s1} status            # the balancer's view\n  \
         {exe} ctl --socket {s1} peers             # gossip: both balancers, the scaler\n  \
         {exe} ctl --socket {s1} rotate-out gear2-demo   # drain gear2 on both balancers\n  \
         {exe} ctl --socket {s1} rotate-in gear2-demo\n\
         \nCtrl-C stops everything.\n",
        s1 = sock1.display(),
    );
    let _ = std::io::stdout().flush();

    let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut shown_events = 0usize;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let events: Vec<String> = broker.events.lock().map(|e| e.clone()).unwrap_or_default();
        if tty {
            print!(
                "\x1b[s\x1b[J{}\x1b[u",
                summary(&broker, &[&a1, &a2], &events)
            );
        } else {
            for e in &events[shown_events..] {
                println!("{e}");
            }
        }
        shown_events = events.len();
        let _ = std::io::stdout().flush();
    }
    println!("\nstopping…");
    let _ = t1.await;
    let _ = t2.await;
    if let Ok(gears) = broker.gears.lock() {
        for g in gears.iter() {
            g.stop.cancel();
        }
    }
    drop(tmp);
    println!("stopped.");
    Ok(())
}

/// The live one-screen summary.
fn summary(broker: &DemoBroker, apps: &[&Arc<App>], events: &[String]) -> String {
    let mut out = String::from("\n");
    let gears: BTreeMap<String, u64> = broker
        .gears
        .lock()
        .map(|g| {
            g.iter()
                .map(|w| (w.name.clone(), w.requests.load(Ordering::Relaxed)))
                .collect()
        })
        .unwrap_or_default();
    out.push_str(&format!("web gears ({}):", gears.len()));
    for (name, n) in &gears {
        out.push_str(&format!("  {name}: {n} req"));
    }
    out.push('\n');
    for app in apps {
        let s = app.status();
        let sc = s.scaler.clone().unwrap_or_default();
        let states: Vec<String> = s
            .backends
            .iter()
            .map(|b| {
                format!(
                    "{}={}",
                    b.name.trim_start_matches("gear-"),
                    serde_json::to_value(b.state)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default()
                )
            })
            .collect();
        out.push_str(&format!(
            "{}: in flight {:>3}  scaler {} {}  capacity {:>5.1}%  {}\n",
            app.cluster_view().self_id,
            s.frontend.requests_current,
            sc.scaler.unwrap_or_default(),
            if sc.acting { "(me)" } else { "    " },
            sc.capacity,
            states.join(" ")
        ));
    }
    for e in events.iter().rev().take(4).rev() {
        out.push_str(&format!("{e}\n"));
    }
    out
}

/// A temporary directory removed on drop (the demo's sockets and state).
struct TempDir {
    path: PathBuf,
}

fn tempfile_dir() -> std::io::Result<TempDir> {
    let path = std::env::temp_dir().join(format!("gearlb-demo-{}", std::process::id()));
    std::fs::create_dir_all(&path)?;
    Ok(TempDir { path })
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
