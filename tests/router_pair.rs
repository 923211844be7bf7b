//! A pair of routers behind keepalived, for real: what `examples/router/` ships, run in
//! network namespaces made here.
//!
//! - A bridge in a namespace of its own joins five namespaces: `r1` and `r2` (a router
//!   each: `gearlb` on `examples/router/router{1,2}.toml` and Debian's `keepalived` on
//!   `examples/router/keepalived-router{1,2}.conf`, with pid files of its own, whose
//!   `vrrp_script` is the shipped `check-gearlb.sh`), `svc` (Debian's ActiveMQ on the
//!   shipped `activemq-routing.xml`, origin-server's routing plugin publishing to it, and
//!   the applications' load-balancer gears), and `cli` (the client). Addresses are the
//!   example's, TEST-NET-1 (192.0.2.0/24), on that bridge only; names carry the test's
//!   pid; everything is removed on drop, a panic included.
//! - Active/active: VIP1 (192.0.2.101) is r1's, VIP2 (192.0.2.102) r2's, each the other's
//!   backup, VRRP by unicast between the routers' own addresses.
//! - The client requests both VIPs all along (three threads each, a request every 20 ms
//!   each, bounded in number and time), each answer checked: the application the `Host`
//!   names, from one of its gears. A request that gets no answer is a failure; an
//!   answer that is not that (a 404, a 503, another application's) is wrong.
//!
//! Each round takes r1 away, each way in turn, then brings it back:
//! - `kill`: its gearlb killed (`kill -9`): VIP1 served by r2 within 4 s; back: started
//!   again on its state;
//! - `link`: its link down (a host lost): within 5 s (three adverts missed, 3.6 s, and
//!   the gratuitous ARPs); back: up (its checks found every gear down meanwhile);
//! - `keepalived`: its keepalived stopped (SIGTERM: a priority-0 advert): within 2 s;
//!   back: started again;
//! - `reinstall`: its gearlb killed, within 4 s; back: started again without its state
//!   directory, so that it takes r2's table.
//!
//! Meanwhile VIP2 never fails a request, and no request is answered wrongly, ever. Once
//! r1 is back it takes VIP1 back (the shipped configuration preempts, `preempt_delay`
//! later; see the example's README), VIP2 still without a failure.
//!
//! `ROUTER_PAIR_ROUNDS=10 cargo test --test router_pair -- --nocapture` measures more
//! rounds and prints each (bench/ROUTER.md); `ROUTER_PAIR_FAULTS=kill,link` picks the
//! faults. Root is required (CI runs as root), and keepalived, curl, ActiveMQ and
//! ruby-stomp (`.ci/run` installs them).

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::activemq::{Netns, Options};
use support::router::{alias, create, endpoint, fixture, ha, spi, wait_subscribed, Source, TOPIC};
use support::{in_netns, ip, require_root, Gearlb, TestBackend};

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/router");
/// The routers' own addresses, and the virtual ones (the example's).
const ROUTER_IPS: [&str; 2] = ["192.0.2.11", "192.0.2.12"];
const VIPS: [&str; 2] = ["192.0.2.101", "192.0.2.102"];
/// The broker and the gears.
const SVC_IP: &str = "192.0.2.20";
const CLI_IP: &str = "192.0.2.30";
const ROUTING_PASSWORD: &str = "routinginfopasswd";
const ROUTER_PASSWORD: &str = "router-password-for-the-test";
const SECRET: &str = "routers-secret-0123456789abcdef";
/// The hosts the client asks for, and the application each is.
const HOSTS: [(&str, &str); 3] = [
    ("ha-app1-ns1.example.com", "app1"),
    ("www.example.org", "app1"),
    ("ha-app2-ns1.example.com", "app2"),
];
/// How long the client waits for a connection, and for an answer.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
const PROBERS_PER_VIP: usize = 3;
const PROBE_PAUSE: Duration = Duration::from_millis(20);

/// The namespaces and the bridge; removed on drop.
struct Net {
    tag: String,
    made: Vec<String>,
}

impl Net {
    fn new() -> Net {
        let mut net = Net {
            tag: format!("glbp{}", std::process::id()),
            made: Vec::new(),
        };
        for n in ["sw", "r1", "r2", "svc", "cli"] {
            let name = net.ns(n);
            // A namespace left by a test killed outright (same pid, rarely).
            let _ = Command::new("ip")
                .args(["netns", "del", &name])
                .stderr(Stdio::null())
                .status();
            ip(&["netns", "add", &name]);
            net.made.push(name);
        }
        let sw = net.ns("sw");
        ip(&["-n", &sw, "link", "set", "lo", "up"]);
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &sw, "link", "set", "br0", "up"]);
        for (n, addr) in [
            ("r1", ROUTER_IPS[0]),
            ("r2", ROUTER_IPS[1]),
            ("svc", SVC_IP),
            ("cli", CLI_IP),
        ] {
            let ns = net.ns(n);
            let port = format!("p-{n}");
            ip(&[
                "-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                &ns,
            ]);
            ip(&["-n", &sw, "link", "set", &port, "master", "br0", "up"]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        net
    }

    fn ns(&self, n: &str) -> String {
        format!("{}-{n}", self.tag)
    }

    /// Whether `vip` is on `ns`'s eth0.
    fn has(&self, ns: &str, vip: &str) -> bool {
        let out = Command::new("ip")
            .args([
                "-n",
                &self.ns(ns),
                "-o",
                "-4",
                "addr",
                "show",
                "dev",
                "eth0",
            ])
            .output()
            .expect("ip");
        String::from_utf8_lossy(&out.stdout).contains(&format!(" {vip}/"))
    }

    /// Wait until `vip` is on `ns` and on no other router; when it was seen so.
    fn wait_vip(&self, ns: &str, vip: &str, within: Duration) -> Option<Instant> {
        let other = if ns == "r1" { "r2" } else { "r1" };
        let end = Instant::now() + within;
        while Instant::now() < end {
            if self.has(ns, vip) && !self.has(other, vip) {
                return Some(Instant::now());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for name in self.made.iter().rev() {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

/// Debian's keepalived in a router's namespace, on the shipped configuration with its
/// own pid files; stopped on drop (SIGTERM, then SIGKILL to both its processes).
struct Keepalived {
    ns: String,
    dir: PathBuf,
    child: Option<Child>,
}

impl Keepalived {
    fn start(ns: &str, dir: &Path, conf: &Path) -> Keepalived {
        std::fs::create_dir_all(dir).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("keepalived.log"))
            .unwrap();
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "keepalived",
                "--dont-fork",
                "--log-console",
            ])
            .args(["--log-detail", "--use-file"])
            .arg(conf)
            .arg("--pid")
            .arg(dir.join("keepalived.pid"))
            .arg("--vrrp_pid")
            .arg(dir.join("vrrp.pid"))
            .arg("--checkers_pid")
            .arg(dir.join("checkers.pid"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("keepalived (Debian's package: apt-get install keepalived)");
        Keepalived {
            ns: ns.to_string(),
            dir: dir.to_path_buf(),
            child: Some(child),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("keepalived.log")).unwrap_or_default()
    }

    /// The VRRP child's pid, if it is a keepalived still.
    fn vrrp_pid(&self) -> Option<i32> {
        let pid: i32 = std::fs::read_to_string(self.dir.join("vrrp.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        String::from_utf8_lossy(&cmd)
            .contains("keepalived")
            .then_some(pid)
    }

    fn signal(pid: i32, sig: rustix::process::Signal) {
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(pid, sig);
        }
    }

    /// SIGTERM (its VRRP process sends priority-0 adverts and drops the addresses), and
    /// wait for the exit (SIGKILL after 10 s).
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let vrrp = self.vrrp_pid();
        Self::signal(child.id() as i32, rustix::process::Signal::TERM);
        let end = Instant::now() + Duration::from_secs(10);
        while child.try_wait().unwrap().is_none() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        if let Some(pid) = vrrp {
            if std::path::Path::new(&format!("/proc/{pid}")).exists() {
                Self::signal(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

impl Drop for Keepalived {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            // Its state changes and checks, not the gratuitous ARPs.
            let tail: Vec<&str> = log
                .lines()
                .rev()
                .filter(|l| !l.contains("gratuitous ARP"))
                .take(60)
                .collect();
            eprintln!(
                "--- keepalived in {} (log tail) ---\n{}\n---",
                self.ns,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        self.stop();
    }
}

/// One request's outcome.
#[derive(Clone, Debug)]
enum Outcome {
    Ok,
    /// No answer (refused, timed out, cut).
    Failed(String),
    /// An answer, but not the application's from one of its gears.
    Wrong(String),
}

#[derive(Clone, Debug)]
struct Rec {
    vip: usize,
    start: Instant,
    end: Instant,
    outcome: Outcome,
}

/// GET `/` for `host` on `vip`:80, checked.
fn request(vip: &str, host: &str, app: &str) -> Outcome {
    let addr: SocketAddr = format!("{vip}:80").parse().unwrap();
    let mut s = match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(format!("connect: {e}")),
    };
    s.set_read_timeout(Some(ANSWER_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(ANSWER_TIMEOUT)).unwrap();
    let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    if let Err(e) = s.write_all(req.as_bytes()) {
        return Outcome::Failed(format!("write: {e}"));
    }
    let mut out = Vec::new();
    if let Err(e) = s.read_to_end(&mut out) {
        return Outcome::Failed(format!("read: {e}"));
    }
    let text = String::from_utf8_lossy(&out);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return if out.is_empty() {
            Outcome::Failed("closed without an answer".into())
        } else {
            Outcome::Wrong(format!("not HTTP: {text:?}"))
        };
    };
    let status = head.split(' ').nth(1).unwrap_or("");
    let right = [format!("backend {app}-g1"), format!("backend {app}-g2")];
    if status == "200" && right.iter().any(|r| r == body) {
        Outcome::Ok
    } else {
        Outcome::Wrong(format!(
            "{host}: {} {body:?}",
            head.lines().next().unwrap_or("")
        ))
    }
}

/// The client: probers in the `cli` namespace on both VIPs, every outcome recorded.
struct Client {
    stop: Arc<AtomicBool>,
    recs: Arc<Mutex<Vec<Rec>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Client {
    fn start(ns: &str, max_per_prober: u64, limit: Duration) -> Client {
        let stop = Arc::new(AtomicBool::new(false));
        let recs = Arc::new(Mutex::new(Vec::new()));
        let until = Instant::now() + limit;
        let mut threads = Vec::new();
        for (vip, addr) in VIPS.iter().enumerate() {
            for p in 0..PROBERS_PER_VIP {
                let (stop, recs, ns) = (stop.clone(), recs.clone(), ns.to_string());
                let path = format!("/run/netns/{ns}");
                threads.push(std::thread::spawn(move || {
                    use std::os::fd::AsFd;
                    let fd = std::fs::File::open(&path).unwrap();
                    rustix::thread::move_into_link_name_space(
                        fd.as_fd(),
                        Some(rustix::thread::LinkNameSpaceType::Network),
                    )
                    .expect("setns into the client's namespace");
                    // Staggered, so that an outage is seen to end promptly.
                    std::thread::sleep(PROBE_PAUSE * p as u32 / PROBERS_PER_VIP as u32);
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed)
                        && n < max_per_prober
                        && Instant::now() < until
                    {
                        let (host, app) = HOSTS[(n as usize + p) % HOSTS.len()];
                        let start = Instant::now();
                        let outcome = request(addr, host, app);
                        let end = Instant::now();
                        recs.lock().unwrap().push(Rec {
                            vip,
                            start,
                            end,
                            outcome,
                        });
                        n += 1;
                        std::thread::sleep(PROBE_PAUSE);
                    }
                }));
            }
        }
        Client {
            stop,
            recs,
            threads,
        }
    }

    /// The requests on `vip` started between `from` and `to`, by their ends.
    fn recs(&self, vip: usize, from: Instant, to: Instant) -> Vec<Rec> {
        // Recorded as they end: from the last back to those that ended before `from`
        // (a second of slack for threads that recorded late).
        let all = self.recs.lock().unwrap();
        let mut v: Vec<Rec> = all
            .iter()
            .rev()
            .take_while(|r| r.end + Duration::from_secs(1) >= from)
            .filter(|r| r.vip == vip && r.start >= from && r.start <= to)
            .cloned()
            .collect();
        drop(all);
        v.sort_by_key(|r| r.end);
        v
    }

    /// Wait until `n` requests on `vip` started after `after` succeeded; when the last
    /// one ended.
    fn wait_ok(&self, vip: usize, after: Instant, n: usize, within: Duration) -> Option<Instant> {
        let end = Instant::now() + within;
        loop {
            let ok: Vec<Rec> = self
                .recs(vip, after, Instant::now())
                .into_iter()
                .filter(|r| matches!(r.outcome, Outcome::Ok))
                .collect();
            if ok.len() >= n {
                return Some(ok[n - 1].end);
            }
            if Instant::now() > end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn finish(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.finish();
    }
}

/// What a window of requests on one VIP shows.
#[derive(Debug, Default)]
struct Window {
    ok: usize,
    failed: Vec<String>,
    wrong: Vec<String>,
    /// The longest time between two answered requests (their ends).
    gap: Duration,
    /// The end of the answered request that closed that gap.
    gap_end: Option<Instant>,
}

fn window(recs: &[Rec]) -> Window {
    let mut w = Window::default();
    let mut last_ok: Option<Instant> = None;
    for r in recs {
        match &r.outcome {
            Outcome::Ok => {
                w.ok += 1;
                if let Some(last) = last_ok {
                    if r.end - last > w.gap {
                        w.gap = r.end - last;
                        w.gap_end = Some(r.end);
                    }
                }
                last_ok = Some(r.end);
            }
            Outcome::Failed(e) => w.failed.push(e.clone()),
            Outcome::Wrong(e) => w.wrong.push(e.clone()),
        }
    }
    w
}

/// How r1 is taken away.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// `kill -9` of its gearlb; back: started again on its state.
    Kill,
    /// Its link down (the host lost); back: up.
    Link,
    /// SIGTERM to its keepalived (a priority-0 advert); back: started again.
    Keepalived,
    /// `kill -9` of its gearlb; back: started again with its state directory lost (a
    /// new router), so that it takes its peer's table.
    Reinstall,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Link => "link",
            Fault::Keepalived => "keepalived",
            Fault::Reinstall => "reinstall",
        }
    }

    /// The longest gap on VIP1 allowed.
    fn bound(self) -> Duration {
        match self {
            Fault::Kill | Fault::Reinstall => Duration::from_secs(4),
            Fault::Link => Duration::from_secs(5),
            Fault::Keepalived => Duration::from_secs(2),
        }
    }
}

/// Everything of one test, dropped in this order: the client, keepalived, the routers,
/// the gears, the broker, the runtime, the files, the namespaces.
struct Pair {
    client: Option<Client>,
    keepalived: [Option<Keepalived>; 2],
    routers: [Option<Gearlb>; 2],
    gears: Vec<TestBackend>,
    src: Source,
    _rt: tokio::runtime::Runtime,
    dir: tempfile::TempDir,
    net: Net,
}

/// The shipped router configuration `n` (1 or 2), its paths and broker the test's.
fn router_config(n: usize, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(format!("{EXAMPLES}/router{n}.toml")).unwrap();
    let mut t: toml::Table = text.parse().unwrap();
    let set = |t: &mut toml::Table, section: &str, key: &str, v: toml::Value| {
        t.get_mut(section)
            .and_then(|s| s.as_table_mut())
            .unwrap_or_else(|| panic!("router{n}.toml has no [{section}]"))
            .insert(key.into(), v);
    };
    let path = |p: PathBuf| toml::Value::String(p.display().to_string());
    set(&mut t, "control", "socket", path(dir.join("control.sock")));
    set(&mut t, "state", "dir", path(dir.join("data")));
    set(&mut t, "tls", "cert", path(fixture("wildcard.crt")));
    set(&mut t, "tls", "key", path(fixture("wildcard.key")));
    let broker = toml::Value::String(format!("{SVC_IP}:61613"));
    set(
        &mut t,
        "routing_spi",
        "brokers",
        toml::Value::Array(vec![broker]),
    );
    let file = dir.join("router.toml");
    std::fs::write(&file, toml::to_string(&t).unwrap()).unwrap();
    file
}

impl Pair {
    fn start_router(&mut self, i: usize) {
        let dir = self.dir.path().join(format!("r{}", i + 1));
        std::fs::create_dir_all(&dir).unwrap();
        let config = router_config(i + 1, &dir);
        let ns = self.net.ns(&format!("r{}", i + 1));
        let r = Gearlb::start_in_with(
            &dir,
            &config,
            &["ip", "netns", "exec", &ns],
            &[
                ("GEARLB_ROUTING_SPI_PASSWORD", ROUTER_PASSWORD),
                ("OPENSHIFT_SECRET_TOKEN", SECRET),
            ],
        );
        wait_subscribed(&r);
        self.routers[i] = Some(r);
    }

    /// keepalived `i` on the shipped configuration: the check script installed as
    /// operators do (root's, mode 0755), run as `nobody` (the test adds no user).
    fn start_keepalived(&mut self, i: usize) {
        let lib = self.dir.path().join("lib");
        let conf = self.dir.path().join(format!("keepalived-r{}.conf", i + 1));
        if !conf.exists() {
            let text =
                std::fs::read_to_string(format!("{EXAMPLES}/keepalived-router{}.conf", i + 1))
                    .unwrap();
            let script = "/usr/local/lib/gearlb/check-gearlb.sh";
            let user = "script_user keepalived_script";
            assert!(text.contains(script) && text.contains(user), "{text}");
            let text = text
                .replace(script, &lib.join("check-gearlb.sh").display().to_string())
                .replace(user, "script_user nobody");
            std::fs::write(&conf, text).unwrap();
        }
        let ns = self.net.ns(&format!("r{}", i + 1));
        let dir = self.dir.path().join(format!("keepalived-r{}", i + 1));
        self.keepalived[i] = Some(Keepalived::start(&ns, &dir, &conf));
    }

    fn router(&self, i: usize) -> &Gearlb {
        self.routers[i].as_ref().unwrap()
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        for (i, r) in self.routers.iter().enumerate() {
            if let Some(r) = r {
                let log = r.log_text();
                let tail: Vec<&str> = log
                    .lines()
                    .rev()
                    .filter(|l| !l.contains("routing event applied"))
                    .take(40)
                    .collect();
                s.push_str(&format!(
                    "--- router r{} ---\n{}\n",
                    i + 1,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                ));
            }
        }
        s
    }
}

/// Whether router `ip` answers every host rightly (from the client's namespace).
fn routes_all(net: &Net, ip: &'static str) -> bool {
    in_netns(&net.ns("cli"), move || {
        HOSTS
            .iter()
            .all(|(host, app)| matches!(request(ip, host, app), Outcome::Ok))
    })
}

fn start() -> Pair {
    require_root();
    for (what, path) in [
        ("keepalived", "/usr/sbin/keepalived"),
        ("curl", "/usr/bin/curl"),
    ] {
        assert!(
            Path::new(path).exists(),
            "{path} is missing: this test runs Debian's {what} (apt-get install {what}; CI \
             installs it)"
        );
    }
    let net = Net::new();
    let dir = tempfile::Builder::new()
        .prefix("gearlb-pair")
        .tempdir()
        .unwrap();
    // The check script where keepalived's script security accepts it and `nobody` can
    // run it: root's, 0755 all the way.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let lib = dir.path().join("lib");
    std::fs::create_dir(&lib).unwrap();
    std::fs::copy(
        format!("{EXAMPLES}/check-gearlb.sh"),
        lib.join("check-gearlb.sh"),
    )
    .unwrap();
    std::fs::set_permissions(
        lib.join("check-gearlb.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let xml = std::fs::read_to_string(format!("{EXAMPLES}/activemq-routing.xml")).unwrap();
    let src = Source::start_with(
        TOPIC,
        Options {
            netns: Some(Netns {
                name: net.ns("svc"),
                ip: SVC_IP.parse().unwrap(),
            }),
            xml: Some(xml),
            conf_files: vec![(
                "credentials.properties".into(),
                format!(
                    "routinginfo.password={ROUTING_PASSWORD}\nrouter.password={ROUTER_PASSWORD}\n"
                ),
            )],
            ..Options::default()
        },
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let gears = {
        let _in = rt.enter();
        let svc = net.ns("svc");
        ["app1-g1", "app1-g2", "app2-g1", "app2-g2"]
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let addr: SocketAddr = format!("{SVC_IP}:{}", 8001 + i).parse().unwrap();
                TestBackend::start_in(name, &svc, addr)
            })
            .collect::<Vec<_>>()
    };
    let mut pair = Pair {
        client: None,
        keepalived: [None, None],
        routers: [None, None],
        gears,
        src,
        _rt: rt,
        dir,
        net,
    };
    pair.start_router(0);
    pair.start_router(1);
    // The platform's events, as the broker's plugin publishes them.
    let gear_ids = [
        "5a1e00000000000000000a11",
        "5a1e00000000000000000a12",
        "5a1e00000000000000000a21",
        "5a1e00000000000000000a22",
    ];
    for (a, app) in ["app1", "app2"].iter().enumerate() {
        pair.src.send(create(app));
        for g in 0..2 {
            let addr = pair.gears[a * 2 + g].addr;
            pair.src.send(endpoint(app, gear_ids[a * 2 + g], addr));
        }
    }
    pair.src.send(alias("app1", "www.example.org"));
    assert_eq!(ha("app1"), HOSTS[0].0);
    let end = Instant::now() + Duration::from_secs(30);
    while !(routes_all(&pair.net, ROUTER_IPS[0]) && routes_all(&pair.net, ROUTER_IPS[1])) {
        assert!(
            Instant::now() < end,
            "the routers do not route every host: {}",
            pair.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    pair.start_keepalived(0);
    pair.start_keepalived(1);
    for (ns, vip) in [("r1", VIPS[0]), ("r2", VIPS[1])] {
        assert!(
            pair.net
                .wait_vip(ns, vip, Duration::from_secs(30))
                .is_some(),
            "{vip} never came to {ns}"
        );
    }
    pair
}

/// The rounds and faults asked for (`ROUTER_PAIR_ROUNDS`, `ROUTER_PAIR_FAULTS`).
fn plan() -> (usize, Vec<Fault>) {
    let rounds = std::env::var("ROUTER_PAIR_ROUNDS")
        .ok()
        .map(|v| v.parse().expect("ROUTER_PAIR_ROUNDS: a number"))
        .unwrap_or(1);
    let faults = match std::env::var("ROUTER_PAIR_FAULTS") {
        Ok(v) => v
            .split(',')
            .map(|f| match f.trim() {
                "kill" => Fault::Kill,
                "link" => Fault::Link,
                "keepalived" => Fault::Keepalived,
                "reinstall" => Fault::Reinstall,
                other => {
                    panic!("ROUTER_PAIR_FAULTS: {other:?} (kill, link, keepalived, reinstall)")
                }
            })
            .collect(),
        Err(_) => vec![
            Fault::Kill,
            Fault::Link,
            Fault::Keepalived,
            Fault::Reinstall,
        ],
    };
    (rounds, faults)
}

/// One round: r1 taken away by `fault`, then brought back.
struct Round {
    gap: Duration,
    /// From the fault to VIP1's first answer after the gap.
    served_after: Duration,
    /// From r1 brought back to VIP1 on r1 again.
    back_after: Duration,
    /// VIP1's failures while r1 took it back.
    takeback_failures: usize,
}

fn round(pair: &mut Pair, n: usize, fault: Fault) -> Round {
    let r1 = pair.net.ns("r1");
    let begin = Instant::now();
    let client = pair.client.as_ref().unwrap();
    // Steady first: both VIPs answering.
    for vip in 0..2 {
        assert!(
            client
                .wait_ok(vip, begin, 20, Duration::from_secs(20))
                .is_some(),
            "VIP{} does not answer before the fault",
            vip + 1
        );
    }
    let t0 = Instant::now();
    match fault {
        Fault::Kill | Fault::Reinstall => pair.router(0).signal("KILL"),
        Fault::Link => ip(&["-n", &r1, "link", "set", "eth0", "down"]),
        Fault::Keepalived => pair.keepalived[0].as_mut().unwrap().stop(),
    }
    let moved = pair.net.wait_vip("r2", VIPS[0], Duration::from_secs(20));
    let moved =
        moved.unwrap_or_else(|| panic!("{fault:?}: VIP1 never moved to r2: {}", pair.logs()));
    let client = pair.client.as_ref().unwrap();
    let served = client
        .wait_ok(0, moved, 1, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("{fault:?}: VIP1 on r2 is not served"));
    let w1 = window(&client.recs(0, t0 - Duration::from_secs(1), served));
    // Back.
    let t_back = Instant::now();
    match fault {
        Fault::Kill | Fault::Reinstall => {
            if let Some(mut old) = pair.routers[0].take() {
                old.wait(Duration::from_secs(10));
            }
            if fault == Fault::Reinstall {
                let data = pair.dir.path().join("r1/data");
                std::fs::remove_dir_all(&data).unwrap();
            }
            pair.start_router(0);
            if fault == Fault::Reinstall {
                let source = spi(pair.router(0))["table"]["source"].clone();
                let end = Instant::now() + Duration::from_secs(30);
                while spi(pair.router(0))["table"]["source"] == "empty" && Instant::now() < end {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let now = spi(pair.router(0));
                assert_eq!(
                    now["table"]["source"], "peer router2",
                    "a new r1 takes r2's table (it said {source} at first): {now}"
                );
            }
        }
        Fault::Link => ip(&["-n", &r1, "link", "set", "eth0", "up"]),
        Fault::Keepalived => pair.start_keepalived(0),
    }
    let home = pair.net.wait_vip("r1", VIPS[0], Duration::from_secs(40));
    let home =
        home.unwrap_or_else(|| panic!("{fault:?}: r1 never took VIP1 back: {}", pair.logs()));
    let client = pair.client.as_ref().unwrap();
    let settled = [0, 1].map(|vip| {
        client
            .wait_ok(vip, home, 20, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("{fault:?}: VIP{} not served after r1 came back", vip + 1))
    });
    let end = settled[0].max(settled[1]);
    let w2 = window(&client.recs(1, begin, end));
    let takeback = window(&client.recs(0, t_back, end));
    let all1 = window(&client.recs(0, begin, end));
    let served_after = w1.gap_end.map_or(served - t0, |e| e - t0);
    println!(
        "round {n:>2} {:<10} VIP1 gap {:>5.2} s (served {:>5.2} s after the fault; {} failed) | VIP2 {} answered, {} failed | \
         VIP1 back on r1 {:>5.2} s after r1, {} failed meanwhile {}",
        fault.name(),
        w1.gap.as_secs_f64(),
        served_after.as_secs_f64(),
        w1.failed.len(),
        w2.ok,
        w2.failed.len(),
        (home - t_back).as_secs_f64(),
        takeback.failed.len(),
        summary(&takeback.failed),
    );
    assert!(
        all1.wrong.is_empty() && w2.wrong.is_empty(),
        "{fault:?}: requests answered wrongly: VIP1 {:?}, VIP2 {:?}",
        all1.wrong,
        w2.wrong
    );
    assert!(
        w2.failed.is_empty(),
        "{fault:?}: VIP2 failed {} requests {}: {}",
        w2.failed.len(),
        summary(&w2.failed),
        pair.logs()
    );
    assert!(
        w1.gap <= fault.bound(),
        "{fault:?}: VIP1 unserved for {:?} (at most {:?})",
        w1.gap,
        fault.bound()
    );
    Round {
        gap: w1.gap,
        served_after,
        back_after: home - t_back,
        takeback_failures: takeback.failed.len(),
    }
}

/// Failures by kind, counted: `(connect: Connection refused ×3)`.
fn summary(failed: &[String]) -> String {
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for f in failed {
        let k = f.split(" (os error").next().unwrap_or(f).to_string();
        match kinds.iter_mut().find(|(x, _)| *x == k) {
            Some((_, n)) => *n += 1,
            None => kinds.push((k, 1)),
        }
    }
    if kinds.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
    format!("({})", parts.join(", "))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Each way of losing r1 moves VIP1 to r2 within its bound, VIP2 never fails, nothing
/// is answered wrongly, and r1 back takes VIP1 back.
#[test]
fn a_router_lost_hands_its_address_to_the_other_and_the_other_address_never_stops() {
    let (rounds, faults) = plan();
    let mut pair = start();
    let limit = Duration::from_secs(120 + 90 * (rounds * faults.len()) as u64);
    pair.client = Some(Client::start(&pair.net.ns("cli"), 1_000_000, limit));
    let mut results: Vec<(Fault, Round)> = Vec::new();
    for n in 1..=rounds {
        for &f in &faults {
            results.push((f, round(&mut pair, n, f)));
        }
    }
    pair.client.as_mut().unwrap().finish();
    for &f in &faults {
        let of: Vec<&Round> = results
            .iter()
            .filter(|(g, _)| *g == f)
            .map(|(_, r)| r)
            .collect();
        let gaps: Vec<Duration> = of.iter().map(|r| r.gap).collect();
        println!(
            "{:<10} {} rounds: VIP1 gap median {:.2} s, max {:.2} s; served after the fault: median {:.2} s; \
             back on r1: median {:.2} s; takeback failures: {}",
            f.name(),
            of.len(),
            median(gaps.clone()).as_secs_f64(),
            gaps.iter().max().unwrap().as_secs_f64(),
            median(of.iter().map(|r| r.served_after).collect()).as_secs_f64(),
            median(of.iter().map(|r| r.back_after).collect()).as_secs_f64(),
            of.iter().map(|r| r.takeback_failures).sum::<usize>(),
        );
    }
}
