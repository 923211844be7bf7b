//! A tree of balancers (`[upstream]`): this balancer registers each of its services
//! with the balancers above it as one backend (itself, at `upstream.advertise`), with
//! the service's hosts and paths and the newest version of its active group, over their
//! HTTP registration (`POST /services/register`, `discovery.token`). It renews every
//! third of `upstream.ttl`, and withdraws a service (`/services/deregister`) when none
//! of its backends can take a request here any more, when it goes, and on stop. So a
//! host that loses its last instance stops receiving traffic from above, drains travel
//! up, and the upstream applies the same version rule across its children.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::ServiceSet;
use crate::config::UpstreamConfig;

/// Register upward until `stop`, then withdraw everything.
pub async fn register_upward(
    set: Arc<ServiceSet>,
    cfg: UpstreamConfig,
    advertise: String,
    stop: CancellationToken,
) {
    let http = match reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "upstream client not available: not registering upward");
            return;
        }
    };
    // The backend name this balancer has upstream: its address, as a name.
    let me: String = advertise
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let token = cfg.token.clone().unwrap_or_default();
    let every = (cfg.ttl / 3).max(Duration::from_millis(500));
    let mut registered: BTreeSet<String> = BTreeSet::new();
    let mut warned: BTreeSet<String> = BTreeSet::new();
    loop {
        let mut now_serving = BTreeSet::new();
        for v in set.views() {
            let table = v.router.snapshot();
            if !table.can_serve() {
                continue;
            }
            let plan = table.version_plan(&v.router.versions());
            let version = plan
                .active
                .iter()
                .filter_map(|&i| table.entries()[i].backend.version.clone())
                .max()
                .map(|v| v.to_string());
            let body = serde_json::json!({
                "service": &*v.name,
                "backend": me,
                "addr": advertise,
                "hosts": v.hosts,
                "paths": v.paths,
                "ttl": format!("{}ms", cfg.ttl.as_millis()),
                "version": version,
            });
            let mut ok = true;
            for up in &cfg.balancers {
                if let Err(e) = post(&http, up, "register", &token, &body).await {
                    ok = false;
                    if warned.insert(format!("{up} {}", v.name)) {
                        warn!(upstream = %up, service = %v.name, error = %e, "registration upward failed; retried");
                    }
                }
            }
            if ok && !registered.contains(&*v.name) {
                info!(service = %v.name, "service registered upward");
            }
            now_serving.insert(v.name.to_string());
        }
        for gone in registered.difference(&now_serving) {
            withdraw(&http, &cfg, &token, gone, &me).await;
        }
        registered = now_serving;
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(every) => {}
        }
    }
    for service in &registered {
        withdraw(&http, &cfg, &token, service, &me).await;
    }
}

async fn withdraw(
    http: &reqwest::Client,
    cfg: &UpstreamConfig,
    token: &str,
    service: &str,
    me: &str,
) {
    let body = serde_json::json!({ "service": service, "backend": me });
    for up in &cfg.balancers {
        match post(http, up, "deregister", token, &body).await {
            Ok(()) => info!(upstream = %up, %service, "service withdrawn upward"),
            Err(e) => {
                warn!(upstream = %up, %service, error = %e, "withdrawal upward failed (its lease will lapse)")
            }
        }
    }
}

async fn post(
    http: &reqwest::Client,
    upstream: &str,
    what: &str,
    token: &str,
    body: &serde_json::Value,
) -> Result<(), String> {
    let resp = http
        .post(format!("{upstream}/services/{what}"))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    if status.is_success() {
        return Ok(());
    }
    let text = resp.text().await.unwrap_or_default();
    Err(format!("{status}: {}", text.trim()))
}
