//! A router's routing SPI started ([`start`]), in this order:
//!
//! 1. the table saved under `state.dir` is loaded and served at once (a router that
//!    restarts, or whose broker is down, routes as it did);
//! 2. the consumer connects and subscribes (durably: what was published meanwhile
//!    waits at the broker), but applies nothing yet;
//! 3. a router with no table takes a live peer router's (`peers`), then the table is
//!    reconciled with the broker's REST API when one is configured;
//! 4. events are applied, in order, each acknowledged once saved.
//!
//! Beside it: reconciliation every `reconcile_interval`, the table marked current
//! while a broker is connected, the comparison with the peer routers' tables, and the
//! idler keep-seen requests. On stop the table is written whole.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::parts::Spi;
use crate::cluster::Cluster;
use crate::config::Config;
use crate::services::ServiceSet;

/// A running routing SPI: the router's table, and its tasks.
pub struct Running {
    pub spi: Arc<Spi>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Wait for the tasks (after the stop), then write the table whole.
    pub async fn finish(self) {
        for t in self.tasks {
            let _ = t.await;
        }
        let table = self.spi.table.lock().await.clone();
        match self.spi.write_snapshot(&table).await {
            Ok(()) => info!(applications = table.apps.len(), "routing table saved"),
            Err(e) => {
                warn!(error = %e, "routing table not saved at stop (its journal holds the events)")
            }
        }
    }
}

/// The STOMP client id of a router: `routing_spi.client_id`, else `cluster.node_id`,
/// else the host's name.
pub fn client_id(cfg: &Config) -> String {
    let spi = cfg.routing_spi.as_ref();
    spi.and_then(|s| s.client_id.clone())
        .or_else(|| cfg.cluster.node_id.clone())
        .unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            let host: String = host
                .trim()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
                .collect();
            format!("gearlb-{}", if host.is_empty() { "router" } else { &host })
        })
}

/// The address peers reach this router's status listener at: the listener's, with the
/// cluster's advertised address when it listens on every address.
fn status_for_peers(status: SocketAddr, cluster: &Cluster) -> String {
    if status.ip().is_unspecified() {
        SocketAddr::new(cluster.advertise().ip(), status.port()).to_string()
    } else {
        status.to_string()
    }
}

/// Say it when peers on other hosts cannot reach this router's status listener (where
/// a router that lost its table takes this one's).
fn warn_unreachable_status(status: SocketAddr, cluster: &Cluster) {
    if status.ip().is_loopback() && !cluster.advertise().ip().is_loopback() {
        warn!(%status, "listen.status is on loopback: a peer router that starts without a table cannot take this one's; listen on an address the routers reach");
    }
}

/// Start the routing SPI of `cfg`, when it has one.
pub async fn start(
    cfg: &Config,
    services: Arc<ServiceSet>,
    certs: Option<crate::tls::AliasCerts>,
    cluster: Option<Arc<Cluster>>,
    status: SocketAddr,
    stop: CancellationToken,
) -> Option<Running> {
    let sc = cfg.routing_spi.clone()?;
    let id = client_id(cfg);
    let spi = Spi::open(
        sc.clone(),
        id.clone(),
        &cfg.state.dir,
        services,
        certs,
        stop.clone(),
    );
    let empty = spi.is_empty().await;
    {
        let t = spi.table.lock().await;
        spi.publish(&t).await;
    }
    if !empty {
        spi.ready.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    info!(destination = %sc.destination, client_id = %id, brokers = ?sc.brokers, "router: routing SPI consumer starting");
    let mut tasks = Vec::new();
    let settings = crate::stomp::Settings {
        brokers: sc.brokers.clone(),
        destination: sc.destination.clone(),
        login: sc.username.clone(),
        passcode: sc.password.clone(),
        client_id: id.clone(),
        subscription_name: sc.is_topic().then(|| id.clone()),
        heartbeat: sc.heartbeat,
        prefetch: 1,
        connect_timeout: Duration::from_secs(5),
        max_backoff: Duration::from_secs(30),
    };
    let handler: Arc<dyn crate::stomp::Handler> = spi.clone();
    tasks.push(tokio::spawn(crate::stomp::consume(
        settings,
        handler,
        spi.broker.clone(),
        stop.clone(),
    )));
    // Bootstrap (a peer's table, the REST API), then let the events in.
    {
        let spi = spi.clone();
        let cluster = cluster.clone();
        let secret = cfg.cluster.secret.clone();
        tasks.push(tokio::spawn(async move {
            if empty {
                if let Some(c) = &cluster {
                    let mine = status_for_peers(status, c);
                    peers_bootstrap(&spi, c, secret.as_deref(), &mine).await;
                }
            }
            if spi.cfg.rest_url.is_some() {
                super::rest::reconcile_and_report(&spi).await;
                if empty && spi.source.load().as_str() == "empty" && !spi.is_empty().await {
                    spi.source.store(Arc::new("REST API".into()));
                }
            }
            spi.gate.send_replace(true);
            spi.ready.store(true, std::sync::atomic::Ordering::Relaxed);
            info!(source = %spi.source.load(), "router: routing table ready; applying events");
        }));
    }
    if sc.rest_url.is_some() {
        tasks.push(tokio::spawn(super::rest::run(spi.clone(), stop.clone())));
    }
    // The table is current while a broker is connected.
    {
        let spi = spi.clone();
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                if spi.broker.connected() {
                    spi.touch().await;
                }
            }
        }));
    }
    if let Some(c) = &cluster {
        warn_unreachable_status(status, c);
        tasks.push(tokio::spawn(super::peers::share(
            spi.clone(),
            c.clone(),
            status_for_peers(status, c),
            stop.clone(),
        )));
    }
    if sc.keep_seen {
        tasks.push(tokio::spawn(super::keep_seen::run(
            spi.clone(),
            cfg.idler.interval,
            cfg.idler.timeout,
            cfg.idler.frontend_port,
            Arc::new(crate::idler::FrontendTouch),
            stop.clone(),
        )));
    }
    Some(Running { spi, tasks })
}

async fn peers_bootstrap(spi: &Spi, cluster: &Cluster, secret: Option<&str>, status: &str) {
    super::peers::bootstrap(spi, cluster, secret, status, spi.cfg.peer_table_timeout).await;
}
