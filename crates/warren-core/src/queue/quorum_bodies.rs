//! Where a quorum queue member keeps the bodies of the messages its state
//! holds: in memory up to a window (per queue, and for all the node's
//! quorum queues together), and past it in the queue's own segment files
//! (`<dir>/<n, 8 digits>.qseg`), as classic queues page a backlog
//! (queue/paging.rs). Once paging has started every new body goes
//! to disk until the paged ones have all been read back, so the window is
//! always the oldest bodies and a delivery rarely waits for a read; a read
//! takes the next few hundred paged bodies of the same segment at once.
//!
//! Durability is the Raft log's. A body is written to a segment when its
//! enqueue is applied, with no fsync; a checkpoint first syncs every
//! segment written since the last, and only once the checkpoint is on
//! disk is the log compacted past those enqueues. The checkpoint names
//! where each paged body lies (segment, offset, length), so one old
//! unacked message keeps its segment (at most [`SEGMENT_BYTES`]), never
//! the log: RabbitMQ 4.3 compacts its quorum queue logs by live index for
//! the same reason.
//!
//! A segment record, little-endian:
//!
//! ```text
//! len u32 (bytes after crc) | crc u32 (CRC-32 of id ++ message) | id u64 | message
//! ```
//!
//! with the message as an enqueue entry carries it ([`encode_message`]).
//! A segment is deleted once no paged body is left in it and it is no
//! longer written, but only after the next checkpoint: the one on disk
//! may still name it.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use warren_amqp091::ShortStr;
use warren_fifo::MsgId;

use super::MemoryGauge;
use crate::error::BrokerError;
use crate::message::{Message, MessageRef};

/// Bodies kept in memory before new ones are paged out (as classic
/// queues' window).
pub const WINDOW_MAX: usize = 4096;
pub const WINDOW_BYTES: u64 = 8 << 20;
/// Body bytes all of a node's quorum queues keep in memory before new
/// ones are paged out: a thousand queues do not hold a thousand windows.
pub const NODE_WINDOW_BYTES: u64 = 64 << 20;
/// What a body in memory costs the node beyond its `memory_size` (the
/// message's fields, its `Arc`, the map's slot), for the node's window.
const BODY_OVERHEAD: usize = 192;
/// Records are gathered and written in one call per applied batch, or at
/// this size.
const WRITE_BUFFER: usize = 64 << 10;
/// A segment is closed and the next begun once it is this long.
pub const SEGMENT_BYTES: u64 = 4 << 20;
/// Paged bodies read back by one read.
const READ_AHEAD: usize = 256;
const READ_AHEAD_BYTES: u64 = 1 << 20;
const RECORD_HEAD: usize = 4 + 4 + 8;
/// A paged body's reference in a checkpoint: id, segment, offset, length.
const REF_LEN: usize = 8 + 4 + 4 + 4;

/// Where a paged body's record lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Loc {
    seg: u32,
    off: u32,
    /// The whole record, head included.
    len: u32,
}

#[derive(Debug)]
struct Writer {
    seg: u32,
    file: File,
    /// The segment's length, `pending` included.
    len: u64,
    /// Records not yet written (dropped once written, so an idle queue
    /// holds no buffer).
    pending: Vec<u8>,
}

impl Writer {
    fn flush(&mut self) -> std::io::Result<()> {
        if !self.pending.is_empty() {
            self.file.write_all(&self.pending)?;
            self.pending = Vec::new();
        }
        Ok(())
    }
}

/// What a checkpoint of the bodies needs before and after it is written.
#[derive(Debug, Default)]
pub struct ToSync {
    /// Segments to sync before the checkpoint is written.
    pub sync: Vec<PathBuf>,
    /// Segments to delete once it is on disk.
    pub doomed: Vec<u32>,
}

impl ToSync {
    /// Sync the segments (before the checkpoint is written).
    pub fn sync(&self) -> std::io::Result<()> {
        for p in &self.sync {
            File::open(p)?.sync_data()?;
        }
        Ok(())
    }
}

#[derive(Debug)]
pub struct Bodies {
    mem: HashMap<MsgId, MessageRef>,
    mem_bytes: u64,
    paged: BTreeMap<MsgId, Loc>,
    /// The queue's segment directory (None: no data directory, so
    /// everything stays in memory).
    dir: Option<PathBuf>,
    /// Paged bodies per segment.
    live: BTreeMap<u32, u64>,
    writer: Option<Writer>,
    next_seg: u32,
    /// Segments written since the last checkpoint (to sync before one).
    unsynced: Vec<u32>,
    /// Segments with nothing live, to delete after the next checkpoint.
    doomed: Vec<u32>,
    /// Writing failed once: keep bodies in memory from then on.
    failed: bool,
    /// Every queue's messages (the memory alarm's gauge).
    memory: Arc<MemoryGauge>,
    /// The node's quorum queues' bodies in memory.
    node: Arc<MemoryGauge>,
}

fn seg_name(seg: u32) -> String {
    format!("{seg:08}.qseg")
}

impl Bodies {
    pub fn new(dir: Option<PathBuf>, memory: Arc<MemoryGauge>, node: Arc<MemoryGauge>) -> Bodies {
        let next_seg = dir
            .as_ref()
            .map_or(0, |d| existing(d).last().map_or(0, |s| s + 1));
        Bodies {
            mem: HashMap::new(),
            mem_bytes: 0,
            paged: BTreeMap::new(),
            dir,
            live: BTreeMap::new(),
            writer: None,
            next_seg,
            unsynced: Vec::new(),
            doomed: Vec::new(),
            failed: false,
            memory,
            node,
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.mem.len() + self.paged.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bodies in memory, and their bytes.
    pub fn in_memory(&self) -> (u64, u64) {
        (self.mem.len() as u64, self.mem_bytes)
    }

    #[cfg(test)]
    pub fn paged(&self) -> usize {
        self.paged.len()
    }

    /// About what a checkpoint writes for these bodies.
    pub fn checkpoint_bytes(&self) -> u64 {
        self.mem_bytes + (self.paged.len() * REF_LEN) as u64
    }

    fn window_full(&self) -> bool {
        !self.paged.is_empty()
            || self.mem.len() >= WINDOW_MAX
            || self.mem_bytes >= WINDOW_BYTES
            || self.node.bytes() >= NODE_WINDOW_BYTES
    }

    /// An applied enqueue's message (`raw`: as its entry carries it).
    pub fn insert(&mut self, id: MsgId, raw: Bytes) -> Result<(), BrokerError> {
        if self.window_full() && self.dir.is_some() && !self.failed {
            match self.write(id, &raw) {
                Ok(loc) => {
                    self.paged.insert(id, loc);
                    *self.live.entry(loc.seg).or_default() += 1;
                    return Ok(());
                }
                Err(e) => {
                    tracing::error!(
                        "a quorum queue's bodies are kept in memory from now on: writing a segment: {e}"
                    );
                    self.failed = true;
                }
            }
        }
        let m = decode_message(raw)?;
        self.keep(id, Arc::new(m));
        Ok(())
    }

    fn keep(&mut self, id: MsgId, m: MessageRef) {
        let size = m.memory_size();
        self.mem_bytes += size as u64;
        self.memory.add(size);
        self.node.add(size + BODY_OVERHEAD);
        if let Some(old) = self.mem.insert(id, m) {
            self.forgot(&old);
        }
    }

    fn forgot(&mut self, m: &Message) {
        self.mem_bytes -= m.memory_size() as u64;
        self.memory.sub(m.memory_size());
        self.node.sub(m.memory_size() + BODY_OVERHEAD);
    }

    fn write(&mut self, id: MsgId, raw: &[u8]) -> std::io::Result<Loc> {
        let rec_len = RECORD_HEAD + raw.len();
        if self
            .writer
            .as_ref()
            .is_some_and(|w| w.len > 0 && w.len + rec_len as u64 > SEGMENT_BYTES)
        {
            self.close_writer()?;
        }
        if self.writer.is_none() {
            let dir = self.dir.as_ref().expect("checked by the caller");
            std::fs::create_dir_all(dir)?;
            let seg = self.next_seg;
            self.next_seg += 1;
            let file = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(dir.join(seg_name(seg)))?;
            self.unsynced.push(seg);
            self.writer = Some(Writer {
                seg,
                file,
                len: 0,
                pending: Vec::new(),
            });
        }
        let w = self.writer.as_mut().expect("opened above");
        let mut h = crc32fast::Hasher::new();
        h.update(&id.to_le_bytes());
        h.update(raw);
        w.pending
            .extend_from_slice(&((8 + raw.len()) as u32).to_le_bytes());
        w.pending.extend_from_slice(&h.finalize().to_le_bytes());
        w.pending.extend_from_slice(&id.to_le_bytes());
        w.pending.extend_from_slice(raw);
        let loc = Loc {
            seg: w.seg,
            off: w.len as u32,
            len: rec_len as u32,
        };
        w.len += rec_len as u64;
        if w.pending.len() >= WRITE_BUFFER {
            w.flush()?;
        }
        Ok(loc)
    }

    /// Write what is gathered (after each applied batch).
    pub fn flush(&mut self) {
        if let Some(Err(e)) = self.writer.as_mut().map(|w| w.flush()) {
            tracing::error!("a quorum queue segment not written: {e}");
        }
    }

    /// The segment being written is full (or obsolete): flushed and left
    /// for the next checkpoint's sync; doomed now if nothing in it lives.
    fn close_writer(&mut self) -> std::io::Result<()> {
        if let Some(mut w) = self.writer.take() {
            w.flush()?;
            if self.live.get(&w.seg).copied().unwrap_or(0) == 0 {
                self.live.remove(&w.seg);
                self.doomed.push(w.seg);
            }
        }
        Ok(())
    }

    /// Message `id`'s body, read back (with the paged bodies after it) if
    /// it was paged out.
    pub fn get(&mut self, id: MsgId) -> Option<MessageRef> {
        if let Some(m) = self.mem.get(&id) {
            return Some(m.clone());
        }
        self.paged.get(&id)?;
        if let Err(e) = self.read_in(id) {
            tracing::error!(id, "a quorum queue body not read back: {e}");
            self.unpage(id);
        }
        self.mem.get(&id).cloned()
    }

    /// Message `id` leaves the queue; its body if `want` (read back if it
    /// was paged: a dead letter needs it).
    pub fn take(&mut self, id: MsgId, want: bool) -> Option<MessageRef> {
        if let Some(m) = self.mem.remove(&id) {
            self.forgot(&m);
            return Some(m);
        }
        let loc = self.unpage(id)?;
        if !want {
            return None;
        }
        match self.read_span(loc.seg, loc.off, loc.len as usize) {
            Ok(span) => match parse(&span, id) {
                Ok(m) => Some(Arc::new(m)),
                Err(e) => {
                    tracing::error!(id, "a quorum queue body not read back: {e}");
                    None
                }
            },
            Err(e) => {
                tracing::error!(id, "a quorum queue body not read back: {e}");
                None
            }
        }
    }

    /// Forget a paged body's place (read back, or gone).
    fn unpage(&mut self, id: MsgId) -> Option<Loc> {
        let loc = self.paged.remove(&id)?;
        let n = self.live.entry(loc.seg).or_default();
        *n = n.saturating_sub(1);
        if *n == 0 && self.writer.as_ref().is_none_or(|w| w.seg != loc.seg) {
            self.live.remove(&loc.seg);
            self.doomed.push(loc.seg);
        }
        if self.paged.is_empty() {
            // Nothing paged is left: the next page-out starts a segment of
            // its own, and this one can go with the rest.
            if let Err(e) = self.close_writer() {
                tracing::warn!("a quorum queue segment not flushed: {e}");
            }
        }
        Some(loc)
    }

    fn read_span(&mut self, seg: u32, off: u32, len: usize) -> std::io::Result<Bytes> {
        if let Some(w) = self.writer.as_mut().filter(|w| w.seg == seg) {
            w.flush()?;
        }
        // Opened for each read (one per few hundred bodies), so a thousand
        // paging queues do not hold a thousand more descriptors.
        let dir = self.dir.as_ref().ok_or(std::io::ErrorKind::NotFound)?;
        let f = File::open(dir.join(seg_name(seg)))?;
        let mut buf = vec![0u8; len];
        f.read_exact_at(&mut buf, off as u64)?;
        Ok(Bytes::from(buf))
    }

    /// Read `id` back with the paged bodies that follow it in its segment
    /// (up to [`READ_AHEAD`]), in one read.
    fn read_in(&mut self, id: MsgId) -> std::io::Result<()> {
        let first = self.paged[&id];
        let mut run = vec![(id, first)];
        let mut end = first.off + first.len;
        for (&next, &loc) in self.paged.range(id + 1..) {
            if run.len() >= READ_AHEAD
                || loc.seg != first.seg
                || loc.off != end
                || (end - first.off) as u64 + loc.len as u64 > READ_AHEAD_BYTES
            {
                break;
            }
            run.push((next, loc));
            end += loc.len;
        }
        let span = self.read_span(first.seg, first.off, (end - first.off) as usize)?;
        for (mid, loc) in run {
            let at = (loc.off - first.off) as usize;
            let rec = span.slice(at..at + loc.len as usize);
            match parse(&rec, mid) {
                Ok(m) => {
                    self.unpage(mid);
                    self.keep(mid, Arc::new(m));
                }
                Err(e) if mid == id => return Err(std::io::Error::other(e)),
                // Left paged: read (and found bad) when it is wanted.
                Err(_) => break,
            }
        }
        Ok(())
    }

    /// Every body inline, paged ones read back: a snapshot for another
    /// member, which has none of this member's segments.
    pub fn encode_inline(&mut self, out: &mut Vec<u8>) {
        let mut ids: Vec<MsgId> = self.mem.keys().chain(self.paged.keys()).copied().collect();
        ids.sort_unstable();
        let count_at = out.len();
        out.extend_from_slice(&0u64.to_le_bytes());
        let mut n = 0u64;
        for id in ids {
            let m = match self.mem.get(&id) {
                Some(m) => m.clone(),
                None => {
                    let loc = self.paged[&id];
                    match self
                        .read_span(loc.seg, loc.off, loc.len as usize)
                        .map(|s| parse(&s, id))
                    {
                        Ok(Ok(m)) => Arc::new(m),
                        _ => {
                            tracing::error!(id, "a quorum queue body not read back for a snapshot");
                            continue;
                        }
                    }
                }
            };
            push_body(out, id, &m);
            n += 1;
        }
        out[count_at..count_at + 8].copy_from_slice(&n.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
    }

    /// This member's checkpoint of its bodies: those in memory inline,
    /// paged ones by reference. The checkpoint may be written only once
    /// the segments returned are synced (the Raft thread leaves that and
    /// the write to another thread); once it is on disk, the segments
    /// `doomed` may go ([`checkpointed`](Self::checkpointed)).
    pub fn encode_checkpoint(&mut self, out: &mut Vec<u8>) -> std::io::Result<ToSync> {
        let sync = self.written_since()?;
        let mut ids: Vec<&MsgId> = self.mem.keys().collect();
        ids.sort_unstable();
        out.extend_from_slice(&(ids.len() as u64).to_le_bytes());
        for id in ids {
            push_body(out, *id, &self.mem[id]);
        }
        out.extend_from_slice(&(self.paged.len() as u64).to_le_bytes());
        for (id, loc) in &self.paged {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&loc.seg.to_le_bytes());
            out.extend_from_slice(&loc.off.to_le_bytes());
            out.extend_from_slice(&loc.len.to_le_bytes());
        }
        Ok(ToSync {
            sync,
            doomed: self.doomed.clone(),
        })
    }

    /// What is gathered is written; the segments written since the last
    /// checkpoint, to sync before the next.
    fn written_since(&mut self) -> std::io::Result<Vec<PathBuf>> {
        if let Some(w) = self.writer.as_mut() {
            w.flush()?;
        }
        let Some(dir) = self.dir.as_ref() else {
            return Ok(Vec::new());
        };
        let segs: Vec<u32> = std::mem::take(&mut self.unsynced)
            .into_iter()
            .filter(|s| !self.doomed.contains(s))
            .collect();
        if let Some(w) = self.writer.as_ref() {
            // Written to again after this checkpoint: synced by the next.
            self.unsynced.push(w.seg);
        }
        Ok(segs.into_iter().map(|s| dir.join(seg_name(s))).collect())
    }

    /// A checkpoint naming none of `doomed` is on disk: they go.
    pub fn checkpointed(&mut self, doomed: &[u32]) {
        self.doomed.retain(|s| !doomed.contains(s));
        if let Some(dir) = &self.dir {
            for seg in doomed {
                let _ = std::fs::remove_file(dir.join(seg_name(*seg)));
            }
        }
    }

    /// Replace every body by those of a snapshot or checkpoint (`b`, as
    /// [`encode_inline`](Self::encode_inline) or
    /// [`encode_checkpoint`](Self::encode_checkpoint) wrote it).
    /// References are only ever this member's own, from its checkpoint.
    pub fn install(&mut self, b: &[u8]) -> Result<(), String> {
        let mut r = b;
        let mut take = |n: usize| -> Result<&[u8], String> {
            if r.len() < n {
                return Err("a quorum queue snapshot ends early".into());
            }
            let (a, rest) = r.split_at(n);
            r = rest;
            Ok(a)
        };
        let n = u64::from_le_bytes(take(8)?.try_into().expect("8"));
        let mut inline = Vec::new();
        for _ in 0..n {
            let id = u64::from_le_bytes(take(8)?.try_into().expect("8"));
            let len = u32::from_le_bytes(take(4)?.try_into().expect("4")) as usize;
            inline.push((id, Bytes::copy_from_slice(take(len)?)));
        }
        // Checkpoints written before bodies were paged end here.
        let refs = match take(8) {
            Ok(n) => u64::from_le_bytes(n.try_into().expect("8")),
            Err(_) => 0,
        };
        let mut paged = BTreeMap::new();
        for _ in 0..refs {
            let e = take(REF_LEN)?;
            let id = u64::from_le_bytes(e[..8].try_into().expect("8"));
            let loc = Loc {
                seg: u32::from_le_bytes(e[8..12].try_into().expect("4")),
                off: u32::from_le_bytes(e[12..16].try_into().expect("4")),
                len: u32::from_le_bytes(e[16..20].try_into().expect("4")),
            };
            paged.insert(id, loc);
        }
        self.clear();
        for loc in paged.values() {
            *self.live.entry(loc.seg).or_default() += 1;
            if loc.seg >= self.next_seg {
                self.next_seg = loc.seg + 1;
            }
        }
        self.doomed.retain(|s| !self.live.contains_key(s));
        // A checkpoint with paged bodies held the rest in memory: they
        // stay there. Otherwise (a snapshot, or all in memory) they fill
        // the window and page past it, as enqueues do.
        let held = !paged.is_empty();
        self.paged = paged;
        for (id, raw) in inline {
            if !held {
                self.insert(id, raw).map_err(|e| e.to_string())?;
            } else {
                let m = decode_message(raw).map_err(|e| e.to_string())?;
                self.keep(id, Arc::new(m));
            }
        }
        Ok(())
    }

    /// Drop every body; the segments they were in go after the next
    /// checkpoint.
    pub fn clear(&mut self) {
        self.memory.sub(self.mem_bytes as usize);
        self.node
            .sub(self.mem_bytes as usize + self.mem.len() * BODY_OVERHEAD);
        self.mem.clear();
        self.mem_bytes = 0;
        self.paged.clear();
        let _ = self.close_writer();
        let live = std::mem::take(&mut self.live);
        self.doomed.extend(live.keys());
    }

    /// After a restart's checkpoint is installed: segment files no paged
    /// body is in (written after that checkpoint, or doomed before the
    /// stop) go now; the log's entries since will write theirs again.
    pub fn sweep(&mut self) {
        let Some(dir) = &self.dir else { return };
        for seg in existing(dir) {
            if !self.live.contains_key(&seg) {
                let _ = std::fs::remove_file(dir.join(seg_name(seg)));
            }
        }
        self.doomed.clear();
    }
}

/// Segment numbers in `dir`, in order.
fn existing(dir: &std::path::Path) -> Vec<u32> {
    let mut segs: Vec<u32> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".qseg")?.parse().ok())
        .collect();
    segs.sort_unstable();
    segs
}

/// One record of a segment, checked against its CRC and id.
fn parse(rec: &Bytes, id: MsgId) -> Result<Message, String> {
    if rec.len() < RECORD_HEAD {
        return Err("a segment record ends early".into());
    }
    let len = u32::from_le_bytes(rec[..4].try_into().expect("4")) as usize;
    let crc = u32::from_le_bytes(rec[4..8].try_into().expect("4"));
    if len + 8 != rec.len() || crc32fast::hash(&rec[8..]) != crc {
        return Err("a segment record that is torn or corrupt".into());
    }
    if u64::from_le_bytes(rec[8..16].try_into().expect("8")) != id {
        return Err("a segment record of another message".into());
    }
    decode_message(rec.slice(RECORD_HEAD..)).map_err(|e| e.to_string())
}

fn push_body(out: &mut Vec<u8>, id: MsgId, m: &Message) {
    let at = out.len();
    out.extend_from_slice(&[0; 12]);
    encode_message(m, out);
    let len = (out.len() - at - 12) as u32;
    out[at..at + 8].copy_from_slice(&id.to_le_bytes());
    out[at + 8..at + 12].copy_from_slice(&len.to_le_bytes());
}

/// The message as an enqueue entry carries it: exchange and routing key
/// with a u8 length each, the 0-9-1 property list with a u32 length, then
/// the body.
pub fn encode_message(m: &Message, out: &mut Vec<u8>) {
    let ex = &m.exchange.as_bytes()[..m.exchange.len().min(255)];
    let rk = &m.routing_key.as_bytes()[..m.routing_key.len().min(255)];
    out.push(ex.len() as u8);
    out.extend_from_slice(ex);
    out.push(rk.len() as u8);
    out.extend_from_slice(rk);
    out.extend_from_slice(&(m.raw_properties.len() as u32).to_le_bytes());
    out.extend_from_slice(&m.raw_properties);
    out.extend_from_slice(&m.body);
}

/// A message from an enqueue entry (no copy of the body: it is a slice of
/// the entry).
pub fn decode_message(b: Bytes) -> Result<Message, BrokerError> {
    let short = || BrokerError::Internal("a quorum queue message ends early".into());
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<Bytes, BrokerError> {
        if b.len() < at + n {
            return Err(short());
        }
        let s = b.slice(at..at + n);
        at += n;
        Ok(s)
    };
    let n = take(1)?[0] as usize;
    let exchange = ShortStr::from_bytes(take(n)?);
    let n = take(1)?[0] as usize;
    let routing_key = ShortStr::from_bytes(take(n)?);
    let n = u32::from_le_bytes(take(4)?[..].try_into().expect("4")) as usize;
    let props = take(n)?;
    let body = b.slice(at..);
    Ok(Message::from_publish(exchange, routing_key, props, body)?.0)
}

#[cfg(test)]
mod tests;
