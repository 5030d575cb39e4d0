//! The two files of a segment, as osiris lays them out (osiris.hrl,
//! osiris_log.erl): `<first offset, 20 digits>.segment` holding chunks one
//! after another behind an 8-byte header (`OSIL`, version 1), and
//! `<same>.index` holding one 29-byte record per chunk behind `OSII`,
//! version 1. All integers big-endian.
//!
//! ```text
//! index record:  chunk id u64 | timestamp i64 (ms) | epoch u64 | position u32 | chunk type u8
//! ```
//!
//! The position is where the chunk's 48-byte header starts in the segment
//! (the first chunk is at 8), so a segment holds at most 4 GiB.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{LogError, Result};

pub const SEGMENT_MAGIC: &[u8; 8] = b"OSIL\0\0\0\x01";
pub const INDEX_MAGIC: &[u8; 8] = b"OSII\0\0\0\x01";
pub const FILE_HEADER: u64 = 8;
pub const INDEX_RECORD: usize = 29;

/// `<offset>.segment` and `<offset>.index` in `dir`.
pub fn names(dir: &Path, first_offset: u64) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{first_offset:020}.segment")),
        dir.join(format!("{first_offset:020}.index")),
    )
}

/// The first offsets of the segments in `dir`, ascending (files whose name
/// is not 20 digits are not the log's).
pub fn list(dir: &Path) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(|e| LogError::io(dir, e))?;
    for e in rd {
        let e = e.map_err(|e| LogError::io(dir, e))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(".segment") else {
            continue;
        };
        if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(n) = stem.parse() {
                // Retention deletes the index first: a segment without
                // one was being deleted when the broker stopped.
                if names(dir, n).1.exists() {
                    out.push(n);
                } else {
                    let _ = std::fs::remove_file(names(dir, n).0);
                }
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexRecord {
    pub chunk_id: u64,
    pub timestamp: i64,
    pub epoch: u64,
    pub position: u32,
    pub chunk_type: u8,
}

impl IndexRecord {
    pub fn encode(&self) -> [u8; INDEX_RECORD] {
        let mut b = [0u8; INDEX_RECORD];
        b[0..8].copy_from_slice(&self.chunk_id.to_be_bytes());
        b[8..16].copy_from_slice(&self.timestamp.to_be_bytes());
        b[16..24].copy_from_slice(&self.epoch.to_be_bytes());
        b[24..28].copy_from_slice(&self.position.to_be_bytes());
        b[28] = self.chunk_type;
        b
    }

    pub fn decode(b: &[u8]) -> IndexRecord {
        let u64_ = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        IndexRecord {
            chunk_id: u64_(0),
            timestamp: u64_(8) as i64,
            epoch: u64_(16),
            position: u32::from_be_bytes(b[24..28].try_into().expect("4 bytes")),
            chunk_type: b[28],
        }
    }

    /// osiris pre-allocates with zeros: an all-zero record is not one.
    pub fn is_blank(b: &[u8]) -> bool {
        b.iter().all(|&x| x == 0)
    }
}

/// Check a file's 8-byte header.
pub fn check_magic(f: &mut File, path: &Path, magic: &[u8; 8]) -> Result<()> {
    let mut h = [0u8; 8];
    f.seek(SeekFrom::Start(0)).map_err(|e| LogError::io(path, e))?;
    match f.read_exact(&mut h) {
        Ok(()) if &h == magic => Ok(()),
        _ => Err(LogError::BadMagic {
            path: path.display().to_string(),
        }),
    }
}

/// Every record of an index file (trailing partial or blank records are
/// left out: they are a torn write).
pub fn read_index(path: &Path) -> Result<Vec<IndexRecord>> {
    let mut f = File::open(path).map_err(|e| LogError::io(path, e))?;
    check_magic(&mut f, path, INDEX_MAGIC)?;
    let mut b = Vec::new();
    f.read_to_end(&mut b).map_err(|e| LogError::io(path, e))?;
    Ok(b.chunks_exact(INDEX_RECORD)
        .take_while(|r| !IndexRecord::is_blank(r))
        .map(IndexRecord::decode)
        .collect())
}

/// The index record at `i`, read from disk (for seeks, which are rare:
/// the index is not kept in memory).
pub fn index_record_at(f: &File, path: &Path, i: u64) -> Result<IndexRecord> {
    let mut b = [0u8; INDEX_RECORD];
    f.read_exact_at(&mut b, FILE_HEADER + i * INDEX_RECORD as u64)
        .map_err(|e| LogError::io(path, e))?;
    Ok(IndexRecord::decode(&b))
}

/// How many records an index file of `len` bytes holds.
pub fn index_len(len: u64) -> u64 {
    len.saturating_sub(FILE_HEADER) / INDEX_RECORD as u64
}
