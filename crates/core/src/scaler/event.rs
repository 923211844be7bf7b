//! [`ScaleEvent`]: the last scale event a scaler made, as gossiped (a leaf: the cluster
//! view carries it without naming the scaler's driver).

use serde::{Deserialize, Serialize};

/// The last scale event a scaler made (gossiped, so a successor keeps the cooldown).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScaleEvent {
    pub event: String,
    pub at_ms: u64,
    pub gears: usize,
}
