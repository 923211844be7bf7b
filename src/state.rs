//! Persisted state: what the balancer must remember across restarts.
//!
//! Owns the state file `<state.dir>/state.json`: the current backend set and the
//! fingerprint of the configuration's `[[backends]]` list at the time it was saved (the
//! persisted set wins on restart unless that list has been edited since). Writes are
//! atomic: a temporary file in the same directory, fsync, rename over the old file, fsync
//! of the directory. A failed write leaves the last good file in place; an unreadable
//! file is reported and set aside, never silently overwritten or half-read.

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

/// The persisted state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PersistedState {
    pub format: u32,
    /// `config::backends_fingerprint` of the config's `[[backends]]` when saved.
    pub config_backends: String,
    pub backends: Vec<BackendSpec>,
    /// The known peer balancers (from `set-peers`), when gossip is on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<crate::gear::PeerSpec>,
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

    /// Write atomically; on error the previous file is untouched.
    pub fn save(&self, state: &PersistedState) -> Result<(), StateError> {
        self.save_with(|| state.clone())
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
        fs::create_dir_all(&self.dir).map_err(io)?;
        let mut text =
            serde_json::to_vec_pretty(&state).map_err(|e| io(std::io::Error::other(e)))?;
        text.push(b'\n');
        let tmp = self
            .dir
            .join(format!(".{STATE_FILE}.tmp.{}.{}", std::process::id(), *seq));
        let write = || -> std::io::Result<()> {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            f.write_all(&text)?;
            f.sync_all()?;
            fs::rename(&tmp, &path)?;
            // The rename is durable only once the directory entry is.
            File::open(&self.dir)?.sync_all()
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&tmp);
            io(e)
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
                })
                .collect(),
            peers: Vec::new(),
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
