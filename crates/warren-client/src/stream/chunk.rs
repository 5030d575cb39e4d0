//! A delivered chunk read message by message as the consumer hands them
//! out: simple entries and sub-entry batches (opened when compressed),
//! each message with its offset. Nothing is gathered up front: a message
//! costs a look at its length, and a share of the chunk's bytes only when
//! the application takes it as an owned [`super::Delivery`].

use std::ops::Range;

use bytes::Bytes;
use warren_stream::chunk::{Chunk, ChunkHeader, Entry, EntryAt, TYPE_USER};

use super::error::Error;

/// The messages of one delivered chunk, in offset order; checked against
/// what the bytes hold as they are read: a broken chunk ends with an
/// error, never a panic.
pub(crate) struct ChunkReader {
    /// The entries.
    data: Bytes,
    /// Where the next entry begins.
    at: usize,
    /// Entries not read yet.
    entries: u16,
    /// The next message's offset.
    offset: u64,
    timestamp: i64,
    first_offset: u64,
    records: u32,
    /// The sub-entry batch being read: its (opened) body, where its next
    /// message begins, and its messages not read yet.
    batch: Option<(Bytes, usize, u16)>,
}

impl ChunkReader {
    /// Read `chunk`, its CRC checked with `check_crc`; None for a chunk
    /// that is not the application's (tracking, say).
    pub(crate) fn new(chunk: &Bytes, check_crc: bool) -> Result<Option<ChunkReader>, Error> {
        let header = ChunkHeader::parse(chunk)?;
        let data = Chunk::data(chunk, &header, check_crc)?;
        if header.chunk_type != TYPE_USER {
            return Ok(None);
        }
        Ok(Some(ChunkReader {
            data,
            at: 0,
            entries: header.num_entries,
            offset: header.first_offset,
            timestamp: header.timestamp,
            first_offset: header.first_offset,
            records: header.num_records,
            batch: None,
        }))
    }

    /// The chunk's first offset.
    pub(crate) fn first_offset(&self) -> u64 {
        self.first_offset
    }

    /// Its messages, as its header says.
    pub(crate) fn records(&self) -> u32 {
        self.records
    }

    /// When the chunk was written.
    pub(crate) fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The next message of the sub-entry batch being read, if any is
    /// left: where it lies in the batch's body.
    #[inline]
    fn next_in_batch(&mut self) -> Option<Result<Range<usize>, Error>> {
        let (body, at, left) = self.batch.as_mut()?;
        if *left == 0 {
            self.batch = None;
            return None;
        }
        *left -= 1;
        let rest = &body[*at..];
        let n = match rest.get(..4) {
            Some(l) => u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize,
            None => return Some(Err(Error::Protocol("a sub-entry cut short".into()))),
        };
        if rest.len() - 4 < n {
            return Some(Err(Error::Protocol("a sub-entry cut short".into())));
        }
        let m = *at + 4..*at + 4 + n;
        *at += 4 + n;
        Some(Ok(m))
    }

    /// Where the next message lies.
    #[inline]
    fn next_message(&mut self) -> Option<Result<Place, Error>> {
        loop {
            if let Some(m) = self.next_in_batch() {
                return Some(m.map(Place::Batch));
            }
            if self.entries == 0 {
                return None;
            }
            self.entries -= 1;
            let (entry, next) = match Entry::locate(&self.data, self.at) {
                Ok(e) => e,
                Err(e) => return Some(Err(e.into())),
            };
            self.at = next;
            match entry {
                EntryAt::Simple(m) => return Some(Ok(Place::Data(m))),
                EntryAt::SubBatch {
                    compression,
                    records,
                    body,
                    ..
                } => {
                    let body = match compression {
                        0 => self.data.slice(body),
                        c => match warren_stream::compression::decompress(c, &self.data[body]) {
                            Some(b) => Bytes::from(b),
                            None => {
                                let why = format!("a sub-entry batch that codec {c} does not open");
                                return Some(Err(Error::Protocol(why)));
                            }
                        },
                    };
                    self.batch = Some((body, 0, records));
                }
            }
        }
    }

    /// The next message's offset and where it lies (valid until the next
    /// call); after an error, nothing more.
    #[inline]
    pub(crate) fn next_place(&mut self) -> Option<Result<(u64, Place), Error>> {
        match self.next_message()? {
            Ok(p) => {
                let offset = self.offset;
                self.offset = offset.wrapping_add(1);
                Some(Ok((offset, p)))
            }
            Err(e) => {
                self.entries = 0;
                self.batch = None;
                Some(Err(e))
            }
        }
    }

    /// The bytes of the message at `p` (the last [`Self::next_place`]).
    #[inline]
    pub(crate) fn bytes(&self, p: &Place) -> &[u8] {
        match p {
            Place::Data(r) => &self.data[r.clone()],
            Place::Batch(r) => self.batch.as_ref().map_or(&[][..], |(b, _, _)| &b[r.clone()]),
        }
    }

    /// A share of the bytes of the message at `p`.
    #[inline]
    pub(crate) fn slice(&self, p: &Place) -> Bytes {
        match p {
            Place::Data(r) => self.data.slice(r.clone()),
            Place::Batch(r) => self
                .batch
                .as_ref()
                .map_or_else(Bytes::new, |(b, _, _)| b.slice(r.clone())),
        }
    }
}

/// Where a message lies: in the chunk's data, or in the body of the
/// sub-entry batch being read.
pub(crate) enum Place {
    Data(Range<usize>),
    Batch(Range<usize>),
}

impl Iterator for ChunkReader {
    /// Each message's offset, chunk timestamp and bytes; after an error,
    /// nothing more.
    type Item = Result<(u64, i64, Bytes), Error>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        Some(
            self.next_place()?
                .map(|(offset, p)| (offset, self.timestamp, self.slice(&p))),
        )
    }
}
