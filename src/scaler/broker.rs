//! The broker's REST API, as the old cartridge's `gear-scale-ctl` used it.
//!
//! Owns the two calls: `POST …/applications/<app>/events` with the form fields
//! `broker_auth_key`, `broker_auth_iv` and `event=scale-up|scale-down`, and `GET
//! …/applications/<app>` for `scale_min`/`scale_max`, with the same key fields as a form
//! in the body of the GET (the broker reads them from the body's parameters; a key in a
//! query string would end up in access logs). The broker key is read from the gear
//! (`$OPENSHIFT_HOMEDIR/.auth/token` and `iv`, trailing newlines trimmed) at each call,
//! so a rotated key is picked up; it is never logged. HTTPS with rustls; a private broker
//! certificate can be trusted with `scaler.broker_ca`. 600 s timeout, as the old client.
//!
//! A failure says what failed: the method, the URL (without credentials) and the cause
//! down the error's sources (refused connection, TLS, timeout), or the status the broker
//! answered with a short excerpt of what it said.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::policy::Outcome;

/// How to reach the broker for one application.
#[derive(Clone, Debug)]
pub struct BrokerConfig {
    /// `https://host[:port]`.
    pub url: String,
    pub namespace: String,
    pub app: String,
    /// Directory holding `token` and `iv`.
    pub auth_dir: PathBuf,
    pub ca_file: Option<PathBuf>,
    pub timeout: Duration,
    /// Sent as `X-Gearlb-Node` so broker logs show which balancer asked.
    pub node: String,
}

/// What went wrong with a broker call. The messages name the request (method and URL,
/// never the key: it travels in the body) and the cause, down the error's sources.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("broker key: {0}")]
    Key(String),
    #[error("broker CA file {0}: {1}")]
    Ca(PathBuf, String),
    #[error("broker client: {0}")]
    Client(String),
    /// No answer: not connected, TLS refused, timed out, connection lost.
    #[error("{method} {url}: {cause}")]
    Request {
        method: &'static str,
        url: String,
        cause: String,
    },
    /// An answer other than success.
    #[error("{method} {url}: broker answered {status}{}", excerpt_suffix(.body))]
    Status {
        method: &'static str,
        url: String,
        status: u16,
        /// What the broker said, shortened (see [`excerpt`]).
        body: String,
    },
    /// A successful answer that could not be used.
    #[error("{method} {url}: unusable answer: {cause}")]
    Answer {
        method: &'static str,
        url: String,
        cause: String,
    },
}

impl BrokerError {
    /// The failure without what varies from one attempt to the next (a broker's
    /// message may carry a request id): two errors with the same cause are the same
    /// failure again, for the log's back-off.
    pub fn cause(&self) -> String {
        match self {
            BrokerError::Status { method, status, .. } => format!("{method} {status}"),
            other => other.to_string(),
        }
    }
}

fn excerpt_suffix(body: &str) -> String {
    if body.is_empty() {
        String::new()
    } else {
        format!(": {body}")
    }
}

/// Bytes of an error answer read, and characters of it shown.
const EXCERPT_READ: usize = 4096;
const EXCERPT_CHARS: usize = 200;

/// A short, single-line form of an error answer: the texts of the broker's JSON
/// `messages` when it has them, else the body, control characters and runs of white
/// space made one space, cut to [`EXCERPT_CHARS`].
pub fn excerpt(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Messages {
        messages: Vec<Message>,
    }
    #[derive(Deserialize)]
    struct Message {
        text: String,
    }
    let text = match serde_json::from_slice::<Messages>(body) {
        Ok(m) if !m.messages.is_empty() => m
            .messages
            .into_iter()
            .map(|m| m.text)
            .collect::<Vec<_>>()
            .join("; "),
        _ => String::from_utf8_lossy(body).into_owned(),
    };
    let mut out = String::new();
    for word in text.split(|c: char| c.is_whitespace() || c.is_control()) {
        if word.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
        if out.chars().count() > EXCERPT_CHARS {
            break;
        }
    }
    if out.chars().count() > EXCERPT_CHARS {
        out = out.chars().take(EXCERPT_CHARS).collect();
        out.push('…');
    }
    out
}

/// An error and its sources, each said once (`a: b: c`): reqwest's own message is
/// only "error sending request", the cause is further down.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    // Bounded: error chains are short, a cyclic one must not hang the scaler.
    for _ in 0..16 {
        let Some(s) = next else { break };
        let m = s.to_string();
        if !m.is_empty() && !out.contains(&m) {
            out.push_str(": ");
            out.push_str(&m);
        }
        next = s.source();
    }
    out
}

/// `url` as it may be shown: without user, password, query or fragment.
pub fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => {
            // Not a URL (the request fails for it): cut what could be credentials.
            let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
            let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
            let rest = rest.split(['?', '#']).next().unwrap_or("");
            if scheme.is_empty() {
                rest.to_string()
            } else {
                format!("{scheme}://{rest}")
            }
        }
    }
}

/// A client for one application's broker endpoints.
pub struct Broker {
    cfg: BrokerConfig,
    http: reqwest::Client,
}

/// Scale limits of the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct Limits {
    pub min: usize,
    /// `None` when unlimited (-1).
    pub max: Option<usize>,
}

fn read_key(dir: &Path, name: &str) -> Result<String, BrokerError> {
    let path = dir.join(name);
    let v = std::fs::read_to_string(&path)
        .map_err(|e| BrokerError::Key(format!("{}: {e}", path.display())))?;
    let v = v.trim_end_matches(['\n', '\r']).to_string();
    if v.is_empty() {
        return Err(BrokerError::Key(format!("{} is empty", path.display())));
    }
    Ok(v)
}

impl Broker {
    pub fn new(cfg: BrokerConfig) -> Result<Self, BrokerError> {
        let mut b = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .user_agent(concat!("OpenShift gearlb/", env!("CARGO_PKG_VERSION")));
        if let Some(ca) = &cfg.ca_file {
            let pem = std::fs::read(ca).map_err(|e| BrokerError::Ca(ca.clone(), e.to_string()))?;
            let cert = reqwest::Certificate::from_pem(&pem)
                .map_err(|e| BrokerError::Ca(ca.clone(), chain(&e)))?;
            b = b.add_root_certificate(cert);
        }
        let http = b.build().map_err(|e| BrokerError::Client(chain(&e)))?;
        Ok(Broker { cfg, http })
    }

    fn app_url(&self) -> String {
        format!(
            "{}/broker/rest/domains/{}/applications/{}",
            self.cfg.url.trim_end_matches('/'),
            self.cfg.namespace,
            self.cfg.app
        )
    }

    fn auth(&self) -> Result<[(&'static str, String); 2], BrokerError> {
        Ok([
            ("broker_auth_key", read_key(&self.cfg.auth_dir, "token")?),
            ("broker_auth_iv", read_key(&self.cfg.auth_dir, "iv")?),
        ])
    }

    /// Send `req` (`method` to `url`); an error says which request failed and why.
    async fn send(
        &self,
        method: &'static str,
        url: &str,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, BrokerError> {
        let req = req.header("X-Gearlb-Node", &self.cfg.node);
        req.send().await.map_err(|e| {
            let timed_out = e.is_timeout();
            // The URL is said once, in front, without credentials.
            let e = e.without_url();
            let mut cause = chain(&e);
            if timed_out {
                cause = format!("no answer within {:?} ({cause})", self.cfg.timeout);
            }
            BrokerError::Request {
                method,
                url: shown_url(url),
                cause,
            }
        })
    }

    /// The error for an answer that is not a success: its status and what it says.
    async fn refused(method: &'static str, url: &str, mut resp: reqwest::Response) -> BrokerError {
        let status = resp.status().as_u16();
        let mut body = Vec::new();
        // Bounded: at most EXCERPT_READ bytes of whatever the broker sends.
        while body.len() < EXCERPT_READ {
            match resp.chunk().await {
                Ok(Some(c)) => body.extend_from_slice(&c[..c.len().min(EXCERPT_READ - body.len())]),
                _ => break,
            }
        }
        BrokerError::Status {
            method,
            url: shown_url(url),
            status,
            body: excerpt(&body),
        }
    }

    /// Send `scale-up` or `scale-down`.
    pub async fn event(&self, event: &str) -> (Outcome, String) {
        let url = format!("{}/events", self.app_url());
        let result = async {
            let [key, iv] = self.auth()?;
            let form = [key, iv, ("event", event.to_string())];
            let req = self
                .http
                .post(&url)
                .header("Accept", "application/json")
                .form(&form);
            let resp = self.send("POST", &url, req).await?;
            match resp.status().as_u16() {
                s @ (200..=299 | 422) => Ok(s),
                _ => Err(Self::refused("POST", &url, resp).await),
            }
        }
        .await;
        match result {
            Ok(422) => (
                Outcome::AtLimit,
                format!("{event}: the application is at its gear limit (422)"),
            ),
            Ok(s) => (Outcome::Done, format!("{event}: broker answered {s}")),
            Err(e) => (Outcome::Failed, format!("{event}: {e}")),
        }
    }

    /// The application's scale limits.
    ///
    /// The broker key goes in the request's body, a form as for the events, never in
    /// the URL: the broker reads it from the request parameters of the body
    /// (`broker_key.rb`), as `gear-scale-ctl.rb` sent it, and a URL ends up in logs.
    pub async fn limits(&self) -> Result<Limits, BrokerError> {
        #[derive(Deserialize)]
        struct App {
            data: Data,
        }
        #[derive(Deserialize)]
        struct Data {
            scale_min: i64,
            scale_max: i64,
        }
        let url = self.app_url();
        let [key, iv] = self.auth()?;
        let req = self
            .http
            .get(&url)
            .header("Accept", "application/json;version=1.0")
            .form(&[key, iv]);
        let resp = self.send("GET", &url, req).await?;
        if !resp.status().is_success() {
            return Err(Self::refused("GET", &url, resp).await);
        }
        let app: App = resp.json().await.map_err(|e| BrokerError::Answer {
            method: "GET",
            url: shown_url(&url),
            cause: chain(&e.without_url()),
        })?;
        Ok(Limits {
            min: app.data.scale_min.max(1) as usize,
            max: (app.data.scale_max >= 0).then_some(app.data.scale_max as usize),
        })
    }
}

#[cfg(test)]
mod tests {
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
}
