//! Definitions on disk: `definitions.json`, a snapshot in RabbitMQ's
//! format, continued by `definitions.N.log`, one JSON record per line for
//! every durable change since (N is named in the snapshot).
//!
//! A change is recorded in memory under the lock that ordered it, then
//! committed: whoever commits first appends every record made so far and
//! fdatasyncs once, and the commits that queued behind find their records
//! already durable (group commit). A declare thus costs one small append,
//! not a rewrite of every definition, which made N durable declares O(N²).
//! Once the log holds more records than twice the objects alive, the next
//! commit writes a new snapshot (temporary file, fsync, rename) and starts
//! a new log. At start the log is replayed over the snapshot; a torn last
//! line (a crash mid-append, before its commit returned) is dropped.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use warren_core::changes::{Change, DefinitionsLog};

use super::model::{Model, Record};
use super::Definitions;

/// A log shorter than this is never compacted, however few objects live.
const COMPACT_MIN_RECORDS: u64 = 4096;

pub struct Store {
    dir: PathBuf,
    state: Mutex<State>,
    /// Held while writing and syncing; the order is `io`, then `state`.
    io: Mutex<Io>,
    /// Open [`Batch`]es: while any is open, commits return at once and the
    /// last batch to close commits for all.
    batches: AtomicUsize,
}

struct State {
    model: Model,
    /// Records not yet written, one line each.
    pending: Vec<u8>,
    /// The ticket of the last record.
    recorded: u64,
    /// Records in the current log, written or pending.
    in_log: u64,
    generation: u64,
}

struct Io {
    log: Option<File>,
    /// Every record up to this ticket is durable.
    synced: u64,
    /// An append failed part way: the log may hold a torn line with good
    /// records to follow, which replay would drop. Compact next time.
    broken: bool,
}

/// Defers commits until dropped: an import of N objects costs one append
/// and one fsync instead of N.
pub struct Batch {
    store: Arc<Store>,
}

impl Drop for Batch {
    fn drop(&mut self) {
        if self.store.batches.fetch_sub(1, Ordering::SeqCst) == 1 {
            let ticket = self.store.state.lock().recorded;
            if let Err(e) = self.store.flush(ticket, false) {
                tracing::error!("cannot save definitions: {e}");
            }
        }
    }
}

impl Store {
    /// Open the definitions in `data_dir`: the store (with nothing in it
    /// yet: restoring what is returned into the broker records it) and the
    /// definitions kept there, if any.
    pub fn open(data_dir: &Path) -> std::io::Result<(Store, Option<Definitions>)> {
        let snapshot_path = data_dir.join("definitions.json");
        let stored: Option<Definitions> = match fs::read(&snapshot_path) {
            Ok(bytes) => Some(
                serde_json::from_slice(&bytes)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let generation = stored.as_ref().and_then(|d| d.warren_log_generation).unwrap_or(0);
        let stored = match stored {
            Some(d) => Some(replay(&d, &log_path(data_dir, generation))?),
            None => None,
        };
        let store = Store {
            dir: data_dir.to_path_buf(),
            state: Mutex::new(State {
                model: Model::default(),
                pending: Vec::new(),
                recorded: 0,
                in_log: 0,
                generation,
            }),
            io: Mutex::new(Io {
                log: None,
                synced: 0,
                broken: false,
            }),
            batches: AtomicUsize::new(0),
        };
        Ok((store, stored))
    }

    /// Commit only when the returned guard drops, not after every change.
    pub fn batch(self: &Arc<Self>) -> Batch {
        self.batches.fetch_add(1, Ordering::SeqCst);
        Batch { store: self.clone() }
    }

    /// Write a snapshot of everything recorded and start a new log: at
    /// start, after restoring (the old log may end in a torn line that new
    /// records must not follow).
    pub fn compact(&self) -> std::io::Result<()> {
        let ticket = self.state.lock().recorded;
        self.flush(ticket, true)
    }

    /// Make every record up to `ticket` durable, with one append and one
    /// fdatasync for all that are pending, or a new snapshot when the log
    /// has outgrown the objects alive (or `compact` asks).
    fn flush(&self, ticket: u64, compact: bool) -> std::io::Result<()> {
        let mut io = self.io.lock();
        if io.synced >= ticket && !compact {
            return Ok(());
        }
        let mut st = self.state.lock();
        let upto = st.recorded;
        let pending = std::mem::take(&mut st.pending);
        let due = st.in_log > COMPACT_MIN_RECORDS.max(2 * st.model.len() as u64);
        if compact || due || io.broken || io.log.is_none() {
            let generation = st.generation + 1;
            let mut d = st.model.to_definitions();
            d.warren_log_generation = Some(generation);
            drop(st);
            match self.write_snapshot(&mut io, &d, generation) {
                Ok(()) => {
                    let mut st = self.state.lock();
                    st.generation = generation;
                    st.in_log = st.recorded - upto;
                    io.synced = upto;
                    io.broken = false;
                    return Ok(());
                }
                // Fall back to appending to the log there is, if any.
                Err(e) if io.log.is_some() && !io.broken && !compact => {
                    tracing::error!("cannot compact definitions (appending instead): {e}")
                }
                Err(e) => {
                    self.put_back(pending);
                    return Err(e);
                }
            }
        } else {
            drop(st);
        }
        let log = io.log.as_mut().expect("a log is open unless broken");
        match log.write_all(&pending).and_then(|()| log.sync_data()) {
            Ok(()) => {
                io.synced = upto;
                Ok(())
            }
            Err(e) => {
                io.broken = true;
                self.put_back(pending);
                Err(e)
            }
        }
    }

    /// Records whose write failed go back in front of those made since.
    fn put_back(&self, mut pending: Vec<u8>) {
        let mut st = self.state.lock();
        pending.extend_from_slice(&st.pending);
        st.pending = pending;
    }

    /// Write `d` as the snapshot continued by log `generation`: create the
    /// new (empty) log, write the snapshot to a temporary file, fsync,
    /// rename it into place, fsync the directory, then delete the old log.
    fn write_snapshot(&self, io: &mut Io, d: &Definitions, generation: u64) -> std::io::Result<()> {
        let log = File::create(log_path(&self.dir, generation))?;
        let json = serde_json::to_vec_pretty(d).map_err(std::io::Error::other)?;
        replace_file(&self.dir.join("definitions.json"), &json)?;
        io.log = Some(log);
        // Every log before this one is covered by the snapshot.
        if let Ok(entries) = fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                let old = name
                    .strip_prefix("definitions.")
                    .and_then(|n| n.strip_suffix(".log"))
                    .and_then(|n| n.parse::<u64>().ok())
                    .is_some_and(|n| n != generation);
                if old {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        Ok(())
    }
}

/// Put `bytes` at `path` whole or not at all: a temporary file beside it,
/// fsynced, renamed over it, and the directory fsynced (so the rename
/// survives a crash too).
pub fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, path)?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

/// The JSON value in the file at `path`, or `T`'s default when there is
/// no such file (a node's registries, written whole by [`replace_file`]).
pub fn read_json_or_default<T: serde::de::DeserializeOwned + Default>(path: &Path) -> std::io::Result<T> {
    match fs::read(path) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(e),
    }
}

impl Store {
    /// Record that every metadata log entry up to `index` is applied, in
    /// the same log as the changes applying them made (committed with
    /// them).
    pub fn record_meta_applied(&self, index: u64) -> u64 {
        self.put(Record::MetaApplied { index })
    }

    /// Record a node that joined the cluster.
    pub fn record_cluster_node(&self, node: super::records::ClusterNode) -> u64 {
        self.put(Record::ClusterNode(node))
    }

    /// Record that a node that had joined was forgotten (nothing if it
    /// was one of the configured nodes, which the store does not hold).
    pub fn record_cluster_node_forgotten(&self, name: &str) -> u64 {
        self.put(Record::ClusterNodeForgotten { name: name.into() })
    }

    fn put(&self, record: Record) -> u64 {
        let mut st = self.state.lock();
        // Serializing these plain structs cannot fail.
        if serde_json::to_writer(&mut st.pending, &record).is_ok() {
            st.pending.push(b'\n');
        }
        st.model.apply(record);
        st.recorded += 1;
        st.in_log += 1;
        st.recorded
    }
}

impl DefinitionsLog for Store {
    fn record(&self, change: Change<'_>) -> u64 {
        self.put(Record::from(change))
    }

    fn commit(&self, ticket: u64) {
        if self.batches.load(Ordering::SeqCst) > 0 {
            return;
        }
        if let Err(e) = self.flush(ticket, false) {
            tracing::error!("cannot save definitions: {e}");
        }
    }
}

fn log_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("definitions.{generation}.log"))
}

/// `d` with the records of the log at `path` applied, in order, up to the
/// first line that does not parse (a torn append).
fn replay(d: &Definitions, path: &Path) -> std::io::Result<Definitions> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    let mut model = Model::of(d);
    let mut applied = 0usize;
    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<Record>(line) {
            Ok(r) => {
                model.apply(r);
                applied += 1;
            }
            Err(e) => {
                tracing::warn!(
                    "{}: dropping a torn record after {applied} good ones: {e}",
                    path.display()
                );
                break;
            }
        }
    }
    Ok(model.to_definitions())
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
