//! Each served application's head gear kept seen by its node's idler
//! (`routing_spi.keep_seen`, on by default). A router sends an application's traffic
//! straight to its load-balancer gears' public ports, past the nodes' frontends, whose
//! access logs are all the idler reads: the head gear of a busy application would be
//! idled (seed 001, "decision point 2"). So once per `idler.interval`, for each
//! application that served requests since the last round (or holds a WebSocket open),
//! the router requests `HEAD /health` with `Host: <app>-<namespace>.<cloud_domain>`
//! (the head gear's name) on port `idler.frontend_port` of the head gear's node: the
//! one the broker's REST API names, else every node with one of its load-balancer
//! gears (the head gear is one of them; a frontend that does not host it does not know
//! the name and the idler ignores the line). The frontend answers it from a file; the
//! gears never see it. Requests, failures and rounds are counted in the report.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::parts::Spi;
use crate::idler::{Target, Touch};

/// Requests of a round in flight at once.
const AT_ONCE: usize = 8;

/// What each routed application served so far: requests, and tunnels open now.
fn served(spi: &Spi) -> HashMap<String, (u64, u64)> {
    spi.services
        .routers()
        .into_iter()
        .map(|(name, r)| {
            let snap = r.snapshot();
            let mut total = (0, 0);
            for t in snap.targets() {
                total.0 += t.stats.requests.load(Ordering::Relaxed);
                total.1 += t.tunnels.load(Ordering::Relaxed);
            }
            (name.to_string(), total)
        })
        .collect()
}

/// The requests of a round for the applications in `busy`.
async fn targets(spi: &Spi, busy: &BTreeSet<String>) -> Vec<Target> {
    let table = spi.table.lock().await;
    let mut out = Vec::new();
    for name in busy {
        let Some(app) = table.apps.get(name) else {
            continue;
        };
        let dns = format!("{}-{}.{}", app.app, app.namespace, spi.cfg.cloud_domain);
        let nodes: BTreeSet<String> = match &app.head_node {
            Some(n) => [n.clone()].into(),
            None => app
                .endpoints
                .values()
                .filter(|e| e.routed(&spi.cfg.endpoint_types))
                .map(|e| e.address.clone())
                .collect(),
        };
        for host in nodes {
            out.push(Target {
                uuid: name.clone(),
                dns: dns.clone(),
                host,
            });
        }
    }
    out
}

/// Run until `stop`: a round every `interval`, for what served.
pub async fn run(
    spi: Arc<Spi>,
    interval: Duration,
    timeout: Duration,
    port: u16,
    touch: Arc<dyn Touch>,
    stop: CancellationToken,
) {
    let counters = spi.keep_seen.clone();
    counters.start(interval);
    let mut last = served(&spi);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let now = served(&spi);
        let busy: BTreeSet<String> = now
            .iter()
            // An application seen for the first time starts from what it served.
            .filter(|(name, (req, open))| {
                *open > 0 || last.get(*name).is_some_and(|(r, _)| r != req)
            })
            .map(|(name, _)| name.clone())
            .collect();
        last = now;
        if busy.is_empty() {
            continue;
        }
        let list = targets(&spi, &busy).await;
        info!(applications = busy.len(), requests = list.len(), "idler keep-seen: requesting the served applications' head gears through their nodes' frontends");
        counters.round(list.len() as u64);
        let mut pending = list.into_iter();
        let mut running = tokio::task::JoinSet::new();
        loop {
            while running.len() < AT_ONCE {
                let Some(t) = pending.next() else { break };
                let touch = touch.clone();
                running.spawn(async move {
                    let r = match tokio::time::timeout(timeout, touch.touch(&t, port)).await {
                        Ok(r) => r,
                        Err(_) => Err(format!("no answer within {timeout:?}")),
                    };
                    (t, r)
                });
            }
            let done = tokio::select! {
                _ = stop.cancelled() => return,
                d = running.join_next() => d,
            };
            let Some(done) = done else { break };
            let failure = match done {
                Ok((_, Ok(code))) if crate::idler::answered(code) => None,
                Ok((t, Ok(code))) => Some(format!("{}@{}: status {code}", t.dns, t.host)),
                Ok((t, Err(e))) => Some(format!("{}@{}: {e}", t.dns, t.host)),
                Err(e) => Some(e.to_string()),
            };
            counters.sent(failure.is_some());
            if let Some(f) = failure {
                debug!(error = %f, "idler keep-seen request failed");
            }
        }
    }
}
