//! Reading a stream log: where a subscription starts (first, last, next,
//! an offset, a timestamp, as osiris_log.erl chooses) and the user chunks
//! from there on, each as a Deliver frame carries it: the stored 48-byte
//! header and the data, without the bloom filter and the trailer (the
//! header still counts them, as RabbitMQ's does: clients size the data by
//! its length field). Tracking chunks are skipped; they use offsets, so
//! offsets a consumer sees are not contiguous.
//!
//! A reader holds its own file handles and takes the view's lock only to
//! copy the segment list, so reading never holds up the writer. A segment
//! deleted by retention stays readable through a handle already open.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use warren_stream::chunk::{ChunkHeader, HEADER_SIZE};

use crate::bloom::Matcher;
use crate::error::{LogError, Result};
use crate::files::{self, IndexRecord, FILE_HEADER};
use crate::log::{read_chunk_header, SegmentMeta, View, ViewState, CHUNK_USER};
use crate::recent::Place;
use crate::slabs::Slabs;

/// Where to start reading (the protocol's offset specification).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    First,
    Last,
    Next,
    Offset(u64),
    /// Milliseconds since the Unix epoch.
    Timestamp(i64),
}

/// A user chunk as it goes to a stream client.
#[derive(Debug, Clone)]
pub struct ChunkRead {
    pub header: ChunkHeader,
    /// The 48-byte header followed by the data.
    pub bytes: Bytes,
}

pub struct Reader {
    view: Arc<View>,
    /// The segment being read (its first offset) and where in it.
    segment: u64,
    pos: u64,
    file: Option<File>,
    filter: Option<Matcher>,
    /// A replication reader (osiris's data reader): every chunk, of every
    /// type, whole, committed or not.
    whole: bool,
    /// Where a replication reader reads chunks from the file into.
    slabs: Slabs,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("segment", &self.segment)
            .field("pos", &self.pos)
            .finish()
    }
}

fn open_index(view: &View, first: u64) -> Result<(File, std::path::PathBuf, u64)> {
    let (_, ip) = files::names(&view.dir, first);
    let f = File::open(&ip).map_err(|e| LogError::io(&ip, e))?;
    let len = f.metadata().map_err(|e| LogError::io(&ip, e))?.len();
    Ok((f, ip, files::index_len(len)))
}

/// In segment `s` (within what is written), the index of the first record
/// for which `pred` fails, `pred` holding for a prefix (binary search on
/// the index file), and that record if there is one.
fn partition_point(
    view: &View,
    s: &SegmentMeta,
    pred: impl Fn(&IndexRecord) -> bool,
) -> Result<(u64, Option<IndexRecord>)> {
    let (f, ip, n) = open_index(view, s.first_offset)?;
    let n = n.min(s.chunks);
    let (mut lo, mut hi) = (0u64, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if pred(&files::index_record_at(&f, &ip, mid)?) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let at = if lo < n {
        Some(files::index_record_at(&f, &ip, lo)?)
    } else {
        None
    };
    Ok((lo, at))
}

fn record_at(view: &View, s: &SegmentMeta, i: u64) -> Result<IndexRecord> {
    let (f, ip, _) = open_index(view, s.first_offset)?;
    files::index_record_at(&f, &ip, i)
}

/// Append `n` bytes of `f` from `pos` to `out`, read straight into its
/// spare capacity: zeroing the room first (`resize`) was 6 % of a
/// replicated stream leader's CPU at 1 KB (perf), as much as the page
/// cache copy of a consumer's read. On an error `out` is as it was.
fn read_into(f: &File, out: &mut BytesMut, pos: u64, n: usize) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    out.reserve(n);
    let start = out.len();
    let spare = out.spare_capacity_mut();
    let mut done = 0usize;
    while done < n {
        // SAFETY: the destination is within `spare` (at least `n` bytes
        // after `reserve`), which pread only writes; nothing reads it
        // before `set_len` below, and only the bytes pread wrote.
        let r = unsafe {
            libc::pread(
                f.as_raw_fd(),
                spare.as_mut_ptr().add(done).cast::<libc::c_void>(),
                n - done,
                (pos + done as u64) as libc::off_t,
            )
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        done += r as usize;
    }
    // SAFETY: the `n` bytes after `start` were written by pread above.
    unsafe { out.set_len(start + n) };
    Ok(())
}

impl Reader {
    /// A reader positioned as `start` says (osiris's rules: an offset
    /// starts at the chunk that holds it; a timestamp at the first chunk
    /// written at or after it; past the end, at the end).
    pub fn new(view: Arc<View>, start: Start, filter: Option<Matcher>) -> Result<Reader> {
        let st = view.snapshot();
        let (segment, pos) = Self::locate(&view, &st, start)?;
        Ok(Reader {
            view,
            segment,
            pos,
            file: None,
            filter: filter.filter(|m| !m.values.is_empty()),
            whole: false,
            slabs: Slabs::default(),
        })
    }

    /// A replication reader from offset `next` (a replica's next offset,
    /// a chunk boundary): [`Reader::next_chunk_into`] then hands out every
    /// chunk as stored (tracking chunks, bloom filter and trailer
    /// included), whether a majority has it or not, for a replica to
    /// store verbatim. Errs when `next` is not where a chunk starts or
    /// the log ends (the replica must be cut first).
    pub fn for_replication(view: Arc<View>, next: u64) -> Result<Reader> {
        let st = view.snapshot();
        let (segment, pos) = if next >= st.next_offset {
            Self::end_of(&st)
        } else {
            Self::locate(&view, &st, Start::Offset(next))?
        };
        let mut r = Reader {
            view,
            segment,
            pos,
            file: None,
            filter: None,
            whole: true,
            slabs: Slabs::default(),
        };
        if next != st.next_offset {
            let at = r.peek_id()?;
            if at != Some(next) {
                return Err(LogError::Corrupt {
                    path: r.view.dir.display().to_string(),
                    why: format!("offset {next} is not the start of a chunk here (found {at:?})"),
                });
            }
        }
        Ok(r)
    }

    /// The id of the chunk at the reader's position, if one is written.
    fn peek_id(&mut self) -> Result<Option<u64>> {
        self.open_file()?;
        let len = self
            .view
            .snapshot()
            .segments
            .iter()
            .find(|s| s.first_offset == self.segment)
            .map_or(0, |s| s.len);
        let f = self.file.as_ref().expect("just opened");
        Ok(read_chunk_header(f, self.pos, len, false).map(|(h, _)| h.first_offset))
    }

    fn end_of(st: &ViewState) -> (u64, u64) {
        let s = st.segments.last().expect("a segment");
        (s.first_offset, s.len)
    }

    fn start_of(st: &ViewState) -> (u64, u64) {
        (st.segments.first().expect("a segment").first_offset, FILE_HEADER)
    }

    fn locate(view: &View, st: &ViewState, start: Start) -> Result<(u64, u64)> {
        let first_chunk = st.segments.iter().find_map(|s| s.first.map(|r| r.chunk_id));
        match start {
            Start::First => Ok(Self::start_of(st)),
            Start::Next => Ok(Self::end_of(st)),
            Start::Last => {
                for s in st.segments.iter().rev() {
                    if s.chunks == 0 {
                        continue;
                    }
                    // Scan back for the newest user chunk (tracking chunks
                    // are few: this ends quickly).
                    let (f, ip, n) = open_index(view, s.first_offset)?;
                    for i in (0..n.min(s.chunks)).rev() {
                        let r = files::index_record_at(&f, &ip, i)?;
                        if r.chunk_type == CHUNK_USER {
                            return Ok((s.first_offset, r.position as u64));
                        }
                    }
                }
                Ok(Self::end_of(st))
            }
            Start::Offset(n) => {
                let Some(first_chunk) = first_chunk else {
                    return Ok(Self::end_of(st));
                };
                if n <= first_chunk {
                    return Ok(Self::start_of(st));
                }
                if n >= st.next_offset {
                    return Ok(Self::end_of(st));
                }
                // The newest segment whose first chunk is at or below n,
                // then the last chunk in it that starts at or below n.
                let Some(s) = st
                    .segments
                    .iter()
                    .rev()
                    .find(|s| s.first.is_some_and(|r| r.chunk_id <= n))
                else {
                    return Ok(Self::start_of(st));
                };
                let (i, _) = partition_point(view, s, |r| r.chunk_id <= n)?;
                if i == 0 {
                    return Ok((s.first_offset, FILE_HEADER));
                }
                Ok((s.first_offset, record_at(view, s, i - 1)?.position as u64))
            }
            Start::Timestamp(ts) => {
                let newest = st.segments.iter().rev().find_map(|s| s.last);
                if newest.is_none_or(|l| ts > l.timestamp) {
                    return Ok(Self::end_of(st));
                }
                // The oldest segment whose newest chunk is at or after ts;
                // in it, the first chunk written at or after ts.
                for s in &st.segments {
                    let Some(last) = s.last else { continue };
                    if last.timestamp < ts {
                        continue;
                    }
                    let (_, at) = partition_point(view, s, |r| r.timestamp < ts)?;
                    let pos = at.map_or(FILE_HEADER, |r| r.position as u64);
                    return Ok((s.first_offset, pos));
                }
                Ok(Self::end_of(st))
            }
        }
    }

    fn open_file(&mut self) -> Result<()> {
        if self.file.is_none() {
            let (sp, _) = files::names(&self.view.dir, self.segment);
            self.file = Some(File::open(&sp).map_err(|e| LogError::io(&sp, e))?);
        }
        Ok(())
    }

    /// Where the reader is: the place of the next chunk it reads.
    pub fn place(&self) -> Place {
        (self.segment, self.pos)
    }

    /// A replication reader's next chunk, whole, or None at the end of
    /// what is written: from the leader's recent chunks when there
    /// (shared, not copied), else read from the file into one of the
    /// reader's reused buffers ([`crate::slabs`]).
    pub fn next_whole(&mut self) -> Result<Option<(ChunkHeader, Bytes)>> {
        debug_assert!(self.whole, "a replication reader");
        if let Some(chunk) = self.view.recent_at(self.place()) {
            if let Ok(header) = ChunkHeader::parse(&chunk) {
                self.pos += chunk.len() as u64;
                self.slabs.release();
                return Ok(Some((header, chunk)));
            }
        }
        let mut slabs = std::mem::take(&mut self.slabs);
        let out = slabs.current();
        let read = self.next_chunk_into(out);
        let chunk = out.split().freeze();
        self.slabs = slabs;
        Ok(read?.map(|h| (h, chunk)))
    }

    /// The next user chunk that passes the filter, or None at the end of
    /// what is written (call again once more is).
    pub fn next_chunk(&mut self) -> Result<Option<ChunkRead>> {
        let mut buf = BytesMut::new();
        Ok(self.next_chunk_into(&mut buf)?.map(|header| ChunkRead {
            header,
            bytes: buf.freeze(),
        }))
    }

    /// Like [`Reader::next_chunk`], but append the chunk (header and data)
    /// to `out`: a Deliver frame is built around it with no extra copy.
    pub fn next_chunk_into(&mut self, out: &mut BytesMut) -> Result<Option<ChunkHeader>> {
        loop {
            let st = self.view.snapshot();
            let here = st.segments.iter().position(|s| s.first_offset == self.segment);
            let (len, newer) = match here {
                Some(i) => (st.segments[i].len, st.segments.get(i + 1).map(|s| s.first_offset)),
                None => {
                    // Retention removed it: go on from the oldest left
                    // that is newer, or read on in the open handle.
                    match (
                        self.file.as_ref(),
                        st.segments.iter().find(|s| s.first_offset > self.segment),
                    ) {
                        (Some(f), next) => (
                            f.metadata().map(|m| m.len()).unwrap_or(0),
                            next.map(|s| s.first_offset),
                        ),
                        (None, Some(next)) => {
                            self.segment = next.first_offset;
                            self.pos = FILE_HEADER;
                            continue;
                        }
                        (None, None) => return Ok(None),
                    }
                }
            };
            if self.pos + HEADER_SIZE as u64 > len {
                match newer {
                    Some(n) => {
                        self.segment = n;
                        self.pos = FILE_HEADER;
                        self.file = None;
                        continue;
                    }
                    None => return Ok(None),
                }
            }
            let pos = self.pos;
            if let Err(e) = self.open_file() {
                // Retention deleted it before we opened it: go on with the
                // next segment, if there is one.
                let gone = matches!(&e, LogError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound);
                match (gone, newer) {
                    (true, Some(n)) => {
                        self.segment = n;
                        self.pos = FILE_HEADER;
                        continue;
                    }
                    (true, None) => return Ok(None),
                    (false, _) => return Err(e),
                }
            }
            let f = self.file.as_ref().expect("just opened");
            let Some((header, total)) = read_chunk_header(f, pos, len, false) else {
                let (sp, _) = files::names(&self.view.dir, self.segment);
                return Err(LogError::Corrupt {
                    path: sp.display().to_string(),
                    why: format!("no whole chunk at position {pos}"),
                });
            };
            // Past what a majority has: not yet (osiris's can_read_next).
            if !self.whole && st.readable_below.is_some_and(|c| header.first_offset >= c) {
                return Ok(None);
            }
            if self.whole {
                read_into(f, out, pos, total as usize).map_err(|e| LogError::io(&self.view.dir, e))?;
                self.pos += total;
                return Ok(Some(header));
            }
            self.pos += total;
            if header.chunk_type != CHUNK_USER {
                continue;
            }
            let bloom_at = pos + HEADER_SIZE as u64;
            if let Some(m) = &self.filter {
                let mut bloom = vec![0u8; header.bloom_size as usize];
                f.read_exact_at(&mut bloom, bloom_at)
                    .map_err(|e| LogError::io(&self.view.dir, e))?;
                if !m.matches(&bloom) {
                    continue;
                }
            }
            let start = out.len();
            let read = read_into(f, out, pos, HEADER_SIZE).and_then(|_| {
                read_into(
                    f,
                    out,
                    bloom_at + header.bloom_size as u64,
                    header.data_length as usize,
                )
            });
            if let Err(e) = read {
                out.truncate(start);
                return Err(LogError::io(&self.view.dir, e));
            }
            return Ok(Some(header));
        }
    }
}
