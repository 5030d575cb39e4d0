//! Record framing and the two record payloads (see the crate docs for the
//! byte diagram). Pure functions over byte slices: no I/O here, so the
//! decoder can be fuzzed and unit-tested on its own.

use bytes::Bytes;

/// Bytes before a record's payload: `len` (u32) and `crc` (u32).
pub const FRAME_HEADER: usize = 8;
/// A message record's fixed part after the kind byte.
const MESSAGE_FIXED: usize = 8 + 1 + 8 + 1 + 1 + 4 + 4;

pub const KIND_MESSAGE: u8 = 1;
pub const KIND_ACKED: u8 = 2;
pub const KIND_DELIVERED: u8 = 3;

/// Magic at the start of every segment file.
pub const SEGMENT_MAGIC: &[u8; 8] = b"WRNSEG01";
/// Magic at the start of every ack log file.
pub const ACKLOG_MAGIC: &[u8; 8] = b"WRNACK01";

/// The largest record a reader accepts: a 512 MiB body (RabbitMQ's hard
/// cap) plus properties and names. A corrupt length never makes a reader
/// allocate more than this.
pub const MAX_RECORD: u32 = (512 << 20) + (1 << 20);

/// Flag bit: delivery mode 2. Transient records are paged-out messages and
/// are dropped on recovery.
pub const FLAG_PERSISTENT: u8 = 1;

/// What [`parse`] found at the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// A whole record whose CRC matches; `size` is its framed length.
    Record {
        kind: u8,
        payload: &'a [u8],
        size: usize,
    },
    /// The buffer ends inside the record: `need` bytes make it whole.
    Incomplete { need: usize },
    /// Not a record: a bad length or a CRC mismatch (a torn or corrupt write).
    Corrupt(&'static str),
}

/// Frame `kind` + `payload` onto `out`.
pub fn frame(out: &mut Vec<u8>, kind: u8, payload: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0u8; FRAME_HEADER]);
    out.push(kind);
    payload(out);
    let len = (out.len() - start - FRAME_HEADER) as u32;
    let crc = crc32fast::hash(&out[start + FRAME_HEADER..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Read one record from the start of `buf`.
pub fn parse(buf: &[u8]) -> Parsed<'_> {
    if buf.len() < FRAME_HEADER {
        return Parsed::Incomplete { need: FRAME_HEADER };
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let crc = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
    if len == 0 || len > MAX_RECORD {
        return Parsed::Corrupt("record length out of range");
    }
    let size = FRAME_HEADER + len as usize;
    if buf.len() < size {
        return Parsed::Incomplete { need: size };
    }
    let body = &buf[FRAME_HEADER..size];
    if crc32fast::hash(body) != crc {
        return Parsed::Corrupt("record CRC mismatch");
    }
    Parsed::Record {
        kind: body[0],
        payload: &body[1..],
        size,
    }
}

/// A message as the store keeps it: what a delivery needs, in the
/// encodings it arrived in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// The queue's position for it.
    pub seq: u64,
    pub persistent: bool,
    /// Absolute expiry, milliseconds since the Unix epoch; 0 for none.
    pub expires_at_ms: u64,
    pub exchange: Bytes,
    pub routing_key: Bytes,
    /// AMQP 0-9-1 property flags and list, as published.
    pub properties: Bytes,
    pub body: Bytes,
}

/// The borrowed parts of a message to write (so a queue can store a
/// message without building a [`StoredMessage`] copy first).
#[derive(Debug, Clone, Copy)]
pub struct MessageRecord<'a> {
    pub seq: u64,
    pub persistent: bool,
    pub expires_at_ms: u64,
    pub exchange: &'a [u8],
    pub routing_key: &'a [u8],
    pub properties: &'a [u8],
    pub body: &'a [u8],
}

impl MessageRecord<'_> {
    /// Framed size on disk.
    pub fn framed_len(&self) -> usize {
        FRAME_HEADER
            + 1
            + MESSAGE_FIXED
            + self.exchange.len()
            + self.routing_key.len()
            + self.properties.len()
            + self.body.len()
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        // Names are short strings (≤ 255 octets) by the protocol; clamp so a
        // caller bug cannot write a length byte that lies.
        let ex = &self.exchange[..self.exchange.len().min(255)];
        let rk = &self.routing_key[..self.routing_key.len().min(255)];
        frame(out, KIND_MESSAGE, |o| {
            o.extend_from_slice(&self.seq.to_le_bytes());
            o.push(if self.persistent { FLAG_PERSISTENT } else { 0 });
            o.extend_from_slice(&self.expires_at_ms.to_le_bytes());
            o.push(ex.len() as u8);
            o.extend_from_slice(ex);
            o.push(rk.len() as u8);
            o.extend_from_slice(rk);
            o.extend_from_slice(&(self.properties.len() as u32).to_le_bytes());
            o.extend_from_slice(self.properties);
            o.extend_from_slice(&(self.body.len() as u32).to_le_bytes());
            o.extend_from_slice(self.body);
        });
    }
}

/// The fields of a message record that recovery needs, without copying
/// the body: sequence number, flags and body length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageHead {
    pub seq: u64,
    pub persistent: bool,
    pub body_len: u64,
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.buf.len() < n {
            return None;
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8).map(|b| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        })
    }
}

/// Decode a message payload (after the kind byte). Copies the parts out,
/// so the result does not pin the read buffer.
pub fn decode_message(payload: &[u8]) -> Option<StoredMessage> {
    let mut r = Reader { buf: payload };
    let seq = r.u64()?;
    let flags = r.u8()?;
    let expires_at_ms = r.u64()?;
    let n = r.u8()? as usize;
    let exchange = Bytes::copy_from_slice(r.take(n)?);
    let n = r.u8()? as usize;
    let routing_key = Bytes::copy_from_slice(r.take(n)?);
    let n = r.u32()? as usize;
    let properties = Bytes::copy_from_slice(r.take(n)?);
    let n = r.u32()? as usize;
    let body = Bytes::copy_from_slice(r.take(n)?);
    if !r.buf.is_empty() {
        return None;
    }
    Some(StoredMessage {
        seq,
        persistent: flags & FLAG_PERSISTENT != 0,
        expires_at_ms,
        exchange,
        routing_key,
        properties,
        body,
    })
}

/// Read just the head of a message payload (recovery's scan).
pub fn decode_head(payload: &[u8]) -> Option<MessageHead> {
    let mut r = Reader { buf: payload };
    let seq = r.u64()?;
    let flags = r.u8()?;
    let _expires = r.u64()?;
    let n = r.u8()? as usize;
    r.take(n)?;
    let n = r.u8()? as usize;
    r.take(n)?;
    let n = r.u32()? as usize;
    r.take(n)?;
    let body_len = r.u32()? as u64;
    if r.buf.len() as u64 != body_len {
        return None;
    }
    Some(MessageHead {
        seq,
        persistent: flags & FLAG_PERSISTENT != 0,
        body_len,
    })
}

/// An ack-log record: every sequence number in `first..=last` was acked
/// (or delivered).
pub fn encode_range(out: &mut Vec<u8>, kind: u8, first: u64, last: u64) {
    frame(out, kind, |o| {
        o.extend_from_slice(&first.to_le_bytes());
        o.extend_from_slice(&last.to_le_bytes());
    });
}

pub fn decode_range(payload: &[u8]) -> Option<(u64, u64)> {
    let mut r = Reader { buf: payload };
    let first = r.u64()?;
    let last = r.u64()?;
    (r.buf.is_empty() && first <= last).then_some((first, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> MessageRecord<'static> {
        MessageRecord {
            seq: 42,
            persistent: true,
            expires_at_ms: 1_700_000_000_123,
            exchange: b"amq.direct",
            routing_key: b"rk",
            properties: &[0x10, 0x00, 2],
            body: b"hello",
        }
    }

    #[test]
    fn message_roundtrip() {
        let mut out = Vec::new();
        sample().encode(&mut out);
        assert_eq!(out.len(), sample().framed_len());
        let Parsed::Record { kind, payload, size } = parse(&out) else {
            panic!("not a record")
        };
        assert_eq!((kind, size), (KIND_MESSAGE, out.len()));
        let m = decode_message(payload).unwrap();
        assert_eq!(m.seq, 42);
        assert!(m.persistent);
        assert_eq!(m.expires_at_ms, 1_700_000_000_123);
        assert_eq!(&m.exchange[..], b"amq.direct");
        assert_eq!(&m.routing_key[..], b"rk");
        assert_eq!(&m.properties[..], &[0x10, 0x00, 2]);
        assert_eq!(&m.body[..], b"hello");
        let h = decode_head(payload).unwrap();
        assert_eq!(
            h,
            MessageHead {
                seq: 42,
                persistent: true,
                body_len: 5
            }
        );
    }

    #[test]
    fn exact_bytes_of_a_range_record() {
        let mut out = Vec::new();
        encode_range(&mut out, KIND_ACKED, 1, 2);
        assert_eq!(&out[0..4], &17u32.to_le_bytes());
        assert_eq!(out[8], KIND_ACKED);
        assert_eq!(&out[9..17], &1u64.to_le_bytes());
        assert_eq!(&out[17..25], &2u64.to_le_bytes());
        assert_eq!(&out[4..8], &crc32fast::hash(&out[8..]).to_le_bytes());
        let Parsed::Record { payload, .. } = parse(&out) else {
            panic!()
        };
        assert_eq!(decode_range(payload), Some((1, 2)));
    }

    #[test]
    fn every_truncation_is_incomplete() {
        let mut out = Vec::new();
        sample().encode(&mut out);
        for cut in 0..out.len() {
            assert!(
                matches!(parse(&out[..cut]), Parsed::Incomplete { .. }),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn flipped_bits_are_caught() {
        let mut out = Vec::new();
        sample().encode(&mut out);
        for i in FRAME_HEADER..out.len() {
            let mut bad = out.clone();
            bad[i] ^= 0x40;
            assert_eq!(parse(&bad), Parsed::Corrupt("record CRC mismatch"), "byte {i}");
        }
    }

    #[test]
    fn absurd_lengths_are_corrupt_not_allocations() {
        let mut b = vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        assert_eq!(parse(&b), Parsed::Corrupt("record length out of range"));
        b[..4].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(parse(&b), Parsed::Corrupt("record length out of range"));
    }

    #[test]
    fn inner_lengths_are_checked() {
        // A payload whose body length overruns it decodes to nothing.
        let mut out = Vec::new();
        sample().encode(&mut out);
        let Parsed::Record { payload, .. } = parse(&out) else {
            panic!()
        };
        let mut p = payload.to_vec();
        let at = p.len() - 5 - 4;
        p[at..at + 4].copy_from_slice(&1000u32.to_le_bytes());
        assert!(decode_message(&p).is_none());
        assert!(decode_head(&p).is_none());
        assert!(decode_range(&[1, 2, 3]).is_none());
    }
}
