//! The watched directory (`discovery.dir`): one service per file, YAML (`.yaml`,
//! `.yml`) or TOML (`.toml`); other names are ignored, so the temporary files that
//! consul-template and editors write before renaming are never read.
//!
//! The directory is watched (inotify through `notify`), and the whole directory is read
//! again 300 ms after the last event (a file written in several writes or renamed into
//! place is read once it is complete), and every 5 s in any case (a missed event, a
//! directory created late). A file that cannot be read or parsed is refused with its
//! path and every problem; its service keeps its last good definition.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::Watcher as _;
use tracing::{info, warn};

use super::{FileState, ServiceSet};
use crate::config::{parse_service_file, service_file_format};

/// Quiet time after the last event before the directory is read.
const SETTLE: Duration = Duration::from_millis(300);
/// The directory is read at least this often.
const RESCAN: Duration = Duration::from_secs(5);

/// Watch `dir` until `services` stops, applying every change; `cfg` gives the
/// configuration in force.
pub async fn watch_dir(services: Arc<ServiceSet>, dir: PathBuf) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut watcher: Option<notify::RecommendedWatcher> = None;
    let mut last: Option<BTreeMap<PathBuf, (String, FileState)>> = None;
    loop {
        if watcher.is_none() {
            watcher = start_watcher(&dir, tx.clone());
        }
        let scanned = scan(&dir, last.as_ref());
        let changed = last.as_ref().is_none_or(|l| !same(l, &scanned));
        if changed {
            let files = scanned
                .iter()
                .map(|(p, (_, f))| (p.clone(), f.clone()))
                .collect();
            services.set_files(files).await;
            last = Some(scanned);
        }
        // Wait for an event (then for the directory to settle) or the rescan.
        tokio::select! {
            _ = services.stop.cancelled() => return,
            _ = tokio::time::sleep(RESCAN) => continue,
            e = rx.recv() => if e.is_none() { return },
        }
        loop {
            tokio::select! {
                _ = services.stop.cancelled() => return,
                _ = tokio::time::sleep(SETTLE) => break,
                e = rx.recv() => if e.is_none() { return },
            }
        }
    }
}

fn start_watcher(
    dir: &Path,
    tx: tokio::sync::mpsc::UnboundedSender<()>,
) -> Option<notify::RecommendedWatcher> {
    let mut w = match notify::recommended_watcher(move |_res: notify::Result<notify::Event>| {
        // Any event, or an error (a queue overflow: events were lost), means: read the
        // directory again.
        let _ = tx.send(());
    }) {
        Ok(w) => w,
        Err(e) => {
            warn!(error = %e, "cannot watch service files: reading them every {RESCAN:?}");
            return None;
        }
    };
    match w.watch(dir, notify::RecursiveMode::NonRecursive) {
        Ok(()) => {
            info!(dir = %dir.display(), "watching service files");
            Some(w)
        }
        Err(e) => {
            warn!(dir = %dir.display(), error = %e, "cannot watch the service directory (retried every {RESCAN:?})");
            None
        }
    }
}

fn same(
    a: &BTreeMap<PathBuf, (String, FileState)>,
    b: &BTreeMap<PathBuf, (String, FileState)>,
) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((pa, (ta, _)), (pb, (tb, _)))| pa == pb && ta == tb)
}

/// Every service file of `dir`, by path: its text and what it says. A file whose text
/// is unchanged keeps its earlier state; a bad file keeps its last good definition.
fn scan(
    dir: &Path,
    last: Option<&BTreeMap<PathBuf, (String, FileState)>>,
) -> BTreeMap<PathBuf, (String, FileState)> {
    let mut out = BTreeMap::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            // Nothing is dropped for a directory that cannot be read: keep what was.
            warn!(dir = %dir.display(), error = %e, "cannot read the service directory; services kept");
            return last.cloned().unwrap_or_default();
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(format) = service_file_format(&path) else {
            continue;
        };
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') || !path.is_file() {
            continue;
        }
        let previous = last.and_then(|l| l.get(&path));
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                let good = previous.and_then(|(_, f)| f.good.clone());
                let state = FileState {
                    good,
                    problem: Some(format!("{}: cannot read: {e}", path.display())),
                };
                out.insert(path, (String::new(), state));
                continue;
            }
        };
        if let Some((t, f)) = previous.filter(|(t, _)| *t == text) {
            out.insert(path, (t.clone(), f.clone()));
            continue;
        }
        let state = match parse_service_file(format, &text) {
            Ok(s) => FileState {
                good: Some(s),
                problem: None,
            },
            Err(errors) => {
                let list: Vec<String> = errors
                    .0
                    .iter()
                    .map(|p| format!("{}: {}", p.path, p.message))
                    .collect();
                FileState {
                    good: previous.and_then(|(_, f)| f.good.clone()),
                    problem: Some(format!("{}: {}", path.display(), list.join("; "))),
                }
            }
        };
        out.insert(path, (text, state));
    }
    out
}
