//! Osiris chunks (osiris_log.erl, "Chunk format"): the unit a stream
//! stores and a Deliver frame carries unchanged. A 48-byte header (magic
//! and version, type, entry and record counts, timestamp, epoch, first
//! offset, CRC and length of the data, trailer length, bloom size), then
//! the bloom filter, the data entries, the trailer. An entry is simple
//! (top bit 0: a 31-bit length and the message) or a sub-batch (top bit 1:
//! compression, record count, lengths, and the records as the producer
//! batched them).

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::CodecError;

pub const HEADER_SIZE: usize = 48;
/// Magic 5 in the high nibble, format version 0 or 1 in the low one.
pub const MAGIC: u8 = 0x5;
pub const TYPE_USER: u8 = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    pub version: u8,
    pub chunk_type: u8,
    pub num_entries: u16,
    pub num_records: u32,
    pub timestamp: i64,
    pub epoch: u64,
    /// The offset of the chunk's first record.
    pub first_offset: u64,
    pub crc: u32,
    pub data_length: u32,
    pub trailer_length: u32,
    pub bloom_size: u8,
}

impl ChunkHeader {
    pub fn parse(b: &[u8]) -> Result<ChunkHeader, CodecError> {
        if b.len() < HEADER_SIZE {
            return Err(CodecError::Truncated("chunk header"));
        }
        if b[0] >> 4 != MAGIC {
            return Err(CodecError::Invalid(format!("chunk magic {:#x}", b[0] >> 4)));
        }
        let u16_ = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let u32_ = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_ = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_be_bytes(a)
        };
        Ok(ChunkHeader {
            version: b[0] & 0x0f,
            chunk_type: b[1],
            num_entries: u16_(2),
            num_records: u32_(4),
            timestamp: u64_(8) as i64,
            epoch: u64_(16),
            first_offset: u64_(24),
            crc: u32_(32),
            data_length: u32_(36),
            trailer_length: u32_(40),
            bloom_size: b[44],
        })
    }

    pub fn encode(&self, out: &mut BytesMut) {
        out.put_u8((MAGIC << 4) | (self.version & 0x0f));
        out.put_u8(self.chunk_type);
        out.put_u16(self.num_entries);
        out.put_u32(self.num_records);
        out.put_i64(self.timestamp);
        out.put_u64(self.epoch);
        out.put_u64(self.first_offset);
        out.put_u32(self.crc);
        out.put_u32(self.data_length);
        out.put_u32(self.trailer_length);
        out.put_u8(self.bloom_size);
        out.put_slice(&[0, 0, 0]);
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// One message.
    Simple(Bytes),
    /// A producer's sub-batch, stored as sent (possibly compressed).
    SubBatch {
        compression: u8,
        records: u16,
        uncompressed_length: u32,
        body: Bytes,
    },
}

/// Where an [`Entry`] lies in a chunk's data section ([`Entry::locate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryAt {
    /// One message: its bytes.
    Simple(std::ops::Range<usize>),
    /// A producer's sub-batch: its fields and its body's bytes.
    SubBatch {
        compression: u8,
        records: u16,
        uncompressed_length: u32,
        body: std::ops::Range<usize>,
    },
}

impl Entry {
    /// The entry at `at` in a chunk's data section, and where the next
    /// one begins.
    #[inline]
    pub fn parse(data: &Bytes, at: usize) -> Result<(Entry, usize), CodecError> {
        let (e, next) = Entry::locate(data, at)?;
        let e = match e {
            EntryAt::Simple(r) => Entry::Simple(data.slice(r)),
            EntryAt::SubBatch {
                compression,
                records,
                uncompressed_length,
                body,
            } => Entry::SubBatch {
                compression,
                records,
                uncompressed_length,
                body: data.slice(body),
            },
        };
        Ok((e, next))
    }

    /// Where the entry at `at` in a chunk's data section lies, and where
    /// the next one begins: [`Entry::parse`] without taking a share of
    /// the bytes (a reader that only looks at them pays no reference
    /// count per message).
    #[inline]
    pub fn locate(data: &[u8], at: usize) -> Result<(EntryAt, usize), CodecError> {
        let rest = data.get(at..).unwrap_or_default();
        if rest.len() < 4 {
            return Err(CodecError::Truncated("chunk entry"));
        }
        if rest[0] & 0x80 == 0 {
            let n = (u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) & 0x7fff_ffff) as usize;
            if rest.len() - 4 < n {
                return Err(CodecError::Truncated("chunk entry body"));
            }
            return Ok((EntryAt::Simple(at + 4..at + 4 + n), at + 4 + n));
        }
        if rest.len() < 11 {
            return Err(CodecError::Truncated("sub-batch header"));
        }
        let compression = (rest[0] >> 4) & 0x07;
        let records = u16::from_be_bytes([rest[1], rest[2]]);
        let uncompressed_length = u32::from_be_bytes([rest[3], rest[4], rest[5], rest[6]]);
        let n = u32::from_be_bytes([rest[7], rest[8], rest[9], rest[10]]) as usize;
        if rest.len() - 11 < n {
            return Err(CodecError::Truncated("sub-batch body"));
        }
        let e = EntryAt::SubBatch {
            compression,
            records,
            uncompressed_length,
            body: at + 11..at + 11 + n,
        };
        Ok((e, at + 11 + n))
    }

    pub fn records(&self) -> u32 {
        match self {
            Entry::Simple(_) => 1,
            Entry::SubBatch { records, .. } => *records as u32,
        }
    }

    /// The bytes [`Entry::encode`] appends.
    pub fn encoded_len(&self) -> usize {
        match self {
            Entry::Simple(b) => 4 + b.len(),
            Entry::SubBatch { body, .. } => 11 + body.len(),
        }
    }

    /// Append the entry as a chunk's data (and a Publish frame's message)
    /// holds it: a simple entry's 4-byte length (top bit clear) and bytes;
    /// a sub-batch's flag-and-codec byte, record count, uncompressed and
    /// stored lengths, and bytes (PROTOCOL.adoc, "Publish").
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            Entry::Simple(b) => {
                out.put_u32(b.len() as u32 & 0x7fff_ffff);
                out.put_slice(b);
            }
            Entry::SubBatch {
                compression,
                records,
                uncompressed_length,
                body,
            } => {
                out.put_u8(0x80 | ((compression & 0x07) << 4));
                out.put_u16(*records);
                out.put_u32(*uncompressed_length);
                out.put_u32(body.len() as u32);
                out.put_slice(body);
            }
        }
    }
}

/// A parsed chunk: its header and its data entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub header: ChunkHeader,
    pub entries: Vec<Entry>,
}

impl Chunk {
    /// Parse a chunk as a Deliver frame carries it: the header, then the
    /// data (RabbitMQ sends neither the bloom filter nor the trailer, but
    /// leaves their sizes in the header, so they are not skipped here).
    /// With `check_crc` the data's CRC-32 must match.
    pub fn parse(b: &Bytes, check_crc: bool) -> Result<Chunk, CodecError> {
        let header = ChunkHeader::parse(b)?;
        let data = Chunk::data(b, &header, check_crc)?;
        let mut entries = Vec::with_capacity((header.num_entries as usize).min(data.len()));
        let mut at = 0usize;
        for _ in 0..header.num_entries {
            let (e, next) = Entry::parse(&data, at)?;
            entries.push(e);
            at = next;
        }
        Ok(Chunk { header, entries })
    }

    /// The data section of chunk `b` (the entries, after the header),
    /// with `check_crc` checked against the header's CRC-32.
    pub fn data(b: &Bytes, header: &ChunkHeader, check_crc: bool) -> Result<Bytes, CodecError> {
        let end = HEADER_SIZE + header.data_length as usize;
        if b.len() < end {
            return Err(CodecError::Truncated("chunk data"));
        }
        let data = b.slice(HEADER_SIZE..end);
        if check_crc && crc32fast::hash(&data) != header.crc {
            return Err(CodecError::Invalid("chunk CRC mismatch".into()));
        }
        Ok(data)
    }

    /// Build a user chunk of simple entries (for the broker and for tests).
    pub fn encode_simple(first_offset: u64, timestamp: i64, epoch: u64, messages: &[&[u8]]) -> Bytes {
        let mut data = BytesMut::new();
        for m in messages {
            data.put_u32(m.len() as u32 & 0x7fff_ffff);
            data.put_slice(m);
        }
        let header = ChunkHeader {
            version: 1,
            chunk_type: TYPE_USER,
            num_entries: messages.len() as u16,
            num_records: messages.len() as u32,
            timestamp,
            epoch,
            first_offset,
            crc: crc32fast::hash(&data),
            data_length: data.len() as u32,
            trailer_length: 0,
            bloom_size: 0,
        };
        let mut out = BytesMut::with_capacity(HEADER_SIZE + data.len());
        header.encode(&mut out);
        out.put_slice(&data);
        out.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_roundtrips_and_its_crc_is_checked() {
        let c = Chunk::encode_simple(100, 1_700_000_000_000, 1, &[b"a", b"bc", b""]);
        assert_eq!(c.len(), HEADER_SIZE + 4 + 1 + 4 + 2 + 4);
        let p = Chunk::parse(&c, true).unwrap();
        assert_eq!(p.header.first_offset, 100);
        assert_eq!(p.header.num_records, 3);
        assert_eq!(
            p.entries,
            vec![
                Entry::Simple(Bytes::from_static(b"a")),
                Entry::Simple(Bytes::from_static(b"bc")),
                Entry::Simple(Bytes::new()),
            ]
        );
        let mut bad = c.to_vec();
        let last = bad.len() - 1;
        bad[last - 2] ^= 1;
        assert!(Chunk::parse(&Bytes::from(bad), true).is_err());
    }

    #[test]
    fn sub_batches_parse() {
        let mut data = BytesMut::new();
        data.put_u8(0x80 | (1 << 4)); // sub-batch, gzip
        data.put_u16(2);
        data.put_u32(10);
        data.put_u32(3);
        data.put_slice(b"xyz");
        let h = ChunkHeader {
            version: 1,
            chunk_type: 0,
            num_entries: 1,
            num_records: 2,
            timestamp: 0,
            epoch: 1,
            first_offset: 0,
            crc: crc32fast::hash(&data),
            data_length: data.len() as u32,
            trailer_length: 0,
            bloom_size: 0,
        };
        let mut b = BytesMut::new();
        h.encode(&mut b);
        b.put_slice(&data);
        let p = Chunk::parse(&b.freeze(), true).unwrap();
        assert_eq!(p.entries[0].records(), 2);
        assert!(matches!(&p.entries[0], Entry::SubBatch { compression: 1, body, .. } if &body[..] == b"xyz"));
    }

    #[test]
    fn truncated_chunks_are_errors() {
        let c = Chunk::encode_simple(0, 0, 1, &[b"hello", b"world"]);
        for cut in 0..c.len() {
            assert!(Chunk::parse(&c.slice(..cut), false).is_err(), "cut {cut}");
        }
        let mut lie = c.to_vec();
        lie[2..4].copy_from_slice(&60000u16.to_be_bytes()); // more entries than data
        assert!(Chunk::parse(&Bytes::from(lie), false).is_err());
    }
}
