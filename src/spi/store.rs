//! A router's table on disk, under `state.dir` ([`TableStore`]): a snapshot
//! (`routing-table.json`, written atomically) and a journal of the events applied
//! since (`routing-table.journal`, one JSON line per event, each fsynced before the
//! event is acknowledged). Both are mode 0600: they hold the aliases' private keys.
//!
//! Loading reads the snapshot and replays the journal over it; a line cut short by a
//! crash in the middle of its write was never acknowledged (its event comes again) and
//! is dropped. The journal is folded into a new snapshot every [`FOLD_AFTER`] events,
//! so that an event costs one small write, not the whole table.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use gearlb_core::spi::table::{Cert, Table};

pub const SNAPSHOT: &str = "routing-table.json";
pub const JOURNAL: &str = "routing-table.journal";
/// Events journaled before the table is written whole again.
pub const FOLD_AFTER: usize = 500;
/// The largest snapshot read (a table of 10 000 applications with certificates).
const MAX_SNAPSHOT: u64 = 512 * 1024 * 1024;

/// One journaled event: its id, its body, and the certificate it carried once checked.
#[derive(Serialize, Deserialize)]
pub struct Entry {
    pub id: String,
    pub body: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<Cert>,
}

/// The snapshot's envelope.
#[derive(Serialize, Deserialize)]
struct Snapshot {
    format: u32,
    table: Table,
}

const FORMAT: u32 = 1;

/// Apply one journaled event while the table is loaded (its certificate was checked
/// when it was first applied).
pub fn replay(table: &mut Table, e: Entry) {
    if table.seen(&e.id) {
        return;
    }
    if let Ok(ev) = gearlb_core::spi::parse(e.body.as_bytes()) {
        table.apply(&ev, e.cert);
    }
    table.remember(&e.id);
}

/// Reads and writes a router's table in one directory.
pub struct TableStore {
    dir: PathBuf,
    journal: Option<File>,
    journaled: usize,
    seq: u64,
}

impl TableStore {
    pub fn new(dir: &Path) -> Self {
        TableStore {
            dir: dir.to_path_buf(),
            journal: None,
            journaled: 0,
            seq: 0,
        }
    }

    pub fn snapshot_path(&self) -> PathBuf {
        self.dir.join(SNAPSHOT)
    }

    /// The table saved, `None` when there is none. `replay(table, entry)` applies one
    /// journaled event. A snapshot that cannot be read is an error (the caller sets it
    /// aside and starts without); journal lines that cannot be read are skipped.
    pub fn load(
        &mut self,
        mut replay: impl FnMut(&mut Table, Entry),
    ) -> Result<Option<Table>, String> {
        let snap = self.snapshot_path();
        let mut table = match fs::metadata(&snap) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("{}: {e}", snap.display())),
            Ok(m) if m.len() > MAX_SNAPSHOT => {
                return Err(format!("{}: {} bytes, too large", snap.display(), m.len()))
            }
            Ok(_) => {
                let text = fs::read(&snap).map_err(|e| format!("{}: {e}", snap.display()))?;
                let s: Snapshot = serde_json::from_slice(&text)
                    .map_err(|e| format!("{}: not a routing table: {e}", snap.display()))?;
                if s.format != FORMAT {
                    return Err(format!(
                        "{}: format {} is not the supported {FORMAT}",
                        snap.display(),
                        s.format
                    ));
                }
                Some(s.table)
            }
        };
        let path = self.dir.join(JOURNAL);
        let mut count = 0;
        if let Ok(f) = File::open(&path) {
            for line in BufReader::new(f).split(b'\n') {
                let Ok(line) = line else { break };
                // A line cut short by a crash does not parse: its event comes again.
                let Ok(entry) = serde_json::from_slice::<Entry>(&line) else {
                    continue;
                };
                replay(table.get_or_insert_with(Table::default), entry);
                count += 1;
            }
        }
        self.journaled = count;
        Ok(table)
    }

    /// Journal one applied event, durably (fsync) before it returns.
    pub fn append(&mut self, entry: &Entry) -> std::io::Result<()> {
        if self.journal.is_none() {
            fs::create_dir_all(&self.dir)?;
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(self.dir.join(JOURNAL))?;
            // A new journal's directory entry must be durable too.
            File::open(&self.dir)?.sync_all()?;
            self.journal = Some(f);
        }
        let mut line = serde_json::to_vec(entry).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let f = self.journal.as_mut().expect("opened above");
        f.write_all(&line)?;
        f.sync_data()?;
        self.journaled += 1;
        Ok(())
    }

    /// Whether the journal is long enough to be folded into a snapshot.
    pub fn due(&self) -> bool {
        self.journaled >= FOLD_AFTER
    }

    /// Write the whole table (atomically, durably), then start an empty journal.
    pub fn write(&mut self, table: &Table) -> std::io::Result<()> {
        let text = serde_json::to_vec(&Snapshot {
            format: FORMAT,
            table: table.clone(),
        })
        .map_err(std::io::Error::other)?;
        self.seq += 1;
        crate::state::write_atomic(&self.dir, SNAPSHOT, &text, self.seq, Some(0o600))?;
        // The snapshot holds every journaled event now; a crash before the journal is
        // emptied replays them over it, and each is recognised by its id.
        self.journal = None;
        let path = self.dir.join(JOURNAL);
        match fs::remove_file(&path) {
            Ok(()) => File::open(&self.dir)?.sync_all()?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        self.journaled = 0;
        Ok(())
    }

    /// Move an unreadable snapshot aside (`.bad`), for a person to look at.
    pub fn set_aside(&self) -> std::io::Result<PathBuf> {
        let bad = self.dir.join(format!("{SNAPSHOT}.bad"));
        fs::rename(self.snapshot_path(), &bad)?;
        Ok(bad)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn alias(n: u32) -> Entry {
        Entry {
            id: format!("ID:{n}"),
            body: format!(
                "---\n:action: :add_alias\n:app_name: myapp\n:namespace: ns1\n:alias: a{n}.example.org\n"
            ),
            cert: None,
        }
    }

    #[test]
    fn snapshot_and_journal_give_back_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = TableStore::new(dir.path());
        assert!(s.load(replay).unwrap().is_none());
        let mut live = Table::default();
        for n in 0..3 {
            let e = alias(n);
            s.append(&e).unwrap();
            replay(&mut live, e);
        }
        let mut again = TableStore::new(dir.path());
        let t = again.load(replay).unwrap().unwrap();
        assert_eq!(t, live);
        again.write(&t).unwrap();
        assert!(!dir.path().join(JOURNAL).exists());
        let e = alias(3);
        again.append(&e).unwrap();
        replay(&mut live, e);
        // A line torn by a crash is dropped; a crash between the snapshot and the
        // journal's removal replays events the snapshot holds, recognised by id.
        let mut j = OpenOptions::new()
            .append(true)
            .open(dir.path().join(JOURNAL))
            .unwrap();
        j.write_all(b"{\"id\":\"ID:9\",\"bo").unwrap();
        drop(j);
        let t = TableStore::new(dir.path()).load(replay).unwrap().unwrap();
        assert_eq!(t, live);
        for f in [SNAPSHOT, JOURNAL] {
            let mode = fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
    }

    #[test]
    fn an_unreadable_snapshot_is_an_error_and_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(SNAPSHOT), b"{not json").unwrap();
        let mut s = TableStore::new(dir.path());
        assert!(s.load(replay).unwrap_err().contains("not a routing table"));
        let bad = s.set_aside().unwrap();
        assert!(bad.exists());
        assert!(s.load(replay).unwrap().is_none());
    }
}
