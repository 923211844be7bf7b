//! The packaged binary on the oldest node gearlb targets, RHEL/CentOS 7 (glibc 2.17,
//! Linux 3.10), checked on this machine:
//!
//! - `cartridge/check-glibc.sh` finds no symbol version newer than GLIBC_2.17 and no
//!   library beyond glibc's and libgcc_s (and does fail on a binary linked here);
//! - the cartridge holds every file of `cartridge/bin`, `hooks`, `metadata`, `cartridge/env`;
//! - a real run under `strace -f` with ENOSYS injected into every system call newer than
//!   Linux 3.10 (`cartridge/syscalls.tsv`), as 3.10 would answer: two gossiping balancers
//!   (TCP, `cluster.peers`, `set-peers`) with health checks, plain and TLS proxying,
//!   sticky sealed cookies, uploads and downloads, the status listener, `gearlb ctl` and
//!   `gearlb check`, reload, rotate-out and rotate-in, a scale-up through an HTTPS broker
//!   reached by name, and a graceful SIGTERM stop with exit 0. Everything must still work,
//!   every post-3.10 call must have been answered ENOSYS and be documented, and a newer
//!   flag on an older call must have been reviewed.
//!
//! The cartridge is `$GEARLB_CARTRIDGE` (`.ci/run` packages it once), else
//! `cartridge/package.sh` builds it under `target/tmp` (minutes). The report of the
//! syscall run is written to `target/tmp/SYSCALLS.md`, and to `$GEARLB_SYSCALLS_MD` when
//! set (`cartridge/syscall-audit.sh` regenerates `cartridge/SYSCALLS.md` that way).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use support::*;

/// Calls numbered above this one (finit_module, Linux 3.8) are newer than Linux 3.10.
const LAST_310_SYSCALL: u32 = 313;
/// x32 calls have this bit set; never made by an x86-64 binary.
const X32_BIT: u32 = 0x4000_0000;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The packaged cartridge: `$GEARLB_CARTRIDGE`, else packaged here once per test binary.
fn cartridge() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("GEARLB_CARTRIDGE") {
            let dir = PathBuf::from(dir);
            assert!(
                dir.join("bin/gearlb").is_file(),
                "GEARLB_CARTRIDGE={} has no bin/gearlb",
                dir.display()
            );
            return dir;
        }
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("portable-cartridge");
        eprintln!(
            "GEARLB_CARTRIDGE is not set: packaging into {} (a release build, minutes)",
            dir.display()
        );
        let mut package = Command::new("bash");
        package.arg(root().join("cartridge/package.sh")).arg(&dir);
        // What `cargo test` adds to a test's environment: a different CARGO_MANIFEST_DIR
        // (and the like) makes the release build's fingerprints differ from a build
        // from the shell, which would then rebuild everything each time.
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            if (k.starts_with("CARGO") && k != "CARGO_HOME" && k != "CARGO_TARGET_DIR")
                || k == "LD_LIBRARY_PATH"
                || k == "GEARLB_BIN"
            {
                package.env_remove(&key);
            }
        }
        let status = package
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .status()
            .expect("bash");
        assert!(status.success(), "cartridge/package.sh failed: {status}");
        dir
    })
}

fn packaged_bin() -> PathBuf {
    cartridge().join("bin/gearlb")
}

fn check_glibc(bin: &Path) -> Output {
    Command::new("bash")
        .arg(root().join("cartridge/check-glibc.sh"))
        .arg(bin)
        .output()
        .expect("bash")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Relative path -> content of every file under `dir`.
fn files_under(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn packaged_binary_loads_with_glibc_2_17_and_the_cartridge_is_complete() {
    let bin = packaged_bin();
    let out = check_glibc(&bin);
    let report = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains("highest glibc version needed: GLIBC_2."),
        "{report}"
    );

    // The check can fail: this test binary's gearlb is linked against this machine's
    // glibc (2.36 on Debian 12), whose __libc_start_main alone is GLIBC_2.34.
    let host = check_glibc(&support::bin());
    let host_report = text(&host.stdout);
    assert_eq!(host.status.code(), Some(1), "{host_report}");
    assert!(
        host_report.contains("FAIL: libc.so.6 GLIBC_2.3"),
        "{host_report}"
    );

    let version = Command::new(&bin).arg("--version").output().unwrap();
    assert!(version.status.success());
    assert!(text(&version.stdout).starts_with("gearlb "));

    // Every file of the source directories, byte for byte; nothing else but the binary.
    let mut expected = BTreeMap::new();
    for (src, dst) in [
        ("cartridge/bin", "bin"),
        ("hooks", "hooks"),
        ("metadata", "metadata"),
        ("cartridge/env", "env"),
        ("cartridge/usr", "usr"),
    ] {
        for (rel, content) in files_under(&root().join(src)) {
            expected.insert(Path::new(dst).join(rel), content);
        }
    }
    let mut got = files_under(cartridge());
    assert!(got.remove(Path::new("bin/gearlb")).is_some());
    let names = |m: &BTreeMap<PathBuf, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&got), names(&expected), "files of the cartridge");
    for (rel, content) in &expected {
        assert!(
            &got[rel] == content,
            "{} differs from its source",
            rel.display()
        );
    }
    for dir in ["bin", "hooks", "usr/bin"] {
        for e in std::fs::read_dir(cartridge().join(dir)).unwrap() {
            use std::os::unix::fs::PermissionsExt;
            let mode = e.unwrap().metadata().unwrap().permissions().mode();
            assert_eq!(mode & 0o111, 0o111, "{dir}: not executable");
        }
    }
}

// ---- the syscall table -------------------------------------------------------------

struct Syscall {
    name: String,
    nr: u32,
    since: String,
    note: String,
}

fn syscall_table() -> Vec<Syscall> {
    let tsv = std::fs::read_to_string(root().join("cartridge/syscalls.tsv")).unwrap();
    let mut out: Vec<Syscall> = Vec::new();
    for line in tsv.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        assert!(f.len() >= 3, "syscalls.tsv: bad line {line:?}");
        let s = Syscall {
            name: f[0].to_string(),
            nr: f[1]
                .parse()
                .unwrap_or_else(|_| panic!("bad number: {line:?}")),
            since: f[2].to_string(),
            note: f.get(3).unwrap_or(&"").trim().to_string(),
        };
        assert!(
            !out.iter().any(|o| o.name == s.name || o.nr == s.nr),
            "syscalls.tsv: {} twice",
            s.name
        );
        out.push(s);
    }
    out
}

/// Flags that newer kernels added to calls Linux 3.10 has, as strace decodes them: a
/// 3.10 kernel answers EINVAL (or ignores the flag). The audit reports those it sees;
/// (flag, reviewed, since, note): a flag seen that is not marked reviewed (its caller's
/// handling of 3.10's answer read in the source) fails the test.
const NEWER_FLAGS: &[(&str, bool, &str, &str)] = &[
    ("MADV_FREE", true, "4.5", "mimalloc purges with MADV_FREE only when told not to decommit (default: MADV_DONTNEED); on EINVAL it switches to MADV_DONTNEED for good (src/prim/unix/prim.c, _mi_prim_reset)"),
    ("PR_GET_THP_DISABLE", true, "3.15", "mimalloc asks before PR_SET_THP_DISABLE, only when its allow_thp option is off (MIMALLOC_ALLOW_THP=0; the crate's no_thp feature leaves it on); on EINVAL it leaves transparent huge pages as the system has them"),
    ("PR_SET_THP_DISABLE", true, "3.15", "see PR_GET_THP_DISABLE: only called when the GET succeeded"),
    ("PR_SET_VMA", true, "5.17", "mimalloc names its mappings (prctl PR_SET_VMA_ANON_NAME) and ignores the result: EINVAL on 3.10, and here too (a kernel without CONFIG_ANON_VMA_NAME)"),
    ("GRND_INSECURE", true, "5.6", "Rust std asks getrandom for HashMap keys with GRND_INSECURE, then GRND_NONBLOCK on EINVAL; on ENOSYS (3.10) it reads /dev/urandom"),
    ("MAP_FIXED_NOREPLACE", false, "4.17", "older kernels treat the address as a hint"),
    ("O_TMPFILE", false, "3.11", "EISDIR/EOPNOTSUPP on 3.10"),
    ("EPOLLEXCLUSIVE", false, "4.5", "EINVAL on 3.10"),
    ("TCP_NOTSENT_LOWAT", false, "3.12", "ENOPROTOOPT on 3.10"),
    ("SO_INCOMING_CPU", false, "3.19", "ENOPROTOOPT on 3.10"),
    ("IP_BIND_ADDRESS_NO_PORT", false, "4.2", "ENOPROTOOPT on 3.10"),
    ("TCP_FASTOPEN_CONNECT", false, "4.11", "ENOPROTOOPT on 3.10"),
    ("SO_ZEROCOPY", false, "4.14", "ENOPROTOOPT on 3.10"),
    ("MSG_ZEROCOPY", false, "4.14", "ignored or EINVAL on 3.10"),
    ("MADV_WIPEONFORK", false, "4.14", "EINVAL on 3.10"),
    ("MADV_COLD", false, "5.4", "EINVAL on 3.10"),
    ("MADV_PAGEOUT", false, "5.4", "EINVAL on 3.10"),
    ("MADV_POPULATE_", false, "5.14", "EINVAL on 3.10"),
    ("MADV_COLLAPSE", false, "6.1", "EINVAL on 3.10"),
    ("CLONE_PIDFD", false, "5.2", "clone flag"),
    ("SS_AUTODISARM", false, "4.7", "sigaltstack flag: EINVAL on 3.10"),
    ("SO_PEERGROUPS", false, "4.13", "ENOPROTOOPT on 3.10"),
    ("MREMAP_DONTUNMAP", false, "5.7", "EINVAL on 3.10"),
    ("MAP_SHARED_VALIDATE", false, "4.15", "EINVAL on 3.10"),
    ("P_PIDFD", false, "5.4", "waitid id type: EINVAL on 3.10"),
];

// ---- strace ------------------------------------------------------------------------

/// The post-3.10 calls this strace can inject into (strace 6.1 knows none after 450).
fn injectable(table: &[Syscall]) -> (Vec<u32>, Vec<u32>) {
    let mut yes = Vec::new();
    let mut no = Vec::new();
    for s in table.iter().filter(|s| s.nr > LAST_310_SYSCALL) {
        let ok = Command::new("strace")
            .args(["-o", "/dev/null", "-e"])
            .arg(format!("trace={}", s.nr))
            .arg("true")
            .stderr(Stdio::null())
            .status()
            .expect("strace (Debian: apt-get install strace; .ci/run installs it)")
            .success();
        if ok { &mut yes } else { &mut no }.push(s.nr);
    }
    (yes, no)
}

struct Strace {
    inject: String,
    logs: PathBuf,
    n: Mutex<u32>,
}

impl Strace {
    /// `strace -f` writing to a new log under `logs`, ENOSYS injected into `inject`.
    fn command(&self, what: &str) -> Command {
        let mut n = self.n.lock().unwrap();
        *n += 1;
        let log = self.logs.join(format!("{:03}-{what}.strace", *n));
        let mut c = Command::new("strace");
        c.args(["-f", "-n", "-qq", "-s", "64", "-o"])
            .arg(log)
            .arg("-e")
            .arg(format!("inject={}:error=ENOSYS", self.inject))
            .arg("--")
            .arg(packaged_bin());
        c
    }

    /// A traced `gearlb ARGS` to completion.
    fn run(&self, what: &str, args: &[&str]) -> (i32, String, String) {
        let out = self.command(what).args(args).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            text(&out.stdout),
            text(&out.stderr),
        )
    }
}

/// A traced `gearlb run`.
struct Balancer {
    strace: Child,
    pid: i32,
    dir: PathBuf,
    proxy: SocketAddr,
    status: SocketAddr,
    gossip: SocketAddr,
    tls: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Balancer {
    async fn start(
        st: &Strace,
        name: &str,
        dir: &Path,
        config: &str,
        env: &[(String, String)],
    ) -> Balancer {
        let cfg = dir.join("gearlb.toml");
        std::fs::write(&cfg, config).unwrap();
        let mut strace = st
            .command(&format!("run-{name}"))
            .args(["run", "--config"])
            .arg(&cfg)
            .current_dir(dir)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("GEARLB_LOG", "info")
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        for pipe in [
            Box::new(strace.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(strace.stderr.take().unwrap()),
        ] {
            let (l, tx) = (log.clone(), tx.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if line.contains("gearlb serving") {
                        let _ = tx.send(line.clone());
                    }
                    l.lock().unwrap().push(line);
                }
            });
        }
        let Ok(line) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = strace.kill();
            panic!(
                "{name} did not start under strace:\n{}",
                log.lock().unwrap().join("\n")
            );
        };
        let field = |key: &str| -> SocketAddr {
            let at = line
                .find(&format!(" {key}="))
                .unwrap_or_else(|| panic!("{key}= in {line}"));
            line[at + key.len() + 2..]
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap_or_else(|e| panic!("{key} in {line}: {e}"))
        };
        let status = field("status");
        let report = get(status, "/gearlb-status.json", &[])
            .await
            .unwrap()
            .json();
        let pid = report["pid"].as_i64().expect("pid in the status report") as i32;
        Balancer {
            strace,
            pid,
            dir: dir.to_path_buf(),
            proxy: field("proxy"),
            status,
            gossip: field("gossip"),
            tls: field("tls"),
            log,
        }
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("control.sock")
    }

    fn status_json(&self) -> serde_json::Value {
        let (code, out, err) = ctl(&self.socket(), &["status", "--json"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap()
    }

    /// SIGTERM to gearlb (not to strace); its exit code, as strace passes it on.
    fn stop(&mut self) -> Option<i32> {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.pid).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        let end = Instant::now() + Duration::from_secs(40);
        while Instant::now() < end {
            if let Some(st) = self.strace.try_wait().unwrap() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        if self.strace.try_wait().ok().flatten().is_none() {
            // strace (without --kill-on-exit) would leave gearlb running: kill it first.
            if let Some(pid) = rustix::process::Pid::from_raw(self.pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            let _ = self.strace.kill();
            let _ = self.strace.wait();
        }
    }
}

/// A self-signed certificate for `localhost` in `dir`: (cert path, key path, DER).
fn certificate(dir: &Path) -> (PathBuf, PathBuf, rustls::pki_types::CertificateDer<'static>) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (dir.join("site.pem"), dir.join("site.key"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    (cert, key, ck.cert.der().clone())
}

/// `seeds`: `cluster.peers`, gossip addresses to start from (`set-peers` follows);
/// `broker_ca`: the test broker's CA (automatic scaling off; `ctl scale up` asks).
fn balancer_config(
    dir: &Path,
    id: &str,
    cert: &Path,
    key: &Path,
    seeds: &[SocketAddr],
    broker_ca: &Path,
) -> String {
    let seeds: Vec<String> = seeds.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "[listen]\nproxy = \"127.0.0.1:0\"\nstatus = \"127.0.0.1:0\"\ntls = \"127.0.0.1:0\"\n\
         [tls]\ncert = \"{}\"\nkey = \"{}\"\n\
         [control]\nsocket = \"{}\"\n[state]\ndir = \"{}\"\n\
         [cluster]\nnode_id = \"{id}\"\nid = \"app1\"\nlisten = \"127.0.0.1:0\"\n\
         secret = \"{SECRET}\"\ngossip_interval = \"100ms\"\npeers = [{}]\n\
         [health]\ninterval = \"300ms\"\n[sticky]\nseal = true\n[log]\nrequests = true\n\
         [scaler]\nenabled = false\nbroker_ca = \"{}\"\n",
        cert.display(),
        key.display(),
        dir.join("control.sock").display(),
        dir.join("data").display(),
        seeds.join(", "),
        broker_ca.display(),
    )
}

/// GET / over TLS (HTTP/1.1), trusting `root`.
async fn tls_get(
    addr: SocketAddr,
    root: &rustls::pki_types::CertificateDer<'static>,
) -> (u16, String) {
    use http_body_util::BodyExt;
    let mut store = rustls::RootCertStore::empty();
    store.add(root.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get("/")
        .header("host", "localhost")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, text(&body))
}

/// One system call as the logs show it.
#[derive(Default)]
struct Seen {
    nr: u32,
    calls: u64,
    injected: u64,
    /// Calls that returned something else than the injected ENOSYS (post-3.10 only).
    not_injected: Vec<String>,
    errors: BTreeSet<String>,
}

/// Parse `strace -f -n` logs: `PID [ NR] name(args) = ret`, with calls split over
/// `<unfinished ...>` / `<... name resumed>` lines when threads interleave.
fn parse_logs(dir: &Path, flags: &mut BTreeMap<&'static str, u64>) -> BTreeMap<String, Seen> {
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    for path in paths {
        let log = std::fs::read_to_string(&path).unwrap();
        let mut pending: BTreeMap<&str, String> = BTreeMap::new();
        for line in log.lines() {
            let Some((pid, rest)) = line.split_once(' ') else {
                continue;
            };
            let rest = rest.trim_start();
            let Some(rest) = rest.strip_prefix('[') else {
                continue; // signals, exits
            };
            let Some((nr, call)) = rest.split_once(']') else {
                continue;
            };
            let nr: u32 = nr.trim().parse().unwrap();
            let call = call.trim_start();
            if call.starts_with("---") || call.starts_with("+++") {
                continue; // a signal delivered, a thread gone
            }
            let full = if let Some(resumed) = call.strip_prefix("<... ") {
                let tail = resumed.split_once("resumed>").map_or("", |(_, t)| t);
                pending.remove(pid).unwrap_or_default() + tail
            } else if let Some(start) = call.strip_suffix("<unfinished ...>") {
                pending.insert(pid, start.trim_end().to_string());
                continue;
            } else {
                call.to_string()
            };
            let name = full.split('(').next().unwrap_or("").to_string();
            for (flag, _, _, _) in NEWER_FLAGS {
                if full.contains(flag) {
                    *flags.entry(flag).or_default() += 1;
                }
            }
            let s = seen.entry(name).or_default();
            s.nr = nr;
            s.calls += 1;
            if full.trim_end().ends_with("(INJECTED)") {
                s.injected += 1;
            } else {
                if nr > LAST_310_SYSCALL && nr & X32_BIT == 0 {
                    s.not_injected.push(full.clone());
                }
                // `= -1 ENOENT (No such file or directory)`
                if let Some((_, err)) = full.rsplit_once(" = -1 ") {
                    s.errors
                        .insert(err.split(' ').next().unwrap_or("").to_string());
                }
            }
        }
    }
    seen
}

/// "3.14" -> (3, 14); "2.4.11" -> (2, 4); "6.16+" -> (6, 16).
fn release(v: &str) -> (u32, u32) {
    let mut parts = v.split('.').map(|p| {
        p.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<u32>()
            .unwrap_or_else(|_| panic!("bad kernel version {v:?}"))
    });
    (parts.next().unwrap(), parts.next().unwrap_or(0))
}

fn markdown_cell(s: &str) -> String {
    s.replace('|', "\\|")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packaged_binary_runs_with_every_syscall_after_linux_3_10_refused() {
    let started = Instant::now();
    let table = syscall_table();
    for s in &table {
        assert_eq!(
            s.nr > LAST_310_SYSCALL,
            release(&s.since) > (3, 10),
            "syscalls.tsv: {} ({}) since {} does not fit its number",
            s.name,
            s.nr,
            s.since
        );
    }
    let (inject, cannot_inject) = injectable(&table);
    for must in ["getrandom", "statx", "clone3", "rseq", "close_range"] {
        let nr = table.iter().find(|s| s.name == must).unwrap().nr;
        assert!(
            inject.contains(&nr),
            "this strace cannot inject into {must}"
        );
    }
    let logs = Path::new(env!("CARGO_TARGET_TMPDIR")).join("portable-strace");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs).unwrap();
    let st = Strace {
        inject: inject
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
        logs: logs.clone(),
        n: Mutex::new(0),
    };

    // Two web gears, two balancers gossiping over TCP, HTTPS, sealed sticky cookies, and
    // a broker over HTTPS, reached by name (`localhost`: a host-name lookup).
    let g1 = TestBackend::start("g1").await;
    let g2 = TestBackend::start("g2").await;
    let broker = TestBroker::start(2, 10).await;
    let (da, db) = (workdir(), workdir());
    let (cert, key, cert_der) = certificate(da.path());
    let gear_env = |dir: &Path| {
        let mut env = broker.gear_env(&dir.join("home"));
        for (k, v) in env.iter_mut() {
            if k == "OPENSHIFT_BROKER_HOST" {
                *v = format!("localhost:{}", broker.addr.port());
            }
        }
        env
    };
    let ca = &broker.ca_file;
    let mut a = Balancer::start(
        &st,
        "lb1",
        da.path(),
        &balancer_config(da.path(), "lb1", &cert, &key, &[], ca),
        &gear_env(da.path()),
    )
    .await;
    let mut b = Balancer::start(
        &st,
        "lb2",
        db.path(),
        &balancer_config(db.path(), "lb2", &cert, &key, &[a.gossip], ca),
        &gear_env(db.path()),
    )
    .await;
    let peers = format!("'lb1'='lb1|{}' 'lb2'='lb2|{}'", a.gossip, b.gossip);
    let gears = format!(
        "g1-ns.example.com|{} g2-ns.example.com|{}",
        g1.addr, g2.addr
    );
    for lb in [&a, &b] {
        let sock = lb.socket();
        let sock = sock.to_str().unwrap();
        for args in [
            &["ctl", "--socket", sock, "set-peers", &peers][..],
            &["ctl", "--socket", sock, "update-cluster", &gears][..],
        ] {
            let (code, out, err) = st.run("ctl", args);
            assert_eq!(code, 0, "{args:?}: {out}{err}");
        }
    }
    let formed = eventually(Duration::from_secs(30), || {
        [&a, &b].iter().all(|lb| {
            let (code, out, _) = ctl(&lb.socket(), &["peers", "--json"]);
            code == 0
                && serde_json::from_str::<serde_json::Value>(&out)
                    .is_ok_and(|v| v["live"] == serde_json::json!(["lb1", "lb2"]))
        })
    })
    .await;
    assert!(
        formed,
        "the balancers did not see each other:\n{}\n{}",
        a.log_text(),
        b.log_text()
    );
    let up = eventually(Duration::from_secs(30), || {
        [&a, &b].iter().all(|lb| {
            let v = lb.status_json();
            let states: Vec<_> = v["backends"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["state"].as_str().unwrap().to_string())
                .collect();
            states == ["up", "up"]
        })
    })
    .await;
    assert!(up, "backends not up: {}", a.status_json());

    // Proxying: both gears reached through both balancers; sticky cookies hold.
    let c = client();
    for lb in [&a, &b] {
        let mut reached = BTreeSet::new();
        let mut cookie = None;
        for _ in 0..40 {
            let got = get(lb.proxy, "/", &[]).await.unwrap();
            assert_eq!(got.status, 200, "{}", got.text());
            reached.insert(got.text());
            if let Some(v) = got.headers.get("set-cookie") {
                let v = v.to_str().unwrap();
                assert!(v.starts_with("GEAR="), "{v}");
                cookie = Some((v.split(';').next().unwrap().to_string(), got.text()));
            }
        }
        assert_eq!(reached.len(), 2, "{reached:?}");
        let (cookie, body) = cookie.expect("a GEAR cookie");
        for _ in 0..5 {
            let got = get(lb.proxy, "/", &[("cookie", &cookie)]).await.unwrap();
            assert_eq!(got.text(), body, "the sticky cookie did not hold");
        }
        let upload = 1 << 20;
        let req = hyper::Request::post(format!("http://{}/upload", lb.proxy))
            .body(gen_body(upload))
            .unwrap();
        let got = send(&c, req).await.unwrap();
        assert_eq!((got.status, got.text()), (200, upload.to_string()));
        let got = get(lb.proxy, "/download?bytes=4194304", &[]).await.unwrap();
        assert_eq!((got.status, got.body.len()), (200, 4 << 20));
    }
    let (code, body) = tls_get(a.tls, &cert_der).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.starts_with("backend g"), "{body}");

    // The status listener.
    for (path, needle) in [
        ("/gearlb-status", "<html"),
        ("/haproxy-status/;csv", "# pxname,svname"),
        ("/gearlb-status.json", "\"backends\""),
        ("/metrics", "gearlb_frontend_requests_total"),
        ("/health", ""),
    ] {
        let got = get(a.status, path, &[]).await.unwrap();
        assert_eq!(got.status, 200, "{path}");
        assert!(got.text().contains(needle), "{path}: {}", got.text());
    }

    // Control commands, check, reload, a rotation across both balancers.
    let sock = a.socket();
    let sock = sock.to_str().unwrap();
    for args in [
        &["ctl", "--socket", sock, "status"][..],
        &["ctl", "--socket", sock, "status", "--json"][..],
        &["ctl", "--socket", sock, "peers"][..],
        &["ctl", "--socket", sock, "reload"][..],
        &[
            "ctl",
            "--socket",
            sock,
            "rotate-out",
            "g1-ns",
            "--timeout",
            "20s",
        ][..],
        &["ctl", "--socket", sock, "rotate-in", "g1-ns"][..],
        &["ctl", "--socket", sock, "scale", "up"][..],
    ] {
        let (code, out, err) = st.run("ctl", args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
    }
    assert_eq!(
        broker.events(),
        [("scale-up".to_string(), "lb1".to_string())],
        "the broker's events"
    );
    let cfg = da.path().join("gearlb.toml");
    let (code, out, err) = st.run("check", &["check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let broken = da.path().join("broken.toml");
    std::fs::write(&broken, "[timeouts]\nconnect = \"soon\"\n").unwrap();
    let (code, out, err) = st.run("check", &["check", "--config", broken.to_str().unwrap()]);
    assert_eq!(code, 64, "{out}{err}");
    assert!(err.contains("timeouts.connect") || out.contains("timeouts.connect"));
    let got = get(a.proxy, "/", &[]).await.unwrap();
    assert_eq!(got.status, 200);

    // Graceful stop: exit 0.
    let code_b = b.stop();
    assert_eq!(code_b, Some(0), "lb2:\n{}", b.log_text());
    let code_a = a.stop();
    assert_eq!(code_a, Some(0), "lb1:\n{}", a.log_text());
    let exercised = started.elapsed();

    // What the logs show.
    let mut flags = BTreeMap::new();
    let seen = parse_logs(&logs, &mut flags);
    let by_name: BTreeMap<&str, &Syscall> = table.iter().map(|s| (s.name.as_str(), s)).collect();
    let by_nr: BTreeMap<u32, &Syscall> = table.iter().map(|s| (s.nr, s)).collect();
    let mut problems = Vec::new();
    // The allocator survived zig's build: mimalloc names each mapping it makes.
    let run_log = std::fs::read_to_string(logs.join("001-run-lb1.strace")).unwrap();
    if !run_log
        .lines()
        .any(|l| l.contains("prctl(PR_SET_VMA") && l.contains("\"mimalloc\""))
    {
        problems.push("no mapping named \"mimalloc\": is mimalloc still the allocator?".into());
    }
    for (name, s) in &seen {
        let known = by_name.get(name.as_str()).or_else(|| by_nr.get(&s.nr));
        if let Some(k) = known {
            if k.nr != s.nr {
                problems.push(format!(
                    "{name}: number {} in syscalls.tsv, strace says {}",
                    k.nr, s.nr
                ));
            }
        }
        if s.nr <= LAST_310_SYSCALL {
            continue;
        }
        if !s.not_injected.is_empty() {
            problems.push(format!(
                "{name} ({}) newer than Linux 3.10 ran without ENOSYS injected: {}",
                s.nr, s.not_injected[0]
            ));
        }
        match known {
            None => problems.push(format!(
                "{name} ({}) is not in cartridge/syscalls.tsv: add it with its kernel version",
                s.nr
            )),
            Some(k) if k.note.is_empty() => problems.push(format!(
                "{name} ({}, Linux {}) was called and refused, and the run passed: \
                 say in cartridge/syscalls.tsv who calls it and what it falls back to",
                s.nr, k.since
            )),
            Some(_) => {}
        }
    }

    for (flag, reviewed, since, _) in NEWER_FLAGS {
        if !reviewed && flags.contains_key(flag) {
            problems.push(format!(
                "{flag} (Linux {since}) was used: read what its caller does with 3.10's \
                 answer (EINVAL, or the flag ignored), then mark it reviewed in NEWER_FLAGS"
            ));
        }
    }

    let report = audit_report(&table, &seen, &flags, &inject, &cannot_inject, exercised);
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("SYSCALLS.md");
    std::fs::write(&out, &report).unwrap();
    if let Some(path) = std::env::var_os("GEARLB_SYSCALLS_MD") {
        std::fs::write(path, &report).unwrap();
    }
    assert!(
        problems.is_empty(),
        "{}\n(report: {}; logs: {})",
        problems.join("\n"),
        out.display(),
        logs.display()
    );
}

fn audit_report(
    table: &[Syscall],
    seen: &BTreeMap<String, Seen>,
    flags: &BTreeMap<&'static str, u64>,
    inject: &[u32],
    cannot_inject: &[u32],
    exercised: Duration,
) -> String {
    let by_name: BTreeMap<&str, &Syscall> = table.iter().map(|s| (s.name.as_str(), s)).collect();
    let cmd = |c: &str, a: &[&str]| {
        Command::new(c)
            .args(a)
            .output()
            .map(|o| {
                text(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_string()
            })
            .unwrap_or_default()
    };
    let bin = packaged_bin();
    let check =
        text(&check_glibc(&bin).stdout).replace(&cartridge().display().to_string(), "CARTRIDGE");
    let mut r = String::new();
    r.push_str("# System calls of the packaged gearlb (Linux 3.10 audit)\n\n");
    r.push_str(
        "Generated by `bash cartridge/syscall-audit.sh` (the test \
         `packaged_binary_runs_with_every_syscall_after_linux_3_10_refused` in \
         `tests/portable.rs`); do not edit by hand. Kernel versions and notes come from \
         `cartridge/syscalls.tsv`.\n\n",
    );
    r.push_str("## How\n\n");
    r.push_str(&format!(
        "The packaged binary (`bin/gearlb` of `cartridge/package.sh`, built for \
         `x86_64-unknown-linux-gnu.2.17`) ran under `strace -f -n` with \
         `-e inject=<every call numbered above {LAST_310_SYSCALL}>:error=ENOSYS`, the answer \
         of Linux 3.10, which has no call numbered above {LAST_310_SYSCALL} (finit_module, \
         3.8). It ran two balancers gossiping over TCP (HMAC secret; the second seeded with \
         the first in `cluster.peers`, both then given the membership with `set-peers`), \
         two web gears given with `update-cluster`, health checks, \
         HTTP and TLS proxying with sealed sticky cookies, a 1 MiB upload and a 4 MiB \
         download through each balancer, the status page, CSV, JSON and metrics, `gearlb ctl` \
         (status, peers, reload, rotate-out and rotate-in, and `scale up`, a call to a test \
         broker over HTTPS by host name), `gearlb check` on a good and a \
         broken configuration, and a graceful SIGTERM stop of both (exit 0). Everything \
         worked; every call shown below is what those processes made ({:.0} s under \
         strace).\n\n",
        exercised.as_secs_f64()
    ));
    r.push_str(&format!(
        "ENOSYS injected into {} calls: {}.\n",
        inject.len(),
        inject
            .iter()
            .map(|n| format!("{} ({n})", table.iter().find(|s| s.nr == *n).unwrap().name))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if !cannot_inject.is_empty() {
        r.push_str(&format!(
            "\nThis strace cannot name {} newer calls ({}): the test fails if the binary \
             makes any of them, since it could not be refused.\n",
            cannot_inject.len(),
            cannot_inject
                .iter()
                .map(|n| table.iter().find(|s| s.nr == *n).unwrap().name.clone())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    r.push_str(&format!(
        "\nHost: Linux {}, {}, {}.\n\n",
        cmd("uname", &["-r"]),
        cmd("ldd", &["--version"]),
        cmd("strace", &["-V"])
    ));
    r.push_str(
        "On this host the binary uses the host's glibc (2.36), which itself tries newer calls \
         (clone3, rseq, ...) and falls back; on RHEL 7, glibc 2.17 never makes them. The \
         calls gearlb's own code makes directly (Rust std, mimalloc, the getrandom crate) \
         are the ones that matter there, and they fall back the same way. Calls served by \
         the vDSO (clock_gettime, also with CLOCK_MONOTONIC_COARSE, gettimeofday, time, \
         getcpu: all in 3.10's x86-64 vDSO) do not enter the kernel and are not in strace's \
         log.\n\n",
    );
    r.push_str("## glibc\n\n```\n");
    r.push_str(&check);
    r.push_str("```\n\n");
    r.push_str("## Calls newer than Linux 3.10 (all refused with ENOSYS; the run passed)\n\n");
    r.push_str(
        "| call | number | Linux | calls seen | who, and the fallback |\n|---|---|---|---|---|\n",
    );
    for (name, s) in seen.iter().filter(|(_, s)| s.nr > LAST_310_SYSCALL) {
        let t = by_name.get(name.as_str());
        r.push_str(&format!(
            "| `{name}` | {} | {} | {} | {} |\n",
            s.nr,
            t.map_or("?", |t| t.since.as_str()),
            s.calls,
            markdown_cell(t.map_or("", |t| t.note.as_str()))
        ));
    }
    r.push_str("\n## Flags newer than Linux 3.10 on older calls\n\n");
    r.push_str(
        "strace's decoded arguments searched for flags that later kernels added (the list is \
         `NEWER_FLAGS` in `tests/portable.rs`; 0: not made in this run); 3.10 rejects or \
         ignores them:\n\n",
    );
    r.push_str("| flag | Linux | calls seen | what happens on 3.10 |\n|---|---|---|---|\n");
    for (flag, _, since, note) in NEWER_FLAGS {
        r.push_str(&format!(
            "| `{flag}` | {since} | {} | {} |\n",
            flags.get(flag).unwrap_or(&0),
            markdown_cell(note)
        ));
    }
    r.push('\n');
    r.push_str("## Calls Linux 3.10 has\n\n");
    r.push_str("| call | number | Linux | calls seen | errors returned |\n|---|---|---|---|---|\n");
    for (name, s) in seen.iter().filter(|(_, s)| s.nr <= LAST_310_SYSCALL) {
        let since = by_name
            .get(name.as_str())
            .map_or("≤ 3.10".to_string(), |t| t.since.clone());
        r.push_str(&format!(
            "| `{name}` | {} | {since} | {} | {} |\n",
            s.nr,
            s.calls,
            s.errors.iter().cloned().collect::<Vec<_>>().join(" ")
        ));
    }
    r
}
