//! How gossip travels: its carrier ([`Carrier`], `cluster.transport`) and the wire
//! formats a balancer speaks ([`GossipWire`], `cluster.gossip_wire`, env
//! `GEARLB_GOSSIP_WIRE`: what a rolling upgrade from the release before needs).

use serde::{Deserialize, Serialize};

/// The gossip wire formats spoken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GossipWire {
    /// Only the release before's format: frames authenticated but readable, an
    /// upgrade proof valid for 15 minutes (`Upgrade: gearlb-gossip/1`). What a
    /// balancer of that release speaks.
    V1,
    /// Both: v2 to every peer that answers it, v1 to a peer that does not (a balancer
    /// of the release before); both accepted. The default of this release, so that
    /// balancers can be upgraded one at a time.
    #[default]
    Both,
    /// Only v2 (encrypted frames bound to their connection): set once every balancer of
    /// the application runs this release.
    V2,
}

impl GossipWire {
    pub fn as_str(self) -> &'static str {
        match self {
            GossipWire::V1 => "v1",
            GossipWire::Both => "both",
            GossipWire::V2 => "v2",
        }
    }

    /// The value named `text`, or a message listing the choices.
    pub fn parse(text: &str) -> Result<GossipWire, String> {
        match text {
            "v1" => Ok(GossipWire::V1),
            "both" => Ok(GossipWire::Both),
            "v2" => Ok(GossipWire::V2),
            _ => Err(format!("{text:?}: use \"both\", \"v2\" or \"v1\"")),
        }
    }

    /// Whether v1 is spoken.
    pub fn v1(self) -> bool {
        self != GossipWire::V2
    }

    /// Whether v2 is spoken.
    pub fn v2(self) -> bool {
        self != GossipWire::V1
    }
}

/// Which carrier gossip uses (`cluster.transport`); the gossip transport itself is
/// `crate::cluster::transport`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Carrier {
    /// Upgraded HTTP/1.1 connections on the proxy port (the default in a gear).
    Http,
    /// A TCP port of its own (`cluster.listen`).
    Tcp,
    /// A UDP port of its own (`cluster.listen`).
    Udp,
}

impl Carrier {
    pub fn as_str(self) -> &'static str {
        match self {
            Carrier::Http => "http",
            Carrier::Tcp => "tcp",
            Carrier::Udp => "udp",
        }
    }
}
