//! Unit tests of how a response body is read for a client that keeps up and for one
//! whose socket is full (issue 34): large reads handed on whole to the first, small
//! reads and frames of at most `FRAME_MAX` to the second.

use super::*;
use crate::upstream::body::FRAME_MAX;

/// A backend that answers one request with a `len`-byte body (a pattern the test checks).
async fn big_body_backend(len: usize) -> (std::net::SocketAddr, Vec<u8>) {
    let big: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let body = big.clone();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let _ = s.read(&mut buf).await;
        let mut r =
            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
        r.extend_from_slice(&body);
        let _ = s.write_all(&r).await;
        // Hold the connection open until the client is done.
        let _ = s.read(&mut buf).await;
    });
    (addr, big)
}

#[tokio::test]
async fn frames_are_bounded_and_reads_stay_small_while_the_client_is_backlogged() {
    let (addr, big) = big_body_backend(4 << 20).await;
    let pool = Pool::new(4);
    let mut conn = pool
        .connect(&addr.into(), Duration::from_secs(1))
        .await
        .unwrap();
    let req = hyper::Request::get("/")
        .header("host", "x")
        .body(ReqBody::Empty)
        .unwrap();
    let head = send(&mut conn, outgoing(req), &w(), None)
        .await
        .unwrap()
        .head;
    let mut body = UpBody::new(conn, &head, None, None);
    let mut got = Vec::new();
    // A client that keeps up: reads grow past FRAME_MAX and are handed on whole.
    let mut largest = 0;
    while got.len() < 1 << 20 {
        let d = next_data(&mut body).await.unwrap().unwrap();
        largest = largest.max(d.len());
        got.extend_from_slice(&d);
    }
    assert!(
        largest > FRAME_MAX,
        "reads grew for a client that keeps up: {largest}"
    );
    // Its socket is full from now on: what is left of the last read goes in frames of at
    // most FRAME_MAX, then every read (and so every frame) is small.
    body.set_backlogged(true);
    let rest = big.len() - got.len();
    let (mut leftover, mut small) = (0, 0);
    while let Some(d) = next_data(&mut body).await {
        let d = d.unwrap();
        assert!(d.len() <= FRAME_MAX, "a frame of {} bytes", d.len());
        if d.len() <= 2 * READ_MIN {
            small += d.len();
        } else {
            assert_eq!(small, 0, "a large read after small ones: {} bytes", d.len());
            leftover += d.len();
        }
        got.extend_from_slice(&d);
    }
    assert!(
        leftover <= READ_MAX,
        "{leftover} bytes after the client fell behind"
    );
    assert!(
        small >= rest - READ_MAX,
        "{small} of {rest} bytes in small reads"
    );
    assert!(got == big, "the body arrives intact");
}
