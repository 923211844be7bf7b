//! Issue 34, point 4: the head gear of an HA application is not idled while traffic
//! flows through the balancers' ports.
//!
//! Two "nodes" (network namespaces joined by a veth pair, made here and removed on
//! drop): node A holds the head gear and its balancer, node B a second balancer gear.
//! Each node has a web gear and a node frontend on port 80 of its address that answers
//! `/health` itself, as origin-server's frontends do for a `health` mapping, and writes
//! one access-log line per request in the frontend's `openshift` LogFormat
//! (`plugins/frontend/apache-vhost/httpd/openshift-vhost-logconf.include`). Clients
//! send their requests to the balancers' ports (the port-proxy path), never to port 80.
//! Then origin-server's own `node-util/sbin/oo-last-access` runs with `ruby` in node
//! A's namespace (so `/sbin/ip -o addr show` lists node A's addresses, whose requests
//! it ignores), in a private mount namespace whose `/etc/passwd` lists the gear users,
//! over node A's frontend log: it must mark the head gear accessed, and must not when
//! the balancers' keep-seen is turned off.
//!
//! The script is `$OO_LAST_ACCESS`, else read from the origin-server mirror; where
//! neither is there, the tests say so loudly and return. `ruby` must be installed
//! (`.ci/run` installs it).

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::{in_netns, ip, require_root, workdir, Gearlb};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = "ns";
const DOMAIN: &str = "example.com";
const APP: &str = "myapp";
/// The head gear's uuid is the application's.
const APP_UUID: &str = "5a1e00000000000000000001";
const UUID_B: &str = "5a1e000000000000000000b2";
/// Another application's gear on node A, visited by a person through the frontend.
const OTHER_UUID: &str = "5a1e000000000000000000c3";
const SECRET: &str = "app-secret-token-0123456789abcdef";
const GECOS: &str = "OpenShift guest";
const MIRROR: &str = "/work/.mirror/openshift+origin-server/repo";
/// `idler.interval` of the balancers here (the default is 10 minutes).
const INTERVAL: Duration = Duration::from_millis(200);

fn app_dns() -> String {
    format!("{APP}-{NS}.{DOMAIN}")
}

fn dns_of(uuid: &str) -> String {
    if uuid == APP_UUID {
        app_dns()
    } else if uuid == OTHER_UUID {
        format!("other-{NS}.{DOMAIN}")
    } else {
        format!("{uuid}-{NS}.{DOMAIN}")
    }
}

/// origin-server's `oo-last-access`, written into `dir`.
fn oo_last_access(dir: &Path) -> Option<PathBuf> {
    let text = match std::env::var("OO_LAST_ACCESS") {
        Ok(p) => std::fs::read(&p).unwrap_or_else(|e| panic!("OO_LAST_ACCESS={p}: {e}")),
        Err(_) => {
            let out = Command::new("git")
                .args(["-C", MIRROR, "show", "HEAD:node-util/sbin/oo-last-access"])
                .output()
                .ok()?;
            if !out.status.success() || out.stdout.is_empty() {
                return None;
            }
            out.stdout
        }
    };
    let path = dir.join("oo-last-access");
    std::fs::write(&path, text).unwrap();
    Some(path)
}

/// Two namespaces ("nodes") joined by a veth pair; removed on drop.
struct Nodes {
    a: String,
    b: String,
    ip_a: String,
    ip_b: String,
}

impl Nodes {
    /// Test `k`'s own names and addresses (tests run in parallel).
    fn new(k: u8) -> Nodes {
        let tag = std::process::id() % 100_000;
        let (a, b) = (format!("glbi{k}a{tag}"), format!("glbi{k}b{tag}"));
        let n = Nodes {
            a: a.clone(),
            b: b.clone(),
            ip_a: format!("169.254.{}.1", 90 + k),
            ip_b: format!("169.254.{}.2", 90 + k),
        };
        ip(&["netns", "add", &a]);
        ip(&["netns", "add", &b]);
        let (va, vb) = (format!("gi{k}a{tag}"), format!("gi{k}b{tag}"));
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        ip(&["link", "set", &va, "netns", &a]);
        ip(&["link", "set", &vb, "netns", &b]);
        ip(&[
            "-n",
            &a,
            "addr",
            "add",
            &format!("{}/24", n.ip_a),
            "dev",
            &va,
        ]);
        ip(&[
            "-n",
            &b,
            "addr",
            "add",
            &format!("{}/24", n.ip_b),
            "dev",
            &vb,
        ]);
        for (ns, dev) in [(&a, &va), (&b, &vb)] {
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        n
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.a]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.b]).status();
    }
}

fn bind_in(ns: &str, addr: &str) -> tokio::net::TcpListener {
    let addr: SocketAddr = addr.parse().unwrap();
    let l = in_netns(ns, move || std::net::TcpListener::bind(addr).unwrap());
    l.set_nonblocking(true).unwrap();
    tokio::net::TcpListener::from_std(l).unwrap()
}

/// A request head, read within 5 s (at most 16 KiB).
async fn read_head(s: &mut tokio::net::TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    let read = async {
        while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
            let n = s.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Some(())
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .ok()??;
    String::from_utf8(head).ok()
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// A web gear: `200 hello` to anything.
fn web_gear(listener: tokio::net::TcpListener) {
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                if read_head(&mut s).await.is_some() {
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n")
                        .await;
                }
            });
        }
    });
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Days since 1970-01-01 of a civil date, and back (H. Hinnant's algorithms).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Apache's `%t` body, in UTC: `05/Mar/2025:10:11:12 +0000`.
fn apache_time(secs: i64) -> String {
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    let month = MONTHS[(m - 1) as usize];
    format!(
        "{d:02}/{month}/{y}:{:02}:{:02}:{:02} +0000",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// The Unix time of a timestamp `oo-last-access` wrote (`%d/%b/%Y:%H:%M:%S +0000`).
fn parse_apache_time(t: &str) -> Option<i64> {
    let (date, zone) = t.trim().split_once(' ')?;
    assert_eq!(zone, "+0000", "the frontend here logs UTC");
    let mut p = date.split(['/', ':']);
    let d: i64 = p.next()?.parse().ok()?;
    let month = p.next()?;
    let m = MONTHS.iter().position(|x| *x == month)? as i64 + 1;
    let y: i64 = p.next()?.parse().ok()?;
    let (h, mi, s): (i64, i64, i64) = (
        p.next()?.parse().ok()?,
        p.next()?.parse().ok()?,
        p.next()?.parse().ok()?,
    );
    Some(days_from_civil(y, m, d) * 86_400 + h * 3600 + mi * 60 + s)
}

/// A node frontend on port 80: `/health` of a gear's name answered from "health.txt",
/// anything else answered too (not proxied: only the log matters here); one line per
/// request in the `openshift` LogFormat:
/// `%h %v %l %u %t "%r" %>s %b "%{Referer}i" "%{User-Agent}i" (%Dus) %X`.
/// `%v` is the matched gear's name, else the default virtual host's (the node's).
fn node_frontend(listener: tokio::net::TcpListener, log: PathBuf, vhosts: Vec<String>) {
    let log = Arc::new(Mutex::new(log));
    tokio::spawn(async move {
        while let Ok((mut s, peer)) = listener.accept().await {
            let (log, vhosts) = (log.clone(), vhosts.clone());
            tokio::spawn(async move {
                let start = Instant::now();
                let Some(head) = read_head(&mut s).await else {
                    return;
                };
                let line = head.lines().next().unwrap_or_default().to_string();
                let host = header(&head, "host").unwrap_or_default();
                let host = host
                    .split(':')
                    .next()
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                let vhost = if vhosts.contains(&host) {
                    host
                } else {
                    format!("node.{DOMAIN}")
                };
                let mut parts = line.split(' ');
                let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                let body: &[u8] = if path.starts_with("/health") {
                    b"1\n"
                } else {
                    b"node frontend\n"
                };
                let sent = if method == "HEAD" { &[][..] } else { body };
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(answer.as_bytes()).await;
                let _ = s.write_all(sent).await;
                let bytes = if sent.is_empty() {
                    "-".to_string()
                } else {
                    sent.len().to_string()
                };
                let q = |name: &str| header(&head, name).unwrap_or("-").to_string();
                let entry = format!(
                    "{} {vhost} - - [{}] \"{line}\" 200 {bytes} \"{}\" \"{}\" ({}us) -\n",
                    peer.ip(),
                    apache_time(unix_now()),
                    q("referer"),
                    q("user-agent"),
                    start.elapsed().as_micros()
                );
                let path = log.lock().unwrap();
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&*path)
                    .unwrap();
                f.write_all(entry.as_bytes()).unwrap();
            });
        }
    });
}

/// One blocking HTTP/1.1 exchange; the status code.
fn http(to: SocketAddr, host: &str, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut answer = Vec::new();
    let _ = s.take(64 * 1024).read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.split(' ').nth(1)?.parse().ok()
}

/// Clients of the application in namespace `ns`: a request to each balancer's port
/// every 50 ms until stopped (or a minute passed); successes counted.
fn clients(ns: &str, balancers: Vec<SocketAddr>, stop: Arc<AtomicBool>, ok: Arc<AtomicU64>) {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        in_netns(&ns, move || {
            let end = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                for b in &balancers {
                    if http(*b, &format!("ha-{}", app_dns()), "/") == Some(200) {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    });
}

/// What every balancer's gear registry says: both balancer gears and both web gears.
fn registry(nodes: &Nodes) -> String {
    let entry = |uuid: &str, host: &str, port: serde_json::Value| {
        serde_json::json!({"namespace": NS, "dns": dns_of(uuid), "proxy_hostname": host,
                           "proxy_port": port, "platform": "linux"})
    };
    serde_json::json!({
        "web": {APP_UUID: entry(APP_UUID, &nodes.ip_a, "9000".into()),
                UUID_B: entry(UUID_B, &nodes.ip_b, "9000".into())},
        "proxy": {APP_UUID: entry(APP_UUID, &nodes.ip_a, 0.into()),
                  UUID_B: entry(UUID_B, &nodes.ip_b, 0.into())},
    })
    .to_string()
}

/// The balancer of gear `uuid` on node `ns` at `ip`, started as in a gear (the gear's
/// variables; keep-seen on by default there unless `keep_seen` is false).
fn balancer(nodes: &Nodes, uuid: &str, keep_seen: bool, dir: &Path) -> Gearlb {
    let (ns, host, peer) = if uuid == APP_UUID {
        (&nodes.a, &nodes.ip_a, &nodes.ip_b)
    } else {
        (&nodes.b, &nodes.ip_b, &nodes.ip_a)
    };
    let home = dir.join("home");
    std::fs::create_dir_all(home.join("gear-registry")).unwrap();
    std::fs::write(
        home.join("gear-registry/gear-registry.json"),
        registry(nodes),
    )
    .unwrap();
    let node_conf = dir.join("node.conf");
    std::fs::write(
        &node_conf,
        format!("PUBLIC_IP=\"{host}\"\nPUBLIC_HOSTNAME=\"{host}\"\n"),
    )
    .unwrap();
    let config = dir.join("gearlb.toml");
    std::fs::write(
        &config,
        format!(
            "[control]\nsocket = \"{0}/control.sock\"\n[state]\ndir = \"{0}/data\"\n\
             [cluster]\npeers = [\"{peer}:8080\"]\ngossip_interval = \"100ms\"\n\
             [[backends]]\nname = \"gear-{APP}-{NS}\"\naddr = \"{1}:9000\"\n\
             [[backends]]\nname = \"gear-{UUID_B}-{NS}\"\naddr = \"{2}:9000\"\n",
            dir.display(),
            nodes.ip_a,
            nodes.ip_b
        ),
    )
    .unwrap();
    let name = if uuid == APP_UUID { APP } else { uuid };
    let (home, node_conf) = (home.display().to_string(), node_conf.display().to_string());
    let (dns, app_dns, advertise) = (dns_of(uuid), app_dns(), format!("{host}:8080"));
    let interval = format!("{}ms", INTERVAL.as_millis());
    let mut env: Vec<(&str, &str)> = vec![
        ("OPENSHIFT_GEAR_UUID", uuid),
        ("OPENSHIFT_GEAR_NAME", name),
        ("OPENSHIFT_GEAR_DNS", &dns),
        ("OPENSHIFT_APP_UUID", APP_UUID),
        ("OPENSHIFT_APP_NAME", APP),
        ("OPENSHIFT_APP_DNS", &app_dns),
        ("OPENSHIFT_NAMESPACE", NS),
        ("OPENSHIFT_HOMEDIR", &home),
        ("OPENSHIFT_SECRET_TOKEN", SECRET),
        ("OPENSHIFT_GEARLB_IP", host),
        ("OPENSHIFT_GEARLB_PORT", "8080"),
        ("OPENSHIFT_GEARLB_STATUS_IP", host),
        ("OPENSHIFT_GEARLB_STATUS_PORT", "8081"),
        ("GEARLB_GOSSIP_ADVERTISE", &advertise),
        ("GEARLB_NODE_CONF", &node_conf),
        ("OPENSHIFT_GEARLB_IDLER_INTERVAL", &interval),
    ];
    if !keep_seen {
        env.push(("OPENSHIFT_GEARLB_IDLER_KEEP_SEEN", "false"));
    }
    Gearlb::start_in_with(dir, &config, &["ip", "netns", "exec", ns], &env)
}

/// Origin-server's `OpenShift::Config` as `oo-last-access` uses it, for this test:
/// `node.conf`'s `KEY=value` lines from `$OPENSHIFT_CONF_DIR`. Also `require 'etc'`
/// (which the real one's dependencies load) and `File.exists?`, which the Ruby of
/// RHEL 6/7 nodes had and Ruby 3.2 dropped.
const CONFIG_SHIM: &str = r#"
require 'etc'
class File
  class << self
    alias_method :exists?, :exist? unless respond_to?(:exists?)
  end
end
module OpenShift
  class Config
    def initialize(path = File.join(ENV['OPENSHIFT_CONF_DIR'] || '/etc/openshift', 'node.conf'))
      @conf = {}
      File.foreach(path) do |line|
        line = line.strip
        next if line.empty? || line.start_with?('#')
        k, v = line.split('=', 2)
        next if v.nil?
        v = v.sub(/[ \t]*#.*$/, '').strip
        v = v[1..-2] if v.length >= 2 && (v.start_with?('"') || v.start_with?("'"))
        @conf[k.strip] = v
      end
    end

    def get(name, default = nil)
      v = @conf[name]
      v.nil? ? default : v.dup
    end

    def params
      @conf.keys
    end
  end
end
"#;

/// Run `oo-last-access` on node `ns` over `frontend_log`, with the gear users `gears`
/// in `/etc/passwd` (a private mount namespace's); the last-access directory and the
/// script's exit status and output.
fn run_oo_last_access(
    ns: &str,
    script: &Path,
    work: &Path,
    frontend_log: &Path,
    gears: &[&str],
) -> (PathBuf, bool, String) {
    let base = work.join("gears");
    let mut passwd = String::from("root:x:0:0:root:/root:/bin/bash\n");
    for (i, uuid) in gears.iter().enumerate() {
        let env = base.join(uuid).join(".env");
        std::fs::create_dir_all(&env).unwrap();
        std::fs::write(env.join("OPENSHIFT_GEAR_DNS"), dns_of(uuid)).unwrap();
        let home = base.join(uuid);
        passwd.push_str(&format!(
            "{uuid}:x:{0}:{0}:{GECOS}:{1}:/bin/false\n",
            6000 + i,
            home.display()
        ));
    }
    passwd.push_str("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
    std::fs::write(work.join("passwd"), passwd).unwrap();
    let conf = work.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("node.conf"), format!("GEAR_GECOS=\"{GECOS}\"\n")).unwrap();
    let lib = work.join("rubylib");
    std::fs::create_dir_all(lib.join("openshift-origin-common")).unwrap();
    std::fs::write(lib.join("openshift-origin-common/config.rb"), CONFIG_SHIM).unwrap();
    for log in ["node-web-proxy-access.log", "node-web-proxy-websockets.log"] {
        std::fs::write(work.join(log), "").unwrap();
    }
    let last_access = work.join("last_access");
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "unshare", "--mount", "--propagation", "private"])
        .args(["--", "/bin/sh", "-c"])
        .arg("mount --bind \"$GLB_PASSWD\" /etc/passwd && exec ruby -I \"$GLB_RUBYLIB\" \"$GLB_SCRIPT\"")
        .env("GLB_PASSWD", work.join("passwd"))
        .env("GLB_RUBYLIB", &lib)
        .env("GLB_SCRIPT", script)
        .env("OPENSHIFT_CONF_DIR", &conf)
        .env("GEAR_BASE_DIR", &base)
        .env("APACHE_ACCESS_LOG", frontend_log)
        .env("NODE_WEB_PROXY_ACCESS_LOG", work.join("node-web-proxy-access.log"))
        .env("NODE_WEB_PROXY_WEBSOCKETS_LOG", work.join("node-web-proxy-websockets.log"))
        .env("LAST_ACCESS_DIR", &last_access)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("ip netns exec … ruby");
    let end = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("oo-last-access ran for a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    (last_access, status.success(), out)
}

/// Two nodes, their web gears and frontends, both balancers, and clients sending to
/// the balancers' ports. Fields drop in order: clients, balancers, then the nodes.
struct App {
    stop_clients: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
    lb_a: Gearlb,
    lb_b: Gearlb,
    script: PathBuf,
    log_a: PathBuf,
    work: tempfile::TempDir,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    nodes: Nodes,
}

impl Drop for App {
    fn drop(&mut self) {
        self.stop_clients.store(true, Ordering::Relaxed);
    }
}

impl App {
    /// `None` (after a loud message) where `oo-last-access` cannot be had.
    fn start(k: u8, keep_seen: bool) -> Option<App> {
        let work = workdir();
        let Some(script) = oo_last_access(work.path()) else {
            eprintln!(
                "\n==========================================================================\n\
                 SKIPPED: origin-server's oo-last-access is not available (set OO_LAST_ACCESS\n\
                 or provide the mirror at {MIRROR}): the idler test did not run.\n\
                 ==========================================================================\n"
            );
            return None;
        };
        require_root();
        let ruby = Command::new("ruby").arg("--version").output();
        assert!(
            ruby.is_ok_and(|o| o.status.success()),
            "this test runs origin-server's oo-last-access with ruby: apt-get install ruby"
        );
        let nodes = Nodes::new(k);
        let log_a = work.path().join("openshift_log-a");
        let log_b = work.path().join("openshift_log-b");
        web_gear(bind_in(&nodes.a, &format!("{}:9000", nodes.ip_a)));
        web_gear(bind_in(&nodes.b, &format!("{}:9000", nodes.ip_b)));
        let on_a = vec![app_dns(), dns_of(OTHER_UUID)];
        node_frontend(
            bind_in(&nodes.a, &format!("{}:80", nodes.ip_a)),
            log_a.clone(),
            on_a,
        );
        let on_b = vec![dns_of(UUID_B)];
        node_frontend(
            bind_in(&nodes.b, &format!("{}:80", nodes.ip_b)),
            log_b,
            on_b,
        );
        let dirs = (workdir(), workdir());
        let lb_a = balancer(&nodes, APP_UUID, keep_seen, dirs.0.path());
        let lb_b = balancer(&nodes, UUID_B, keep_seen, dirs.1.path());
        let (stop_clients, served) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        clients(
            &nodes.b,
            vec![lb_a.proxy, lb_b.proxy],
            stop_clients.clone(),
            served.clone(),
        );
        Some(App {
            stop_clients,
            served,
            lb_a,
            lb_b,
            script,
            log_a,
            work,
            _dirs: dirs,
            nodes,
        })
    }

    /// Node A's frontend log, line by line.
    fn log_a(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log_a)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Poll `f` every 50 ms until it holds or `limit` passes.
    async fn until(&self, limit: Duration, mut f: impl FnMut(&App) -> bool) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if f(self) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        f(self)
    }

    fn keep_seen(lb: &Gearlb) -> serde_json::Value {
        lb.peers()["keep_seen"].clone()
    }

    fn oo_last_access(&self, gears: &[&str]) -> (PathBuf, bool, String) {
        let work = self.work.path().join("idler");
        std::fs::create_dir_all(&work).unwrap();
        run_oo_last_access(&self.nodes.a, &self.script, &work, &self.log_a, gears)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oo_last_access_marks_the_head_gear_accessed_while_traffic_flows_through_the_balancers() {
    let Some(app) = App::start(1, true) else {
        return;
    };
    let (ip_a, ip_b) = (app.nodes.ip_a.clone(), app.nodes.ip_b.clone());
    // Balancer B, on node B, requests the head gear through node A's frontend.
    let from_b = format!("{ip_b} {} ", app_dns());
    let seen = app
        .until(Duration::from_secs(30), |a| {
            a.log_a().iter().any(|l| l.starts_with(&from_b))
        })
        .await;
    assert!(
        seen,
        "no request for the head gear from node B in node A's frontend log: {:?}\nB: {}\n{}",
        app.log_a(),
        App::keep_seen(&app.lb_b),
        app.lb_b.log_text()
    );
    assert!(
        app.served.load(Ordering::Relaxed) > 0,
        "clients got no answer"
    );
    app.stop_clients.store(true, Ordering::Relaxed);
    let b = App::keep_seen(&app.lb_b);
    assert_eq!(b["enabled"], true, "{b}");
    assert!(b["sent"].as_u64().unwrap() >= 1, "{b}");
    assert_eq!(b["peers"], 1, "{b}");
    let (_, text, _) = app.lb_b.ctl(&["peers"]);
    assert!(text.contains("idler keep-seen: every 200 ms"), "{text}");
    // Only requests from the other node: the head gear's own balancer requests no gear
    // on its own node (its own address would be ignored), and clients never came here.
    let lines = app.log_a();
    assert!(lines.iter().all(|l| l.starts_with(&from_b)), "{lines:#?}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains("\"HEAD /health HTTP/1.1\" 200 - ")),
        "{lines:#?}"
    );
    assert!(!lines.iter().any(|l| l.starts_with(&format!("{ip_a} "))));

    let (dir, ok, out) = app.oo_last_access(&[APP_UUID, OTHER_UUID]);
    assert!(ok, "oo-last-access failed: {out}");
    let stamp = std::fs::read_to_string(dir.join(APP_UUID))
        .unwrap_or_else(|e| panic!("the head gear is not marked accessed ({e}): {out}"));
    let at = parse_apache_time(&stamp).unwrap_or_else(|| panic!("timestamp {stamp:?}"));
    let age = unix_now() - at;
    assert!(
        (-5..120).contains(&age),
        "last access {stamp} is {age} s old"
    );
    assert!(
        !dir.join(OTHER_UUID).exists(),
        "nobody visited the other gear"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_keep_seen_off_the_head_gear_is_not_marked_accessed() {
    let Some(app) = App::start(2, false) else {
        return;
    };
    // Clients keep both balancers busy for ten intervals and more.
    let start = Instant::now();
    let busy = app
        .until(Duration::from_secs(30), |a| {
            let total = |lb: &Gearlb| lb.status_json()["frontend"]["requests_total"].as_u64();
            start.elapsed() >= INTERVAL * 10
                && total(&a.lb_a).unwrap_or(0) >= 10
                && total(&a.lb_b).unwrap_or(0) >= 10
        })
        .await;
    assert!(
        busy,
        "clients served: {}",
        app.served.load(Ordering::Relaxed)
    );
    for lb in [&app.lb_a, &app.lb_b] {
        let k = App::keep_seen(lb);
        assert_eq!(
            (k["enabled"].as_bool(), k["sent"].as_u64()),
            (Some(false), Some(0)),
            "{k}"
        );
    }
    // A person visits another application's gear on node A through its frontend: the
    // log is not empty, and the script has a gear to find.
    let other = dns_of(OTHER_UUID);
    let to = format!("{}:80", app.nodes.ip_a).parse().unwrap();
    let status = in_netns(&app.nodes.b, move || http(to, &other, "/"));
    assert_eq!(status, Some(200));
    app.stop_clients.store(true, Ordering::Relaxed);
    let lines = app.log_a();
    assert_eq!(lines.len(), 1, "{lines:#?}");

    let (dir, ok, out) = app.oo_last_access(&[APP_UUID, OTHER_UUID]);
    assert!(ok, "oo-last-access failed: {out}");
    assert!(
        dir.join(OTHER_UUID).exists(),
        "the visited gear is marked: {out}"
    );
    assert!(
        !dir.join(APP_UUID).exists(),
        "the head gear is marked accessed with keep-seen off: {out}"
    );
}

#[test]
fn apache_times_read_back() {
    for t in [0, 951_782_400, 1_709_251_199, 1_741_172_400, 4_102_444_800] {
        assert_eq!(
            parse_apache_time(&apache_time(t)),
            Some(t),
            "{}",
            apache_time(t)
        );
    }
    assert_eq!(apache_time(1_741_169_472), "05/Mar/2025:10:11:12 +0000");
}
