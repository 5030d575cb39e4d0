//! The store's root (`DATA_DIR/queues`): one directory per queue that has
//! needed the disk, named at random and labelled by a `queue.meta` file, so
//! a queue deleted and declared again never meets its predecessor's files.
//! At start the broker claims the directories of the durable queues it
//! restores; whatever nobody claims (non-durable queues' pages, deleted
//! queues) is removed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use rand::RngCore;

use crate::error::{Result, StoreError};
use crate::queue_store::{QueueStore, Recovered};
use crate::syncer::Syncer;
use crate::writer::Shared;

const META: &str = "queue.meta";
const META_MAGIC: &[u8; 8] = b"WRNQMETA";

type QueueKey = (String, Vec<u8>);

pub struct Storage {
    root: PathBuf,
    syncer: Arc<Syncer>,
    /// Directories found at start, not yet claimed.
    found: Mutex<HashMap<QueueKey, PathBuf>>,
    /// Every store opened, for the flush at shutdown.
    open: Mutex<Vec<Weak<Shared>>>,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Storage({})", self.root.display())
    }
}

fn encode_meta(vhost: &str, name: &[u8]) -> Vec<u8> {
    let mut m = META_MAGIC.to_vec();
    m.extend_from_slice(&(vhost.len() as u16).to_le_bytes());
    m.extend_from_slice(vhost.as_bytes());
    m.push(name.len().min(255) as u8);
    m.extend_from_slice(&name[..name.len().min(255)]);
    m
}

fn decode_meta(b: &[u8]) -> Option<QueueKey> {
    let rest = b.strip_prefix(META_MAGIC)?;
    let vl = u16::from_le_bytes([*rest.first()?, *rest.get(1)?]) as usize;
    let vhost = std::str::from_utf8(rest.get(2..2 + vl)?).ok()?.to_string();
    let rest = &rest[2 + vl..];
    let nl = *rest.first()? as usize;
    let name = rest.get(1..1 + nl)?.to_vec();
    (rest.len() == 1 + nl).then_some((vhost, name))
}

impl Storage {
    /// Open (or create) the root and index the queue directories in it.
    pub fn open(root: &Path) -> Result<Arc<Storage>> {
        std::fs::create_dir_all(root).map_err(|e| StoreError::io(root, e))?;
        let mut found = HashMap::new();
        let rd = std::fs::read_dir(root).map_err(|e| StoreError::io(root, e))?;
        for ent in rd.flatten() {
            let dir = ent.path();
            if !dir.is_dir() {
                continue;
            }
            match std::fs::read(dir.join(META))
                .ok()
                .as_deref()
                .and_then(decode_meta)
            {
                Some(key) => {
                    if let Some(other) = found.insert(key, dir.clone()) {
                        tracing::warn!("two stores for one queue; ignoring {}", other.display());
                    }
                }
                None => {
                    // Created but never labelled: it holds nothing confirmed.
                    let _ = std::fs::remove_dir_all(&dir);
                }
            }
        }
        Ok(Arc::new(Storage {
            root: root.to_path_buf(),
            syncer: Syncer::start(),
            found: Mutex::new(found),
            open: Mutex::new(Vec::new()),
        }))
    }

    pub fn syncer(&self) -> &Arc<Syncer> {
        &self.syncer
    }

    fn opened(&self, store: &QueueStore) {
        let mut open = self.open.lock();
        open.retain(|w| w.strong_count() > 0);
        open.push(Arc::downgrade(store.shared()));
    }

    /// The store a durable queue left before the restart, recovered; None
    /// if it had none.
    pub fn recover(&self, vhost: &str, name: &[u8]) -> Result<Option<(QueueStore, Recovered)>> {
        let Some(dir) = self.found.lock().remove(&(vhost.to_string(), name.to_vec())) else {
            return Ok(None);
        };
        let (store, rec) = QueueStore::open(dir, true, self.syncer.clone())?;
        self.opened(&store);
        Ok(Some((store, rec)))
    }

    /// A new, empty store for a queue.
    pub fn create(&self, vhost: &str, name: &[u8], durable: bool) -> Result<QueueStore> {
        let mut id = [0u8; 8];
        rand::thread_rng().fill_bytes(&mut id);
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let dir = self.root.join(hex);
        std::fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        let meta = dir.join(META);
        std::fs::write(&meta, encode_meta(vhost, name)).map_err(|e| StoreError::io(&meta, e))?;
        if durable {
            // The label must be there before any confirmed message is.
            for p in [&meta, &dir, &self.root] {
                std::fs::File::open(p)
                    .and_then(|f| f.sync_all())
                    .map_err(|e| StoreError::io(p, e))?;
            }
        }
        let (store, _) = QueueStore::open(dir, durable, self.syncer.clone())?;
        self.opened(&store);
        Ok(store)
    }

    /// Remove every directory no queue claimed at start.
    pub fn discard_unclaimed(&self) {
        for (_, dir) in self.found.lock().drain() {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                tracing::warn!("cannot remove {}: {e}", dir.display());
            }
        }
    }

    /// Write out and fsync every open store, then stop the sync thread
    /// (clean shutdown: acks still in buffers reach the disk).
    pub fn shutdown(&self) {
        let open: Vec<_> = self.open.lock().drain(..).filter_map(|w| w.upgrade()).collect();
        for s in open {
            if let Err(e) = s.sync() {
                tracing::error!("flushing the message store at shutdown: {e}");
            }
        }
        self.syncer.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_roundtrip_and_garbage() {
        let m = encode_meta("/", b"orders");
        assert_eq!(decode_meta(&m), Some(("/".to_string(), b"orders".to_vec())));
        assert_eq!(decode_meta(&m[..m.len() - 1]), None);
        assert_eq!(decode_meta(b"nonsense"), None);
    }
}
