//! Reading a queue's directory back after a restart or a crash: the ack
//! log into range sets, then every segment, sequentially, checking each
//! record's CRC and counting the messages still owed to the queue. A torn
//! record at the end of the last segment is cut off (the write it belonged
//! to was never confirmed); a bad record elsewhere ends that segment's scan
//! with an error in the log.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::{Result, StoreError};
use crate::ranges::RangeSet;
use crate::record::{self, Parsed, ACKLOG_MAGIC, KIND_ACKED, KIND_DELIVERED, KIND_MESSAGE, SEGMENT_MAGIC};

/// One segment as recovery found it.
#[derive(Debug, Clone, Copy)]
pub struct ScannedSegment {
    pub first_seq: u64,
    /// Persistent, unacked messages in it.
    pub live: u64,
    pub live_bytes: u64,
}

#[derive(Debug, Default)]
pub struct Scan {
    pub acked: RangeSet,
    pub delivered: RangeSet,
    /// Ack log files found: (number, highest seq named).
    pub ack_files: Vec<(u64, u64)>,
    pub segments: Vec<ScannedSegment>,
    /// One past the highest sequence number found anywhere.
    pub next_seq: u64,
    pub torn_bytes: u64,
}

fn numbered(dir: &Path, ext: &str) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))?;
    for ent in rd {
        let ent = ent.map_err(|e| StoreError::io(dir, e))?;
        let path = ent.path();
        if path.extension().and_then(|e| e.to_str()) != Some(ext) {
            continue;
        }
        if let Some(n) = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u64>().ok())
        {
            out.push((n, path));
        }
    }
    out.sort();
    Ok(out)
}

/// Feed every whole record of `path` (after its magic) to `f`, reading in
/// large chunks. Returns the offset just past the last good record and
/// whether the file ended cleanly there.
fn for_each_record(path: &Path, magic: &[u8; 8], mut f: impl FnMut(u8, &[u8])) -> Result<(u64, bool)> {
    let mut file = File::open(path).map_err(|e| StoreError::io(path, e))?;
    let mut buf = vec![0u8; 4 << 20];
    let mut have = 0usize;
    // The magic first.
    let mut head = [0u8; 8];
    let mut got = 0;
    while got < 8 {
        let n = file.read(&mut head[got..]).map_err(|e| StoreError::io(path, e))?;
        if n == 0 {
            break;
        }
        got += n;
    }
    if got < 8 {
        // Empty, or the magic itself was torn: nothing in it was written.
        return Ok((0, got == 0));
    }
    if &head != magic {
        return Err(StoreError::BadMagic {
            path: path.display().to_string(),
        });
    }
    let mut offset = 8u64;
    let mut eof = false;
    loop {
        if !eof && have < buf.len() {
            let n = file.read(&mut buf[have..]).map_err(|e| StoreError::io(path, e))?;
            if n == 0 {
                eof = true;
            }
            have += n;
        }
        let mut pos = 0;
        loop {
            match record::parse(&buf[pos..have]) {
                Parsed::Record { kind, payload, size } => {
                    f(kind, payload);
                    pos += size;
                    offset += size as u64;
                }
                Parsed::Incomplete { need } => {
                    if eof {
                        return Ok((offset, pos == have));
                    }
                    if need > buf.len() {
                        // A large record: grow to hold it (bounded by MAX_RECORD).
                        buf.resize(need, 0);
                    }
                    break;
                }
                Parsed::Corrupt(_) => return Ok((offset, false)),
            }
        }
        buf.copy_within(pos..have, 0);
        have -= pos;
    }
}

pub fn scan(dir: &Path) -> Result<Scan> {
    let mut s = Scan::default();
    for (number, path) in numbered(dir, "acks")? {
        let mut max_seq = 0;
        let (acked, delivered) = (&mut s.acked, &mut s.delivered);
        let r = for_each_record(&path, ACKLOG_MAGIC, |kind, payload| {
            if let Some((a, b)) = record::decode_range(payload) {
                max_seq = max_seq.max(b);
                match kind {
                    KIND_ACKED => acked.insert(a, b),
                    KIND_DELIVERED => delivered.insert(a, b),
                    _ => {}
                }
            }
        });
        if let Err(e) = r {
            tracing::warn!("skipping ack log {}: {e}", path.display());
        }
        s.ack_files.push((number, max_seq));
    }
    s.acked.normalize();
    s.delivered.normalize();

    let segments = numbered(dir, "seg")?;
    let last = segments.len().saturating_sub(1);
    for (i, (first_seq, path)) in segments.into_iter().enumerate() {
        let mut seg = ScannedSegment {
            first_seq,
            live: 0,
            live_bytes: 0,
        };
        let acked = &s.acked;
        let mut next_seq = s.next_seq;
        let (end, clean) = for_each_record(&path, SEGMENT_MAGIC, |kind, payload| {
            if kind != KIND_MESSAGE {
                return;
            }
            if let Some(h) = record::decode_head(payload) {
                next_seq = next_seq.max(h.seq + 1);
                if h.persistent && !acked.contains(h.seq) {
                    seg.live += 1;
                    seg.live_bytes += h.body_len;
                }
            }
        })?;
        s.next_seq = next_seq;
        if !clean {
            let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(end);
            if i == last {
                // A torn tail: the write was cut short, so it was never
                // confirmed. Cut it off so new appends never follow garbage.
                tracing::warn!(
                    "{}: cutting a torn write of {} bytes at offset {end}",
                    path.display(),
                    len.saturating_sub(end)
                );
                s.torn_bytes += len.saturating_sub(end);
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| StoreError::io(&path, e))?;
                // Below 8 bytes even the magic is torn: an empty segment.
                f.set_len(if end < 8 { 0 } else { end })
                    .map_err(|e| StoreError::io(&path, e))?;
                f.sync_all().map_err(|e| StoreError::io(&path, e))?;
            } else {
                tracing::error!(
                    "{}: corrupt record at offset {end}; the {} bytes after it are skipped",
                    path.display(),
                    len.saturating_sub(end)
                );
            }
        }
        s.segments.push(seg);
    }
    Ok(s)
}
