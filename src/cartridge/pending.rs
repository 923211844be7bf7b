//! Calls that change what the balancer routes: sent to the running balancer over its
//! control socket, or, while it is stopped, recorded in the pending file (under the
//! state lock) for its start; and how their outcome is printed for the node.

use std::path::Path;
use std::time::Duration;

use super::convention::Out;
use crate::config::Config;
use crate::control::{self, ClientError, Reply, Request};
use crate::state::{Pending, StateStore};

/// How long a call waits for a balancer that is starting (it holds the state lock but
/// does not answer on its control socket yet).
const STARTING_TIMEOUT: Duration = Duration::from_secs(30);

/// A call's fate: applied by the running balancer, or recorded for its start.
pub(super) enum Outcome {
    Applied(Reply),
    Recorded(String),
}

/// Send `request` to the running balancer; when it is stopped, `record` adds the call
/// to the pending file (under the state lock, so a balancer starting meanwhile either
/// sees it or is the one that answers). `record` returns what was recorded, or why the
/// call is refused.
pub(super) fn call_or_record(
    cfg: &Config,
    request: Request,
    record: impl FnOnce(&mut Pending) -> Result<String, String>,
) -> Result<Outcome, String> {
    let socket = &cfg.control.socket;
    let store = StateStore::new(&cfg.state.dir);
    let mut record = Some(record);
    let deadline = std::time::Instant::now() + STARTING_TIMEOUT;
    loop {
        match call(socket, &request) {
            Ok(reply) => return Ok(Outcome::Applied(reply)),
            Err(ClientError::Connect { source, .. })
                if source.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                return Err(format!(
                    "{} belongs to another user: {source}",
                    socket.display()
                ))
            }
            Err(ClientError::Connect { .. }) => {}
            Err(e) => return Err(e.to_string()),
        }
        // Not answering: stopped, or starting (it holds the lock before it answers).
        match store.try_lock().map_err(|e| e.to_string())? {
            Some(lock) => {
                let mut pending = store
                    .load_pending()
                    .map_err(|e| e.to_string())?
                    .unwrap_or_default();
                let Some(record) = record.take() else {
                    return Err("internal: call recorded twice".into());
                };
                let what = record(&mut pending)?;
                store.save_pending(&lock, &pending).map_err(|e| {
                    format!("gearlb is stopped and the call could not be kept: {e}")
                })?;
                return Ok(Outcome::Recorded(what));
            }
            None if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            None => {
                return Err(format!(
                    "gearlb holds {} but does not answer on {}",
                    cfg.state.dir.display(),
                    socket.display()
                ))
            }
        }
    }
}

/// Print a reply the node's way; its exit code.
pub(super) fn report(outcome: Outcome, out: &mut Out) -> i32 {
    match outcome {
        Outcome::Applied(r) => {
            if r.exit_code == 0 {
                out.result(&r.message);
            } else {
                out.error(&r.message);
            }
            r.exit_code
        }
        Outcome::Recorded(what) => {
            out.result(format!(
                "gearlb is stopped: {what} recorded; applied when it starts"
            ));
            0
        }
    }
}

pub(super) fn describe_bad(bad: &[crate::gear::BadEntry]) -> String {
    bad.iter()
        .map(|b| format!("invalid entry {:?}: {}", b.entry, b.reason))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One control-socket call, on a small runtime of its own.
pub(super) fn call(socket: &Path, request: &Request) -> Result<Reply, ClientError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| ClientError::Io {
            path: socket.to_path_buf(),
            source,
        })?;
    rt.block_on(control::call(socket, request))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_to_a_stopped_balancer_is_recorded_under_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = Config::default();
        cfg.control.socket = dir.path().join("run/control.sock");
        cfg.state.dir = dir.path().join("data");
        let request = Request::UpdateCluster {
            args: vec!["a-ns.x.com|127.0.0.1:9001".into()],
        };
        let outcome = call_or_record(&cfg, request.clone(), |p| {
            p.update_cluster = Some(vec!["a-ns.x.com|127.0.0.1:9001".into()]);
            Ok("gear list".into())
        })
        .unwrap();
        assert!(matches!(outcome, Outcome::Recorded(ref w) if w == "gear list"));
        let store = StateStore::new(&cfg.state.dir);
        let pending = store.load_pending().unwrap().unwrap();
        assert_eq!(
            pending.update_cluster,
            Some(vec!["a-ns.x.com|127.0.0.1:9001".to_string()])
        );
        // A call refused while recording changes nothing.
        let refused = call_or_record(&cfg, request, |p| {
            p.update_cluster = None;
            Err("no valid entry".into())
        });
        assert_eq!(refused.err().as_deref(), Some("no valid entry"));
        assert_eq!(store.load_pending().unwrap().unwrap(), pending);
    }
}
