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

use gearlb_core::scaler::policy::Outcome;

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
/// space made one space, cut to `EXCERPT_CHARS`.
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
mod tests;
