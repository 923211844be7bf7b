//! Faults under load, with real processes: a web gear killed with SIGKILL, a balancer
//! killed with SIGKILL, a balancer restarted in the middle of a rotation, a full disk
//! under the state file, and SIGHUP with a broken configuration. Bounded in time and
//! count; traffic to 127.0.0.1 only.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::*;

// ---------------------------------------------------------------------------------------
// A web gear as a separate process, so that it can be killed with SIGKILL.

/// A threaded HTTP/1.1 server: `GET /…?ms=N` answers `backend NAME` after N ms;
/// `POST /upload/ID?ms=N` reads the body, prints `START ID`, waits N ms, prints
/// `DONE ID` and answers `NAME LEN`. Prints its port first.
const GEAR_PY: &str = r#"
import http.server, socketserver, sys, time
from urllib.parse import urlparse, parse_qs
name = sys.argv[1]
def say(line):
    sys.stdout.write(line + "\n"); sys.stdout.flush()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def ms(self):
        return int(parse_qs(urlparse(self.path).query).get("ms", ["0"])[0]) / 1000.0
    def answer(self, text):
        # Head and body in one write: a gear killed between the two would truncate a
        # response the balancer has already passed on, which no balancer can undo.
        b = text.encode()
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(b), b))
    def do_GET(self):
        time.sleep(self.ms())
        self.answer("backend " + name)
    def do_POST(self):
        data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        rid = urlparse(self.path).path.rsplit("/", 1)[-1]
        say("START " + rid)
        time.sleep(self.ms())
        say("DONE " + rid)
        self.answer("%s %d" % (name, len(data)))
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 1024
s = S(("127.0.0.1", 0), H)
say(str(s.server_address[1]))
s.serve_forever()
"#;

struct PyGear {
    name: String,
    addr: SocketAddr,
    child: Child,
    /// `START id` / `DONE id` lines, in order.
    lines: Arc<Mutex<Vec<String>>>,
}

impl PyGear {
    fn start(name: &str) -> PyGear {
        let mut child = Command::new("python3")
            .args(["-c", GEAR_PY, name])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 (the web gear of the kill -9 test)");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut port = String::new();
        out.read_line(&mut port).unwrap();
        let addr = SocketAddr::from(([127, 0, 0, 1], port.trim().parse().unwrap()));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        PyGear {
            name: name.to_string(),
            addr,
            child,
            lines,
        }
    }

    fn ids(&self, what: &str) -> Vec<u64> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| l.strip_prefix(what))
            .filter_map(|id| id.trim().parse().ok())
            .collect()
    }
}

impl Drop for PyGear {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request of a load run.
#[derive(Clone, Debug)]
struct Outcome {
    id: u64,
    post: bool,
    /// POST pinned to the gear that gets killed.
    pinned: bool,
    start: Instant,
    end: Instant,
    status: Option<u16>,
    body: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_a_web_gear_fails_only_the_posts_in_flight_on_it() {
    let gears: Vec<PyGear> = ["g0", "g1", "g2"]
        .iter()
        .map(|n| PyGear::start(n))
        .collect();
    let dir = workdir();
    let lb = Gearlb::start_with(
        dir.path(),
        &config_text(dir.path(), &[], "[health]\ninterval = \"200ms\""),
        &["--log-requests"],
        &[],
    );
    let entries: Vec<String> = gears
        .iter()
        .map(|g| format!("{}-ns.example.com|{}", g.name, g.addr))
        .collect();
    assert_eq!(lb.ctl(&["update-cluster", &entries.join(" ")]).0, 0);

    let proxy = lb.proxy;
    let outcomes = Arc::new(Mutex::new(Vec::<Outcome>::new()));
    let next_id = Arc::new(std::sync::atomic::AtomicU64::new(1));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..8u64 {
        let (outcomes, next_id) = (outcomes.clone(), next_id.clone());
        tasks.push(tokio::spawn(async move {
            let c = client();
            for i in 0..3000u64 {
                if t0.elapsed() > Duration::from_millis(2500) {
                    break;
                }
                let id = next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                // Worker 0 sends slow POSTs pinned to g0; the others a GET/POST mix.
                let pinned = worker == 0;
                let post = pinned || i % 3 == 0;
                let ms = if pinned { 300 } else { 20 * (i % 3) };
                let req = if post {
                    let mut r = http::Request::post(format!("http://{proxy}/upload/{id}?ms={ms}"));
                    if pinned {
                        r = r.header("cookie", "GEAR=g0-ns");
                    }
                    // A sized body: Python's http.server reads Content-Length only.
                    r.body(full(vec![b'p'; 1000])).unwrap()
                } else {
                    http::Request::get(format!("http://{proxy}/get/{id}?ms={ms}"))
                        .body(gen_body(0))
                        .unwrap()
                };
                let start = Instant::now();
                let got = send(&c, req).await;
                let o = Outcome {
                    id,
                    post,
                    pinned,
                    start,
                    end: Instant::now(),
                    status: got.as_ref().ok().map(|g| g.status),
                    body: match &got {
                        Ok(g) => g.text(),
                        Err(e) => e.clone(),
                    },
                };
                outcomes.lock().unwrap().push(o);
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(900)).await;
    let mut victim = gears.into_iter();
    let mut g0 = victim.next().unwrap();
    let survivors: Vec<PyGear> = victim.collect();
    let killed = Instant::now();
    g0.child.kill().unwrap(); // SIGKILL
    g0.child.wait().unwrap();
    let reaped = Instant::now();
    for t in tasks {
        t.await.unwrap();
    }
    let outcomes = outcomes.lock().unwrap().clone();
    let log = lb.log_text();
    // The backend each request ended on, from the request log (`path=/upload/ID`).
    let backend_of = |id: u64, post: bool| -> Option<String> {
        let path = format!("path={}/{id} ", if post { "/upload" } else { "/get" });
        log.lines()
            .find(|l| l.contains(&path))
            .and_then(|l| l.split("backend=").nth(1))
            .map(|b| b.split_whitespace().next().unwrap_or("").to_string())
    };

    let gets: Vec<&Outcome> = outcomes.iter().filter(|o| !o.post).collect();
    let posts: Vec<&Outcome> = outcomes.iter().filter(|o| o.post).collect();
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.status != Some(200)).collect();
    // The gear dies between `killed` (the signal sent) and `reaped` (`wait` returned): a
    // POST that reached it meanwhile was in flight too. Once it is reaped, its sockets
    // are closed, and the balancer must see that before it sends a POST there. The
    // margin covers a loaded host delivering the gear's closes over loopback late.
    let in_flight = |o: &Outcome| o.start < reaped + Duration::from_millis(10) && o.end >= killed;
    let in_flight_at_kill = posts.iter().filter(|o| in_flight(o)).count();
    // Times in ms from the kill, for the record of a failure.
    let ms = |t: Instant| match t.checked_duration_since(killed) {
        Some(d) => d.as_secs_f64() * 1e3,
        None => -(killed - t).as_secs_f64() * 1e3,
    };
    eprintln!(
        "{} GETs, {} POSTs, {} POSTs in flight at the kill (reaped at +{:.1} ms), {} failed \
         (id, status, start ms, end ms): {:?}",
        gets.len(),
        posts.len(),
        in_flight_at_kill,
        ms(reaped),
        failed.len(),
        failed
            .iter()
            .map(|o| (o.id, o.status, ms(o.start).round(), ms(o.end).round()))
            .collect::<Vec<_>>()
    );
    assert!(gets.len() > 50 && posts.len() > 20, "too little load");
    assert!(
        gets.iter().all(|o| o.status == Some(200)),
        "a GET failed: {:?}",
        gets.iter().find(|o| o.status != Some(200))
    );
    // Only POSTs that were on g0 when it died fail, with 502, never replayed elsewhere.
    let started_on_survivors: BTreeSet<u64> =
        survivors.iter().flat_map(|g| g.ids("START ")).collect();
    for o in &failed {
        assert!(o.post, "{o:?}");
        assert_eq!(o.status, Some(502), "{o:?}");
        assert!(
            in_flight(o),
            "failed but not in flight at the kill: {o:?} (killed at +{:?})",
            killed - t0
        );
        assert_eq!(
            backend_of(o.id, true).as_deref(),
            Some("gear-g0-ns"),
            "{o:?}"
        );
        assert!(
            !started_on_survivors.contains(&o.id),
            "POST {} was replayed on another gear",
            o.id
        );
    }
    assert!(failed.len() <= in_flight_at_kill);
    assert!(
        failed.iter().any(|o| o.pinned),
        "no POST was in flight on g0 when it died"
    );
    // No POST reached two gears, or one gear twice.
    let mut started: BTreeMap<u64, usize> = BTreeMap::new();
    for id in g0
        .ids("START ")
        .into_iter()
        .chain(survivors.iter().flat_map(|g| g.ids("START ")))
    {
        *started.entry(id).or_default() += 1;
    }
    assert!(
        started.values().all(|&n| n == 1),
        "a POST was sent twice: {:?}",
        started.iter().filter(|(_, &n)| n > 1).collect::<Vec<_>>()
    );
    // Every successful POST was processed exactly once.
    let mut done: BTreeMap<u64, usize> = BTreeMap::new();
    for id in g0
        .ids("DONE ")
        .into_iter()
        .chain(survivors.iter().flat_map(|g| g.ids("DONE ")))
    {
        *done.entry(id).or_default() += 1;
    }
    for o in posts.iter().filter(|o| o.status == Some(200)) {
        assert_eq!(
            done.get(&o.id),
            Some(&1),
            "POST {} processed {:?} times",
            o.id,
            done.get(&o.id)
        );
        assert!(o.body.ends_with(" 1000"), "{o:?}");
    }
    // POSTs pinned to g0 after its death went elsewhere and succeeded.
    let after: Vec<&&Outcome> = posts
        .iter()
        .filter(|o| o.pinned && o.start > reaped + Duration::from_millis(100))
        .collect();
    assert!(!after.is_empty());
    assert!(after
        .iter()
        .all(|o| o.status == Some(200) && !o.body.starts_with("g0")));
    assert_eq!(backend_state(&lb, "gear-g0-ns"), "down");
}

// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_a_balancer_leaves_the_other_unaffected() {
    let g0 = TestBackend::start("g0").await;
    let g1 = TestBackend::start("g1").await;
    let (_dirs, mut lbs) = cluster_of(2, &[&g0, &g1], "").await;
    let (p1, p2) = (lbs[0].proxy, lbs[1].proxy);
    let t0 = Instant::now();
    // (ok, failed, slowest) through lb1; lb2 takes load too until it dies.
    let mut tasks = Vec::new();
    for worker in 0..8u32 {
        let proxy = if worker < 6 { p1 } else { p2 };
        tasks.push(tokio::spawn(async move {
            let c = client();
            let (mut ok, mut failed, mut slowest) = (0u32, 0u32, Duration::ZERO);
            for i in 0..3000u32 {
                if t0.elapsed() > Duration::from_millis(2500) {
                    break;
                }
                let req = if i % 4 == 0 {
                    http::Request::post(format!("http://{proxy}/upload"))
                        .body(gen_body(2000))
                        .unwrap()
                } else {
                    http::Request::get(format!("http://{proxy}/"))
                        .body(gen_body(0))
                        .unwrap()
                };
                let t = Instant::now();
                match send(&c, req).await {
                    Ok(g) if g.status == 200 => ok += 1,
                    _ => failed += 1,
                }
                slowest = slowest.max(t.elapsed());
            }
            (proxy, ok, failed, slowest)
        }));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    lbs[1].child.kill().unwrap(); // SIGKILL
    lbs[1].child.wait().unwrap();
    let (mut ok, mut failed, mut slowest) = (0, 0, Duration::ZERO);
    let mut through_dead = (0, 0);
    for t in tasks {
        let (proxy, o, f, s) = t.await.unwrap();
        if proxy == p1 {
            ok += o;
            failed += f;
            slowest = slowest.max(s);
        } else {
            through_dead.0 += o;
            through_dead.1 += f;
        }
    }
    eprintln!(
        "lb1: {ok} ok, {failed} failed, slowest {slowest:?}; lb2 (killed): {} ok, {} failed",
        through_dead.0, through_dead.1
    );
    assert_eq!(failed, 0, "requests through the surviving balancer failed");
    assert!(ok > 300, "only {ok} requests through lb1");
    assert!(through_dead.1 > 0, "lb2 was not under load when it died");
    assert!(
        slowest < Duration::from_secs(1),
        "slowest request {slowest:?}"
    );
    // lb1 sees lb2 dead and still covers and serves every gear.
    assert!(
        eventually(Duration::from_secs(6), || lbs[0].live()
            == vec!["lb1".to_string()])
        .await,
        "lb1 still sees {:?}",
        lbs[0].live()
    );
    let status = lbs[0].status_json();
    for b in status["backends"].as_array().unwrap() {
        assert_eq!(b["state"], "up", "{b}");
        assert_eq!(b["in_subset"], true, "{b}");
    }
}

// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balancer_restarted_mid_rotation_comes_back_with_the_gear_out() {
    let g0 = TestBackend::start("g0").await;
    let g1 = TestBackend::start("g1").await;
    let dirs: Vec<_> = (0..2).map(|_| workdir()).collect();
    // Fixed gossip ports, as the node's port proxy gives a gear: a restarted balancer is
    // found at the same address.
    let conf = |d: &Path, id: &str, port: u16| {
        config_text(
            d,
            &[],
            &format!(
                "[cluster]\nnode_id = \"{id}\"\nid = \"app1\"\nlisten = \"127.0.0.1:{port}\"\nsecret = \"{SECRET}\"\ngossip_interval = \"100ms\"\n[health]\ninterval = \"300ms\""
            ),
        )
    };
    let ports = [free_port("127.0.0.1"), free_port("127.0.0.1")];
    let lb1 = Gearlb::start(dirs[0].path(), &conf(dirs[0].path(), "lb1", ports[0]));
    let mut lb2 = Gearlb::start(dirs[1].path(), &conf(dirs[1].path(), "lb2", ports[1]));
    let peers = peer_list(&[("lb1", &lb1), ("lb2", &lb2)]);
    let entries = format!(
        "g0-ns.example.com|{} g1-ns.example.com|{}",
        g0.addr, g1.addr
    );
    for lb in [&lb1, &lb2] {
        assert_eq!(lb.ctl(&["set-peers", &peers]).0, 0);
        assert_eq!(lb.ctl(&["update-cluster", &entries]).0, 0);
    }
    let both = vec!["lb1".to_string(), "lb2".to_string()];
    assert!(
        eventually(Duration::from_secs(8), || lb1.live() == both
            && lb2.live() == both)
        .await
    );

    // A slow request on g0 through lb2 holds the drain open.
    let p2 = lb2.proxy;
    let slow =
        tokio::spawn(async move { get(p2, "/slow?ms=4000", &[("cookie", "GEAR=g0-ns")]).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    let rotation = {
        let socket = lb1.dir.join("control.sock");
        tokio::task::spawn_blocking(move || {
            ctl(
                &socket,
                &["rotate-out", "g0-ns", "--timeout", "20s", "--as-json"],
            )
        })
    };
    // lb2 has learnt the op and saved it, and is draining g0...
    let state = dirs[1].path().join("data/state.json");
    let saved = eventually(Duration::from_secs(5), || {
        std::fs::read_to_string(&state)
            .is_ok_and(|s| s.contains("\"rotations\"") && s.contains("g0-ns"))
    })
    .await;
    assert!(saved, "lb2 did not persist the rotation");
    assert_eq!(backend_state(&lb2, "gear-g0-ns"), "draining");
    // ...when it is killed, and started again.
    lb2.child.kill().unwrap();
    lb2.child.wait().unwrap();
    assert!(
        slow.await.unwrap().is_err(),
        "the slow request died with lb2"
    );
    let lb2 = Gearlb::start_file(dirs[1].path(), &dirs[1].path().join("gearlb.toml"));
    let state = backend_state(&lb2, "gear-g0-ns");
    assert!(
        state == "draining" || state == "drained",
        "g0 is {state} after the restart"
    );
    for _ in 0..10 {
        let got = get(lb2.proxy, "/", &[("cookie", "GEAR=g0-ns")])
            .await
            .unwrap();
        assert_eq!(got.text(), "backend g1");
    }

    // The rotation completes, long before its deadline, with both balancers accounted for.
    let (code, out, err) = rotation.await.unwrap();
    let took = t.elapsed();
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(took < Duration::from_secs(15), "took {took:?}");
    let result: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(result["status"], "success", "{result}");
    assert_eq!(
        result["proxy_results"]["lb1"]["status"], "success",
        "{result}"
    );
    let lb2_result = result["proxy_results"]["lb2"]["status"]
        .as_str()
        .unwrap_or("");
    assert!(
        lb2_result == "success" || lb2_result == "unreachable",
        "{result}"
    );
    // Nothing reaches g0 any more, through either balancer.
    assert!(
        eventually(Duration::from_secs(5), || backend_state(&lb2, "gear-g0-ns")
            == "drained")
        .await
    );
    let before = g0.requests();
    for lb in [&lb1, &lb2] {
        for _ in 0..10 {
            assert_eq!(
                get(lb.proxy, "/", &[("cookie", "GEAR=g0-ns")])
                    .await
                    .unwrap()
                    .text(),
                "backend g1"
            );
        }
    }
    assert_eq!(g0.requests(), before);
}

// ---------------------------------------------------------------------------------------

/// A small tmpfs mounted for one test; unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        assert!(
            rustix::process::geteuid().is_root(),
            "the full-disk test mounts a tmpfs and needs root; CI runs as root"
        );
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount -t tmpfs failed");
        Tmpfs(dir.to_path_buf())
    }

    /// Write a filler file until the file system is full.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.0.join("filler")).unwrap();
        let block = vec![0u8; 4096];
        for _ in 0..100_000 {
            if f.write_all(&block).and_then(|_| f.sync_all()).is_err() {
                return;
            }
        }
        panic!("the tmpfs never filled up");
    }

    fn free(&self) {
        std::fs::remove_file(self.0.join("filler")).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disk_keeps_serving_reports_the_failed_save_and_keeps_the_last_good_state() {
    let (a, b) = (TestBackend::start("a").await, TestBackend::start("b").await);
    let dir = workdir();
    let data = dir.path().join("data");
    let disk = Tmpfs::mount(&data, "64k");
    let config = config_text(dir.path(), &[], "");
    let mut lb = Gearlb::start(dir.path(), &config);
    let one = format!("a-ns.example.com|{}", a.addr);
    let two = format!("{one} b-ns.example.com|{}", b.addr);
    assert_eq!(lb.ctl(&["update-cluster", &one]).0, 0);
    let state = data.join("state.json");
    let good = std::fs::read(&state).unwrap();

    disk.fill();
    let (code, out, err) = lb.ctl(&["update-cluster", &two]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("NOT saved"), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    // Applied in memory and serving; the file on disk is the last good one, and no
    // temporary file is left behind.
    assert_eq!(lb.backend_names(), vec!["gear-a-ns", "gear-b-ns"]);
    for _ in 0..4 {
        assert_eq!(get(lb.proxy, "/", &[]).await.unwrap().status, 200);
    }
    assert_eq!(std::fs::read(&state).unwrap(), good, "state file changed");
    let mut left: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, vec!["filler", "gearlb.lock", "state.json"]);

    // Killed now, it comes back with the last good state.
    lb.child.kill().unwrap();
    lb.child.wait().unwrap();
    let lb = Gearlb::start(dir.path(), &config);
    assert_eq!(lb.backend_names(), vec!["gear-a-ns"]);
    assert_eq!(get(lb.proxy, "/", &[]).await.unwrap().text(), "backend a");

    // With room again, the next change is saved.
    disk.free();
    let (code, out, err) = lb.ctl(&["update-cluster", &two]);
    assert_eq!(code, 0, "{out}{err}");
    let saved = std::fs::read_to_string(&state).unwrap();
    assert!(saved.contains("gear-b-ns"), "{saved}");
    drop(lb);
}

// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_with_an_invalid_or_missing_config_keeps_the_old_one() {
    let (a, b) = (TestBackend::start("a").await, TestBackend::start("b").await);
    let dir = workdir();
    let lb = Gearlb::start(dir.path(), &config_text(dir.path(), &[("a", a.addr)], ""));
    // (tests/lifecycle.rs covers a TOML syntax error.) Valid TOML, invalid values; then
    // no file at all.
    let refusals = |lb: &Gearlb| lb.log_text().matches("reload refused").count();
    let invalid = config_text(
        dir.path(),
        &[("b", b.addr)],
        "[limits]\nmax_header_size = 10\n[timeouts]\nconnect = \"0s\"",
    );
    std::fs::write(&lb.config, invalid).unwrap();
    lb.signal("HUP");
    // The refusal is logged first, then one line per problem: wait for all of them.
    assert!(
        eventually(Duration::from_secs(5), || {
            let log = lb.log_text();
            refusals(&lb) == 1
                && log.contains("limits.max_header_size")
                && log.contains("timeouts.connect")
        })
        .await,
        "{}",
        lb.log_text()
    );
    std::fs::remove_file(&lb.config).unwrap();
    lb.signal("HUP");
    assert!(
        eventually(Duration::from_secs(5), || refusals(&lb) == 2
            && lb.log_text().contains("cannot read"))
        .await,
        "{}",
        lb.log_text()
    );
    assert_eq!(lb.backend_names(), vec!["a"]);
    assert_eq!(get(lb.proxy, "/", &[]).await.unwrap().text(), "backend a");
    // Fixed: the next SIGHUP applies it.
    std::fs::write(&lb.config, config_text(dir.path(), &[("b", b.addr)], "")).unwrap();
    lb.signal("HUP");
    assert!(eventually(Duration::from_secs(5), || lb.backend_names() == vec!["b"]).await);
    assert_eq!(get(lb.proxy, "/", &[]).await.unwrap().text(), "backend b");
}

// ---------------------------------------------------------------------------------------

/// Saving the state file waits for the disk (write, fsync, rename, fsync), which can take
/// seconds on a loaded node; with `threads = 1` the data plane runs on one thread, and a
/// save on it would stall every request meanwhile. Saves run on the blocking pool: a save
/// that blocks (here: its temporary file is a FIFO nobody reads, so opening it blocks)
/// holds the control command that asked for it, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_state_save_does_not_stall_the_data_plane() {
    let a = TestBackend::start("a").await;
    let dir = workdir();
    let config = config_text(
        dir.path(),
        &[("a", a.addr)],
        "[runtime]\nthreads = 1\n[health]\nenabled = false",
    );
    let lb = Gearlb::start(dir.path(), &config);
    assert_eq!(get(lb.proxy, "/", &[]).await.unwrap().status, 200);
    // Every temporary name the next saves can use is a FIFO: opening one blocks until
    // a reader comes.
    let data = dir.path().join("data");
    // The saves of the start are over (none is writing a temporary file).
    let settled = eventually(Duration::from_secs(5), || {
        data.join("state.json").exists()
            && std::fs::read_dir(&data)
                .unwrap()
                .all(|e| !e.unwrap().file_name().to_string_lossy().contains(".tmp."))
    })
    .await;
    assert!(settled);
    let fifos: Vec<PathBuf> = (1..=64)
        .map(|seq| data.join(format!(".state.json.tmp.{}.{seq}", lb.pid())))
        .collect();
    // (A save of the rotation engine may take one of the names meanwhile: then that
    // one is a plain file, and the others still block.)
    let made = fifos
        .iter()
        .filter(|f| Command::new("mkfifo").arg(f).status().unwrap().success())
        .count();
    assert!(made >= 60, "{made} FIFOs made");
    let socket = dir.path().join("control.sock");
    let entry = format!("b-ns.example.com|{}", a.addr);
    let ctl = std::thread::spawn(move || ctl(&socket, &["update-cluster", &entry]));
    // The save is under way (blocked opening its FIFO): requests are still served.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..5 {
        let t = Instant::now();
        let got = tokio::time::timeout(Duration::from_secs(3), get(lb.proxy, "/", &[])).await;
        assert!(
            matches!(got, Ok(Ok(ref g)) if g.status == 200),
            "a request during a blocked save: {got:?}"
        );
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    }
    // Let the save go: read whatever FIFO it opened.
    let readers: Vec<_> = fifos
        .into_iter()
        .map(|f| {
            std::thread::spawn(move || {
                use std::io::Read;
                use std::os::unix::fs::OpenOptionsExt;
                let opened = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
                    .open(&f);
                if let Ok(mut fifo) = opened {
                    let mut sink = Vec::new();
                    let _ = fifo.read_to_end(&mut sink);
                }
            })
        })
        .collect();
    let (code, out, err) = ctl.join().unwrap();
    // Written into a FIFO, fsync fails: not saved, said so, and applied all the same.
    assert_eq!(code, 1, "{out}{err}");
    for r in readers {
        r.join().unwrap();
    }
}
