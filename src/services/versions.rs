//! An operator's version decisions on a service ([`ServiceSet::cutover`],
//! [`ServiceSet::hold`]): kept as the service's [`VersionOps`], shared by gossip (the
//! newest counts on every balancer), and applied to the service's router as its
//! version policy (`gearlb_core::routing::versions`).

use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use super::running::in_flight_outside_active;
use super::state::VersionOps;
use super::ServiceSet;
use crate::routing::versions::Version;
use crate::routing::Router;

impl ServiceSet {
    /// Make `version`'s group of `service` active now: the older groups get no new
    /// session and drain. Returns once the backends outside the active group have no
    /// request in flight here, or at `timeout`.
    pub async fn cutover(
        &self,
        service: &str,
        version: &str,
        timeout: Duration,
    ) -> Result<String, String> {
        let v = Version::parse(version)?;
        let router = self
            .decide(service, &v, |ops| {
                ops.cutover = Some(v.to_string());
                ops.held
                    .retain(|h| Version::parse(h).ok().as_ref() != Some(&v));
            })
            .await?;
        info!(%service, version = %v, "cut-over: the older groups drain");
        let at = self.state.lock().await.ops_of(service, &self.self_id).at_ms;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Drained here, and acknowledged (adopted and drained) by every live peer.
            let left = in_flight_outside_active(&router);
            let waiting = self.state.lock().await.unacknowledged(service, at);
            if left == 0 && waiting.is_empty() {
                return Ok(format!(
                    "{service}: {v}'s group is active; every balancer acknowledged (the others have no request in flight)"
                ));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "{v}'s group of {service} is active, but after {timeout:?}: {left} requests in flight here on the others; not acknowledged by: {}",
                    if waiting.is_empty() { "-".to_string() } else { waiting.join(", ") }
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Hold `version`'s group of `service` back (it is never active nor the canary),
    /// or release it.
    pub async fn hold(
        &self,
        service: &str,
        version: &str,
        release: bool,
    ) -> Result<String, String> {
        let v = Version::parse(version)?;
        self.decide(service, &v, |ops| {
            ops.held
                .retain(|h| Version::parse(h).ok().as_ref() != Some(&v));
            if !release {
                ops.held.push(v.to_string());
            }
        })
        .await?;
        Ok(if release {
            format!("{service}: {v}'s group released")
        } else {
            format!("{service}: {v}'s group held back")
        })
    }

    /// Change `service`'s version decisions with `edit` (a backend must run `v`) and
    /// apply them; its router.
    async fn decide(
        &self,
        service: &str,
        v: &Version,
        edit: impl FnOnce(&mut VersionOps),
    ) -> Result<Arc<Router>, String> {
        let cfg = self.cfg.load_full();
        let mut st = self.state.lock().await;
        let router = st
            .running
            .get(service)
            .map(|r| r.service.router.clone())
            .ok_or_else(|| format!("unknown service {service:?}"))?;
        let runs = router
            .snapshot()
            .entries()
            .iter()
            .any(|e| e.backend.version.as_ref() == Some(v));
        if !runs {
            return Err(format!("no backend of {service:?} runs version {v}"));
        }
        let mut ops = st.ops_of(service, &self.self_id);
        edit(&mut ops);
        ops.at_ms = crate::time::unix_ms().max(ops.at_ms + 1);
        st.version_ops.insert(service.to_string(), ops);
        self.apply_locked(&mut st, &cfg).await;
        Ok(router)
    }
}
