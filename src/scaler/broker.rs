//! The broker's REST API, as the old cartridge's `gear-scale-ctl` used it.
//!
//! Owns the two calls: `POST …/applications/<app>/events` with the form fields
//! `broker_auth_key`, `broker_auth_iv` and `event=scale-up|scale-down`, and `GET
//! …/applications/<app>` for `scale_min`/`scale_max`. The broker key is read from the gear
//! (`$OPENSHIFT_HOMEDIR/.auth/token` and `iv`, trailing newlines trimmed) at each call,
//! so a rotated key is picked up; it is never logged. HTTPS with rustls; a private broker
//! certificate can be trusted with `scaler.broker_ca`. 600 s timeout, as the old client.

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

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("broker key: {0}")]
    Key(String),
    #[error("broker CA file {0}: {1}")]
    Ca(PathBuf, String),
    #[error("broker request failed: {0}")]
    Http(String),
    #[error("broker answered {0}")]
    Status(u16),
}

/// A client for one application's broker endpoints.
pub struct Broker {
    cfg: BrokerConfig,
    http: reqwest::Client,
}

/// Scale limits of the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
                .map_err(|e| BrokerError::Ca(ca.clone(), e.to_string()))?;
            b = b.add_root_certificate(cert);
        }
        let http = b.build().map_err(|e| BrokerError::Http(e.to_string()))?;
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

    /// Send `scale-up` or `scale-down`.
    pub async fn event(&self, event: &str) -> (Outcome, String) {
        let result = async {
            let [key, iv] = self.auth()?;
            let form = [key, iv, ("event", event.to_string())];
            let resp = self
                .http
                .post(format!("{}/events", self.app_url()))
                .header("Accept", "application/json")
                .header("X-Gearlb-Node", &self.cfg.node)
                .form(&form)
                .send()
                .await
                .map_err(|e| BrokerError::Http(e.without_url().to_string()))?;
            Ok::<u16, BrokerError>(resp.status().as_u16())
        }
        .await;
        match result {
            Ok(s) if (200..300).contains(&s) => {
                (Outcome::Done, format!("{event}: broker answered {s}"))
            }
            Ok(422) => (
                Outcome::AtLimit,
                format!("{event}: the application is at its gear limit (422)"),
            ),
            Ok(s) => (
                Outcome::Failed,
                format!("{event}: {}", BrokerError::Status(s)),
            ),
            Err(e) => (Outcome::Failed, format!("{event}: {e}")),
        }
    }

    /// The application's scale limits.
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
        let [key, iv] = self.auth()?;
        let resp = self
            .http
            .get(self.app_url())
            .header("Accept", "application/json;version=1.0")
            .header("X-Gearlb-Node", &self.cfg.node)
            .query(&[key, iv])
            .send()
            .await
            .map_err(|e| BrokerError::Http(e.without_url().to_string()))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(BrokerError::Status(status));
        }
        let app: App = resp
            .json()
            .await
            .map_err(|e| BrokerError::Http(e.without_url().to_string()))?;
        Ok(Limits {
            min: app.data.scale_min.max(1) as usize,
            max: (app.data.scale_max >= 0).then_some(app.data.scale_max as usize),
        })
    }
}
