//! Life of a balancer process: configuration checks, control socket, persistence across
//! restarts, signals.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

#[test]
fn check_lists_every_problem_and_exits_64() {
    let dir = workdir();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        r#"
colour = "blue"
[listen]
proxy = "not an address"
[timeouts]
connect = "soon"
server = true
[limits]
max_connections = -1
[[backends]]
name = "web 1"
addr = "127.0.0.1:99999"
"#,
    )
    .unwrap();
    for cmd in ["check", "run"] {
        let out = Command::new(bin())
            .args([cmd, "--config"])
            .arg(&cfg)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{cmd}: {err}");
        for path in [
            "colour",
            "listen.proxy",
            "timeouts.connect",
            "timeouts.server",
            "limits.max_connections",
            "backends[0].name",
            "backends[0].addr",
        ] {
            assert!(err.contains(path), "{cmd}: {path} not reported in:\n{err}");
        }
        assert!(!err.contains("panicked"), "{err}");
    }
    let out = Command::new(bin())
        .args(["check", "--config"])
        .arg(dir.path().join("missing.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));

    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        config_text(
            dir.path(),
            &[("web1", "127.0.0.1:9001".parse().unwrap())],
            "",
        ),
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["check", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_socket_is_private() {
    let dir = workdir();
    let lb = Gearlb::start(dir.path(), &config_text(dir.path(), &[], ""));
    let mode = std::fs::metadata(dir.path().join("control.sock"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let (code, out, _) = lb.ctl(&["status"]);
    assert_eq!(code, 0);
    assert!(out.contains("backends: none"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_cluster_one_word_or_many_and_bad_entries() {
    let (a, b) = (TestBackend::start("a").await, TestBackend::start("b").await);
    let dir = workdir();
    let lb = Gearlb::start(dir.path(), &config_text(dir.path(), &[], ""));

    // One shell word holding spaces, as the node passes it.
    let one = format!("a-ns.example.com|{} b-ns.example.com|{}", a.addr, b.addr);
    let (code, out, err) = lb.ctl(&["update-cluster", &one]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(lb.backend_names(), vec!["gear-a-ns", "gear-b-ns"]);

    // Many words; one invalid entry: reported, exit 22, the valid ones applied.
    let (code, _, err) = lb.ctl(&[
        "update-cluster",
        &format!("a-ns.example.com|{}", a.addr),
        "bad$(reboot)|1.2.3.4:80",
    ]);
    assert_eq!(code, 22);
    assert!(err.contains("invalid entry"), "{err}");
    assert_eq!(lb.backend_names(), vec!["gear-a-ns"]);

    // A bad address for a known gear keeps the gear as it was.
    let (code, _, err) = lb.ctl(&["update-cluster", "a-ns.example.com|127.0.0.1:0"]);
    assert_eq!(code, 22, "{err}");
    assert_eq!(lb.backend_names(), vec!["gear-a-ns"]);

    // Nothing valid at all: nothing changes.
    let (code, _, _) = lb.ctl(&["update-cluster", "garbage"]);
    assert_eq!(code, 22);
    assert_eq!(lb.backend_names(), vec!["gear-a-ns"]);
    assert_eq!(get(lb.proxy, "/", &[]).await.unwrap().text(), "backend a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_restores_backends_unless_config_was_edited() {
    let (a, b, c) = (
        TestBackend::start("a").await,
        TestBackend::start("b").await,
        TestBackend::start("c").await,
    );
    let dir = workdir();
    let config = config_text(dir.path(), &[("a", a.addr)], "");
    let mut lb = Gearlb::start(dir.path(), &config);
    let entries = format!("b-ns.example.com|{} c-ns.example.com|{}", b.addr, c.addr);
    assert_eq!(lb.ctl(&["update-cluster", &entries]).0, 0);
    lb.signal("TERM");
    assert_eq!(lb.wait(Duration::from_secs(10)), Some(0));

    // Same config: the operator's runtime change survives the restart.
    let mut lb = Gearlb::start(dir.path(), &config);
    assert_eq!(lb.backend_names(), vec!["gear-b-ns", "gear-c-ns"]);
    let got = get(lb.proxy, "/", &[]).await.unwrap();
    assert!(
        got.text() == "backend b" || got.text() == "backend c",
        "{}",
        got.text()
    );
    lb.signal("TERM");
    assert_eq!(lb.wait(Duration::from_secs(10)), Some(0));

    // Edited [[backends]]: the file wins.
    let edited = config_text(dir.path(), &[("a", a.addr), ("c", c.addr)], "");
    let lb = Gearlb::start(dir.path(), &edited);
    assert_eq!(lb.backend_names(), vec!["a", "c"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_state_file_is_set_aside() {
    let a = TestBackend::start("a").await;
    let dir = workdir();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("data/state.json"), "{ not json").unwrap();
    let lb = Gearlb::start(dir.path(), &config_text(dir.path(), &[("a", a.addr)], ""));
    assert_eq!(lb.backend_names(), vec!["a"]);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("data/state.json.bad")).unwrap(),
        "{ not json"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_slow_request_finish() {
    let b = TestBackend::start("slow").await;
    let dir = workdir();
    let mut lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("slow", b.addr)], ""),
    );
    let proxy = lb.proxy;
    let slow = tokio::spawn(async move { get(proxy, "/slow?ms=1500", &[]).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    lb.signal("TERM");
    // New connections are refused once the stop has begun.
    let refused = eventually(Duration::from_secs(1), || {
        std::net::TcpStream::connect(proxy).is_err()
    })
    .await;
    assert!(refused, "still accepting after SIGTERM");
    let got = slow.await.unwrap().unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(got.text(), "slow done by slow");
    let code = tokio::task::spawn_blocking(move || lb.wait(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(code, Some(0));
    assert!(
        t.elapsed() >= Duration::from_millis(1000),
        "exited before the request was done"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_clients_do_not_delay_stop() {
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let mut lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("web1", b.addr)], ""),
    );
    // A client with an idle keep-alive connection, and one connected but silent.
    let c = client();
    let req = http::Request::get(format!("http://{}/", lb.proxy))
        .body(gen_body(0))
        .unwrap();
    assert_eq!(send(&c, req).await.unwrap().status, 200);
    let _silent = std::net::TcpStream::connect(lb.proxy).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    lb.signal("TERM");
    let code = tokio::task::spawn_blocking(move || lb.wait(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(code, Some(0));
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "stop took {:?}",
        t.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_and_keeps_old_config_when_broken() {
    let (a, b) = (TestBackend::start("a").await, TestBackend::start("b").await);
    let dir = workdir();
    let lb = Gearlb::start(dir.path(), &config_text(dir.path(), &[("a", a.addr)], ""));
    // Edited file: backends and a timeout change apply without a restart.
    std::fs::write(&lb.config, config_text(dir.path(), &[("b", b.addr)], "")).unwrap();
    lb.signal("HUP");
    let mut names = Vec::new();
    let ok = eventually(Duration::from_secs(5), || {
        names = lb.backend_names();
        names == vec!["b"]
    })
    .await;
    assert!(ok, "{names:?}");
    // Broken file: error logged, old configuration kept, still serving.
    std::fs::write(&lb.config, "[listen\nproxy = 1").unwrap();
    lb.signal("HUP");
    let logged = eventually(Duration::from_secs(5), || {
        lb.log_text().contains("reload refused")
    })
    .await;
    assert!(logged, "{}", lb.log_text());
    assert_eq!(lb.backend_names(), vec!["b"]);
    assert_eq!(get(lb.proxy, "/", &[]).await.unwrap().text(), "backend b");
    // `ctl reload` reports the problems and exits 64.
    let (code, _, err) = lb.ctl(&["reload"]);
    assert_eq!(code, 64);
    assert!(err.contains("not valid TOML"), "{err}");
}

#[test]
fn ctl_without_a_balancer_says_so() {
    let dir = workdir();
    let (code, _, err) = ctl(&dir.path().join("nothing.sock"), &["status"]);
    assert_eq!(code, 69);
    assert!(err.contains("is it running"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_balancer_cannot_take_the_socket() {
    let dir = workdir();
    let _lb = Gearlb::start(dir.path(), &config_text(dir.path(), &[], ""));
    let cfg = dir.path().join("second.toml");
    std::fs::write(&cfg, config_text(dir.path(), &[], "")).unwrap();
    let out = Command::new(bin())
        .args(["run", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("already running"), "{text}");
}

/// Operators and developers run a balancer under valgrind (memcheck for a leak, callgrind
/// for an instruction count that host noise does not move; `bench/README.md`). rustix's
/// own auxv parser read the real vDSO address, which valgrind does not map for its guest,
/// and gearlb died of SIGSEGV on its first clock read: it must start, proxy and stop
/// cleanly under valgrind (`.ci/run` installs it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_under_valgrind() {
    assert!(
        Command::new("valgrind").arg("--version").output().is_ok(),
        "valgrind is missing: apt-get install valgrind"
    );
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let path = dir.path().join("gearlb.toml");
    std::fs::write(&path, config_text(dir.path(), &[("web1", b.addr)], "")).unwrap();
    let mut lb = Gearlb::start_in(
        dir.path(),
        &path,
        &["valgrind", "--tool=none", "--quiet", "--error-exitcode=99"],
    );
    for _ in 0..3 {
        let got = get(lb.proxy, "/", &[]).await.unwrap();
        assert_eq!(got.status, 200);
        assert_eq!(got.text(), "backend web1");
    }
    lb.signal("TERM");
    let (code, log) = tokio::task::spawn_blocking(move || {
        let code = lb.wait(Duration::from_secs(20));
        (code, lb.log_text())
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "exit under valgrind; log:\n{log}");
}

/// SIGTERM: a request in flight finishes, open WebSockets are closed at once (as the old
/// cartridge's HAProxy did on stop), and the stop waits until they are closed, well
/// within `timeouts.shutdown_grace`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_open_websockets_and_finishes_requests() {
    use futures_util::{SinkExt, StreamExt};
    let b = TestBackend::start("web1").await;
    let dir = workdir();
    let mut lb = Gearlb::start(
        dir.path(),
        &config_text(
            dir.path(),
            &[("web1", b.addr)],
            "[timeouts]\nshutdown_grace = \"20s\"",
        ),
    );
    let mut sockets = Vec::new();
    for _ in 0..2 {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", lb.proxy))
            .await
            .unwrap();
        ws.send("ping".into()).await.unwrap();
        let reply = ws.next().await.unwrap().unwrap();
        assert_eq!(reply.into_text().unwrap(), "web1: ping");
        sockets.push(ws);
    }
    let proxy = lb.proxy;
    let slow = tokio::spawn(async move { get(proxy, "/slow?ms=3000", &[]).await });
    let busy = eventually(Duration::from_secs(5), || {
        lb.status_json()["frontend"]["requests_current"] == 1
    })
    .await;
    assert!(busy, "{}", lb.status_json());
    assert_eq!(lb.status_json()["frontend"]["connections_current"], 3);

    let t = Instant::now();
    lb.signal("TERM");
    for ws in &mut sockets {
        let end = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("an open WebSocket is closed by the stop");
        assert!(!matches!(&end, Some(Ok(m)) if m.is_text()), "{end:?}");
    }
    assert!(
        !slow.is_finished(),
        "tunnels closed after {:?}: not at once, but after the request in flight",
        t.elapsed()
    );
    let got = slow.await.unwrap().unwrap();
    assert_eq!(got.status, 200, "the request in flight finished");
    let code = tokio::task::spawn_blocking(move || {
        let code = lb.wait(Duration::from_secs(10));
        (code, lb)
    })
    .await
    .unwrap();
    let (code, lb) = code;
    assert_eq!(code, Some(0));
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "stop took {:?}",
        t.elapsed()
    );
    assert!(
        !lb.log_text().contains("grace period"),
        "the stop saw every tunnel end:\n{}",
        lb.log_text()
    );
}

/// A start-up error is said once where stdout and stderr are the same file (a terminal,
/// the gear's log), and on both when they differ.
#[test]
fn a_startup_error_is_printed_once() {
    let dir = workdir();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let config = format!(
        "[listen]\nproxy = \"{}\"\nstatus = \"127.0.0.1:0\"\n[control]\nsocket = \"{}\"\n[state]\ndir = \"{}\"\n",
        taken.local_addr().unwrap(),
        dir.path().join("c.sock").display(),
        dir.path().join("data").display()
    );
    let path = dir.path().join("gearlb.toml");
    std::fs::write(&path, config).unwrap();
    let log = dir.path().join("both.log");
    let f = std::fs::File::create(&log).unwrap();
    let status = Command::new(bin())
        .args(["run", "--config"])
        .arg(&path)
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1));
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("cannot listen").count(), 1, "{text}");
    let out = Command::new(bin())
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot listen"));
}

/// Peers listed with gossip off: `check` accepts the file but says why it will not
/// gossip.
#[test]
fn check_warns_of_peers_without_gossip() {
    let dir = workdir();
    let path = dir.path().join("gearlb.toml");
    let text = config_text(dir.path(), &[], "[cluster]\npeers = [\"10.0.0.2:7946\"]\n");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(bin())
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: cluster.peers") && err.contains("gossip is off"),
        "{err}"
    );
}

/// `check --help` says where the configuration comes from.
#[test]
fn check_help_describes_the_configuration_source() {
    let out = Command::new(bin())
        .args(["check", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("--config") && text.contains("$GEARLB_CONFIG"),
        "{text}"
    );
}

/// A standalone balancer (no broker) does not claim to scale anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_balancer_without_a_broker_does_not_say_it_scales() {
    let dir = workdir();
    let lb = Gearlb::start(dir.path(), &config_text(dir.path(), &[], ""));
    let said = eventually(Duration::from_secs(10), || {
        lb.log_text().contains("no broker is configured")
    })
    .await;
    assert!(said, "{}", lb.log_text());
    assert!(!lb.log_text().contains("this balancer is now the scaler"));
}

/// A misspelt `--timeout` says what to write: no escaped quotes, no units the 7-day
/// bound refuses anyway.
#[test]
fn a_bad_ctl_timeout_says_what_to_write() {
    let out = Command::new(bin())
        .args([
            "ctl",
            "--socket",
            "/nonexistent/control.sock",
            "rotate-out",
            "web1",
        ])
        .args(["--timeout", "5x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"5x\"") && err.contains("units: ms, s, m, h, d"),
        "{err}"
    );
    assert!(!err.contains("\\\"") && !err.contains("months"), "{err}");
}
