//! The HTTP/1.1 byte path (`downstream::lane`) and its hand-overs to hyper's server, on
//! real sockets: requests of either kind on one connection keep their order, and a
//! response reaches the client the same whichever path its request took.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::*;

/// A balancer in front of `gear` alone, health checks off.
fn lb_for(dir: &std::path::Path, gear: std::net::SocketAddr) -> Gearlb {
    Gearlb::start(
        dir,
        &config_text(dir, &[("web1", gear)], "[health]\nenabled = false\n"),
    )
}

/// A gear that answers each request with its target as the body.
async fn echo_gear() -> Scripted {
    Scripted::start(|req| {
        let body = req.head.split(' ').nth(1).unwrap_or("?").to_string();
        Reply::after(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Gear: web1\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
    })
    .await
}

/// A client connection to `lb`'s proxy port, writes sent at once, reads bounded.
fn client_of(lb: &Gearlb) -> std::net::TcpStream {
    let s = std::net::TcpStream::connect(lb.proxy).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// Pipelined requests, some for the byte path (a body with a length too) and some for
/// hyper (a chunked body), sent in one write: every one answered, in order, each body
/// where it belongs; and after the connection parked, the byte path again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_of_both_paths_keep_their_order_on_one_connection() {
    use std::io::Write;
    let gear = echo_gear().await;
    let dir = workdir();
    let lb = lb_for(dir.path(), gear.addr);
    let mut s = std::net::TcpStream::connect(lb.proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(
        b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\n\
          POST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc\
          GET /3 HTTP/1.1\r\nHost: x\r\n\r\n\
          POST /4 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nxyz\r\n0\r\n\r\n",
    )
    .unwrap();
    let mut rest = Vec::new();
    for want in ["/1", "/2", "/3", "/4"] {
        let (head, body) = read_head_and_body(&mut s, &mut rest);
        assert!(head.starts_with("HTTP/1.1 200"), "{want}: {head}");
        assert_eq!(body, want);
    }
    // Idle past the parking delay, then the byte path takes the connection back.
    std::thread::sleep(Duration::from_millis(1500));
    s.write_all(b"GET /5 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let (head, body) = read_head_and_body(&mut s, &mut rest);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, "/5");
    let seen = gear.seen();
    assert_eq!(seen[1].body, b"abc", "the upload went with its request");
    assert_eq!(
        seen[3].body, b"xyz",
        "the chunked upload went with its request"
    );
    let seen: Vec<String> = seen
        .iter()
        .map(|r| r.head.lines().next().unwrap_or_default().to_string())
        .collect();
    let want: Vec<String> = (1..=5)
        .map(|i| {
            let m = if i == 2 || i == 4 { "POST" } else { "GET" };
            format!("{m} /{i} HTTP/1.1")
        })
        .collect();
    assert_eq!(seen, want);
}

/// Field names and values of a head, without its status line and `Date`.
fn fields(head: &str) -> BTreeSet<String> {
    head.lines()
        .skip(1)
        .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
        .map(str::to_string)
        .collect()
}

/// The same gear response through the byte path (a plain GET) and through hyper's
/// server (the same GET with a `Connection` field that names another field, which the
/// byte path leaves to hyper): the same status line and fields, and the gear sees the
/// same request fields from both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_is_the_same_whichever_path_its_request_took() {
    let gear = Scripted::start(|_| {
        Reply::after(
            &b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Private\r\nX-Private: 1\r\nKeep-Alive: timeout=5\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 2, 2\r\nX-Kept: yes\r\n\r\nok"[..],
        )
    })
    .await;
    let dir = workdir();
    let lb = lb_for(dir.path(), gear.addr);
    let bytes = raw(
        lb.proxy,
        b"GET /same HTTP/1.1\r\nHost: x\r\nAccept: */*\r\nX-Forwarded-For: 10.1.1.1\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    let hyper = raw(
        lb.proxy,
        b"GET /same HTTP/1.1\r\nHost: x\r\nAccept: */*\r\nX-Forwarded-For: 10.1.1.1\r\nConnection: close, x-drop\r\nX-Drop: 1\r\n\r\n",
        Duration::from_secs(5),
    );
    let (bh, bb) = bytes.split_once("\r\n\r\n").expect("a response");
    let (hh, hb) = hyper.split_once("\r\n\r\n").expect("a response");
    assert_eq!(bh.lines().next(), hh.lines().next());
    assert_eq!(fields(bh), fields(hh), "byte path:\n{bh}\nhyper:\n{hh}");
    assert_eq!((bb, hb), ("ok", "ok"));
    assert!(
        bh.contains("content-length: 2\r\n") && !bh.contains("x-private"),
        "{bh}"
    );
    // What the gear got: the same fields.
    let seen = gear.seen();
    assert_eq!(seen.len(), 2);
    let gear_fields = |i: usize| -> BTreeSet<String> {
        seen[i].head.lines().skip(1).map(str::to_string).collect()
    };
    assert_eq!(gear_fields(0), gear_fields(1));
    // The client is no trusted front: its list is replaced, on both paths alike.
    assert!(gear_fields(0).contains("x-forwarded-for: 127.0.0.1"));
}

/// A status without a canonical reason (`419 Page Expired`, a framework's) keeps the
/// gear's reason on both paths, and one that came without a reason gets none: never
/// hyper's `<none>`. A status with a canonical reason gets that one, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_without_a_standard_reason_keeps_the_gears_reason_on_both_paths() {
    let gear = Scripted::start(|req| {
        let line = if req.head.starts_with("GET /419") {
            "HTTP/1.1 419 Page Expired"
        } else if req.head.starts_with("GET /599") {
            "HTTP/1.1 599"
        } else {
            "HTTP/1.1 404 Nope"
        };
        Reply::after(format!("{line}\r\nContent-Length: 2\r\n\r\nok").into_bytes())
    })
    .await;
    let dir = workdir();
    let lb = lb_for(dir.path(), gear.addr);
    for (path, want) in [
        ("/419", "HTTP/1.1 419 Page Expired"),
        ("/599", "HTTP/1.1 599 "),
        ("/404", "HTTP/1.1 404 Not Found"),
    ] {
        // The byte path, then hyper's server (a `Connection` field naming a field).
        for extra in ["", "Connection: x-drop\r\n"] {
            let out = raw(
                lb.proxy,
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}\r\n")
                    .as_bytes(),
                Duration::from_secs(5),
            );
            assert_eq!(out.lines().next(), Some(want), "{path} {extra:?}: {out:?}");
        }
    }
}

/// A chunked body broken before its first chunk is whole, in the bytes that came with
/// its head, is the gear's bad answer: a 502 on either path (as HAProxy answers), and
/// the client's connection goes on to its next request. A break further on still
/// reaches the client as a cut body (`tests/proxy.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_broken_at_its_start_is_a_502_and_the_connection_goes_on() {
    use std::io::Write;
    let gear = Scripted::start(|req| {
        let body = match req.head.split(' ').nth(1).unwrap_or("?") {
            "/hex" => "0x2\r\nok\r\n0\r\n\r\n",
            "/lf" => "2\nok\n0\n\n",
            "/short" => "1\r\nok\r\n0\r\n\r\n",
            _ => return Reply::after(&b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"[..]),
        };
        Reply::after(
            format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{body}").into_bytes(),
        )
    })
    .await;
    let dir = workdir();
    let lb = lb_for(dir.path(), gear.addr);
    for path in ["/hex", "/lf", "/short"] {
        // The byte path, then hyper's server (a `Connection` field naming a field).
        for extra in ["", "Connection: x-drop\r\n"] {
            let mut s = std::net::TcpStream::connect(lb.proxy).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let ask = format!(
                "GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\nGET /fine HTTP/1.1\r\nHost: x\r\n\r\n"
            );
            s.write_all(ask.as_bytes()).unwrap();
            let mut rest = Vec::new();
            let (head, _) = read_head_and_body(&mut s, &mut rest);
            assert!(head.starts_with("HTTP/1.1 502"), "{path} {extra:?}: {head}");
            let (head, body) = read_head_and_body(&mut s, &mut rest);
            assert!(head.starts_with("HTTP/1.1 200"), "{path} {extra:?}: {head}");
            assert_eq!(body, "ok", "{path} {extra:?}");
        }
    }
}

/// Bodies with a length reach the gear whole and framed by their length, on one
/// keep-alive connection: a body written in pieces after its head, a request pipelined
/// behind a body, `Content-Length: 0`, the longest body the byte path reads whole
/// (16 KiB) and one byte more (hyper's server, streamed). Each answer comes in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_with_a_length_reach_the_gear_whole() {
    use std::io::Write;
    let gear = echo_gear().await;
    let dir = workdir();
    let lb = lb_for(dir.path(), gear.addr);
    let mut s = client_of(&lb);
    let mut rest = Vec::new();
    // The head, then the body in two pieces.
    for piece in [
        &b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\n"[..],
        b"hello",
        b" world",
    ] {
        s.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    // A body and the request behind it, in one write; then `Content-Length: 0`.
    s.write_all(
        b"PUT /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /c HTTP/1.1\r\nHost: x\r\n\r\n\
          POST /d HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    )
    .unwrap();
    // 16 KiB, then one byte more.
    let payload = |len: usize| -> String {
        (0..len)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect()
    };
    let sizes = [16 * 1024, 16 * 1024 + 1];
    for (i, len) in sizes.into_iter().enumerate() {
        let ask = format!(
            "POST /big{i} HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\n\r\n{}",
            payload(len)
        );
        s.write_all(ask.as_bytes()).unwrap();
    }
    for want in ["/a", "/b", "/c", "/d", "/big0", "/big1"] {
        let (head, body) = read_head_and_body(&mut s, &mut rest);
        assert!(head.starts_with("HTTP/1.1 200"), "{want}: {head}");
        assert_eq!(body, want);
    }
    let seen = gear.seen();
    let got: Vec<(String, Option<String>, Vec<u8>)> = seen
        .iter()
        .map(|r| {
            let line = r.head.lines().next().unwrap_or_default().to_string();
            (line, r.header("content-length"), r.body.clone())
        })
        .collect();
    let want = [
        ("POST /a HTTP/1.1", Some("11"), b"hello world".to_vec()),
        ("PUT /b HTTP/1.1", Some("3"), b"abc".to_vec()),
        ("GET /c HTTP/1.1", None, Vec::new()),
        ("POST /d HTTP/1.1", Some("0"), Vec::new()),
        (
            "POST /big0 HTTP/1.1",
            Some("16384"),
            payload(sizes[0]).into_bytes(),
        ),
        (
            "POST /big1 HTTP/1.1",
            Some("16385"),
            payload(sizes[1]).into_bytes(),
        ),
    ];
    let want: Vec<(String, Option<String>, Vec<u8>)> = want
        .into_iter()
        .map(|(l, n, b)| (l.to_string(), n.map(str::to_string), b))
        .collect();
    assert!(
        got == want,
        "the gear got {:?}",
        got.iter()
            .map(|(l, n, b)| (l, n, b.len()))
            .collect::<Vec<_>>()
    );
    assert!(seen.iter().all(|r| r.header("transfer-encoding").is_none()));
}

/// A connection idle long enough to be asked to park, then a head that starts on the
/// byte path and turns out to be hyper's (a chunked body) after a pause: hyper gets the
/// whole request, the part read before the pause included. (It used to get an
/// end-of-stream instead: the first part was dropped, and the rest read as a new
/// request.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_handed_to_hyper_after_a_pause_arrives_whole() {
    use std::io::Write;
    let gear = echo_gear().await;
    let dir = workdir();
    let lb = lb_for(dir.path(), gear.addr);
    let mut s = client_of(&lb);
    let mut rest = Vec::new();
    s.write_all(b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let (head, _) = read_head_and_body(&mut s, &mut rest);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Past the parking delay, then half a head, a pause past it again, the rest.
    std::thread::sleep(Duration::from_millis(1200));
    s.write_all(b"POST /2 HTTP/1.1\r\nHost: x\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    s.write_all(b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        .unwrap();
    let (head, body) = read_head_and_body(&mut s, &mut rest);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, "/2");
    let seen = gear.seen();
    assert_eq!(seen.len(), 2);
    assert!(
        seen[1].head.starts_with("POST /2 HTTP/1.1"),
        "{}",
        seen[1].head
    );
    assert_eq!(seen[1].body, b"hello");
}
