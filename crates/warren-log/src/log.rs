//! The writer's side of a stream log: appending chunks, rolling segments
//! over, applying retention, and recovering after a crash.
//!
//! One `Log` per stream, owned by whoever serialises its writes. Readers
//! ([`crate::Reader`]) share only the [`View`]: the list of segments and
//! how much of the newest is written, behind a lock held for a copy.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use bytes::{BufMut, Bytes, BytesMut};
use warren_stream::chunk::{ChunkHeader, Entry, HEADER_SIZE};

use crate::bloom;
use crate::error::{LogError, Result};
use crate::files::{self, IndexRecord, FILE_HEADER, INDEX_MAGIC, INDEX_RECORD, SEGMENT_MAGIC};
use crate::recent::{Place, Recent};
use crate::tracking::{Delta, Tracking};

/// Chunk types (osiris.hrl).
pub const CHUNK_USER: u8 = 0;
pub const CHUNK_TRACKING_DELTA: u8 = 1;
pub const CHUNK_TRACKING_SNAPSHOT: u8 = 2;
/// osiris writes format version 0 (a first byte of 0x50).
const CHUNK_VERSION: u8 = 0;

/// Retention and segment sizes (RabbitMQ's stream arguments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// x-stream-max-segment-size-bytes (osiris: 500 MB).
    pub max_segment_bytes: u64,
    /// osiris's max_segment_size_chunks (256,000).
    pub max_segment_chunks: u64,
    /// x-max-length-bytes: whole old segments go past this.
    pub max_bytes: Option<u64>,
    /// x-max-age, in milliseconds: segments whose newest chunk is older go.
    pub max_age_ms: Option<u64>,
    /// x-stream-filter-size-bytes.
    pub filter_size: u8,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_segment_bytes: 500_000_000,
            max_segment_chunks: 256_000,
            max_bytes: None,
            max_age_ms: None,
            filter_size: bloom::DEFAULT_SIZE,
        }
    }
}

/// A segment as readers and retention see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentMeta {
    /// Its name: the chunk id of its first chunk.
    pub first_offset: u64,
    /// Bytes written (and visible to readers), header included.
    pub len: u64,
    pub chunks: u64,
    pub first: Option<IndexRecord>,
    pub last: Option<IndexRecord>,
}

/// What readers share with the writer.
#[derive(Debug, Clone, Default)]
pub struct ViewState {
    pub segments: Vec<SegmentMeta>,
    /// The offset the next record will get.
    pub next_offset: u64,
    /// Consumers read only chunks whose id is below this (one past
    /// osiris's committed chunk id: what a majority of the stream's
    /// members has; 0 while a new leader knows of none); None: every
    /// chunk written (a stream with no replicas).
    pub readable_below: Option<u64>,
}

#[derive(Debug)]
pub struct View {
    pub dir: PathBuf,
    pub state: RwLock<ViewState>,
    /// The newest chunks, whole, for replication readers.
    recent: Mutex<Recent>,
}

impl View {
    pub fn snapshot(&self) -> ViewState {
        self.state.read().expect("view lock").clone()
    }

    /// Keep up to `bytes` of the newest chunks in memory for replication
    /// readers (a leader with replicas); 0 keeps none and drops what is
    /// kept. See [`crate::recent`].
    pub fn keep_recent(&self, bytes: usize) {
        self.recent.lock().expect("recent lock").set_capacity(bytes);
    }

    /// Every replication reader is at or past `at`: the chunks before it
    /// are no longer kept.
    pub fn release_recent(&self, at: Place) {
        self.recent.lock().expect("recent lock").release_before(at);
    }

    pub(crate) fn clear_recent(&self) {
        self.recent.lock().expect("recent lock").clear();
    }

    pub(crate) fn recent_at(&self, at: Place) -> Option<Bytes> {
        self.recent.lock().expect("recent lock").get(at)
    }
}

/// A message to append: a simple entry or a producer's sub-batch, and its
/// filter value (publish v2).
#[derive(Debug, Clone)]
pub struct Message {
    pub entry: Entry,
    pub filter: Option<Bytes>,
}

/// Where a chunk went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub chunk_id: u64,
    pub records: u32,
    pub timestamp: i64,
}

pub struct Log {
    pub(crate) dir: PathBuf,
    pub(crate) config: Config,
    epoch: u64,
    pub(crate) view: Arc<View>,
    /// The newest segment's files.
    pub(crate) segment: File,
    pub(crate) index: File,
    /// Segments sealed since the owner last took what to sync.
    pub(crate) sealed: Vec<SegmentFiles>,
    pub(crate) tracking: Tracking,
}

/// One segment's open files and how much of it was written, for a sync
/// that runs outside the log's lock.
#[derive(Debug)]
pub struct SegmentFiles {
    /// The segment's name: its first chunk id.
    pub first_offset: u64,
    pub segment: File,
    pub index: File,
    /// Bytes of the segment written when the handles were taken.
    pub len: u64,
}

/// What a background sync writes out: segments sealed since the last one
/// (their tails may not be on disk yet), then the newest.
#[derive(Debug)]
pub struct ToSync {
    pub sealed: Vec<SegmentFiles>,
    pub newest: SegmentFiles,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log").field("dir", &self.dir).finish()
    }
}

fn create_files(dir: &Path, first_offset: u64) -> Result<(File, File)> {
    let (sp, ip) = files::names(dir, first_offset);
    let open = |p: &Path, magic: &[u8; 8]| -> Result<File> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(p)
            .map_err(|e| LogError::io(p, e))?;
        f.write_all_at(magic, 0).map_err(|e| LogError::io(p, e))?;
        Ok(f)
    };
    let s = open(&sp, SEGMENT_MAGIC)?;
    let i = open(&ip, INDEX_MAGIC)?;
    Ok((s, i))
}

fn open_rw(p: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .map_err(|e| LogError::io(p, e))
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Read a chunk's header at `pos` and check the chunk is whole (and, with
/// `crc`, that its data matches): its total size, or None.
pub(crate) fn read_chunk_header(f: &File, pos: u64, file_len: u64, crc: bool) -> Option<(ChunkHeader, u64)> {
    if pos + HEADER_SIZE as u64 > file_len {
        return None;
    }
    let mut h = [0u8; HEADER_SIZE];
    f.read_exact_at(&mut h, pos).ok()?;
    let header = ChunkHeader::parse(&h).ok()?;
    let total = HEADER_SIZE as u64
        + header.bloom_size as u64
        + header.data_length as u64
        + header.trailer_length as u64;
    if pos + total > file_len {
        return None;
    }
    if crc {
        let mut data = vec![0u8; header.data_length as usize];
        f.read_exact_at(&mut data, pos + HEADER_SIZE as u64 + header.bloom_size as u64)
            .ok()?;
        if crc32fast::hash(&data) != header.crc {
            return None;
        }
    }
    Some((header, total))
}

/// A buffer for a chunk: room for its header, then its bloom filter;
/// the data and the trailer go after ([`Log::write_chunk`] fills the
/// header in). One buffer, so the chunk is written, and kept for
/// replication, whole.
fn chunk_buf(bloom: &[u8], data: usize) -> BytesMut {
    let mut b = BytesMut::with_capacity(HEADER_SIZE + bloom.len() + data);
    b.put_bytes(0, HEADER_SIZE);
    b.put_slice(bloom);
    b
}

/// A tracking chunk's buffer: the body's length, then the body.
fn tracking_chunk(body: &[u8]) -> BytesMut {
    let mut b = chunk_buf(&[], body.len() + 4);
    b.put_u32(body.len() as u32);
    b.put_slice(body);
    b
}

impl Log {
    /// Open the log in `dir` (created if missing), recovering what a crash
    /// left: index records whose chunk is not whole or fails its CRC are
    /// cut, with the segment after them.
    pub fn open(dir: &Path, config: Config) -> Result<Log> {
        Self::open_from(dir, config, 0)
    }

    /// [`Log::open`], but a log with no segment yet starts at offset
    /// `first` (a replica whose leader's log starts there, retention
    /// having removed what came before).
    pub fn open_from(dir: &Path, config: Config, first: u64) -> Result<Log> {
        std::fs::create_dir_all(dir).map_err(|e| LogError::io(dir, e))?;
        let mut firsts = files::list(dir)?;
        if firsts.is_empty() {
            create_files(dir, first)?;
            sync_dir(dir);
            firsts.push(first);
        }
        let mut segments = Vec::new();
        let last_name = *firsts.last().expect("one segment at least");
        for &first in &firsts[..firsts.len() - 1] {
            match Self::meta_of_sealed(dir, first) {
                Ok(m) => segments.push(m),
                // Retention's thread (of an earlier Log on this directory)
                // deleted it meanwhile.
                Err(LogError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        let (meta, segment, index, next, tracking) = Self::recover_last(dir, last_name)?;
        segments.push(meta);
        let epoch = 1;
        let view = Arc::new(View {
            dir: dir.to_path_buf(),
            state: RwLock::new(ViewState {
                segments,
                next_offset: next,
                readable_below: None,
            }),
            recent: Mutex::default(),
        });
        Ok(Log {
            dir: dir.to_path_buf(),
            config,
            epoch,
            view,
            segment,
            index,
            sealed: Vec::new(),
            tracking,
        })
    }

    /// A segment that is no longer written: its first and last index
    /// records and its length, read from disk.
    fn meta_of_sealed(dir: &Path, first: u64) -> Result<SegmentMeta> {
        let (sp, ip) = files::names(dir, first);
        let len = std::fs::metadata(&sp).map_err(|e| LogError::io(&sp, e))?.len();
        let mut idx = File::open(&ip).map_err(|e| LogError::io(&ip, e))?;
        files::check_magic(&mut idx, &ip, INDEX_MAGIC)?;
        let ilen = idx.metadata().map_err(|e| LogError::io(&ip, e))?.len();
        let chunks = files::index_len(ilen);
        let (first_rec, last_rec) = if chunks == 0 {
            (None, None)
        } else {
            (
                Some(files::index_record_at(&idx, &ip, 0)?),
                Some(files::index_record_at(&idx, &ip, chunks - 1)?),
            )
        };
        Ok(SegmentMeta {
            first_offset: first,
            len,
            chunks,
            first: first_rec,
            last: last_rec,
        })
    }

    /// The newest segment: check its chunks from the end, cut a torn tail,
    /// and rebuild the tracking state from its chunks (its first chunk is
    /// a snapshot whenever there was state to carry over).
    fn recover_last(dir: &Path, first: u64) -> Result<(SegmentMeta, File, File, u64, Tracking)> {
        let (sp, ip) = files::names(dir, first);
        let mut segment = open_rw(&sp)?;
        files::check_magic(&mut segment, &sp, SEGMENT_MAGIC)?;
        let mut index = open_rw(&ip)?;
        files::check_magic(&mut index, &ip, INDEX_MAGIC)?;
        let mut records = files::read_index(&ip)?;
        let seg_len = segment.metadata().map_err(|e| LogError::io(&sp, e))?.len();
        // Drop index records whose chunk did not make it whole.
        let mut end = FILE_HEADER;
        let mut next = first;
        while let Some(r) = records.last() {
            match read_chunk_header(&segment, r.position as u64, seg_len, true) {
                Some((h, total)) if h.first_offset == r.chunk_id => {
                    end = r.position as u64 + total;
                    next = h.first_offset + h.num_records as u64;
                    break;
                }
                _ => {
                    tracing::warn!(segment = %sp.display(), chunk = r.chunk_id, "cutting a torn chunk at the tail of the stream log");
                    records.pop();
                }
            }
        }
        let index_end = FILE_HEADER + (records.len() * INDEX_RECORD) as u64;
        index.set_len(index_end).map_err(|e| LogError::io(&ip, e))?;
        if seg_len != end {
            // A chunk written without its index record was never confirmed.
            segment.set_len(end).map_err(|e| LogError::io(&sp, e))?;
        }
        let mut tracking = Tracking::default();
        for r in &records {
            let Some((h, _)) = read_chunk_header(&segment, r.position as u64, end, false) else {
                continue;
            };
            let body_at = r.position as u64 + HEADER_SIZE as u64 + h.bloom_size as u64;
            match h.chunk_type {
                CHUNK_USER if h.trailer_length > 0 => {
                    let mut t = vec![0u8; h.trailer_length as usize];
                    if segment
                        .read_exact_at(&mut t, body_at + h.data_length as u64)
                        .is_ok()
                    {
                        tracking.apply_delta(h.first_offset, &t);
                    }
                }
                CHUNK_TRACKING_DELTA | CHUNK_TRACKING_SNAPSHOT => {
                    let mut d = vec![0u8; h.data_length as usize];
                    if segment.read_exact_at(&mut d, body_at).is_err() || d.len() < 4 {
                        continue;
                    }
                    // One simple entry: a 4-byte length, then the body.
                    let body = &d[4..];
                    if h.chunk_type == CHUNK_TRACKING_SNAPSHOT {
                        tracking.load_snapshot(body);
                    } else {
                        tracking.apply_delta(h.first_offset, body);
                    }
                }
                _ => {}
            }
        }
        let meta = SegmentMeta {
            first_offset: first,
            len: end,
            chunks: records.len() as u64,
            first: records.first().copied(),
            last: records.last().copied(),
        };
        Ok((meta, segment, index, next, tracking))
    }

    pub fn view(&self) -> Arc<View> {
        self.view.clone()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Retention can change after creation (policies).
    pub fn set_config(&mut self, config: Config) {
        self.config = config;
    }

    /// The epoch new chunks are written with (1 until a stream's leaders
    /// are counted: each new leader writes with one more).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn set_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
    }

    /// Consumers read up to chunk `committed` from now on (None: all).
    pub fn set_committed(&self, committed: Option<u64>) {
        self.view.state.write().expect("view lock").readable_below = committed.map(|c| c + 1);
    }

    /// Consumers read nothing until [`Log::set_committed`] (a new leader
    /// before a majority has answered: osiris's committed chunk id -1).
    pub fn hold_readers(&self) {
        self.view.state.write().expect("view lock").readable_below = Some(0);
    }

    pub fn next_offset(&self) -> u64 {
        self.view.state.read().expect("view lock").next_offset
    }

    /// The first offset still in the log (the next offset when it is empty).
    pub fn first_offset(&self) -> u64 {
        let v = self.view.state.read().expect("view lock");
        v.segments
            .iter()
            .find_map(|s| s.first.map(|r| r.chunk_id))
            .unwrap_or(v.next_offset)
    }

    /// Bytes of the log on disk.
    pub fn bytes(&self) -> u64 {
        let v = self.view.state.read().expect("view lock");
        v.segments.iter().map(|s| s.len).sum()
    }

    pub fn tracking(&self) -> &Tracking {
        &self.tracking
    }

    /// The last publishing id stored for producer `reference`.
    pub fn sequence(&self, reference: &str) -> Option<u64> {
        self.tracking.sequences.get(reference).map(|s| s.1)
    }

    /// The offset consumer `reference` stored.
    pub fn stored_offset(&self, reference: &str) -> Option<u64> {
        self.tracking.offsets.get(reference).copied()
    }

    /// Append one user chunk of `messages`, carrying `delta` (producers'
    /// publishing ids, consumers' offsets) in its trailer.
    pub fn append(&mut self, messages: &[Message], delta: &Delta, now_ms: i64) -> Result<Appended> {
        let bloom = if messages.iter().any(|m| m.filter.is_some()) {
            let mut filter = bloom::Builder::new(self.config.filter_size);
            for m in messages {
                filter.add(m.filter.as_deref());
            }
            filter.finish()
        } else {
            None
        };
        let bloom = bloom.as_deref().unwrap_or(&[]);
        let trailer = delta.encode();
        let data: usize = messages.iter().map(|m| m.entry.encoded_len()).sum();
        let mut chunk = chunk_buf(bloom, data + trailer.len());
        let mut records = 0u32;
        for m in messages {
            m.entry.encode(&mut chunk);
            records += m.entry.records();
        }
        chunk.put_slice(&trailer);
        let at = self.write_chunk(
            CHUNK_USER,
            messages.len() as u16,
            records,
            chunk,
            bloom.len(),
            trailer.len(),
            now_ms,
        )?;
        self.tracking.apply(at.chunk_id, delta);
        Ok(at)
    }

    /// Write a tracking delta on its own (a consumer stored an offset and
    /// no messages were written with it). It takes an offset.
    pub fn append_tracking(&mut self, delta: &Delta, now_ms: i64) -> Result<Appended> {
        let at = self.write_chunk(
            CHUNK_TRACKING_DELTA,
            1,
            1,
            tracking_chunk(&delta.encode()),
            0,
            0,
            now_ms,
        )?;
        self.tracking.apply(at.chunk_id, delta);
        Ok(at)
    }

    /// A replica's append: `chunk` is one whole chunk as the leader
    /// stored it (header, bloom filter, data, trailer), written verbatim
    /// with the leader's epoch and timestamp (osiris_log:accept_chunk). It
    /// must be the next chunk (its id the next offset) and its data must
    /// match its CRC. A tracking snapshot opens a segment, as on the
    /// leader; a full segment rolls over without a snapshot of its own
    /// (the leader's follows).
    pub fn accept_chunk(&mut self, chunk: &[u8], now_ms: i64) -> Result<Appended> {
        let bad = |why: String| LogError::Corrupt {
            path: self.dir.display().to_string(),
            why,
        };
        let header = ChunkHeader::parse(chunk).map_err(|e| bad(format!("a replicated chunk: {e}")))?;
        let body_at = HEADER_SIZE + header.bloom_size as usize;
        let total = body_at + header.data_length as usize + header.trailer_length as usize;
        if chunk.len() != total {
            return Err(bad(format!(
                "a replicated chunk of {} bytes says it has {total}",
                chunk.len()
            )));
        }
        let data = &chunk[body_at..body_at + header.data_length as usize];
        if crc32fast::hash(data) != header.crc {
            return Err(bad(format!(
                "replicated chunk {} fails its CRC",
                header.first_offset
            )));
        }
        let next = self.next_offset();
        if header.first_offset != next {
            return Err(bad(format!(
                "replicated chunk {} is out of order (next offset {next})",
                header.first_offset
            )));
        }
        let empty = {
            let v = self.view.state.read().expect("view lock");
            v.segments.last().expect("a segment").chunks == 0
        };
        if header.chunk_type == CHUNK_TRACKING_SNAPSHOT {
            if !empty {
                self.roll(now_ms, false)?;
            }
        } else {
            self.roll_if_full(now_ms, false)?;
        }
        let at = self.write_raw(&header, chunk)?;
        let trailer = &chunk[body_at + data.len()..];
        match header.chunk_type {
            CHUNK_USER if !trailer.is_empty() => {
                self.tracking.apply_delta(header.first_offset, trailer);
            }
            CHUNK_TRACKING_DELTA if data.len() >= 4 => {
                self.tracking.apply_delta(header.first_offset, &data[4..]);
            }
            CHUNK_TRACKING_SNAPSHOT if data.len() >= 4 => {
                self.tracking.load_snapshot(&data[4..]);
            }
            _ => {}
        }
        Ok(at)
    }

    /// Write a chunk whose bytes are already whole (a replica's).
    fn write_raw(&mut self, header: &ChunkHeader, chunk: &[u8]) -> Result<Appended> {
        let (seg_first, pos, chunks) = {
            let v = self.view.state.read().expect("view lock");
            let s = v.segments.last().expect("a segment");
            (s.first_offset, s.len, s.chunks)
        };
        if pos + chunk.len() as u64 > u32::MAX as u64 {
            return Err(LogError::Corrupt {
                path: self.dir.display().to_string(),
                why: "a segment cannot grow past 4 GiB (lower x-stream-max-segment-size-bytes)".into(),
            });
        }
        let (sp, ip) = files::names(&self.dir, seg_first);
        self.segment
            .write_all_at(chunk, pos)
            .map_err(|e| LogError::io(&sp, e))?;
        let rec = IndexRecord {
            chunk_id: header.first_offset,
            timestamp: header.timestamp,
            epoch: header.epoch,
            position: pos as u32,
            chunk_type: header.chunk_type,
        };
        self.index
            .write_all_at(&rec.encode(), FILE_HEADER + chunks * INDEX_RECORD as u64)
            .map_err(|e| LogError::io(&ip, e))?;
        let mut v = self.view.state.write().expect("view lock");
        let s = v.segments.last_mut().expect("a segment");
        s.len = pos + chunk.len() as u64;
        s.chunks += 1;
        s.first.get_or_insert(rec);
        s.last = Some(rec);
        v.next_offset = header.first_offset + header.num_records as u64;
        Ok(Appended {
            chunk_id: header.first_offset,
            records: header.num_records,
            timestamp: header.timestamp,
        })
    }

    #[allow(clippy::too_many_arguments)]
    /// Write `chunk`, laid out by [`chunk_buf`] with `bloom` bytes of
    /// filter after the header's room and `trailer` bytes at the end:
    /// its header filled in, then one positional write.
    #[allow(clippy::too_many_arguments)]
    fn write_chunk(
        &mut self,
        chunk_type: u8,
        entries: u16,
        records: u32,
        mut chunk: BytesMut,
        bloom: usize,
        trailer: usize,
        now_ms: i64,
    ) -> Result<Appended> {
        if chunk_type != CHUNK_TRACKING_SNAPSHOT {
            self.roll_if_full(now_ms, true)?;
        }
        let (seg_first, pos, chunk_id) = {
            let v = self.view.state.read().expect("view lock");
            let s = v.segments.last().expect("a segment");
            (s.first_offset, s.len, v.next_offset)
        };
        if pos + chunk.len() as u64 > u32::MAX as u64 {
            return Err(LogError::Corrupt {
                path: self.dir.display().to_string(),
                why: "a segment cannot grow past 4 GiB (lower x-stream-max-segment-size-bytes)".into(),
            });
        }
        let data = &chunk[HEADER_SIZE + bloom..chunk.len() - trailer];
        let header = ChunkHeader {
            version: CHUNK_VERSION,
            chunk_type,
            num_entries: entries,
            num_records: records,
            timestamp: now_ms,
            epoch: self.epoch,
            first_offset: chunk_id,
            crc: crc32fast::hash(data),
            data_length: data.len() as u32,
            trailer_length: trailer as u32,
            bloom_size: bloom as u8,
        };
        let mut head = BytesMut::with_capacity(HEADER_SIZE);
        header.encode(&mut head);
        chunk[..HEADER_SIZE].copy_from_slice(&head);
        let total = chunk.len() as u64;
        let (sp, ip) = files::names(&self.dir, seg_first);
        self.segment
            .write_all_at(&chunk, pos)
            .map_err(|e| LogError::io(&sp, e))?;
        let rec = IndexRecord {
            chunk_id,
            timestamp: now_ms,
            epoch: self.epoch,
            position: pos as u32,
            chunk_type,
        };
        let chunks = {
            let v = self.view.state.read().expect("view lock");
            v.segments.last().expect("a segment").chunks
        };
        self.index
            .write_all_at(&rec.encode(), FILE_HEADER + chunks * INDEX_RECORD as u64)
            .map_err(|e| LogError::io(&ip, e))?;
        // Only now do readers see it.
        let mut v = self.view.state.write().expect("view lock");
        let s = v.segments.last_mut().expect("a segment");
        s.len = pos + total;
        s.chunks += 1;
        s.first.get_or_insert(rec);
        s.last = Some(rec);
        v.next_offset = chunk_id + records as u64;
        drop(v);
        self.view
            .recent
            .lock()
            .expect("recent lock")
            .push((seg_first, pos), chunk.freeze());
        Ok(Appended {
            chunk_id,
            records,
            timestamp: now_ms,
        })
    }

    /// Start a new segment once the newest is full (see [`Log::roll`]).
    fn roll_if_full(&mut self, now_ms: i64, snapshot: bool) -> Result<()> {
        let full = {
            let v = self.view.state.read().expect("view lock");
            let s = v.segments.last().expect("a segment");
            s.chunks > 0
                && (s.len >= self.config.max_segment_bytes || s.chunks >= self.config.max_segment_chunks)
        };
        if full {
            self.roll(now_ms, snapshot)?;
        }
        Ok(())
    }

    /// Start a new segment named after the next offset, apply retention
    /// (osiris does it at roll-over too), and, on a leader (`snapshot`),
    /// open it with a snapshot of the tracking state. A replica writes
    /// none of its own: the leader's arrives.
    fn roll(&mut self, now_ms: i64, snapshot: bool) -> Result<()> {
        let next = self.next_offset();
        // No fsync here: syncing a 500 MB segment under the writer's lock
        // stalled publishers for seconds. The owner syncs in the
        // background ([`Log::sync_handles`]).
        let (segment, index) = create_files(&self.dir, next)?;
        let (first_offset, len) = {
            let v = self.view.state.read().expect("view lock");
            let s = v.segments.last().expect("a segment");
            (s.first_offset, s.len)
        };
        self.sealed.push(SegmentFiles {
            first_offset,
            segment: std::mem::replace(&mut self.segment, segment),
            index: std::mem::replace(&mut self.index, index),
            len,
        });
        self.view
            .state
            .write()
            .expect("view lock")
            .segments
            .push(SegmentMeta {
                first_offset: next,
                len: FILE_HEADER,
                chunks: 0,
                first: None,
                last: None,
            });
        self.apply_retention(now_ms)?;
        if snapshot && !self.tracking.is_empty() {
            let first = self.first_offset();
            let chunk = tracking_chunk(&self.tracking.snapshot(first));
            self.write_chunk(CHUNK_TRACKING_SNAPSHOT, 1, 1, chunk, 0, 0, now_ms)?;
        }
        Ok(())
    }

    /// Delete whole old segments past max-length-bytes or max-age; the
    /// newest segment always stays. Returns how many went.
    pub fn apply_retention(&mut self, now_ms: i64) -> Result<usize> {
        let segs = self.view.state.read().expect("view lock").segments.clone();
        if segs.len() < 2 {
            return Ok(0);
        }
        let mut keep_from = 0;
        if let Some(max) = self.config.max_bytes {
            // Newest first: keep while they fit.
            let mut budget = max.saturating_sub(segs.last().expect("a segment").len);
            let mut i = segs.len() - 1;
            while i > 0 {
                let s = &segs[i - 1];
                if s.len > budget {
                    break;
                }
                budget -= s.len;
                i -= 1;
            }
            keep_from = keep_from.max(i);
        }
        if let Some(age) = self.config.max_age_ms {
            let limit = now_ms - age as i64;
            let mut i = 0;
            while i < segs.len() - 1 && segs[i].last.is_none_or(|l| l.timestamp < limit) {
                i += 1;
            }
            keep_from = keep_from.max(i);
        }
        if keep_from == 0 {
            return Ok(0);
        }
        // Readers stop seeing them first; their open files stay readable.
        self.view
            .state
            .write()
            .expect("view lock")
            .segments
            .drain(..keep_from);
        // Unlinking a 500 MB file takes the file system a while: not on
        // the writer's path (osiris deletes asynchronously too).
        let doomed: Vec<(PathBuf, PathBuf)> = segs[..keep_from]
            .iter()
            .map(|s| files::names(&self.dir, s.first_offset))
            .collect();
        let remove = move || {
            for (sp, ip) in doomed {
                let _ = std::fs::remove_file(&ip);
                let _ = std::fs::remove_file(&sp);
                tracing::debug!(segment = %sp.display(), "retention deleted a stream segment");
            }
        };
        if let Err(e) = std::thread::Builder::new()
            .name("warren-retention".into())
            .spawn(remove)
        {
            tracing::warn!("cannot start a thread to delete old stream segments: {e}");
        }
        Ok(keep_from)
    }

    /// What to fdatasync without holding up the writer: the segments
    /// sealed since the last call (their files, taken over) and duplicate
    /// handles on the newest (a sync on a duplicate handle syncs the file).
    pub fn to_sync(&mut self) -> Result<ToSync> {
        let (first_offset, len) = {
            let v = self.view.state.read().expect("view lock");
            let s = v.segments.last().expect("a segment");
            (s.first_offset, s.len)
        };
        let (sp, ip) = files::names(&self.dir, first_offset);
        let segment = self.segment.try_clone().map_err(|e| LogError::io(&sp, e))?;
        let index = self.index.try_clone().map_err(|e| LogError::io(&ip, e))?;
        Ok(ToSync {
            sealed: std::mem::take(&mut self.sealed),
            newest: SegmentFiles {
                first_offset,
                segment,
                index,
                len,
            },
        })
    }

    /// fdatasync what was written, here and now (tests, shutdown).
    pub fn sync(&mut self) -> Result<()> {
        let t = self.to_sync()?;
        for f in t.sealed.iter().chain(std::iter::once(&t.newest)) {
            f.sync(&self.dir)?;
        }
        Ok(())
    }

    /// Remove the whole log (the stream was deleted).
    pub fn delete(self) -> Result<()> {
        let dir = self.dir.clone();
        drop(self);
        std::fs::remove_dir_all(&dir).map_err(|e| LogError::io(&dir, e))
    }
}

impl SegmentFiles {
    /// fdatasync the segment and its index.
    pub fn sync(&self, dir: &Path) -> Result<()> {
        let (sp, ip) = files::names(dir, self.first_offset);
        self.segment.sync_data().map_err(|e| LogError::io(&sp, e))?;
        self.index.sync_data().map_err(|e| LogError::io(&ip, e))?;
        Ok(())
    }
}
