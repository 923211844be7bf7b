//! An operator's version decisions on a service ([`ServiceSet::cutover`],
//! [`ServiceSet::hold`]): kept as the service's [`VersionOps`], shared by gossip (the
//! newest counts on every balancer), and applied to the service's router as its
//! version policy (`gearlb_core::routing::versions`).

use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use super::state::VersionOps;
use super::ServiceSet;
use crate::routing::versions::{self, Member, Version};
use crate::routing::{Admin, Router};

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
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = in_flight_outside_active(&router);
            if left == 0 {
                return Ok(format!(
                    "{service}: {v}'s group is active; the others have no request in flight here"
                ));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(format!(
                    "{service}: {v}'s group is active; {left} requests still in flight on the others after {timeout:?}"
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

/// Requests in flight on the backends of `router` that new sessions may not go to.
fn in_flight_outside_active(router: &Router) -> u64 {
    let table = router.snapshot();
    let members: Vec<Member> = table
        .entries()
        .iter()
        .map(|e| Member {
            version: e.backend.version.clone(),
            compatible: e.backend.compatible.clone(),
            present: e.admin == Admin::Active && !e.parked,
        })
        .collect();
    let plan = versions::plan(&members, &router.versions());
    if !plan.versioned {
        return 0;
    }
    table
        .iter()
        .enumerate()
        .filter(|(i, _)| !plan.active.contains(i) && !plan.canary.contains(i))
        .map(|(_, (_, t))| t.outstanding())
        .sum()
}
