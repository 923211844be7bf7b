//! The cluster view: [`ClusterView`], the snapshot every other part of gearlb reads
//! (who is live, their load, health reports, rotation ops and acknowledgments, scaler
//! claims), with a version per part ([`Versions`]) so that readers skip work when theirs
//! did not change. [`super::model`] builds it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use chitchat::ChitchatId;
use serde::{Deserialize, Serialize};

use super::keys::HealthReport;
use super::transport::GossipCounters;
use gearlb_core::rotation::register::{Ack, RotationOp};
use gearlb_core::routing::subset::{Assignment, Covered};
use gearlb_core::scaler::event::ScaleEvent;

/// Load a balancer publishes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Load {
    /// Client connections now.
    #[serde(rename = "s")]
    pub sessions: u64,
    /// Moving average of requests in flight (`scaler.average_window`): what the scaler
    /// adds up across balancers.
    #[serde(rename = "a")]
    pub sessions_avg: f64,
    /// Requests per second over the last second.
    #[serde(rename = "r")]
    pub rps: f64,
    /// Requests in flight now.
    #[serde(rename = "f")]
    pub in_flight: u64,
}

/// One peer balancer as this balancer sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerView {
    /// Gear uuid / node id (unknown until first contact for address-only peers).
    pub id: Option<String>,
    pub addr: String,
    pub live: bool,
    /// Known to the broker (listed by `set-peers` or `cluster.peers`).
    pub known: bool,
    pub name: Option<String>,
    /// Filled in for reports (`ClusterView::with_loads`); the live view keeps loads
    /// apart ([`ClusterView::loads`]) so that a load change does not rebuild this list.
    pub load: Option<Load>,
}

/// What a peer says about the scaler.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScalerClaim {
    /// Who it believes the scaler is.
    pub belief: Option<String>,
    /// It acts as the scaler now.
    pub acting: bool,
}

/// Version of each part of the view: a reader compares the part it uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Versions {
    pub members: u64,
    pub loads: u64,
    pub reports: u64,
    pub rotations: u64,
    pub acks: u64,
    pub scaler: u64,
}

/// The cluster as this balancer sees it; replaced, never mutated.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterView {
    pub enabled: bool,
    pub self_id: String,
    pub advertise: String,
    /// Ids of the live members, this balancer included, sorted.
    pub live: Arc<Vec<String>>,
    /// Every other balancer: known ones (live or not) and live unknown ones.
    pub peers: Arc<Vec<PeerView>>,
    /// Balancers the broker lists (this one included): the quorum base.
    pub known_count: usize,
    pub gossip: GossipCounters,
    /// When each live member (this one included) started: chitchat's generation,
    /// Unix milliseconds. Subsets depend on it.
    #[serde(skip)]
    pub started: Arc<BTreeMap<String, u64>>,
    /// Live members heard from within half the failure timeout (this one included):
    /// the scaler's quorum counts these only.
    #[serde(skip)]
    pub fresh: Arc<Vec<String>>,
    /// Gossip address of each live peer.
    #[serde(skip)]
    pub addrs: Arc<HashMap<String, SocketAddr>>,
    /// Load of each live peer.
    #[serde(skip)]
    pub loads: Arc<HashMap<String, Load>>,
    /// Gear health reported by each live peer (peer id → its report): the gears it
    /// found down among those it covers, and the subset epoch that says which.
    #[serde(skip)]
    pub reports: Arc<HashMap<String, Arc<HealthReport>>>,
    /// The rotation op in force per gear among every op the counted peers published
    /// (a last-writer-wins register: it only moves forward).
    #[serde(skip)]
    pub rotations: Arc<BTreeMap<String, RotationOp>>,
    /// Rotation acks of each live peer: peer id → gear label → ack (`ack:` keys).
    #[serde(skip)]
    pub acks: Arc<HashMap<String, Arc<BTreeMap<String, Ack>>>>,
    /// Each live peer's claim about the scaler (`scaler`, `acts` keys).
    #[serde(skip)]
    pub scaler: Arc<HashMap<String, ScalerClaim>>,
    /// The last scale event each live peer made (`scale` keys).
    #[serde(skip)]
    pub scale_events: Arc<Vec<ScaleEvent>>,
    #[serde(skip)]
    pub versions: Versions,
}

impl ClusterView {
    /// A balancer on its own (gossip off).
    pub fn single(self_id: &str) -> Self {
        ClusterView {
            enabled: false,
            self_id: self_id.to_string(),
            live: Arc::new(vec![self_id.to_string()]),
            fresh: Arc::new(vec![self_id.to_string()]),
            known_count: 1,
            ..Default::default()
        }
    }

    /// This view with each live peer's load in its [`PeerView`] (for reports).
    pub fn with_loads(mut self) -> Self {
        for p in Arc::make_mut(&mut self.peers).iter_mut() {
            p.load = p.id.as_ref().and_then(|id| self.loads.get(id)).cloned();
        }
        self
    }

    /// Merged health of a gear outside this balancer's subset, from the peers'
    /// reports: up if a peer covering it (one whose subset epoch is `epoch`, this
    /// balancer's own, so that `covers` says what it covers) does not report it down;
    /// else down if some peer reports it down; else unknown. A peer whose epoch differs
    /// computed other subsets: its silence says nothing, only its reports of gears
    /// down do.
    pub fn remote_health(
        &self,
        label: &str,
        epoch: &str,
        covers: impl Fn(&str, &str) -> bool,
    ) -> Option<bool> {
        let mut seen = None;
        for (peer, report) in self.reports.iter() {
            if peer == &self.self_id {
                continue;
            }
            if report.down.contains(label) {
                seen = Some(false);
            } else if report.epoch.as_deref() == Some(epoch) && covers(peer, label) {
                return Some(true);
            }
        }
        seen
    }

    /// [`remote_health`](Self::remote_health) of every gear at once, for the subsets
    /// `all` this balancer computed in `epoch`: the gears covered by a peer of that
    /// epoch are gathered once from those peers' subsets (O(M × k)), so each gear's
    /// answer is a lookup, not a walk of the peers; only a gear some peer reports down
    /// (rare) takes the walk.
    pub fn remote_health_all<'a>(
        &'a self,
        epoch: &'a str,
        all: &'a Assignment,
    ) -> RemoteHealth<'a> {
        let peers = self.reports.iter().filter(|(p, _)| **p != self.self_id);
        let covering = peers
            .clone()
            .filter(|(_, r)| r.epoch.as_deref() == Some(epoch))
            .map(|(p, _)| p.as_str());
        let reported = peers
            .flat_map(|(_, r)| r.down.iter().map(String::as_str))
            .collect();
        RemoteHealth {
            view: self,
            epoch,
            all,
            covered: all.covered_by(covering),
            reported,
        }
    }

    /// Text for `gearlb ctl peers`.
    pub fn to_text(&self) -> String {
        if !self.enabled {
            return "gossip off: this balancer works alone\n".into();
        }
        let mut out = format!(
            "self {} ({}), {} live of {} known; gossip frames sent {} received {} rejected {}; \
             handshakes refused {}; connections upgraded {}; v1 frames received {}\n",
            self.self_id,
            self.advertise,
            self.live.len(),
            self.known_count,
            self.gossip.frames_sent,
            self.gossip.frames_received,
            self.gossip.rejected_bad_tag
                + self.gossip.rejected_other_cluster
                + self.gossip.rejected_malformed
                + self.gossip.rejected_oversized
                + self.gossip.rejected_replayed,
            self.gossip.rejected_handshake,
            self.gossip.upgrades_accepted,
            self.gossip.frames_received_v1,
        );
        for p in self.peers.iter() {
            let load = p
                .load
                .as_ref()
                .map(|l| {
                    format!(
                        "sessions {} (avg {:.1}), {:.0} req/s",
                        l.sessions, l.sessions_avg, l.rps
                    )
                })
                .unwrap_or_default();
            out.push_str(&format!(
                "  {:<38} {:<22} {:<11} {}\n",
                p.id.as_deref().unwrap_or("(not yet seen)"),
                p.addr,
                if p.live {
                    "live"
                } else if p.known {
                    "unreachable"
                } else {
                    "dead"
                },
                load
            ));
        }
        out
    }
}

/// One key written on one node, as chitchat reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyEvent {
    pub node: ChitchatId,
    pub key: String,
    pub value: String,
}

/// Every gear's health from the peers' reports (see [`ClusterView::remote_health_all`]).
pub struct RemoteHealth<'a> {
    view: &'a ClusterView,
    epoch: &'a str,
    all: &'a Assignment,
    /// Gears covered by a peer whose subsets are this balancer's (same epoch).
    covered: Covered<'a>,
    /// Gears some peer reports down.
    reported: HashSet<&'a str>,
}

impl RemoteHealth<'_> {
    /// What [`ClusterView::remote_health`] says of `label`.
    pub fn get(&self, label: &str) -> Option<bool> {
        if self.reported.contains(label) {
            self.view
                .remote_health(label, self.epoch, |p, g| self.all.covers(p, g))
        } else if self.covered.contains(label) {
            Some(true)
        } else {
            None
        }
    }
}
