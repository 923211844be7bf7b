//! TCP mode's routing and client addresses on real sockets: TLS services on one port
//! chosen by the ClientHello's server name without terminating it (HAProxy's
//! `req.ssl_sni`), hellos split over many packets or over 16 KiB, unknown names, the
//! PROXY protocol sent to backends and accepted from a trusted front, and affinity by
//! client address that is the same on every balancer.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use support::tls_gear::*;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

fn head(dir: &Path, tcp: &str) -> String {
    format!(
        "[listen]\nproxy = \"127.0.0.1:0\"\nstatus = \"127.0.0.1:0\"\nmode = \"tcp\"\n\
         [control]\nsocket = \"{}\"\n[state]\ndir = \"{}\"\n\
         [health]\ninterval = \"200ms\"\nfall = 2\nrise = 1\n[tcp]\n{tcp}\n",
        dir.join("control.sock").display(),
        dir.join("data").display()
    )
}

fn service(name: &str, hosts: &[&str], backends: &[(&str, SocketAddr, &str)]) -> String {
    let hosts: Vec<String> = hosts.iter().map(|h| format!("{h:?}")).collect();
    let mut s = format!(
        "[[services]]\nname = \"{name}\"\nmode = \"tcp\"\nhosts = [{}]\n",
        hosts.join(", ")
    );
    for (b, addr, more) in backends {
        s.push_str(&format!(
            "[[services.backends]]\nname = \"{b}\"\naddr = \"{addr}\"\n{more}\n"
        ));
    }
    s
}

/// A ClientHello for `sni` padded to about `size` bytes of handshake, framed in TLS
/// records of at most 16 KiB (a large hello takes several).
fn client_hello(sni: &str, size: usize) -> Vec<u8> {
    let mut ext = Vec::new();
    // server_name
    let name = sni.as_bytes();
    let mut list = vec![0u8];
    list.extend((name.len() as u16).to_be_bytes());
    list.extend(name);
    let mut sn = (list.len() as u16).to_be_bytes().to_vec();
    sn.extend(list);
    ext.extend(0u16.to_be_bytes());
    ext.extend((sn.len() as u16).to_be_bytes());
    ext.extend(sn);
    // padding (21) up to the size asked
    let pad = size.saturating_sub(200);
    ext.extend(21u16.to_be_bytes());
    ext.extend((pad as u16).to_be_bytes());
    ext.extend(vec![0u8; pad]);
    let mut body = vec![3, 3];
    body.extend([7u8; 32]);
    body.push(0);
    body.extend([0, 2, 0x13, 0x01]);
    body.extend([1, 0]);
    body.extend((ext.len() as u16).to_be_bytes());
    body.extend(ext);
    let mut hs = vec![1];
    hs.extend(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend(body);
    let mut out = Vec::new();
    for chunk in hs.chunks(16 * 1024) {
        out.extend([0x16, 3, 1]);
        out.extend((chunk.len() as u16).to_be_bytes());
        out.extend(chunk);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_services_on_one_port_are_chosen_by_server_name() {
    let a = TlsGear::start("a1", "127.0.0.1:0".parse().unwrap(), &["a.example"], false).await;
    let b = TlsGear::start("b1", "127.0.0.1:0".parse().unwrap(), &["b.example"], false).await;
    let fallback = TlsGear::start(
        "d1",
        "127.0.0.1:0".parse().unwrap(),
        &["other.example"],
        false,
    )
    .await;
    let raw_b = Recorder::start().await;
    let dir = workdir();
    let config = format!(
        "{}{}{}{}",
        head(dir.path(), "check = \"connect\""),
        service("a", &["a.example"], &[("a1", a.addr, "")]),
        service("b", &["b.example", "*.b.example"], &[("b1", b.addr, "")]),
        service("big", &["big.example"], &[("r1", raw_b.addr, "")]),
    );
    let config = format!(
        "{config}{}",
        service("fallback", &["*"], &[("d1", fallback.addr, "")])
    );
    let lb = Gearlb::start(dir.path(), &config);
    let roots = [a.cert.clone(), b.cert.clone(), fallback.cert.clone()];

    // Each name reaches its own service's gear, with that gear's certificate.
    let (_c, who) = through(lb.proxy, "a.example", &roots).await.unwrap();
    assert_eq!(who, "a1");
    let (_c, who) = through(lb.proxy, "b.example", &roots).await.unwrap();
    assert_eq!(who, "b1");
    let wild = through(lb.proxy, "api.b.example", &roots).await;
    // A wildcard claim routes, but b's certificate names only b.example: the gear's
    // TLS stack decides, the balancer never answers.
    assert!(
        wild.is_err(),
        "the gear's own certificate check, not the balancer's"
    );
    // An unknown name goes to the service claiming every host.
    let (_c, who) = through(lb.proxy, "other.example", &roots).await.unwrap();
    assert_eq!(who, "d1");

    // A ClientHello split over many packets (7 bytes each) is read whole.
    let tcp = TcpStream::connect(lb.proxy).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let (_c, who) = tls_hello(
        Dribble {
            inner: tcp,
            chunk: 7,
        },
        "b.example",
        &roots,
    )
    .await
    .unwrap();
    assert_eq!(who, "b1");

    // A hello over 16 KiB (two records) routes by its name; the bytes arrive untouched.
    let hello = client_hello("big.example", 20_000);
    assert!(hello.len() > 16 * 1024);
    let mut c = TcpStream::connect(lb.proxy).await.unwrap();
    c.write_all(&hello).await.unwrap();
    c.shutdown().await.unwrap();
    let arrived = eventually(Duration::from_secs(10), || {
        raw_b.seen.lock().unwrap().contains(&hello)
    })
    .await;
    assert!(
        arrived,
        "the large hello reached big's backend byte for byte"
    );

    // Not TLS at all, with no service for it: the default service takes it as bytes.
    let mut c = TcpStream::connect(lb.proxy).await.unwrap();
    c.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(10), c.read(&mut buf)).await;
    assert!(n.is_ok(), "answered or closed, never left hanging");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_name_is_closed_when_asked() {
    let a = TlsGear::start("a1", "127.0.0.1:0".parse().unwrap(), &["a.example"], false).await;
    let dir = workdir();
    let config = format!(
        "{}{}",
        head(
            dir.path(),
            "unknown_sni = \"close\"\ninspect_timeout = \"1s\""
        ),
        service("a", &["a.example"], &[("a1", a.addr, "")]),
    );
    let lb = Gearlb::start(dir.path(), &config);
    let roots = [a.cert.clone()];
    assert_eq!(
        through(lb.proxy, "a.example", &roots).await.unwrap().1,
        "a1"
    );
    assert!(through(lb.proxy, "nobody.example", &roots).await.is_err());
    // A client that sends nothing is closed at the inspect timeout.
    let mut c = TcpStream::connect(lb.proxy).await.unwrap();
    let mut b = [0u8; 1];
    let r = tokio::time::timeout(Duration::from_secs(10), c.read(&mut b)).await;
    assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "{r:?}");
    assert_eq!(a.handshakes.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_v2_to_a_backend_that_requires_it_and_v1_from_a_trusted_front() {
    // The gear requires a PROXY v2 header (its checks get LOCAL ones).
    let g = TlsGear::start("g1", "127.0.0.1:0".parse().unwrap(), &["app.example"], true).await;
    let dir = workdir();
    let config = format!(
        "{}[[backends]]\nname = \"g1\"\naddr = \"{}\"\nsend_proxy = \"v2\"\n",
        head(dir.path(), "accept_proxy = [\"127.0.0.2\"]"),
        g.addr
    );
    let lb = Gearlb::start(dir.path(), &config);
    assert!(
        eventually(Duration::from_secs(10), || backend_state(&lb, "g1") == "up").await,
        "the hello check, behind a LOCAL header, finds the gear up"
    );
    let roots = [g.cert.clone()];
    let (_c, who) = through(lb.proxy, "app.example", &roots).await.unwrap();
    assert_eq!(who, "g1");
    let local = eventually(Duration::from_secs(10), || {
        g.proxy_headers
            .lock()
            .unwrap()
            .iter()
            .any(|h| h[12] == 0x20)
    })
    .await;
    assert!(local, "checks send a LOCAL header");
    let headers = g.proxy_headers.lock().unwrap().clone();
    let proxied: Vec<&Vec<u8>> = headers.iter().filter(|h| h[12] == 0x21).collect();
    assert_eq!(proxied.len(), 1, "one PROXY header for the one connection");
    let h = proxied[0];
    assert_eq!(h[13], 0x11, "TCP over IPv4");
    assert_eq!(&h[16..20], &[127, 0, 0, 1], "the client's address");
    assert_eq!(&h[20..24], &[127, 0, 0, 1], "the balancer's listener");
    assert_eq!(u16::from_be_bytes([h[26], h[27]]), lb.proxy.port());
    // From the trusted front (127.0.0.2), a PROXY v1 header names the real client.
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut tcp = sock.connect(lb.proxy).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    tcp.write_all(b"PROXY TCP4 198.51.100.7 127.0.0.1 40000 443\r\n")
        .await
        .unwrap();
    let (_c, who) = tls_hello(tcp, "app.example", &roots).await.unwrap();
    assert_eq!(who, "g1");
    let headers = g.proxy_headers.lock().unwrap().clone();
    let last = headers.iter().rev().find(|h| h[12] == 0x21).unwrap();
    assert_eq!(
        &last[16..20],
        &[198, 51, 100, 7],
        "the front's client, passed on"
    );
    assert_eq!(u16::from_be_bytes([last[24], last[25]]), 40000);

    // A front that is not trusted cannot claim an address: its header is data, and
    // the gear's TLS stack refuses it.
    let mut tcp = TcpStream::connect(lb.proxy).await.unwrap();
    tcp.write_all(b"PROXY TCP4 198.51.100.8 127.0.0.1 40000 443\r\n")
        .await
        .unwrap();
    let mut b = [0u8; 64];
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut b)).await;
    let headers = g.proxy_headers.lock().unwrap().clone();
    assert!(!headers
        .iter()
        .any(|h| h.len() > 20 && h[16..20] == [198, 51, 100, 8]));

    // A trusted front's broken header closes the connection; the gear sees nothing.
    let before = g.proxy_headers.lock().unwrap().len();
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut tcp = sock.connect(lb.proxy).await.unwrap();
    tcp.write_all(b"PROXY TCP4 nonsense\r\n").await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut b)).await;
    assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "{r:?}");
    let after: Vec<Vec<u8>> = g.proxy_headers.lock().unwrap().clone();
    assert!(
        after[before..].iter().all(|h| h[12] == 0x20),
        "only checks came"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn affinity_by_client_address_is_the_same_on_every_balancer() {
    let mut gears = Vec::new();
    for i in 0..4 {
        gears.push(
            TlsGear::start(
                &format!("g{i}"),
                "127.0.0.1:0".parse().unwrap(),
                &["app.example"],
                false,
            )
            .await,
        );
    }
    let roots: Vec<_> = gears.iter().map(|g| g.cert.clone()).collect();
    let backends: Vec<(String, SocketAddr)> =
        gears.iter().map(|g| (g.name.clone(), g.addr)).collect();
    let mut lbs = Vec::new();
    let mut dirs = Vec::new();
    for _ in 0..2 {
        let dir = workdir();
        let mut config = head(dir.path(), "balance = \"source\"\ncheck = \"connect\"");
        for (n, a) in &backends {
            config.push_str(&format!("[[backends]]\nname = \"{n}\"\naddr = \"{a}\"\n"));
        }
        lbs.push(Gearlb::start(dir.path(), &config));
        dirs.push(dir);
    }
    let mut seen = std::collections::BTreeSet::new();
    for client in 1..=12u8 {
        let mut picks = Vec::new();
        for lb in &lbs {
            for _ in 0..2 {
                let sock = TcpSocket::new_v4().unwrap();
                sock.bind(format!("127.0.9.{client}:0").parse().unwrap())
                    .unwrap();
                let tcp = sock.connect(lb.proxy).await.unwrap();
                let (_c, who) = tls_hello(tcp, "app.example", &roots).await.unwrap();
                picks.push(who);
            }
        }
        assert!(
            picks.iter().all(|p| *p == picks[0]),
            "client {client}: {picks:?}"
        );
        seen.insert(picks[0].clone());
    }
    assert!(seen.len() >= 2, "clients spread over the gears: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_service_on_its_own_listener_from_a_watched_file() {
    // An HTTP balancer (the default service) beside a TCP service with a listener of its
    // own, defined in a YAML file written the way consul-template writes (a temporary
    // file renamed over the target).
    let web = TestBackend::start("web").await;
    let g1 = TlsGear::start("g1", "127.0.0.1:0".parse().unwrap(), &["db.example"], false).await;
    // g2 requires a PROXY v2 header (and the file says send_proxy: v2).
    let g2 = TlsGear::start("g2", "127.0.0.1:0".parse().unwrap(), &["db.example"], true).await;
    let dir = workdir();
    let sd = dir.path().join("services.d");
    std::fs::create_dir(&sd).unwrap();
    let port = free_port("127.0.0.1");
    let listen: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let yaml = format!(
        "name: db\nmode: tcp\nlisten: \"{listen}\"\nbackends:\n  - name: g1\n    addr: \"{}\"\n  - name: g2\n    addr: \"{}\"\n    send_proxy: v2\n",
        g1.addr, g2.addr
    );
    let tmp = sd.join(".db.yaml.tmp");
    std::fs::write(&tmp, &yaml).unwrap();
    std::fs::rename(&tmp, sd.join("db.yaml")).unwrap();
    let extra = format!(
        "[health]\ninterval = \"200ms\"\nfall = 2\nrise = 1\n[discovery]\ndir = \"{}\"\n",
        sd.display()
    );
    let lb = Gearlb::start(
        dir.path(),
        &config_text(dir.path(), &[("web", web.addr)], &extra),
    );
    let served = eventually(Duration::from_secs(10), || {
        std::net::TcpStream::connect(listen).is_ok()
    })
    .await;
    assert!(served, "the service's own listener is up");
    let roots = [g1.cert.clone(), g2.cert.clone()];
    let mut seen = std::collections::BTreeSet::new();
    let mut open = Vec::new();
    for _ in 0..4 {
        let (c, who) = through(listen, "db.example", &roots).await.unwrap();
        seen.insert(who);
        open.push(c);
    }
    assert_eq!(seen.len(), 2, "both backends take connections: {seen:?}");
    // The HTTP listener still serves the default service.
    let got = get(lb.proxy, "/", &[]).await.unwrap();
    assert_eq!(got.status, 200);
    // Its CSV proxy is in the TCP shape, with its own FRONTEND.
    let text = get(lb.status, "/;csv", &[]).await.unwrap().text();
    let row = text
        .lines()
        .find(|l| l.starts_with("db,BACKEND,"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains(",tcp,"), "{row}");
    let express = text
        .lines()
        .find(|l| l.starts_with("express,BACKEND,"))
        .unwrap();
    assert!(express.contains(",http,"), "{express}");
    // Rotation by service, by connection.
    let socket = lb.dir.join("control.sock");
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        ctl(
            &socket,
            &["rotate-out", "--service", "db", "g1", "--timeout", "1s"],
        )
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{out}{err}");
    for _ in 0..4 {
        let (_c, who) = through(listen, "db.example", &roots).await.unwrap();
        assert_eq!(who, "g2", "g1 is out");
    }
}
