//! The broker client against scripted brokers: the calls' shapes, and what a failure says.

use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A request as a server received it.
#[derive(Debug)]
struct Seen {
    head: String,
    body: String,
}

fn head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// A server at `127.0.0.1` that answers one request with `status` and `body`, and
/// hands back what it received.
async fn one_shot(
    status: &'static str,
    body: &'static str,
) -> (std::net::SocketAddr, tokio::sync::oneshot::Receiver<Seen>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let Ok((mut s, _)) = l.accept().await else {
            return;
        };
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        // Bounded: a head and a body of Content-Length bytes, within 64 KiB.
        while got.len() < 64 * 1024 {
            if let Some(end) = head_end(&got) {
                let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if got.len() >= end + len {
                    break;
                }
            }
            match s.read(&mut buf).await {
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        let answer = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = s.write_all(answer.as_bytes()).await;
        let end = head_end(&got).unwrap_or(got.len());
        let _ = tx.send(Seen {
            head: String::from_utf8_lossy(&got[..end]).into_owned(),
            body: String::from_utf8_lossy(&got[end..]).into_owned(),
        });
    });
    (addr, rx)
}

/// A broker client for application `app` of `ns` at `url`, with a key that needs
/// encoding.
fn client(url: &str, dir: &Path, timeout: Duration) -> Broker {
    std::fs::write(dir.join("token"), "k3y+/=\n").unwrap();
    std::fs::write(dir.join("iv"), "i v\n").unwrap();
    Broker::new(BrokerConfig {
        url: url.to_string(),
        namespace: "ns".into(),
        app: "app".into(),
        auth_dir: dir.to_path_buf(),
        ca_file: None,
        timeout,
        node: "lb1".into(),
    })
    .unwrap()
}

const KEY_FORM: &str = "broker_auth_key=k3y%2B%2F%3D&broker_auth_iv=i+v";

/// As `gear-scale-ctl.rb`: the GET of the limits carries the key as a form in its
/// body, where the broker reads it (`broker_key.rb`), and nothing in its URL.
#[tokio::test]
async fn limits_send_the_key_in_the_body_never_in_the_url() {
    let (addr, seen) = one_shot("200 OK", r#"{"data":{"scale_min":2,"scale_max":5}}"#).await;
    let dir = tempfile::tempdir().unwrap();
    let b = client(
        &format!("http://{addr}"),
        dir.path(),
        Duration::from_secs(5),
    );
    let limits = b.limits().await.unwrap();
    assert_eq!(
        limits,
        Limits {
            min: 2,
            max: Some(5)
        }
    );
    let seen = seen.await.unwrap();
    assert!(
        seen.head
            .starts_with("GET /broker/rest/domains/ns/applications/app HTTP/1.1\r\n"),
        "{seen:?}"
    );
    let head = seen.head.to_ascii_lowercase();
    assert!(
        head.contains("content-type: application/x-www-form-urlencoded"),
        "{seen:?}"
    );
    assert!(head.contains("x-gearlb-node: lb1"), "{seen:?}");
    assert!(
        !head.contains("k3y") && !head.contains("broker_auth"),
        "{seen:?}"
    );
    assert_eq!(seen.body, KEY_FORM);
}

#[tokio::test]
async fn events_send_the_key_and_the_event_in_the_body() {
    let (addr, seen) = one_shot("201 Created", "{}").await;
    let dir = tempfile::tempdir().unwrap();
    let b = client(
        &format!("http://{addr}/"),
        dir.path(),
        Duration::from_secs(5),
    );
    let (outcome, text) = b.event("scale-up").await;
    assert_eq!(outcome, Outcome::Done, "{text}");
    let seen = seen.await.unwrap();
    assert!(
        seen.head
            .starts_with("POST /broker/rest/domains/ns/applications/app/events HTTP/1.1\r\n"),
        "{seen:?}"
    );
    assert_eq!(seen.body, format!("{KEY_FORM}&event=scale-up"));
}

/// A refused connection is named: method, URL (without the credentials it was
/// configured with) and the cause, not only "error sending request".
#[tokio::test]
async fn a_refused_connection_names_the_request_and_its_cause() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let b = client(
        &format!("http://admin:s3cret@127.0.0.1:{port}"),
        dir.path(),
        Duration::from_secs(5),
    );
    let e = b.limits().await.unwrap_err();
    let text = e.to_string();
    let url = format!("http://127.0.0.1:{port}/broker/rest/domains/ns/applications/app");
    assert!(text.starts_with(&format!("GET {url}: ")), "{text}");
    assert!(text.contains("Connection refused"), "{text}");
    assert!(
        !text.contains("s3cret") && !text.contains("admin"),
        "{text}"
    );
    assert_eq!(e.cause(), text, "a refusal is the same failure every time");
    let (outcome, text) = b.event("scale-down").await;
    assert_eq!(outcome, Outcome::Failed);
    assert!(
        text.starts_with(&format!("scale-down: POST {url}/events: ")),
        "{text}"
    );
    assert!(text.contains("Connection refused"), "{text}");
}

#[tokio::test]
async fn an_error_answer_says_its_status_and_what_the_broker_said() {
    let (addr, _seen) = one_shot(
        "401 Unauthorized",
        r#"{"messages":[{"text":"Broker key authentication failed","severity":"error"}],"status":"unauthorized"}"#,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let b = client(
        &format!("http://{addr}"),
        dir.path(),
        Duration::from_secs(5),
    );
    let e = b.limits().await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "GET http://{addr}/broker/rest/domains/ns/applications/app: broker answered 401: Broker key authentication failed"
        )
    );
    assert_eq!(e.cause(), "GET 401");
}

#[tokio::test]
async fn no_answer_within_the_timeout_says_so() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    // Accepts, reads, never answers.
    let silent = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = [0u8; 1024];
        while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
    });
    let dir = tempfile::tempdir().unwrap();
    let b = client(
        &format!("http://{addr}"),
        dir.path(),
        Duration::from_millis(300),
    );
    let text = b.limits().await.unwrap_err().to_string();
    assert!(
        text.starts_with(&format!("GET http://{addr}/broker/")),
        "{text}"
    );
    assert!(text.contains("no answer within 300ms"), "{text}");
    silent.abort();
}

#[tokio::test]
async fn a_tls_failure_is_named() {
    // A plain HTTP server where the broker's HTTPS is expected: it answers the
    // client's hello with an HTTP response.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let _ = s
            .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            .await;
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf).await;
    });
    let dir = tempfile::tempdir().unwrap();
    let b = client(
        &format!("https://{addr}"),
        dir.path(),
        Duration::from_secs(5),
    );
    let text = b.limits().await.unwrap_err().to_string();
    let url = format!("https://{addr}/broker/rest/domains/ns/applications/app");
    assert!(text.starts_with(&format!("GET {url}: ")), "{text}");
    assert!(text.contains("corrupt message"), "the TLS cause: {text}");
}

#[test]
fn excerpts_are_short_single_lines() {
    assert_eq!(excerpt(b"  bad\r\n\tkey\x00 "), "bad key");
    assert_eq!(
        excerpt(br#"{"messages":[{"text":"one"},{"text":"two"}]}"#),
        "one; two"
    );
    assert_eq!(excerpt(br#"{"messages":[]}"#), r#"{"messages":[]}"#);
    let long = "x".repeat(5000);
    let cut = excerpt(long.as_bytes());
    assert_eq!(cut.chars().count(), EXCERPT_CHARS + 1);
    assert!(cut.ends_with('…'));
    assert_eq!(excerpt(b""), "");
}

#[test]
fn urls_are_shown_without_credentials() {
    assert_eq!(
        shown_url("https://u:p@broker.example.com:8443/broker/rest?broker_auth_key=k#f"),
        "https://broker.example.com:8443/broker/rest"
    );
    assert_eq!(
        shown_url("https://u:p@bro ker/x?k=1"),
        "https://bro ker/x",
        "not a URL: still no credentials or query"
    );
}
