//! Unit tests of the exchange on scripted I/O (the decision table's rows that real
//! sockets make awkward to stage: what arrives when, and what is never read).

use super::*;

fn mock_conn(io: tokio_test::io::Mock) -> Conn {
    Conn {
        io: ConnIo::Mock(Box::new(io)),
        buf: BytesMut::new(),
        read_size: READ_MIN,
        heard: false,
        cell: Arc::default(),
        _open: OpenGuard(Arc::new(AtomicU64::new(1))),
    }
}

const POST6: &[u8] = b"POST /f HTTP/1.1\r\nhost: x\r\ncontent-length: 6\r\n\r\n";

/// A POST of 6 body bytes, fed through the returned sender.
fn post6() -> (
    http_body_util::channel::Sender<Bytes, hyper::Error>,
    Outgoing,
) {
    let (tx, body) = http_body_util::channel::Channel::new(4);
    let out = Outgoing {
        head: Bytes::from_static(POST6),
        method: http::Method::POST,
        framing: ReqFraming::Length(6),
        body: ReqBody::Test(body),
    };
    (tx, out)
}

fn limits(client_s: u64, server_s: u64) -> Wait {
    Wait::new(
        crate::io::Clock::new(),
        Duration::from_secs(client_s),
        Duration::from_secs(server_s),
    )
}

/// Row "interim responses": 1xx other than 100 and 101 are handed on in order,
/// `100 Continue` is the balancer's own; more than `MAX_INTERIM` is a bad answer.
#[tokio::test]
async fn interim_responses_are_handed_on_but_100_continue() {
    let io = tokio_test::io::Builder::new()
        .write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .read(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n")
        .read(b"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        .build();
    let mut conn = mock_conn(io);
    let seen = std::sync::Mutex::new(Vec::new());
    let sink = |h: &Head| seen.lock().unwrap().push(h.status.as_u16());
    let req = hyper::Request::get("/")
        .header("host", "x")
        .body(ReqBody::Empty)
        .unwrap();
    let a = send(&mut conn, outgoing(req), &limits(60, 60), Some(&sink))
        .await
        .unwrap();
    assert_eq!(a.head.status, 200);
    assert_eq!(*seen.lock().unwrap(), [103, 102]);

    let flood: Vec<u8> = b"HTTP/1.1 103 Early Hints\r\n\r\n".repeat(MAX_INTERIM + 1);
    let io = tokio_test::io::Builder::new()
        .write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .read(&flood)
        .build();
    let mut conn = mock_conn(io);
    let req = hyper::Request::get("/")
        .header("host", "x")
        .body(ReqBody::Empty)
        .unwrap();
    let r = send(&mut conn, outgoing(req), &limits(60, 60), Some(&sink)).await;
    assert!(
        matches!(r, Err(SendFailure::Sent(SendError::Parse(_)))),
        "{r:?}"
    );
}

/// Row "refusal before the whole body": an error answer while the body waits on the
/// client ends the upload at once (no byte more is written: the mock would fail),
/// and the connection is not used again (RFC 9112 §9.6).
#[tokio::test]
async fn a_refusal_while_the_body_waits_on_the_client_stops_the_upload() {
    let io = tokio_test::io::Builder::new()
        .write(POST6)
        .read(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n")
        .build();
    let mut conn = mock_conn(io);
    let (_client, req) = post6();
    let a = send(&mut conn, req, &limits(60, 60), None).await.unwrap();
    assert_eq!(a.head.status, 413);
    assert!(!a.head.keep_alive);
    assert!(a.upload.is_none());
}

/// Row "refusal that closes": the backend stops the upload with a reset; what it
/// answered before is the response, and the connection is done.
#[tokio::test]
async fn an_answer_before_a_broken_upload_is_the_response() {
    let io = tokio_test::io::Builder::new()
        .write(POST6)
        .write_error(io::Error::new(io::ErrorKind::BrokenPipe, "reset"))
        .read(b"HTTP/1.1 401 Unauthorized\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
        .build();
    let mut conn = mock_conn(io);
    let (mut client, req) = post6();
    client
        .send_data(Bytes::from_static(b"abcdef"))
        .await
        .unwrap();
    let a = send(&mut conn, req, &limits(60, 60), None).await.unwrap();
    assert_eq!(a.head.status, 401);
    assert!(!a.head.keep_alive && a.upload.is_none());
}

/// Rows "success before the whole body" and "the rest of the upload": a 302 while
/// the body is half sent is the answer at once, with the rest of the body to send
/// alongside; a backend that then takes none of it is cut after `timeouts.server`
/// of silence, and its connection is not pooled.
#[tokio::test(start_paused = true)]
async fn a_success_before_the_whole_body_goes_on_at_once_and_the_rest_is_bounded() {
    let io = tokio_test::io::Builder::new()
        .write(POST6)
        .write(b"abc")
        .read(b"HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n")
        // Reads no more: a write now waits (an hour).
        .wait(Duration::from_secs(3600))
        .build();
    let mut conn = mock_conn(io);
    let (mut client, req) = post6();
    client.send_data(Bytes::from_static(b"abc")).await.unwrap();
    let wait = Arc::new(limits(60, 2));
    let a = send(&mut conn, req, &wait, None).await.unwrap();
    assert_eq!(a.head.status, 302);
    assert!(a.head.keep_alive, "the head allows reuse ...");
    let mut body = UpBody::new(conn, &a.head, a.upload, Some(wait.clone()));
    assert!(next_data(&mut body).await.is_none());
    assert!(
        body.take_reusable().is_none(),
        "... not with the body unsent"
    );
    let (conn, up, keep) = body.take_unfinished_upload().expect("the rest to send");
    client.send_data(Bytes::from_static(b"def")).await.unwrap();
    let t = tokio::time::Instant::now();
    let rest = limits(60, 2);
    assert!(finish_upload(conn, up, &rest, keep).await.is_none());
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(1_900) && took <= Duration::from_millis(2_200),
        "{took:?}"
    );
}

/// Rows "server timeout": it is inactivity while the body goes, and the wait for
/// the response head starts when the request was sent. A client taking 5 s over its
/// body (the backend taking each piece) with `server` = 2 s: the backend's silence
/// after the last byte runs out at 7 s, not at 2.
#[tokio::test(start_paused = true)]
async fn the_server_timeout_counts_from_the_last_byte_sent() {
    let io = tokio_test::io::Builder::new()
        .write(POST6)
        .write(b"abc")
        .write(b"def")
        .wait(Duration::from_secs(3600))
        .build();
    let mut conn = mock_conn(io);
    let (mut client, req) = post6();
    let feeding = tokio::spawn(async move {
        client.send_data(Bytes::from_static(b"abc")).await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        client.send_data(Bytes::from_static(b"def")).await.unwrap();
        client
    });
    let wait = limits(60, 2);
    let t = tokio::time::Instant::now();
    let r = crate::wait::watched(&wait, send(&mut conn, req, &wait, None)).await;
    assert!(matches!(r, Err(Phase::Server)), "{r:?}");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(6_900) && took <= Duration::from_millis(7_200),
        "{took:?}"
    );
    drop(feeding.await.unwrap());
}

/// A gear that takes none of the body and trickles a response head meanwhile, a byte
/// at a time within `server`: the head's bytes are no progress, the body's wait on
/// the gear runs out after `server` all the same.
#[tokio::test(start_paused = true)]
async fn a_trickled_head_does_not_keep_a_stalled_upload_alive() {
    let mut b = tokio_test::io::Builder::new();
    b.write(POST6).write(b"abc");
    for byte in b"HTTP/1.1 200" {
        b.read(&[*byte]).wait(Duration::from_millis(1_500));
    }
    let mut conn = mock_conn(b.wait(Duration::from_secs(3600)).build());
    let (mut client, req) = post6();
    client.send_data(Bytes::from_static(b"abc")).await.unwrap();
    client.send_data(Bytes::from_static(b"def")).await.unwrap();
    let wait = limits(60, 2);
    let t = tokio::time::Instant::now();
    let r = crate::wait::watched(&wait, send(&mut conn, req, &wait, None)).await;
    assert!(matches!(r, Err(Phase::Server)), "{r:?}");
    let took = t.elapsed();
    assert!(took <= Duration::from_millis(2_200), "{took:?}");
    // The gear's script is cut short, as the connection is: its mock would assert
    // on drop that every byte was read.
    std::mem::forget(conn);
}

/// Row "response body, backend silent": a backend that stops mid-body is the
/// server timeout's (not the client's), after `server` of silence.
#[tokio::test(start_paused = true)]
async fn a_backend_silent_mid_body_runs_out_the_server_timeout() {
    let io = tokio_test::io::Builder::new()
        .write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .read(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello")
        .wait(Duration::from_secs(3600))
        .build();
    let mut conn = mock_conn(io);
    let wait = Arc::new(limits(60, 2));
    let req = hyper::Request::get("/")
        .header("host", "x")
        .body(ReqBody::Empty)
        .unwrap();
    let a = send(&mut conn, outgoing(req), &wait, None).await.unwrap();
    let mut body = UpBody::new(conn, &a.head, None, Some(wait.clone()));
    assert_eq!(&next_data(&mut body).await.unwrap().unwrap()[..], b"hello");
    let t = tokio::time::Instant::now();
    let r = crate::wait::watched(&wait, next_data(&mut body)).await;
    let took = t.elapsed();
    assert!(
        matches!(
            r,
            Err(Phase::Server) | Ok(Some(Err(SendError::Timeout(Phase::Server))))
        ),
        "{r:?}"
    );
    assert!(took <= Duration::from_millis(2_200), "{took:?}");
}

#[tokio::test]
async fn connect_refused_is_an_error() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    let pool = Pool::new(4);
    let err = pool
        .connect(&addr.into(), Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(err, ConnectError::Io(_)), "{err}");
}

/// A body read whole with its head (the byte path's): written after the head, framed by
/// its length, and the exchange waits on the answer with nothing left to upload.
#[tokio::test]
async fn a_whole_body_follows_its_head() {
    let io = tokio_test::io::Builder::new()
        .write(POST6)
        .write(b"abcdef")
        .read(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")
        .build();
    let mut conn = mock_conn(io);
    let out = Outgoing {
        head: Bytes::from_static(POST6),
        method: http::Method::POST,
        framing: ReqFraming::Length(6),
        body: ReqBody::Whole(Bytes::from_static(b"abcdef")),
    };
    let a = send(&mut conn, out, &limits(60, 60), None).await.unwrap();
    assert_eq!(a.head.status, 201);
    assert!(a.upload.is_none());
}
