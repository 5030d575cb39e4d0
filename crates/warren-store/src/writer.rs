//! The write side of one queue's store, shared between the queue (which
//! appends under its own lock) and the sync thread (which writes out and
//! fsyncs). Appends only copy into a buffer; the buffer goes to the file
//! with a positional write when it grows past [`WRITE_AT`], when a reader
//! needs the bytes, or in a sync round. Nothing here holds a lock across
//! an fsync.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Result, StoreError};
use crate::record::{self, ACKLOG_MAGIC, KIND_ACKED, KIND_DELIVERED, SEGMENT_MAGIC};

/// Buffered bytes that trigger a write without waiting for a sync round.
const WRITE_AT: usize = 1 << 20;
/// An ack log file is closed and a new one started past this size.
const ACKLOG_BYTES: u64 = 4 << 20;

pub fn segment_path(dir: &Path, first_seq: u64) -> PathBuf {
    dir.join(format!("{first_seq:020}.seg"))
}

pub fn acklog_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:020}.acks"))
}

/// State the sync thread needs: the writer and how far fsync has reached.
pub struct Shared {
    pub(crate) dir: PathBuf,
    pub(crate) writer: Mutex<Writer>,
    /// Logical bytes (see [`Writer::logical`]) known to be on stable storage.
    pub(crate) synced: AtomicU64,
    /// Set while a sync round for this store is requested or running.
    pub(crate) dirty: AtomicBool,
}

impl Shared {
    pub(crate) fn new(dir: PathBuf, next_ack_file: u64) -> Shared {
        Shared {
            writer: Mutex::new(Writer {
                dir: dir.clone(),
                segment: None,
                buf: Vec::new(),
                logical: 0,
                unsynced: Vec::new(),
                dir_dirty: false,
                acks: AckWriter {
                    number: next_ack_file,
                    ..AckWriter::default()
                },
                dead: false,
            }),
            dir,
            synced: AtomicU64::new(0),
            dirty: AtomicBool::new(false),
        }
    }

    /// Write out everything buffered and fsync what holds messages; then
    /// every append up to the logical position read here is durable.
    pub(crate) fn sync(&self) -> Result<()> {
        let (files, target, dir_dirty) = {
            let mut w = self.writer.lock();
            if w.dead {
                return Ok(());
            }
            w.write_out()?;
            w.acks.write_out(&self.dir)?;
            let mut files = std::mem::take(&mut w.unsynced);
            if let Some(s) = &w.segment {
                files.push(s.file.clone());
            }
            (files, w.logical, std::mem::take(&mut w.dir_dirty))
        };
        if target > self.synced.load(Ordering::Acquire) {
            for f in &files {
                f.sync_data().map_err(|e| StoreError::io(&self.dir, e))?;
            }
        }
        if dir_dirty {
            // New segment files must survive a crash as directory entries too.
            File::open(&self.dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| StoreError::io(&self.dir, e))?;
        }
        self.synced.fetch_max(target, Ordering::AcqRel);
        Ok(())
    }
}

pub(crate) struct OpenSegment {
    pub first_seq: u64,
    pub file: Arc<File>,
    /// Bytes already in the file (the buffer continues from here).
    pub written: u64,
}

pub(crate) struct Writer {
    dir: PathBuf,
    pub segment: Option<OpenSegment>,
    buf: Vec<u8>,
    /// Every byte ever appended through this writer, across segments: a
    /// message's ticket is the logical position of its record's end.
    pub logical: u64,
    /// Closed segments not yet fsynced.
    unsynced: Vec<Arc<File>>,
    dir_dirty: bool,
    pub acks: AckWriter,
    /// The queue was deleted: ignore everything.
    pub dead: bool,
}

impl Writer {
    /// Bytes of the current segment, written or buffered.
    pub fn segment_len(&self) -> u64 {
        self.segment
            .as_ref()
            .map_or(0, |s| s.written + self.buf.len() as u64)
    }

    /// Start a new segment whose first record is `first_seq`. Returns the
    /// first sequence number of the segment it closed, if any.
    pub fn roll(&mut self, first_seq: u64) -> Result<Option<u64>> {
        self.write_out()?;
        let path = segment_path(&self.dir, first_seq);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| StoreError::io(&path, e))?;
        let old = self.segment.replace(OpenSegment {
            first_seq,
            file: Arc::new(file),
            written: 0,
        });
        self.buf.extend_from_slice(SEGMENT_MAGIC);
        self.logical += SEGMENT_MAGIC.len() as u64;
        self.dir_dirty = true;
        Ok(old.map(|o| {
            self.unsynced.push(o.file);
            o.first_seq
        }))
    }

    /// Append one framed record; returns its offset in the segment and the
    /// logical position of its end.
    pub fn append(&mut self, rec: &record::MessageRecord) -> Result<(u64, u64)> {
        let offset = self.segment_len();
        let before = self.buf.len();
        rec.encode(&mut self.buf);
        self.logical += (self.buf.len() - before) as u64;
        let end = self.logical;
        if self.buf.len() >= WRITE_AT {
            self.write_out()?;
        }
        Ok((offset, end))
    }

    /// Put the buffer into the current segment file.
    pub fn write_out(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let Some(seg) = self.segment.as_mut() else {
            self.buf.clear();
            return Ok(());
        };
        seg.file
            .write_all_at(&self.buf, seg.written)
            .map_err(|e| StoreError::io(&self.dir, e))?;
        seg.written += self.buf.len() as u64;
        self.buf.clear();
        if self.buf.capacity() > 2 * WRITE_AT {
            self.buf = Vec::new();
        }
        Ok(())
    }

    /// The segment being written (its first sequence number).
    pub fn current_segment(&self) -> Option<u64> {
        self.segment.as_ref().map(|s| s.first_seq)
    }
}

/// The ack log's writer: consecutive sequence numbers of one kind merge
/// into one range record before anything is encoded.
#[derive(Default)]
pub(crate) struct AckWriter {
    file: Option<File>,
    pub number: u64,
    len: u64,
    buf: Vec<u8>,
    acked: Option<(u64, u64)>,
    delivered: Option<(u64, u64)>,
    /// Highest sequence number named by the current file.
    max_seq: u64,
    /// Closed files and the highest sequence number each names: a file can
    /// go once every segment below that number has.
    pub retired: Vec<(u64, u64)>,
}

impl AckWriter {
    pub fn acked(&mut self, seq: u64) {
        Self::note(&mut self.acked, &mut self.buf, KIND_ACKED, seq);
        self.max_seq = self.max_seq.max(seq);
    }

    pub fn delivered(&mut self, seq: u64) {
        Self::note(&mut self.delivered, &mut self.buf, KIND_DELIVERED, seq);
        self.max_seq = self.max_seq.max(seq);
    }

    pub fn acked_range(&mut self, first: u64, last: u64) {
        self.close_ranges();
        record::encode_range(&mut self.buf, KIND_ACKED, first, last);
        self.max_seq = self.max_seq.max(last);
    }

    fn note(open: &mut Option<(u64, u64)>, buf: &mut Vec<u8>, kind: u8, seq: u64) {
        match open {
            Some((_, last)) if seq == *last + 1 => *last = seq,
            Some((first, last)) => {
                record::encode_range(buf, kind, *first, *last);
                *open = Some((seq, seq));
            }
            None => *open = Some((seq, seq)),
        }
    }

    fn close_ranges(&mut self) {
        if let Some((a, b)) = self.acked.take() {
            record::encode_range(&mut self.buf, KIND_ACKED, a, b);
        }
        if let Some((a, b)) = self.delivered.take() {
            record::encode_range(&mut self.buf, KIND_DELIVERED, a, b);
        }
    }

    pub fn write_out(&mut self, dir: &Path) -> Result<()> {
        self.close_ranges();
        if self.buf.is_empty() {
            return Ok(());
        }
        if self.file.is_none() {
            let path = acklog_path(dir, self.number);
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .open(&path)
                .map_err(|e| StoreError::io(&path, e))?;
            std::io::Write::write_all(&mut f, ACKLOG_MAGIC).map_err(|e| StoreError::io(&path, e))?;
            self.file = Some(f);
            self.len = ACKLOG_MAGIC.len() as u64;
        }
        if let Some(f) = self.file.as_mut() {
            std::io::Write::write_all(f, &self.buf).map_err(|e| StoreError::io(dir, e))?;
            self.len += self.buf.len() as u64;
        }
        self.buf.clear();
        if self.len >= ACKLOG_BYTES {
            self.file = None;
            self.retired.push((self.number, self.max_seq));
            self.number += 1;
            self.max_seq = 0;
        }
        Ok(())
    }
}
