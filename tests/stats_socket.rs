//! The stats socket (`run/stats`) as the old cartridge's tools use it: `socat` one-liners
//! from `bin/control`, `haproxy_ctld.rb`'s `show stat` reader, people at a `prompt`; its
//! access rule, its bounds, and `disable server` reaching every balancer.

mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// `echo "$input" | socat stdio $path`, as the old cartridge's `bin/control` runs it;
/// (exit code, standard output).
fn socat(path: &Path, input: &str) -> (i32, String) {
    socat_as(&[], path, input)
}

/// The same, through a command prefix (e.g. `setpriv` to run as another user).
fn socat_as(prefix: &[&str], path: &Path, input: &str) -> (i32, String) {
    let mut cmd = match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg("socat");
            c
        }
        None => Command::new("socat"),
    };
    let mut child = cmd
        .arg("stdio")
        .arg(path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("socat (CI installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{input}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `show stat` read as `haproxy_ctld.rb` reads it: open the socket, `puts "show stat\n"`,
/// `gets` lines until the end, `line.split(',')` (Ruby drops trailing empty fields),
/// indexed by pxname then svname.
fn ctld_show_stat(path: &Path) -> HashMap<String, HashMap<String, Vec<String>>> {
    let mut s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"show stat\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("# pxname,svname,"), "{text}");
    assert!(
        text.ends_with(",\n\n"),
        "CSV, then the empty line: {text:?}"
    );
    let mut stats: HashMap<String, HashMap<String, Vec<String>>> = HashMap::new();
    for line in text.split_inclusive('\n') {
        let mut fields: Vec<String> = line.split(',').map(str::to_string).collect();
        while fields.last().is_some_and(|f| f.is_empty()) {
            fields.pop();
        }
        let px = fields.first().cloned().unwrap_or_default();
        let sv = fields.get(1).cloned().unwrap_or_default();
        stats.entry(px).or_default().insert(sv, fields);
    }
    stats
}

/// A server's `status` (column 17) in `show stat`.
fn server_status(path: &Path, server: &str) -> String {
    ctld_show_stat(path)["express"]
        .get(server)
        .map(|r| r[17].clone())
        .unwrap_or_default()
}

async fn wait_status(path: &Path, server: &str, want: &str) {
    let ok = eventually(Duration::from_secs(10), || {
        server_status(path, server) == want
    })
    .await;
    assert!(ok, "{server} never {want}: {}", server_status(path, server));
}

/// One request through the proxy, on a new connection; which backend answered.
async fn who(lb: &Gearlb) -> String {
    let r = get(lb.proxy, "/", &[]).await.unwrap();
    assert_eq!(r.status, 200);
    r.text()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socat_show_stat_show_info_and_disable_enable_server() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let web1 = TestBackend::start("web1").await;
    let web2 = TestBackend::start("web2").await;
    let dir = workdir();
    let path = dir.path().join("stats");
    // A stale socket file, as a killed balancer leaves behind, is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let mut lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("web1", web1.addr), ("web2", web2.addr)], ""),
    );
    let meta = std::fs::metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);

    // haproxy_ctld: the gear count is the `express` rows minus FRONTEND and BACKEND, the
    // load is express/BACKEND scur.
    for _ in 0..4 {
        who(&lb).await;
    }
    let stats = ctld_show_stat(&path);
    assert_eq!(stats["express"].len() - 2, 2, "gear count");
    assert_eq!(stats["express"]["BACKEND"][4], "0", "scur");
    assert_eq!(stats["express"]["BACKEND"][7], "4", "stot");
    assert_eq!(stats["express"]["web1"][17], "UP");
    assert!(stats["stats"].contains_key("FRONTEND"));

    // show info: HAProxy's `Name: value` lines.
    let (code, out) = socat(&path, "show info");
    assert_eq!(code, 0);
    let info: HashMap<&str, &str> = out.lines().filter_map(|l| l.split_once(": ")).collect();
    assert_eq!(info["Name"], "gearlb");
    assert_eq!(info["Pid"], lb.pid().to_string());
    assert!(info["Uptime_sec"].parse::<u64>().is_ok());
    assert_eq!(info["Maxconn"], "10000");
    assert!(info["CumReq"].parse::<u64>().unwrap() >= 4);
    assert!(out.ends_with("\n\n"), "{out:?}");
    // Two commands on a line: two answers, each ended by an empty line.
    let (_, out) = socat(&path, "show info;show stat");
    let blocks: Vec<&str> = out.split("\n\n").collect();
    assert_eq!(blocks.len(), 3, "{out:?}");
    assert!(blocks[0].starts_with("Name: gearlb") && blocks[1].starts_with("# pxname"));

    // disable server: an empty answer at once; then the gear takes no new request.
    let started = Instant::now();
    let (code, out) = socat(&path, "disable server express/web1");
    assert_eq!((code, out.as_str()), (0, "\n"));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "answered without waiting for the drain"
    );
    wait_status(&path, "web1", "MAINT").await;
    let before = web1.requests();
    for _ in 0..20 {
        assert_eq!(who(&lb).await, "backend web2");
    }
    assert_eq!(
        web1.requests(),
        before,
        "nothing reached the disabled server"
    );
    // The log is read from the balancer's stdout by another thread: wait for it.
    let logged = eventually(Duration::from_secs(5), || {
        lb.log_text().contains("rotation submitted (stats socket)")
    })
    .await;
    assert!(logged, "{}", lb.log_text());
    // Disabling again changes nothing and answers the same.
    assert_eq!(socat(&path, "disable server express/web1").1, "\n");

    // Mistakes get HAProxy's answers and change nothing.
    for (cmd, answer) in [
        ("disable server express/nope", "No such server.\n\n"),
        ("enable server express/nope", "No such server.\n\n"),
        ("disable server www/web2", "No such backend.\n\n"),
        ("disable server express", "Require 'backend/server'.\n\n"),
    ] {
        assert_eq!(socat(&path, cmd), (0, answer.to_string()), "{cmd}");
    }
    let (_, out) = socat(&path, "frobnicate");
    assert!(
        out.starts_with(
            "Unknown command: 'frobnicate'. Please enter one of the following commands only:\n"
        ),
        "{out}"
    );
    assert!(out.contains("disable server") && out.ends_with("\n\n"));
    assert_eq!(server_status(&path, "web2"), "UP");
    assert_eq!(server_status(&path, "web1"), "MAINT");

    // enable server brings it back.
    let (code, out) = socat(&path, "enable server express/web1");
    assert_eq!((code, out.as_str()), (0, "\n"));
    wait_status(&path, "web1", "UP").await;
    let end = Instant::now() + Duration::from_secs(10);
    while web1.requests() == before {
        assert!(Instant::now() < end, "web1 never took a request again");
        who(&lb).await;
    }

    // Removed on stop.
    lb.signal("TERM");
    assert_eq!(lb.wait(Duration::from_secs(20)), Some(0));
    assert!(!path.exists(), "stats socket removed on stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_mode_bounds_and_other_users() {
    use std::os::unix::fs::PermissionsExt;
    assert!(
        rustix::process::geteuid().is_root(),
        "this test connects as another user and needs root; CI runs as root"
    );
    let web1 = TestBackend::start("web1").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("web1", web1.addr)], ""),
    );
    let path = dir.path().join("stats");

    // A client that connects and says nothing holds up nobody.
    let silent = UnixStream::connect(&path).unwrap();
    let started = Instant::now();
    assert!(socat(&path, "show stat").1.contains("express,web1,"));
    assert!(started.elapsed() < Duration::from_secs(2));

    // Prompt mode: a prompt after each answer, until quit.
    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let read_until = |s: &mut UnixStream, end: &str| {
        let mut got = Vec::new();
        let mut b = [0u8; 4096];
        while !String::from_utf8_lossy(&got).ends_with(end) {
            let n = s.read(&mut b).unwrap();
            assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&b[..n]);
        }
        String::from_utf8_lossy(&got).into_owned()
    };
    s.write_all(b"prompt\n").unwrap();
    assert_eq!(read_until(&mut s, "> "), "\n> ");
    s.write_all(b"show info\n").unwrap();
    let out = read_until(&mut s, "\n\n> ");
    assert!(out.starts_with("Name: gearlb\n"), "{out}");
    s.write_all(b"show stat stats -1 -1\n").unwrap();
    let out = read_until(&mut s, "\n\n> ");
    let rows: Vec<&str> = out.lines().skip(1).filter(|l| l.contains(',')).collect();
    assert_eq!(rows.len(), 2, "the stats proxy only: {out}");
    assert!(rows[0].starts_with("stats,FRONTEND,") && rows[1].starts_with("stats,BACKEND,"));
    s.write_all(b"quit\n").unwrap();
    let mut rest = String::new();
    s.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "", "quit closes");

    // A line longer than the limit is refused and the connection closed.
    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(&vec![b'x'; 20_000]);
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.contains("command line too long"), "{out:?}");
    drop(silent);

    // Another user: stopped by the mode (0600) at connect; with the mode opened up by
    // mistake, refused by the peer check.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let nobody = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    let (code, out) = socat_as(&nobody, &path, "disable server express/web1");
    assert_ne!(code, 0, "connected through mode 0600: {out}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (_, out) = socat_as(&nobody, &path, "disable server express/web1");
    assert_eq!(out, "Permission denied\n\n");
    let logged = eventually(Duration::from_secs(5), || {
        lb.log_text()
            .contains("stats socket connection from another user refused")
    })
    .await;
    assert!(logged, "{}", lb.log_text());
    assert_eq!(server_status(&path, "web1"), "UP", "nothing changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_server_takes_the_gear_out_on_every_balancer() {
    let web1 = TestBackend::start("web1").await;
    let web2 = TestBackend::start("web2").await;
    let (_dirs, lbs) = cluster_of(2, &[&web1, &web2], "").await;
    let path = lbs[0].dir.join("stats");
    let (code, out) = socat(&path, "disable server express/gear-web1-ns");
    assert_eq!((code, out.as_str()), (0, "\n"));
    // Gossiped: the other balancer drains it too (gearlb's rotations are cluster-wide).
    let drained = eventually(Duration::from_secs(15), || {
        lbs.iter()
            .all(|lb| backend_state(lb, "gear-web1-ns") == "drained")
    })
    .await;
    assert!(drained, "{}", lbs[1].log_text());
    assert_eq!(
        server_status(&lbs[1].dir.join("stats"), "gear-web1-ns"),
        "MAINT"
    );
    let (_, out) = socat(
        &lbs[1].dir.join("stats"),
        "enable server express/gear-web1-ns",
    );
    assert_eq!(out, "\n");
    let back = eventually(Duration::from_secs(15), || {
        lbs.iter()
            .all(|lb| backend_state(lb, "gear-web1-ns") == "up")
    })
    .await;
    assert!(back);
}
