//! The application's one scaler: elected by gossip, quorum-guarded, talking to the broker.
//!
//! Owns the check loop and manual scaling ([`Scaler`]: `driver`) and the broker client
//! ([`broker`]); the election ([`elect`]) and the policy ([`policy`]) are pure and live
//! in `gearlb_core::scaler` (re-exported here).
//! Every balancer runs the loop; only the elected one acts:
//!
//! - **Ranking**: the gear named by `scaler.preferred` / `OPENSHIFT_GEARLB_SCALER_GEAR`
//!   (uuid or gear name) first, then the head gear (its gear name is the application's
//!   name), then by id. The scaler is the highest-ranked *live* balancer.
//! - **Quorum**: it acts only while it sees a majority of the known balancers (itself
//!   included) *fresh*, heard from within half the failure timeout; with exactly half,
//!   only if it outranks every balancer it does not. A partition never yields two
//!   scalers that both act: the old one stops once half the timeout passed without a
//!   majority, the other side elects a new one only after the whole timeout.
//! - **Handover**: the election runs on every change of the view, not on a tick, and a
//!   balancer starts acting only when no live peer says it acts (`acts` key); one that
//!   stops acting because a higher-ranked balancer is back says so at once to that
//!   balancer. So at a partition's heal the scalers hand over without overlap.
//! - Each balancer publishes who it believes the scaler is (`scaler` key) and the last
//!   scale event it made (`scale` key: a new scaler keeps the cooldown of the old one).
//! - Decisions come from [`policy`] over the moving-average sessions (requests in
//!   flight and open WebSocket tunnels, as the old autoscaler's `scur`) of every live
//!   balancer (gossiped `load`), checked every `scaler.check_interval` by the acting
//!   scaler; the `.openshift/markers/disable_auto_scaling` marker or
//!   `scaler.enabled = false` stops them, checked live.

pub mod broker;
mod driver;
mod role;

pub use driver::{Scaler, ScalerReport, ScalerSettings};
pub use gearlb_core::scaler::{elect, park_local_gear, Candidate, Election, ScaleEvent};
pub use gearlb_core::scaler::{election, event, failures, policy};
