//! TCP mode on real sockets: TLS passed through to gears that hold their own
//! certificates, HAProxy's `ssl-hello-chk`, rotation by connection, the CSV in `mode
//! tcp` shape, routing by the ClientHello's server name, and the PROXY protocol both
//! ways. Every balancer is a real `gearlb run` process.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use support::tls_gear::*;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A TCP-mode configuration: `[listen] mode = "tcp"`, fast checks, `extra`, backends.
fn tcp_config(dir: &Path, extra: &str, backends: &[(&str, SocketAddr, &str)]) -> String {
    let mut s = format!(
        "[listen]\nproxy = \"127.0.0.1:0\"\nstatus = \"127.0.0.1:0\"\nmode = \"tcp\"\n\
         [control]\nsocket = \"{}\"\n[state]\ndir = \"{}\"\n\
         [health]\ninterval = \"200ms\"\nfall = 2\nrise = 1\n{extra}\n",
        dir.join("control.sock").display(),
        dir.join("data").display()
    );
    for (name, addr, more) in backends {
        s.push_str(&format!(
            "[[backends]]\nname = \"{name}\"\naddr = \"{addr}\"\n{more}\n"
        ));
    }
    s
}

/// The CSV (`;csv` on the status listener) as rows of fields, header first.
async fn csv(lb: &Gearlb) -> Vec<Vec<String>> {
    let got = get(lb.status, "/;csv", &[]).await.unwrap();
    got.text()
        .lines()
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

fn column(rows: &[Vec<String>], px: &str, sv: &str, name: &str) -> String {
    let header = &rows[0];
    let i = header
        .iter()
        .position(|c| c.trim_start_matches("# ") == name)
        .unwrap_or_else(|| panic!("no column {name}"));
    rows.iter()
        .find(|r| r[0] == px && r[1] == sv)
        .map(|r| r[i].clone())
        .unwrap_or_else(|| panic!("no row {px}/{sv}"))
}

async fn state_is(lb: &Gearlb, name: &str, want: &str) -> bool {
    eventually(Duration::from_secs(10), || backend_state(lb, name) == want).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_goes_through_to_the_gears_certificates_checked_by_a_tls_hello() {
    let g1 = TlsGear::start(
        "g1",
        "127.0.0.1:0".parse().unwrap(),
        &["app.example"],
        false,
    )
    .await;
    let g2 = TlsGear::start(
        "g2",
        "127.0.0.1:0".parse().unwrap(),
        &["app.example"],
        false,
    )
    .await;
    // A gear that speaks plain HTTP on its port: the TLS hello check marks it down.
    let plain = TestBackend::start("plain").await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &tcp_config(
            dir.path(),
            "",
            &[
                ("g1", g1.addr, ""),
                ("g2", g2.addr, ""),
                ("plain", plain.addr, ""),
            ],
        ),
    );
    assert!(
        state_is(&lb, "plain", "down").await,
        "plain HTTP gear stays up"
    );
    assert!(state_is(&lb, "g1", "up").await && state_is(&lb, "g2", "up").await);

    // Each client completes a handshake with the gear's own certificate (trusting
    // only the gears' certificates: the balancer has none) and gets its answer.
    let roots = [g1.cert.clone(), g2.cert.clone()];
    let mut open = Vec::new();
    for _ in 0..4 {
        let (mut tls, who) = through(lb.proxy, "app.example", &roots).await.unwrap();
        assert!(who == "g1" || who == "g2", "{who}");
        tls.write_all(b"ping\n").await.unwrap();
        let mut back = [0u8; 5];
        tls.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"ping\n");
        open.push((tls, who));
    }
    // Least connections: two each.
    let on_g1 = open.iter().filter(|(_, w)| w == "g1").count();
    assert_eq!(on_g1, 2, "leastconn spreads connections");
    assert_eq!(plain.requests(), 0, "nothing reaches a down gear");

    // The CSV in HAProxy's `mode tcp` shape: sessions are connections.
    let rows = csv(&lb).await;
    assert_eq!(column(&rows, "express", "g1", "scur"), "2");
    assert_eq!(column(&rows, "express", "BACKEND", "scur"), "4");
    assert_eq!(column(&rows, "express", "FRONTEND", "scur"), "4");
    assert_eq!(column(&rows, "express", "g1", "mode"), "tcp");
    assert_eq!(column(&rows, "express", "g1", "check_status"), "L6OK");
    assert_eq!(column(&rows, "express", "plain", "check_status"), "L6RSP");
    assert_eq!(column(&rows, "express", "g1", "check_code"), "");
    assert_eq!(column(&rows, "express", "g1", "hrsp_2xx"), "");
    assert_eq!(column(&rows, "express", "FRONTEND", "req_tot"), "0");
    assert_eq!(column(&rows, "express", "BACKEND", "req_tot"), "");
    assert_eq!(column(&rows, "express", "BACKEND", "algo"), "leastconn");
    assert!(
        column(&rows, "express", "g1", "bout")
            .parse::<u64>()
            .unwrap()
            > 0
    );
    // And the old autoscaler's load: connections on the backends.
    let counted = eventually(Duration::from_secs(10), || {
        lb.status_json()["scaler"]["sessions"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.1
    })
    .await;
    assert!(counted, "{}", lb.status_json()["scaler"]);

    drop(open);
    let closed = eventually(Duration::from_secs(5), || {
        g1.open.load(Ordering::Relaxed) + g2.open.load(Ordering::Relaxed) == 0
    })
    .await;
    assert!(closed, "connections close end to end");
    let rows = csv(&lb).await;
    assert_eq!(column(&rows, "express", "BACKEND", "scur"), "0");
    assert_eq!(column(&rows, "express", "BACKEND", "stot"), "4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotate_out_waits_for_an_open_tls_connection_then_completes() {
    let g1 = TlsGear::start(
        "g1",
        "127.0.0.1:0".parse().unwrap(),
        &["app.example"],
        false,
    )
    .await;
    let g2 = TlsGear::start(
        "g2",
        "127.0.0.1:0".parse().unwrap(),
        &["app.example"],
        false,
    )
    .await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &tcp_config(dir.path(), "", &[("g1", g1.addr, ""), ("g2", g2.addr, "")]),
    );
    let roots = [g1.cert.clone(), g2.cert.clone()];
    // One connection, on whichever gear.
    let (mut tls, who) = through(lb.proxy, "app.example", &roots).await.unwrap();
    let gear = if who == "g1" { &g1 } else { &g2 };

    let socket = lb.dir.join("control.sock");
    let name = who.clone();
    let rotate = std::thread::spawn(move || {
        let t = Instant::now();
        let r = ctl(
            &socket,
            &["rotate-out", &name, "--timeout", "30s", "--as-json"],
        );
        (r, t.elapsed())
    });
    // No new connection goes to it meanwhile; the open one still works.
    assert!(state_is(&lb, &who, "draining").await);
    for _ in 0..4 {
        let (_c, other) = through(lb.proxy, "app.example", &roots).await.unwrap();
        assert_ne!(other, who, "a draining gear takes no new connection");
    }
    tls.write_all(b"still\n").await.unwrap();
    let mut back = [0u8; 6];
    tls.read_exact(&mut back).await.unwrap();
    assert!(
        !rotate.is_finished(),
        "the rotate-out waits for the open connection"
    );

    let closed_at = Instant::now();
    drop(tls);
    let ((code, out, err), took) = rotate.join().unwrap();
    assert_eq!(code, 0, "{out}{err}");
    let result: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(result["status"], "success", "{result}");
    assert!(
        !out.contains("forced"),
        "nothing was cut: the connection ended by itself: {out}"
    );
    assert!(took < Duration::from_secs(30));
    assert!(closed_at.elapsed() < Duration::from_secs(10));
    assert_eq!(gear.open.load(Ordering::Relaxed), 0);
    assert_eq!(backend_state(&lb, &who), "drained");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_deadline_cuts_what_is_left_and_counts_it() {
    let g1 = TlsGear::start(
        "g1",
        "127.0.0.1:0".parse().unwrap(),
        &["app.example"],
        false,
    )
    .await;
    let dir = workdir();
    let lb = Gearlb::start(
        dir.path(),
        &tcp_config(dir.path(), "", &[("g1", g1.addr, "")]),
    );
    let (mut tls, _) = through(lb.proxy, "app.example", std::slice::from_ref(&g1.cert))
        .await
        .unwrap();
    let socket = lb.dir.join("control.sock");
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        ctl(
            &socket,
            &["rotate-out", "g1", "--timeout", "1s", "--as-json"],
        )
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("forced: 1"),
        "the cut connection is counted: {out}"
    );
    let mut b = [0u8; 1];
    let end = tokio::time::timeout(Duration::from_secs(5), tls.read(&mut b))
        .await
        .expect("the client sees the cut");
    assert!(matches!(end, Ok(0) | Err(_)), "{end:?}");
}
