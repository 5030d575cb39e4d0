//! The broker's reading of a Publish frame (key 0x0002), versions 1 and 2,
//! messages and sub-batches alike, without building a `Command`: this is
//! the hot path, and the entries come out ready to be stored.
//!
//! ```text
//! Publish v1 => PublisherId [PublishingId Message]
//! Publish v2 => PublisherId [PublishingId FilterValue Message]   FilterValue: string, -1 for none
//! Message    => int32 length, bytes                       (top bit of the first byte 0)
//!             | 1 compression:3 0:4, records u16,
//!               uncompressed length u32, length u32, bytes (a producer's sub-batch)
//! ```
//!
//! A sub-batch is one entry with one publishing id, stored as sent.

use bytes::{Buf, Bytes};

use crate::chunk::Entry;
use crate::error::CodecError;
use crate::wire::Reader;

/// One published entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub publishing_id: u64,
    /// Publish v2's filter value.
    pub filter: Option<Bytes>,
    pub entry: Entry,
}

/// A Publish frame's content (version 2, after the size prefix) for
/// `entries`: what a replica's node hands its stream's leader, read back
/// with [`parse_publish`].
pub fn encode_publish(out: &mut bytes::BytesMut, publisher_id: u8, entries: &[Published]) {
    use bytes::BufMut;
    out.put_u16(crate::command::key::PUBLISH);
    out.put_u16(2);
    out.put_u8(publisher_id);
    out.put_i32(entries.len() as i32);
    for e in entries {
        out.put_u64(e.publishing_id);
        match &e.filter {
            Some(f) => {
                out.put_i16(f.len().min(i16::MAX as usize) as i16);
                out.put_slice(&f[..f.len().min(i16::MAX as usize)]);
            }
            None => out.put_i16(-1),
        }
        e.entry.encode(out);
    }
}

/// Read a Publish frame's content (after the size prefix). Returns the
/// publisher id and the entries.
pub fn parse_publish(frame: Bytes) -> Result<(u8, Vec<Published>), CodecError> {
    let mut r = Reader::new(frame);
    let _key = r.u16()?;
    let version = r.u16()?;
    let publisher_id = r.u8()?;
    // At least a publishing id and a 4-byte length each.
    let n = r.count(12)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let publishing_id = r.u64()?;
        let filter = if version >= 2 { r.opt_string_bytes()? } else { None };
        let mut b = r.rest();
        if b.is_empty() {
            return Err(CodecError::Truncated("published message"));
        }
        let entry = if b[0] & 0x80 == 0 {
            if b.len() < 4 {
                return Err(CodecError::Truncated("message length"));
            }
            let len = b.get_u32() as usize;
            if b.len() < len {
                return Err(CodecError::Truncated("message"));
            }
            let m = b.split_to(len);
            Entry::Simple(m)
        } else {
            if b.len() < 11 {
                return Err(CodecError::Truncated("sub-batch header"));
            }
            let compression = (b.get_u8() >> 4) & 0x07;
            let records = b.get_u16();
            let uncompressed_length = b.get_u32();
            let len = b.get_u32() as usize;
            if b.len() < len {
                return Err(CodecError::Truncated("sub-batch"));
            }
            Entry::SubBatch {
                compression,
                records,
                uncompressed_length,
                body: b.split_to(len),
            }
        };
        r = Reader::new(b);
        out.push(Published {
            publishing_id,
            filter,
            entry,
        });
    }
    Ok((publisher_id, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};

    #[test]
    fn what_is_encoded_parses_back_the_same() {
        let entries = vec![
            Published {
                publishing_id: 5,
                filter: Some(Bytes::from_static(b"eu")),
                entry: Entry::Simple(Bytes::from_static(b"one")),
            },
            Published {
                publishing_id: 6,
                filter: None,
                entry: Entry::SubBatch {
                    compression: 1,
                    records: 3,
                    uncompressed_length: 40,
                    body: Bytes::from_static(b"zipped"),
                },
            },
        ];
        let mut out = BytesMut::new();
        encode_publish(&mut out, 9, &entries);
        assert_eq!(parse_publish(out.freeze()).unwrap(), (9, entries));
    }

    #[test]
    fn v1_v2_and_sub_batches() {
        let mut f = BytesMut::new();
        f.put_u16(2);
        f.put_u16(2);
        f.put_u8(7);
        f.put_i32(3);
        f.put_u64(10);
        f.put_i16(-1);
        f.put_u32(2);
        f.put_slice(b"hi");
        f.put_u64(11);
        f.put_i16(2);
        f.put_slice(b"ca");
        f.put_u32(1);
        f.put_slice(b"x");
        f.put_u64(12);
        f.put_i16(-1);
        f.put_u8(0x80 | (2 << 4));
        f.put_u16(5);
        f.put_u32(100);
        f.put_u32(3);
        f.put_slice(b"zzz");
        let (p, msgs) = parse_publish(f.freeze()).unwrap();
        assert_eq!(p, 7);
        assert_eq!(msgs[0].entry, Entry::Simple(Bytes::from_static(b"hi")));
        assert_eq!(msgs[1].filter.as_deref(), Some(&b"ca"[..]));
        assert!(
            matches!(&msgs[2].entry, Entry::SubBatch { compression: 2, records: 5, uncompressed_length: 100, body } if &body[..] == b"zzz")
        );
    }

    #[test]
    fn lies_about_lengths_are_errors() {
        let mut f = BytesMut::new();
        f.put_u16(2);
        f.put_u16(1);
        f.put_u8(0);
        f.put_i32(1);
        f.put_u64(1);
        f.put_u32(1000);
        f.put_slice(b"short");
        assert!(parse_publish(f.clone().freeze()).is_err());
        for cut in 0..f.len() {
            let _ = parse_publish(f.clone().freeze().slice(..cut));
        }
    }
}
