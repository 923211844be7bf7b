//! A cluster node's settings: [`NodeSettings`], the failure timeout (in gossip rounds)
//! and chitchat's configuration tuned to agree with [`super::liveness`].

use std::net::SocketAddr;
use std::time::Duration;

use chitchat::{ChitchatConfig, ChitchatId, FailureDetectorConfig, ProtocolVersion};

use super::keys;

/// Gossip rounds without a new heartbeat after which a peer is dead.
pub const FAILURE_ROUNDS: u32 = 10;

/// The failure detector's timeout for a gossip interval (at least 1 s).
pub fn failure_timeout(gossip_interval: Duration) -> Duration {
    (gossip_interval * FAILURE_ROUNDS).max(Duration::from_secs(1))
}

/// chitchat's configuration for one balancer.
///
/// chitchat's own failure detector only chooses gossip targets here (the view's
/// liveness is [`liveness`](super::liveness)'s), but a target wrongly thought dead is gossiped with
/// less, so it is tuned to agree with ours. It declares a node dead after
/// `phi_threshold` × the mean interval between heartbeats seen, smoothed towards
/// `initial_interval` with a weight of 5 samples: with a window of 10 samples and a
/// prior of a quarter of our timeout, the mean cannot fall below a twelfth of the
/// timeout however fast heartbeats arrive (with chitchat's window of 1000 it falls to
/// the heartbeat rate, and at M = 100 any 0.8 s hiccup was a death), so its verdicts
/// land between about 0.7× and 1× ours.
pub fn chitchat_config(
    id: ChitchatId,
    cluster_id: &str,
    interval: Duration,
    listen: SocketAddr,
    seeds: Vec<String>,
) -> ChitchatConfig {
    let timeout = failure_timeout(interval);
    ChitchatConfig {
        chitchat_id: id,
        cluster_id: cluster_id.to_string(),
        gossip_interval: interval,
        listen_addr: listen,
        seed_nodes: seeds,
        failure_detector_config: FailureDetectorConfig {
            phi_threshold: 8.0,
            sampling_window_size: 10,
            initial_interval: timeout / 4,
            max_interval: timeout * 5,
            dead_node_grace_period: Duration::from_secs(3600),
        },
        marked_for_deletion_grace_period: Duration::from_secs(3600),
        catchup_callback: None,
        extra_liveness_predicate: Some(Box::new(|ns| ns.get(keys::READY) == Some("1"))),
        protocol_version: ProtocolVersion::V0,
    }
}

/// What a cluster node needs besides its transport (see [`Cluster::start_on`](super::Cluster::start_on)).
#[derive(Clone, Debug)]
pub struct NodeSettings {
    /// This balancer's id (`cluster.node_id`).
    pub self_id: String,
    /// The application (`cluster.id`): nodes of other clusters are refused.
    pub cluster_id: String,
    /// Time between gossip rounds.
    pub gossip_interval: Duration,
    /// Where peers reach this node.
    pub advertise: SocketAddr,
    /// The address the transport listens on (chitchat's `listen_addr`).
    pub listen: SocketAddr,
    /// Incarnation: grows with every start.
    pub generation: u64,
    /// The gear name, for people.
    pub name: Option<String>,
}
