//! Reconciliation with the broker's REST API (`routing_spi.rest_url`): at start and
//! every `reconcile_interval`, the applications the API lists (with their aliases and
//! each one's gears' endpoints) are compared with the table, and every difference is
//! repaired and reported (`gearlb_core::spi::reconcile`). What the events cannot say
//! in order (a certificate change is `remove_ssl` then `add_ssl`) or lost is mended so.
//!
//! The answers are read whole first, then the table is compared under its lock; when
//! events were applied meanwhile, the answers are read again (they may predate those
//! events), up to three times. A failure changes nothing and is reported.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use gearlb_core::spi::reconcile::{self, Repair, RestApp};

use super::parts::Spi;

/// Gear groups read at once.
const AT_ONCE: usize = 8;

/// The REST client of `spi`'s configuration.
fn client(spi: &Spi) -> Result<reqwest::Client, String> {
    let mut b = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(60));
    if let Some(ca) = &spi.cfg.rest_ca {
        let pem = std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
        for cert in reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| format!("{}: {e}", ca.display()))?
        {
            b = b.add_root_certificate(cert);
        }
    }
    b.build().map_err(|e| e.to_string())
}

async fn get(spi: &Spi, http: &reqwest::Client, url: &str) -> Result<Vec<u8>, String> {
    let mut req = http.get(url).header("accept", "application/json");
    if let Some(user) = &spi.cfg.rest_user {
        req = req.basic_auth(user, spi.cfg.rest_password.as_ref());
    }
    let resp = req.send().await.map_err(|e| format!("{url}: {e}"))?;
    let status = resp.status();
    let body = resp.bytes().await.map_err(|e| format!("{url}: {e}"))?;
    if !status.is_success() {
        return Err(format!("{url}: {status}"));
    }
    Ok(body.to_vec())
}

/// Every application the API lists, with its endpoints.
async fn read_all(spi: &Spi, http: &reqwest::Client, base: &str) -> Result<Vec<RestApp>, String> {
    let body = get(spi, http, &format!("{base}/applications?nolinks=true")).await?;
    let mut apps =
        reconcile::parse_applications(&body).map_err(|e| format!("applications: {e}"))?;
    let mut set = tokio::task::JoinSet::new();
    let mut pending = apps
        .iter()
        .enumerate()
        .map(|(i, a)| (i, a.id.clone()))
        .collect::<Vec<_>>()
        .into_iter();
    let mut bodies: Vec<Option<Vec<u8>>> = vec![None; apps.len()];
    loop {
        while set.len() < AT_ONCE {
            let Some((i, id)) = pending.next() else { break };
            let url = format!("{base}/application/{id}/gear_groups?include=endpoints&nolinks=true");
            let (http, user, pass) = (
                http.clone(),
                spi.cfg.rest_user.clone(),
                spi.cfg.rest_password.clone(),
            );
            set.spawn(async move {
                let mut req = http.get(&url).header("accept", "application/json");
                if let Some(user) = user {
                    req = req.basic_auth(user, pass);
                }
                let r = async {
                    let resp = req.send().await.map_err(|e| format!("{url}: {e}"))?;
                    let status = resp.status();
                    let body = resp.bytes().await.map_err(|e| format!("{url}: {e}"))?;
                    if status.is_success() {
                        Ok(body.to_vec())
                    } else {
                        Err(format!("{url}: {status}"))
                    }
                }
                .await;
                (i, r)
            });
        }
        let Some(done) = set.join_next().await else {
            break;
        };
        let (i, r) = done.map_err(|e| e.to_string())?;
        bodies[i] = Some(r?);
    }
    for (app, body) in apps.iter_mut().zip(bodies) {
        let body = body.ok_or("a gear group answer is missing")?;
        reconcile::parse_gear_groups(app, &body)
            .map_err(|e| format!("gear groups of {}: {e}", app.service()))?;
    }
    Ok(apps)
}

/// Whether `service`'s backend at `key` serves now (up and in rotation).
async fn in_service(spi: &Spi) -> impl Fn(&str, &str) -> bool {
    let routers: std::collections::HashMap<String, Arc<crate::routing::Router>> = spi
        .services
        .routers()
        .into_iter()
        .map(|(n, r)| (n.to_string(), r))
        .collect();
    move |service: &str, key: &str| {
        let Some(r) = routers.get(service) else {
            return false;
        };
        let Ok(addr) = key.parse::<crate::gear::Addr>() else {
            return false;
        };
        let snap = r.snapshot();
        let found = snap.iter().find(|(e, _)| e.backend.spec.addr == addr);
        found.is_some_and(|(e, _)| e.usable())
    }
}

/// One reconciliation; the differences found (repaired, or kept).
pub async fn reconcile_once(spi: &Spi) -> Result<Vec<Repair>, String> {
    let base = spi.cfg.rest_url.clone().ok_or("no routing_spi.rest_url")?;
    let http = client(spi)?;
    for attempt in 0..3 {
        let before = spi.applied.load(Ordering::Relaxed);
        let apps = read_all(spi, &http, &base).await?;
        let serving = in_service(spi).await;
        let mut table = spi.table.lock().await;
        if table.applied != before && attempt < 2 {
            continue;
        }
        let repairs = reconcile::diff(&table, &apps, &spi.cfg.endpoint_types, &serving);
        let mut changed = false;
        for r in &repairs {
            changed |= reconcile::repair(&mut table, r);
        }
        reconcile::note_heads(&mut table, &apps);
        table.current_ms = crate::time::unix_ms();
        if changed || !repairs.is_empty() {
            spi.write_snapshot(&table).await?;
        }
        spi.publish(&table).await;
        return Ok(repairs);
    }
    Err("events kept coming while the REST API was read".into())
}

/// Reconcile now and record it (log and report).
pub async fn reconcile_and_report(spi: &Spi) {
    let result = reconcile_once(spi).await;
    let mut report = spi.reconcile.lock().unwrap_or_else(|p| p.into_inner());
    report.last_ms = Some(crate::time::unix_ms());
    match result {
        Ok(repairs) => {
            report.runs += 1;
            report.error = None;
            report.differences = repairs.iter().map(Repair::describe).collect();
            let n = repairs.iter().filter(|r| r.changes()).count();
            report.repaired_total += n as u64;
            for r in &repairs {
                warn!(difference = %r.describe(), "routing table reconciled with the broker's REST API");
            }
            info!(
                repaired = n,
                differences = repairs.len(),
                "reconciliation with the broker's REST API done"
            );
        }
        Err(e) => {
            warn!(error = %e, "reconciliation with the broker's REST API failed: the table is kept as it is");
            report.error = Some(e);
        }
    }
}

/// Reconcile every `reconcile_interval` until `stop` (the first one is the start's).
pub async fn run(spi: Arc<Spi>, stop: CancellationToken) {
    let every = spi.cfg.reconcile_interval;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        reconcile_and_report(&spi).await;
    }
}

impl Spi {
    /// Reconcile with the broker's REST API now (`gearlb ctl spi reconcile`).
    pub async fn reconcile_now(&self) -> Result<(), String> {
        if self.cfg.rest_url.is_none() {
            return Err("no routing_spi.rest_url: nothing to reconcile with".into());
        }
        reconcile_and_report(self).await;
        let r = self.reconcile.lock().unwrap_or_else(|p| p.into_inner());
        match &r.error {
            Some(e) => Err(format!("reconciliation failed: {e}")),
            None => Ok(()),
        }
    }
}
