//! `gearlb demo` as the README starts it: serves within 10 s, scales up under the load it
//! suggests, and stops cleanly on Ctrl-C leaving no process behind.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_serves_scales_and_stops_cleanly() {
    let started = Instant::now();
    let mut child = Command::new(bin())
        .arg("demo")
        .env_remove("GEARLB_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let out = child.stdout.take().unwrap();
    let l = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            l.lock().unwrap().push(line);
        }
    });
    let proxy = loop {
        let found = lines.lock().unwrap().iter().find_map(|l| {
            l.trim_start()
                .strip_prefix("balancer lb1: http://")
                .and_then(|r| r.split('/').next())
                .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
        });
        if let Some(a) = found {
            break a;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no URL printed: {:?}",
            lines.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Serving within 10 s of the start.
    let mut served = false;
    while started.elapsed() < Duration::from_secs(10) && !served {
        served = get(proxy, "/", &[])
            .await
            .is_ok_and(|g| g.status == 200 && g.text().contains("Hello from web gear"));
        if !served {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(served, "the demo did not serve within 10 s");

    // The first suggestion, run as printed, shows the sticky cookie.
    let hint = lines
        .lock()
        .unwrap()
        .iter()
        .find(|l| l.trim_start().starts_with("curl ") && l.contains("GEAR"))
        .cloned()
        .expect("a curl hint about the GEAR cookie");
    let command = hint.split('#').next().unwrap().trim().to_string();
    let shown = Command::new("sh").arg("-c").arg(&command).output().unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.to_ascii_lowercase().contains("set-cookie: gear="),
        "{command}: {shown}"
    );

    // The suggested load: 12 concurrent half-second requests, bounded.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..60 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let _ = get(proxy, "/slow?ms=500", &[]).await;
            }
        }));
    }
    let scaled = eventually(Duration::from_secs(25), || {
        lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("broker: scale-up from") && l.contains("added web gear"))
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        scaled,
        "no scale-up under load: {:?}",
        lines.lock().unwrap()
    );

    // Everything runs in the one process: no child to leave behind.
    let children = Command::new("pgrep")
        .args(["-P", &child.id().to_string()])
        .output()
        .unwrap();
    assert!(
        children.stdout.is_empty(),
        "child processes: {}",
        String::from_utf8_lossy(&children.stdout)
    );
    let ok = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let end = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < end, "demo did not stop on SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    assert!(
        !std::path::Path::new(&format!("/tmp/gearlb-demo-{}", child.id())).exists(),
        "temporary files left"
    );
}
