//! The HTTPS listener's stapled OCSP responses kept current: once a minute, the `.ocsp`
//! files beside the certificates are looked at ([`crate::tls::staples`]: size, time,
//! whether past `nextUpdate`); when that changed, the certificates are loaded again for
//! new connections, as a reload would (a broken file keeps the ones in force).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::parts::App;

impl App {
    /// Until `stop`: follow the OCSP files, every `every`.
    pub(super) async fn follow_staples(self: Arc<App>, every: Duration, stop: CancellationToken) {
        let Some(acceptor) = self.tls.clone() else {
            return;
        };
        let mut last = crate::tls::staples(&self.config.lock().await.tls);
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let cfg = self.config.lock().await;
            let now = crate::tls::staples(&cfg.tls);
            if now == last {
                continue;
            }
            match crate::tls::load_with(
                &cfg.tls,
                cfg.proxy.h2c,
                acceptor.resumption(),
                acceptor.aliases(),
            ) {
                Ok(certs) => {
                    acceptor.replace(certs);
                    info!("OCSP responses changed: certificates loaded again for new connections");
                    last = now;
                }
                Err(problems) => {
                    warn!(problems = problems.len(), "OCSP responses changed, but the certificates cannot be loaded: the ones in force are kept");
                }
            }
        }
    }
}
