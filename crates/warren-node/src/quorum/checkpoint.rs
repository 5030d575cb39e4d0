//! A quorum queue's checkpoint: its state machine, the bodies it holds in
//! memory and where its paged bodies lie (queue/quorum_bodies.rs in
//! warren-core) at an applied index, in `DATA_DIR/quorum/<group, 16 hex digits>.snap`,
//! replaced whole (written beside, synced, renamed). Once one is on disk
//! the group's log forgets what it covers, so a restart installs it and
//! replays only the entries after it.
//!
//! ```text
//! magic "WRNQCP01" | index u64 | crc u32 (CRC-32 of data) | len u64 | data
//! ```
//! (little-endian). A file that is short or fails its CRC is ignored,
//! as if there were none: the log still holds everything after the
//! previous one, since it is compacted only after a checkpoint is synced.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"WRNQCP01";
const HEAD: usize = 8 + 8 + 4 + 8;

fn path(dir: &Path, group: u64) -> PathBuf {
    dir.join(format!("{group:016x}.snap"))
}

/// (index, data) of `group`'s checkpoint, if a whole one is there.
fn read(dir: &Path, group: u64) -> Option<(u64, Vec<u8>)> {
    let mut b = std::fs::read(path(dir, group)).ok()?;
    if b.len() < HEAD || &b[..8] != MAGIC {
        return None;
    }
    let index = u64::from_le_bytes(b[8..16].try_into().ok()?);
    let crc = u32::from_le_bytes(b[16..20].try_into().ok()?);
    let len = u64::from_le_bytes(b[20..28].try_into().ok()?) as usize;
    if b.len() - HEAD != len || crc32fast::hash(&b[HEAD..]) != crc {
        tracing::warn!(
            group,
            "a quorum queue checkpoint that is torn or corrupt, ignored"
        );
        return None;
    }
    b.drain(..HEAD);
    Some((index, b))
}

/// Each group with a checkpoint, and the index it covers (what the Raft
/// log need not hand back again).
pub fn indexes(dir: &Path) -> BTreeMap<u64, u64> {
    let mut out = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(hex) = name.to_str().and_then(|n| n.strip_suffix(".snap")) else {
            continue;
        };
        let Ok(group) = u64::from_str_radix(hex, 16) else {
            continue;
        };
        if let Some((index, _)) = read(dir, group) {
            out.insert(group, index);
        }
    }
    out
}

/// `group`'s checkpoint data.
pub fn load(dir: &Path, group: u64) -> Option<Vec<u8>> {
    read(dir, group).map(|(_, d)| d)
}

/// Write `group`'s state at `index`, durably.
pub fn write(dir: &Path, group: u64, index: u64, data: &[u8]) -> std::io::Result<()> {
    let mut b = Vec::with_capacity(HEAD + data.len());
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&index.to_le_bytes());
    b.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    b.extend_from_slice(&(data.len() as u64).to_le_bytes());
    b.extend_from_slice(data);
    crate::definitions::replace_file(&path(dir, group), &b)
}

/// The group is gone: its checkpoint, and its paged bodies' segments
/// (`<group, 16 hex digits>/`, the queue's own).
pub fn remove(dir: &Path, group: u64) {
    let _ = std::fs::remove_file(path(dir, group));
    let _ = std::fs::remove_dir_all(dir.join(format!("{group:016x}")));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_comes_back_and_a_torn_one_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 0xab, 42, b"state").unwrap();
        assert_eq!(indexes(dir.path()), [(0xab, 42)].into());
        assert_eq!(load(dir.path(), 0xab).as_deref(), Some(&b"state"[..]));
        let p = path(dir.path(), 0xab);
        let b = std::fs::read(&p).unwrap();
        std::fs::write(&p, &b[..b.len() - 1]).unwrap();
        assert!(indexes(dir.path()).is_empty());
        assert_eq!(load(dir.path(), 0xab), None);
    }
}
