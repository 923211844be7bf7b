//! The state file as the running balancer keeps it: every save (backends, peers,
//! rotations) built and written in order, and the state directory's lock taken at start.

use std::time::Duration;

use tokio::time::Instant;
use tracing::error;

use super::parts::App;
use crate::state::{PersistedState, StateStore, FORMAT};

impl App {
    /// Save the state file: backends, peers, rotations. Written on the blocking pool
    /// (see [`StateStore::save_off_runtime`]): a slow disk holds this call, never the
    /// runtime's worker threads.
    pub(super) async fn persist(&self) -> Result<(), String> {
        let _ordered = self.saved.saving.lock().await;
        let state = PersistedState {
            format: FORMAT,
            config_backends: self
                .saved
                .fingerprint
                .lock()
                .map(|f| f.clone())
                .unwrap_or_default(),
            backends: self.router.specs(),
            peers: self.cluster.as_ref().map(|c| c.known()).unwrap_or_default(),
            peers_config: Some(self.saved.peers_config.clone()),
            rotations: self.rotations.ops().into_values().collect(),
        };
        self.saved
            .store
            .save_off_runtime(state)
            .await
            .map_err(|e| e.to_string())
    }
}

/// Take the state directory's lock, waiting a little for a caller that holds it to
/// record a call; fails when another balancer holds it. A directory that cannot hold
/// the lock file (read-only, full) is reported and served without it: nothing can be
/// recorded there while stopped either.
pub(super) async fn take_state_lock(
    store: &StateStore,
) -> anyhow::Result<Option<crate::state::StateLock>> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match store.try_lock() {
            Ok(Some(l)) => return Ok(Some(l)),
            Ok(None) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Ok(None) => anyhow::bail!(
                "state directory {} is in use by another running gearlb",
                store
                    .path()
                    .parent()
                    .unwrap_or(store.path().as_path())
                    .display()
            ),
            Err(e) => {
                error!(error = %e, "cannot lock the state directory: calls made while this balancer is stopped will not be kept");
                return Ok(None);
            }
        }
    }
}
