//! Persisted state: what the balancer must remember across restarts.
//!
//! Owns the state file `<state.dir>/state.json`: the current backend set and the
//! fingerprint of the configuration's `[[backends]]` list at the time it was saved (the
//! persisted set wins on restart unless that list has been edited since). Writes are
//! atomic: a temporary file in the same directory, fsync, rename over the old file, fsync
//! of the directory. A failed write leaves the last good file in place; an unreadable
//! file is reported and set aside, never silently overwritten or half-read.
//!
//! Also owns what keeps calls made while the balancer is stopped: a running balancer
//! holds an exclusive lock on `<state.dir>/gearlb.lock` ([`StateLock`]) for its whole
//! life; a caller that cannot reach it and can take that lock knows it is stopped and
//! records its call in `<state.dir>/pending.json` ([`Pending`]), which the balancer
//! applies at start, through the same code as a live call, before it serves.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::routing::BackendSpec;

/// Name of the state file inside `state.dir`.
pub const STATE_FILE: &str = "state.json";
/// Format version written; files of other versions are refused, not guessed at.
pub const FORMAT: u32 = 1;
/// Largest state file read (a few thousand gears fit in far less).
const MAX_STATE_BYTES: u64 = 16 << 20;
/// Calls made while the balancer was stopped.
pub const PENDING_FILE: &str = "pending.json";
/// Held by the running balancer.
pub const LOCK_FILE: &str = "gearlb.lock";

/// Calls made while the balancer was stopped, applied in this order at its start:
/// the peer list, the gear list, then rotations (merged by their timestamps). Only the
/// latest of each list matters, and one rotation per gear.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pending {
    pub format: u32,
    /// Arguments of the latest `set-peers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_peers: Option<Vec<String>>,
    /// Arguments of the latest `update-cluster`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_cluster: Option<Vec<String>>,
    /// The latest rotation op per gear.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rotations: Vec<crate::rotation::RotationOp>,
}

impl Pending {
    pub fn is_empty(&self) -> bool {
        self.set_peers.is_none() && self.update_cluster.is_none() && self.rotations.is_empty()
    }

    /// Record a rotation op, replacing an earlier one for the same gear.
    pub fn add_rotation(&mut self, op: crate::rotation::RotationOp) {
        self.rotations.retain(|o| o.gear != op.gear);
        self.rotations.push(op);
    }
}

/// The running balancer's hold on its state directory (released when dropped, or by
/// the kernel when the process ends, however it ends).
#[derive(Debug)]
pub struct StateLock {
    _file: File,
}

/// The persisted state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PersistedState {
    pub format: u32,
    /// `config::backends_fingerprint` of the config's `[[backends]]` when saved.
    pub config_backends: String,
    pub backends: Vec<BackendSpec>,
    /// The known peer balancers (from `set-peers`, or `cluster.peers` with the ids
    /// learnt at their addresses), when gossip is on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<crate::gear::PeerSpec>,
    /// `cluster::peers_fingerprint` of the configuration's `cluster.peers` when saved
    /// (absent in files of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peers_config: Option<String>,
    /// Rotation ops in force, one per gear: rotated-out gears stay out across restarts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rotations: Vec<crate::rotation::RotationOp>,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("state file {path} is not valid: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

/// Reads and writes the state file of one state directory. Saves are serialised:
/// two writers (a control command and the rotation engine) never interleave.
#[derive(Clone, Debug)]
pub struct StateStore {
    dir: PathBuf,
    writing: std::sync::Arc<std::sync::Mutex<u64>>,
}

impl StateStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StateStore {
            dir: dir.into(),
            writing: Default::default(),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    /// The saved state, `None` when there is none yet.
    pub fn load(&self) -> Result<Option<PersistedState>, StateError> {
        let path = self.path();
        let io = |source| StateError::Io {
            path: path.clone(),
            source,
        };
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        let len = file.metadata().map_err(io)?.len();
        if len > MAX_STATE_BYTES {
            return Err(StateError::Invalid {
                path,
                reason: format!("{len} bytes, more than the {MAX_STATE_BYTES} allowed"),
            });
        }
        let text = fs::read_to_string(&path).map_err(io)?;
        parse(&text)
            .map(Some)
            .map_err(|reason| StateError::Invalid { path, reason })
    }

    /// Take the state directory's lock if nobody holds it (`None` when a balancer
    /// does). Creates the directory.
    pub fn try_lock(&self) -> Result<Option<StateLock>, StateError> {
        let path = self.dir.join(LOCK_FILE);
        let io = |source| StateError::Io {
            path: path.clone(),
            source,
        };
        fs::create_dir_all(&self.dir).map_err(io)?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(StateLock { _file: file })),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(io(e)),
        }
    }

    /// Calls recorded while the balancer was stopped, if any.
    pub fn load_pending(&self) -> Result<Option<Pending>, StateError> {
        let path = self.dir.join(PENDING_FILE);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StateError::Io { path, source }),
        };
        let p: Pending = serde_json::from_str(&text).map_err(|e| StateError::Invalid {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if p.format != FORMAT {
            return Err(StateError::Invalid {
                path,
                reason: format!("format {} is not the supported {FORMAT}", p.format),
            });
        }
        Ok(Some(p))
    }

    /// Record calls for the next start (atomically). The caller holds the lock.
    pub fn save_pending(&self, _held: &StateLock, pending: &Pending) -> Result<(), StateError> {
        let mut p = pending.clone();
        p.format = FORMAT;
        let mut text = serde_json::to_vec_pretty(&p).map_err(|e| StateError::Io {
            path: self.dir.join(PENDING_FILE),
            source: std::io::Error::other(e),
        })?;
        text.push(b'\n');
        let mut seq = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        *seq += 1;
        self.write_atomic(PENDING_FILE, &text, *seq)
    }

    /// Forget the recorded calls once applied.
    pub fn clear_pending(&self, _held: &StateLock) -> Result<(), StateError> {
        let path = self.dir.join(PENDING_FILE);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StateError::Io { path, source }),
        }
    }

    /// Write atomically; on error the previous file is untouched.
    pub fn save(&self, state: &PersistedState) -> Result<(), StateError> {
        self.save_with(|| state.clone())
    }

    /// [`StateStore::save`] on the runtime's blocking pool: the write and its fsyncs
    /// take as long as the disk does, and on a worker thread they would stall every
    /// task on it (with `runtime.threads = 1`, the whole data plane). The caller orders
    /// its saves (the last one awaited is the last written).
    pub async fn save_off_runtime(&self, state: PersistedState) -> Result<(), StateError> {
        let me = self.clone();
        let path = self.path();
        tokio::task::spawn_blocking(move || me.save(&state))
            .await
            .unwrap_or_else(|e| {
                Err(StateError::Io {
                    path,
                    source: std::io::Error::other(e),
                })
            })
    }

    /// Build the state under the write lock, then write it: of two concurrent savers,
    /// the one that writes last also read last, so the file never goes back in time.
    pub fn save_with(&self, build: impl FnOnce() -> PersistedState) -> Result<(), StateError> {
        let path = self.path();
        let io = |source| StateError::Io {
            path: path.clone(),
            source,
        };
        // The guarded counter only names temporary files; a panic while holding it
        // leaves nothing inconsistent, so a poisoned lock is taken over.
        let mut seq = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        *seq += 1;
        let state = build();
        let mut text =
            serde_json::to_vec_pretty(&state).map_err(|e| io(std::io::Error::other(e)))?;
        text.push(b'\n');
        self.write_atomic(STATE_FILE, &text, *seq)
    }

    /// Write `name` in the state directory (see [`write_atomic`]).
    fn write_atomic(&self, name: &str, text: &[u8], seq: u64) -> Result<(), StateError> {
        write_atomic(&self.dir, name, text, seq, None).map_err(|source| StateError::Io {
            path: self.dir.join(name),
            source,
        })
    }

    /// Move an unreadable state file aside (`state.json.bad`) so it is kept for a
    /// person to look at and a fresh one can be written.
    pub fn set_aside(&self) -> std::io::Result<PathBuf> {
        let bad = self.dir.join(format!("{STATE_FILE}.bad"));
        fs::rename(self.path(), &bad)?;
        Ok(bad)
    }
}

/// Write `name` in `dir`: a temporary file (created with `mode` when given: a file
/// that holds secrets is never readable by others, not even for a moment), fsync,
/// rename over the old one, fsync of the directory. On error the previous file is
/// untouched. `seq` names the temporary file (concurrent writers each have their own).
pub fn write_atomic(
    dir: &Path,
    name: &str,
    text: &[u8],
    seq: u64,
    mode: Option<u32>,
) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(name);
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{name}.tmp.{}.{seq}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut opts = OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        if let Some(m) = mode {
            opts.mode(m);
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(text)?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        // The rename is durable only once the directory entry is.
        File::open(dir)?.sync_all()
    };
    write().inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

/// Parse and check a state file's text.
pub fn parse(text: &str) -> Result<PersistedState, String> {
    let st: PersistedState = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if st.format != FORMAT {
        return Err(format!(
            "format {} is not the supported {FORMAT}",
            st.format
        ));
    }
    let mut names = std::collections::HashSet::new();
    for b in &st.backends {
        if !crate::gear::is_backend_name(&b.name) {
            return Err(format!(
                "backend name {:?} is not valid",
                crate::gear::printable(&b.name)
            ));
        }
        if !names.insert(b.name.as_str()) {
            return Err(format!("backend {} is listed twice", b.name));
        }
    }
    Ok(st)
}

/// True when `dir` exists or can be created and written (for `gearlb check`).
pub fn dir_writable(dir: &Path) -> Result<(), std::io::Error> {
    fs::create_dir_all(dir)?;
    let probe = dir.join(format!(".gearlb-write-test.{}", std::process::id()));
    File::create(&probe)?;
    fs::remove_file(&probe)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(n: u16) -> PersistedState {
        PersistedState {
            format: FORMAT,
            config_backends: "abc".into(),
            backends: (1..=n)
                .map(|i| BackendSpec {
                    name: format!("web{i}"),
                    addr: format!("127.0.0.1:{}", 9000 + i).parse().unwrap(),
                    gear_dns: Some(format!("web{i}-ns.example.com")),
                    cookie: None,
                    backup: false,
                    max_connections: None,
                    version: None,
                    compatible: Vec::new(),
                    send_proxy: None,
                })
                .collect(),
            peers: Vec::new(),
            peers_config: None,
            rotations: Vec::new(),
        }
    }

    #[test]
    fn round_trip_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::new(dir.path().join("nested"));
        assert_eq!(store.load().unwrap(), None);
        store.save(&state(3)).unwrap();
        assert_eq!(store.load().unwrap(), Some(state(3)));
        store.save(&state(1)).unwrap();
        assert_eq!(store.load().unwrap(), Some(state(1)));
        let leftovers: Vec<_> = fs::read_dir(store.dir.clone())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from(STATE_FILE)]);
    }

    #[test]
    fn invalid_files_are_refused() {
        for text in [
            "",
            "{",
            r#"{"format":2,"config_backends":"","backends":[]}"#,
            r#"{"format":1,"config_backends":"","backends":[{"name":"a b","addr":"127.0.0.1:1"}]}"#,
            r#"{"format":1,"config_backends":"","backends":[{"name":"a","addr":"127.0.0.1:0"}]}"#,
            r#"{"format":1,"config_backends":"","backends":[{"name":"a","addr":"127.0.0.1:1"},{"name":"a","addr":"127.0.0.1:2"}]}"#,
            r#"{"format":1,"config_backends":"","backends":[],"extra":1}"#,
        ] {
            assert!(parse(text).is_err(), "{text:?} should be refused");
        }
    }

    #[test]
    fn failed_save_keeps_last_good_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::new(dir.path());
        store.save(&state(2)).unwrap();
        // A directory where the temporary file must go: the write fails, even as root.
        let tmp = dir
            .path()
            .join(format!(".{STATE_FILE}.tmp.{}.2", std::process::id()));
        fs::create_dir(&tmp).unwrap();
        assert!(store.save(&state(5)).is_err());
        assert_eq!(store.load().unwrap(), Some(state(2)));
    }

    #[test]
    fn concurrent_saves_do_not_trip_over_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::new(dir.path());
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let store = store.clone();
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        store.save(&state(i % 3 + 1)).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(store.load().unwrap().is_some());
    }

    #[test]
    fn the_lock_is_exclusive_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::new(dir.path().join("fresh"));
        let held = store.try_lock().unwrap().expect("free");
        assert!(store.try_lock().unwrap().is_none(), "held by someone else");
        drop(held);
        assert!(store.try_lock().unwrap().is_some());
    }

    #[test]
    fn pending_calls_round_trip_and_keep_one_rotation_per_gear() {
        use crate::rotation::{Op, RotationOp};
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::new(dir.path());
        assert_eq!(store.load_pending().unwrap(), None);
        let lock = store.try_lock().unwrap().unwrap();
        let op = |gear: &str, op, ts| RotationOp {
            gear: gear.into(),
            op,
            ts,
            by: "lb1".into(),
            deadline_ms: 0,
        };
        let mut p = Pending {
            update_cluster: Some(vec!["a-ns.x|127.0.0.1:1".into()]),
            ..Default::default()
        };
        p.add_rotation(op("a-ns", Op::Out, 1));
        p.add_rotation(op("b-ns", Op::Out, 2));
        p.add_rotation(op("a-ns", Op::In, 3));
        store.save_pending(&lock, &p).unwrap();
        let back = store.load_pending().unwrap().unwrap();
        assert_eq!(back.format, FORMAT);
        assert_eq!(back.update_cluster, p.update_cluster);
        assert_eq!(back.rotations.len(), 2);
        assert!(back.rotations.contains(&op("a-ns", Op::In, 3)));
        store.clear_pending(&lock).unwrap();
        assert_eq!(store.load_pending().unwrap(), None);
        fs::write(dir.path().join(PENDING_FILE), "{").unwrap();
        assert!(
            store.load_pending().is_err(),
            "garbage is an error, not nothing"
        );
    }

    #[test]
    fn set_aside_keeps_the_bad_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::new(dir.path());
        fs::write(store.path(), "garbage").unwrap();
        assert!(store.load().is_err());
        let bad = store.set_aside().unwrap();
        assert_eq!(fs::read_to_string(bad).unwrap(), "garbage");
        assert_eq!(store.load().unwrap(), None);
    }
}
