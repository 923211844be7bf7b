//! The acting role of this balancer's [`Scaler`]: the claims other balancers make, the
//! fence's checks (`gearlb_core::scaler::fence`) with what the cluster last heard, and
//! standing down or taking over (logged with the reason, published, and pushed to the
//! balancer taking over).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::driver::Scaler;
use crate::cluster::{keys, Cluster, ClusterView};
use gearlb_core::scaler::election::Election;
use gearlb_core::scaler::fence::{self, Fence, StepDown};

impl Scaler {
    /// Milliseconds on this scaler's monotonic clock of an instant.
    pub(super) fn ms_of(&self, t: tokio::time::Instant) -> u64 {
        t.saturating_duration_since(self.clock).as_millis() as u64
    }

    /// Record the claims to act that other balancers make in `view`: a live balancer
    /// that acts, with when it was last heard; a live one that does not has withdrawn
    /// its claim; a dead one's claim stays until it lapses.
    pub(super) fn note_claims(
        &self,
        claims: &mut HashMap<String, u64>,
        view: &ClusterView,
        heard: &[(Arc<str>, tokio::time::Instant)],
        now_ms: u64,
        liveness: Duration,
    ) {
        let live = |id: &str| view.live.binary_search_by(|l| l.as_str().cmp(id)).is_ok();
        for (id, c) in view.scaler.iter() {
            if c.acting && *id != self.self_id && live(id) {
                let at = heard
                    .iter()
                    .find(|(h, _)| **h == **id)
                    .map_or(now_ms, |(_, t)| self.ms_of(*t));
                claims.insert(id.clone(), at);
            }
        }
        claims.retain(|id, _| !live(id) || view.scaler.get(id).is_some_and(|c| c.acting));
        claims.retain(|_, at| !fence::claim_lapsed(now_ms, *at, liveness));
    }

    /// The fence (`gearlb_core::scaler::fence`) at `now_ms`: a majority heard from since
    /// this balancer resumed, no other live balancer acting, and, to take over, no
    /// other balancer's claim that has not lapsed. Always clear without a cluster.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fenced(
        &self,
        fence: &Fence,
        cluster: &Option<Arc<Cluster>>,
        view: &ClusterView,
        e: &Election,
        claims: &HashMap<String, u64>,
        acting: bool,
        now_ms: u64,
    ) -> Result<(), StepDown> {
        let Some(c) = cluster else { return Ok(()) };
        let heard: Vec<u64> = c.heard().iter().map(|(_, t)| self.ms_of(*t)).collect();
        let others: Vec<String> = view
            .peers
            .iter()
            .filter(|p| p.live)
            .filter_map(|p| p.id.clone())
            .filter(|id| view.scaler.get(id).is_some_and(|c| c.acting))
            .collect();
        // A majority of the membership as it is now: a set-peers that just grew it
        // counts before the view catches up.
        let known = e.known.max(c.known_count_now());
        fence.check(now_ms, &heard, known, e.first, &others)?;
        if !acting {
            fence.settled(now_ms)?;
            if let Some(id) = claims.keys().next() {
                return Err(StepDown::OtherClaims { id: id.clone() });
            }
        }
        Ok(())
    }

    /// The known membership was just replaced (`set-peers`): an acting scaler stands
    /// down at once, before the call returns, and its loop's next turn takes the role
    /// back only if a majority of the new membership was heard. Without this, a
    /// balancer that knew only itself would go on acting until its loop turned again,
    /// beside another that already counted it.
    pub fn membership_replaced(&self) {
        if !self.acting() {
            return;
        }
        self.revoked.store(true, Ordering::SeqCst);
        self.acting_until_ms.store(0, Ordering::SeqCst);
        self.update(|r| r.acting = false);
        warn!(
            reason = "the known balancers were replaced (set-peers): it takes the role back only with a majority of them",
            "this balancer stands down as the scaler"
        );
    }

    /// Start or stop acting: say so in the log (why, when it stands down), publish it,
    /// and tell the balancer taking over at once.
    pub(super) async fn set_acting(
        &self,
        cluster: &Option<Arc<Cluster>>,
        e: &Election,
        acts: bool,
        why: Option<StepDown>,
    ) {
        if acts && self.broker.is_none() {
            // Elected, but nothing to scale: no broker is configured (a standalone
            // balancer). Said once, as what it is.
            info!("this balancer holds the scaler role, but no broker is configured: it asks for no gears");
        } else if acts {
            info!("this balancer is now the scaler");
        } else {
            self.acting_until_ms.store(0, Ordering::Relaxed);
            match why {
                Some(why) => warn!(reason = %why, "this balancer stands down as the scaler"),
                None => info!(quorum = e.quorum, "this balancer stopped acting as scaler"),
            }
        }
        self.update(|r| r.acting = acts);
        if let Some(c) = cluster {
            c.publish(keys::ACTS, if acts { "1" } else { "0" }.into())
                .await;
            // The balancer taking over waits for this: tell it now.
            if let Some(next) = e.scaler.as_deref().filter(|n| *n != self.self_id) {
                c.push_to(next);
            }
        }
    }
}
