//! [`Carrier`]: which connection kind carries gossip frames.

use serde::{Deserialize, Serialize};

/// Which carrier gossip uses.
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
