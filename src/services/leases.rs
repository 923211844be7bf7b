//! Registrations with leases ([`ServiceSet::register`], [`ServiceSet::deregister`]):
//! an instance announces itself (control socket or HTTP) and renews its lease; a
//! refused registration changes nothing.

use std::time::Duration;

use tokio::time::Instant;
use tracing::info;

use super::sources::{Origin, Registration};
use super::{Lease, ServiceSet, MAX_REGISTRATIONS};

impl ServiceSet {
    /// Register (or renew) an instance; the reply says until when. Refused with why
    /// when its service or routes conflict with another source's.
    pub async fn register(&self, reg: Registration, ttl: Duration) -> Result<String, String> {
        let cfg = &*self.cfg.load_full();
        let mut st = self.state.lock().await;
        let mut reg = reg;
        if reg.hosts.is_empty() {
            // An instance joining a registered service carries its routes, so that the
            // service keeps them whichever instance is left.
            if let Some(r) = st
                .running
                .get(&reg.service)
                .filter(|r| r.origin == Origin::Registration)
            {
                reg.hosts = r.config.hosts.clone();
                reg.paths = r.config.paths.clone();
            }
        }
        let key = (reg.service.clone(), reg.backend.clone());
        let renewed = st.leases.get(&key).is_some_and(|l| l.reg == reg);
        if !st.leases.contains_key(&key) && st.leases.len() >= MAX_REGISTRATIONS {
            return Err(format!(
                "registration refused: {MAX_REGISTRATIONS} instances are registered here already"
            ));
        }
        let previous = st.leases.insert(
            key.clone(),
            Lease {
                reg: reg.clone(),
                expires: Instant::now() + ttl,
            },
        );
        if renewed {
            return Ok(format!(
                "lease of {}/{} renewed for {ttl:?}",
                reg.service, reg.backend
            ));
        }
        self.apply_locked(&mut st, cfg).await;
        let why = st
            .refused
            .iter()
            .find(|r| {
                r.service == reg.service
                    && r.origin == Origin::Registration
                    && r.backend.as_ref().is_none_or(|b| *b == reg.backend)
            })
            .map(|r| r.why.clone());
        if let Some(why) = why {
            match previous {
                Some(p) => st.leases.insert(key, p),
                None => st.leases.remove(&key),
            };
            self.apply_locked(&mut st, cfg).await;
            return Err(format!("registration refused: {why}"));
        }
        info!(service = %reg.service, backend = %reg.backend, addr = %reg.addr, ?ttl, "instance registered");
        Ok(format!(
            "{}/{} registered at {} for {ttl:?} (renew before it lapses)",
            reg.service, reg.backend, reg.addr
        ))
    }

    /// Deregister an instance: it drains, then goes.
    pub async fn deregister(&self, service: &str, backend: &str) -> Result<String, String> {
        let cfg = &*self.cfg.load_full();
        let mut st = self.state.lock().await;
        if st
            .leases
            .remove(&(service.to_string(), backend.to_string()))
            .is_none()
        {
            return Err(format!(
                "no registered instance {backend:?} of service {service:?}"
            ));
        }
        info!(%service, %backend, "instance deregistered: it drains");
        self.apply_locked(&mut st, cfg).await;
        Ok(format!("{service}/{backend} deregistered: draining"))
    }
}
