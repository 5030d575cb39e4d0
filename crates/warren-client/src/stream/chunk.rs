//! A delivered chunk read into its messages: simple entries and sub-entry
//! batches (opened when compressed), each with its offset.

use bytes::Bytes;
use warren_stream::chunk::{Chunk, Entry, TYPE_USER};

use super::error::Error;

/// Hand each message of a delivered chunk to `each` (offset, chunk
/// timestamp, message), opening sub-entry batches; a chunk that is not
/// the application's (tracking, say) has none. Checked against what the
/// bytes hold: a broken chunk is an error, never a panic.
pub(crate) fn read_chunk(
    chunk: &Bytes,
    check_crc: bool,
    mut each: impl FnMut(u64, i64, Bytes),
) -> Result<(), Error> {
    let c = Chunk::parse(chunk, check_crc)?;
    if c.header.chunk_type != TYPE_USER {
        return Ok(());
    }
    let timestamp = c.header.timestamp;
    let mut offset = c.header.first_offset;
    for e in c.entries {
        match e {
            Entry::Simple(raw) => {
                each(offset, timestamp, raw);
                offset = offset.wrapping_add(1);
            }
            Entry::SubBatch {
                compression,
                records,
                body,
                ..
            } => {
                let body = match compression {
                    0 => body,
                    c => Bytes::from(warren_stream::compression::decompress(c, &body).ok_or_else(|| {
                        Error::Protocol(format!("a sub-entry batch that codec {c} does not open"))
                    })?),
                };
                let mut at = 0usize;
                for _ in 0..records {
                    let rest = &body[at..];
                    if rest.len() < 4 {
                        return Err(Error::Protocol("a sub-entry cut short".into()));
                    }
                    let n = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                    if rest.len() - 4 < n {
                        return Err(Error::Protocol("a sub-entry cut short".into()));
                    }
                    each(offset, timestamp, body.slice(at + 4..at + 4 + n));
                    at += 4 + n;
                    offset = offset.wrapping_add(1);
                }
            }
        }
    }
    Ok(())
}
