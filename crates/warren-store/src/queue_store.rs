//! One queue's store, as its queue sees it (called under the queue's lock).
//!
//! The queue keeps a bounded window of ready messages in memory; what lies
//! beyond it is the *tail*: messages that are only on disk. The tail is
//! always a suffix of the log, so it is described by a cursor (where the
//! next tail record starts) and counts, never by per-message memory: a
//! queue of two million messages costs the same RAM as one of two
//! thousand. Recovery makes every surviving message part of the tail, and
//! the queue reads it back as its window drains.
//!
//! The store also counts, per segment, the messages that have not yet left
//! the queue, and deletes a segment when that count reaches zero.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::error::{Result, StoreError};
use crate::ranges::RangeSet;
use crate::record::{self, MessageRecord, Parsed, StoredMessage, KIND_MESSAGE, SEGMENT_MAGIC};
use crate::recovery;
use crate::syncer::Syncer;
use crate::writer::{acklog_path, segment_path, Shared};

/// A segment is closed once it passes this size.
pub const SEGMENT_BYTES: u64 = 16 << 20;
/// How much a tail read asks of the file at once.
const READ_CHUNK: usize = 512 << 10;

/// Durability of one append: satisfied once an fsync has covered it.
#[derive(Clone)]
pub struct SyncTicket {
    shared: Arc<Shared>,
    pos: u64,
}

impl SyncTicket {
    pub fn is_synced(&self) -> bool {
        self.shared.synced.load(Ordering::Acquire) >= self.pos
    }
}

impl std::fmt::Debug for SyncTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SyncTicket({})", self.pos)
    }
}

/// A message read back from the tail.
#[derive(Debug)]
pub struct Loaded {
    pub message: StoredMessage,
    /// Delivered before a restart and not acked (RabbitMQ's redelivered).
    pub redelivered: bool,
}

/// What recovery found, for the queue and the log line.
#[derive(Debug, Clone, Copy)]
pub struct Recovered {
    pub messages: u64,
    pub bytes: u64,
    /// The first sequence number the queue may use.
    pub next_seq: u64,
    pub segments: usize,
    pub took: std::time::Duration,
}

#[derive(Debug, Default, Clone, Copy)]
struct Segment {
    /// Messages in this segment still in the queue (ready or unacked).
    live: u64,
    /// Of those, how many are in the tail (not yet read back).
    tail: u64,
}

#[derive(Debug, Clone, Copy)]
struct Cursor {
    segment: u64,
    offset: u64,
}

/// Only for messages written before the last restart: what the ack log said.
struct Before {
    acked: RangeSet,
    delivered: RangeSet,
    /// Sequence numbers from here on were written after the restart.
    boundary: u64,
}

pub struct QueueStore {
    shared: Arc<Shared>,
    syncer: Arc<Syncer>,
    /// Durable queue: persistent messages are fsynced and acks are logged.
    durable: bool,
    segments: BTreeMap<u64, Segment>,
    tail_count: u64,
    tail_bytes: u64,
    cursor: Option<Cursor>,
    /// No sequence number below this is in the tail.
    tail_first_seq: u64,
    read_file: Option<(u64, File)>,
    rbuf: Vec<u8>,
    before: Option<Before>,
}

impl std::fmt::Debug for QueueStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueStore")
            .field("dir", &self.shared.dir)
            .field("segments", &self.segments.len())
            .field("tail_count", &self.tail_count)
            .finish()
    }
}

impl QueueStore {
    /// Open `dir`, recovering what a durable queue left there (a
    /// non-durable store starts empty).
    pub(crate) fn open(dir: PathBuf, durable: bool, syncer: Arc<Syncer>) -> Result<(QueueStore, Recovered)> {
        let started = Instant::now();
        std::fs::create_dir_all(&dir).map_err(|e| StoreError::io(&dir, e))?;
        let scan = if durable {
            recovery::scan(&dir)?
        } else {
            wipe(&dir)?;
            recovery::Scan::default()
        };
        let next_ack = scan.ack_files.iter().map(|a| a.0 + 1).max().unwrap_or(0);
        let shared = Arc::new(Shared::new(dir.clone(), next_ack));
        let mut segments = BTreeMap::new();
        let (mut count, mut bytes) = (0, 0);
        for s in &scan.segments {
            if s.live == 0 {
                let p = segment_path(&dir, s.first_seq);
                std::fs::remove_file(&p).map_err(|e| StoreError::io(&p, e))?;
                continue;
            }
            segments.insert(
                s.first_seq,
                Segment {
                    live: s.live,
                    tail: s.live,
                },
            );
            count += s.live;
            bytes += s.live_bytes;
        }
        shared.writer.lock().acks.retired = scan.ack_files.clone();
        let cursor = segments.keys().next().map(|&segment| Cursor {
            segment,
            offset: SEGMENT_MAGIC.len() as u64,
        });
        let mut store = QueueStore {
            shared,
            syncer,
            durable,
            segments,
            tail_count: count,
            tail_bytes: bytes,
            tail_first_seq: cursor.map_or(0, |c| c.segment),
            cursor,
            read_file: None,
            rbuf: Vec::new(),
            before: Some(Before {
                acked: scan.acked,
                delivered: scan.delivered,
                boundary: scan.next_seq,
            }),
        };
        store.drop_old_ack_files();
        let rec = Recovered {
            messages: count,
            bytes,
            next_seq: scan.next_seq,
            segments: store.segments.len(),
            took: started.elapsed(),
        };
        Ok((store, rec))
    }

    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    pub fn tail_len(&self) -> u64 {
        self.tail_count
    }

    /// Body bytes of the tail (x-max-length-bytes counts them).
    pub fn tail_bytes(&self) -> u64 {
        self.tail_bytes
    }

    /// Append a message. With `to_tail` it becomes part of the on-disk tail
    /// (the queue keeps no copy); it must be, whenever the tail is not
    /// empty, so that the tail stays a suffix of the log. Returns a ticket
    /// when the message is persistent on a durable queue.
    pub fn append(&mut self, rec: &MessageRecord, to_tail: bool) -> Result<Option<SyncTicket>> {
        debug_assert!(to_tail || self.tail_count == 0);
        let mut w = self.shared.writer.lock();
        if w.dead {
            return Ok(None);
        }
        let len = w.segment_len();
        if w.segment.is_none() || len + rec.framed_len() as u64 > SEGMENT_BYTES {
            let closed = w.roll(rec.seq)?;
            self.segments.insert(rec.seq, Segment::default());
            if let Some(old) = closed {
                if self.segments.get(&old).is_some_and(|s| s.live == 0) {
                    self.segments.remove(&old);
                    remove(&segment_path(&self.shared.dir, old));
                }
            }
        }
        let segment = w.segment.as_ref().map_or(rec.seq, |s| s.first_seq);
        let (offset, end) = w.append(rec)?;
        drop(w);
        if let Some(s) = self.segments.get_mut(&segment) {
            s.live += 1;
            if to_tail {
                s.tail += 1;
            }
        }
        if to_tail {
            if self.tail_count == 0 {
                self.cursor = Some(Cursor { segment, offset });
                self.tail_first_seq = rec.seq;
            }
            self.tail_count += 1;
            self.tail_bytes += rec.body.len() as u64;
        }
        if self.durable && rec.persistent {
            self.syncer.request(&self.shared);
            return Ok(Some(SyncTicket {
                shared: self.shared.clone(),
                pos: end,
            }));
        }
        Ok(None)
    }

    /// A stored message was delivered to a consumer that must ack it: after
    /// a restart it comes back marked redelivered.
    pub fn delivered(&mut self, seq: u64, persistent: bool) {
        if self.durable && persistent {
            self.shared.writer.lock().acks.delivered(seq);
            self.syncer.request(&self.shared);
        }
    }

    /// A stored message left the queue for good (acked, expired, dropped,
    /// dead-lettered).
    pub fn remove(&mut self, seq: u64, persistent: bool) {
        if self.durable && persistent {
            self.shared.writer.lock().acks.acked(seq);
            self.syncer.request(&self.shared);
        }
        let Some((&first, s)) = self.segments.range_mut(..=seq).next_back() else {
            return;
        };
        s.live = s.live.saturating_sub(1);
        if s.live == 0 {
            self.segment_emptied(first);
        }
    }

    /// Drop the whole tail (queue.purge): every message in it leaves.
    pub fn purge_tail(&mut self, next_seq: u64) {
        if self.tail_count == 0 {
            return;
        }
        if self.durable {
            // The range may name numbers that were never stored (or were
            // acked already), which recovery ignores.
            let first = self.tail_first_seq;
            self.shared
                .writer
                .lock()
                .acks
                .acked_range(first, next_seq.saturating_sub(1).max(first));
            self.syncer.request(&self.shared);
        }
        let mut emptied = Vec::new();
        for (&first, s) in self.segments.iter_mut() {
            s.live -= s.tail.min(s.live);
            s.tail = 0;
            if s.live == 0 {
                emptied.push(first);
            }
        }
        for first in emptied {
            self.segment_emptied(first);
        }
        self.tail_count = 0;
        self.tail_bytes = 0;
        self.cursor = None;
    }

    fn segment_emptied(&mut self, first: u64) {
        let current = self.shared.writer.lock().current_segment();
        if current == Some(first) {
            return; // still being written; goes when it is closed
        }
        self.segments.remove(&first);
        if self.read_file.as_ref().is_some_and(|r| r.0 == first) {
            self.read_file = None;
        }
        remove(&segment_path(&self.shared.dir, first));
        self.drop_old_ack_files();
    }

    /// Delete ack log files that speak only of deleted segments.
    fn drop_old_ack_files(&mut self) {
        let lowest = self.segments.keys().next().copied().unwrap_or(u64::MAX);
        let mut w = self.shared.writer.lock();
        let dir = self.shared.dir.clone();
        w.acks.retired.retain(|&(number, max_seq)| {
            if max_seq < lowest {
                remove(&acklog_path(&dir, number));
                false
            } else {
                true
            }
        });
    }

    /// Read up to `max` messages (or about `max_bytes` of bodies) from the
    /// tail, oldest first.
    pub fn read_tail(&mut self, max: usize, max_bytes: u64, out: &mut Vec<Loaded>) -> Result<()> {
        let mut bytes = 0;
        let mut n = 0;
        while self.tail_count > 0 && n < max && bytes < max_bytes {
            let Some(c) = self.cursor else {
                self.lost_tail("no cursor");
                break;
            };
            if !self.segments.contains_key(&c.segment) {
                self.next_segment(c.segment);
                continue;
            }
            {
                // The tail may end in bytes still in the write buffer.
                let mut w = self.shared.writer.lock();
                if w.current_segment() == Some(c.segment) {
                    w.write_out()?;
                }
            }
            let got = self.fill(c)?;
            if got == 0 {
                self.next_segment(c.segment);
                continue;
            }
            let mut pos = 0;
            while pos < got && self.tail_count > 0 && n < max && bytes < max_bytes {
                match record::parse(&self.rbuf[pos..got]) {
                    Parsed::Record { kind, payload, size } => {
                        pos += size;
                        if kind != KIND_MESSAGE {
                            continue;
                        }
                        let Some(m) = record::decode_message(payload) else {
                            continue;
                        };
                        let mut redelivered = false;
                        if let Some(b) = &self.before {
                            if m.seq < b.boundary {
                                if !m.persistent || b.acked.contains(m.seq) {
                                    continue; // gone before the restart
                                }
                                redelivered = b.delivered.contains(m.seq);
                            }
                        }
                        self.tail_count -= 1;
                        self.tail_first_seq = m.seq + 1;
                        self.tail_bytes = self.tail_bytes.saturating_sub(m.body.len() as u64);
                        if let Some(s) = self.segments.get_mut(&c.segment) {
                            s.tail = s.tail.saturating_sub(1);
                        }
                        bytes += m.body.len() as u64;
                        n += 1;
                        out.push(Loaded {
                            message: m,
                            redelivered,
                        });
                    }
                    Parsed::Incomplete { need } => {
                        if pos == 0 {
                            if got < self.rbuf.len() {
                                // Read to the end of the file, and the
                                // record is still not whole.
                                self.corrupt_segment(c.segment, "record runs past the end of the segment");
                            } else {
                                // One record larger than the buffer: grow
                                // (bounded by MAX_RECORD) and read again.
                                self.rbuf.resize(need, 0);
                            }
                        }
                        break;
                    }
                    Parsed::Corrupt(why) => {
                        self.corrupt_segment(c.segment, why);
                        pos = 0;
                        break;
                    }
                }
            }
            if pos > 0 {
                if let Some(cur) = self.cursor.as_mut() {
                    cur.offset += pos as u64;
                }
            }
        }
        if self.tail_count == 0 {
            self.cursor = None;
            self.read_file = None;
        }
        if self.rbuf.len() > READ_CHUNK {
            self.rbuf = Vec::new(); // give back what a large record took
        }
        Ok(())
    }

    /// Read the next chunk at the cursor into `rbuf`; 0 at the segment's end.
    fn fill(&mut self, c: Cursor) -> Result<usize> {
        if self.rbuf.len() < READ_CHUNK {
            self.rbuf.resize(READ_CHUNK, 0);
        }
        let mut rbuf = std::mem::take(&mut self.rbuf);
        let path = segment_path(&self.shared.dir, c.segment);
        let r = self.reader(c.segment).and_then(|f| {
            f.read_at(&mut rbuf, c.offset)
                .map_err(|e| StoreError::io(&path, e))
        });
        self.rbuf = rbuf;
        r
    }

    fn reader(&mut self, segment: u64) -> Result<&File> {
        if self.read_file.as_ref().is_none_or(|r| r.0 != segment) {
            let p = segment_path(&self.shared.dir, segment);
            let f = File::open(&p).map_err(|e| StoreError::io(&p, e))?;
            self.read_file = Some((segment, f));
        }
        Ok(&self.read_file.as_ref().expect("just opened").1)
    }

    fn next_segment(&mut self, after: u64) {
        let next = self.segments.range(after + 1..).next().map(|(&k, _)| k);
        match next {
            Some(segment) => {
                self.cursor = Some(Cursor {
                    segment,
                    offset: SEGMENT_MAGIC.len() as u64,
                })
            }
            None => self.lost_tail("the log ended before the tail did"),
        }
    }

    /// A record in `segment` cannot be read: the rest of that segment's
    /// tail is lost (logged), and reading goes on in the next segment.
    fn corrupt_segment(&mut self, segment: u64, why: &str) {
        let lost = self.segments.get(&segment).map_or(0, |s| s.tail);
        tracing::error!(
            "{}: {why}; {lost} message(s) in the rest of the segment are lost",
            segment_path(&self.shared.dir, segment).display()
        );
        if let Some(s) = self.segments.get_mut(&segment) {
            s.live -= s.tail.min(s.live);
            s.tail = 0;
        }
        self.tail_count = self.tail_count.saturating_sub(lost);
        self.next_segment(segment);
    }

    fn lost_tail(&mut self, why: &str) {
        if self.tail_count > 0 {
            tracing::error!(
                "{}: {why}; {} message(s) unaccounted for",
                self.shared.dir.display(),
                self.tail_count
            );
        }
        self.tail_count = 0;
        self.tail_bytes = 0;
        self.cursor = None;
    }

    /// Write out and fsync now (clean shutdown).
    pub fn flush(&self) -> Result<()> {
        self.shared.sync()
    }

    /// The queue was deleted: remove its files; tickets still waiting are
    /// released (a message routed to a deleted queue is confirmed).
    pub fn destroy(&mut self) {
        let mut w = self.shared.writer.lock();
        w.dead = true;
        w.segment = None;
        drop(w);
        self.shared.synced.store(u64::MAX, Ordering::Release);
        self.read_file = None;
        self.segments.clear();
        self.tail_count = 0;
        self.tail_bytes = 0;
        self.cursor = None;
        if let Err(e) = std::fs::remove_dir_all(&self.shared.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("cannot remove {}: {e}", self.shared.dir.display());
            }
        }
    }

    /// For [`crate::Storage`]'s clean shutdown.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

fn remove(p: &Path) {
    if let Err(e) = std::fs::remove_file(p) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!("cannot remove {}: {e}", p.display());
        }
    }
}

/// Empty a non-durable queue's directory (left by an earlier run).
fn wipe(dir: &Path) -> Result<()> {
    let rd = std::fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))?;
    for ent in rd.flatten() {
        let p = ent.path();
        if p.extension().is_some_and(|e| e == "seg" || e == "acks") {
            remove(&p);
        }
    }
    Ok(())
}
