//! The entries of a Publish frame as a producer writes them: one message
//! (with its filter value in a version 2 frame), or a sub-entry batch
//! (its messages encoded together, and compressed). Messages are read
//! where the application keeps them and written straight into the
//! frame's encoding (which the producer keeps until they are confirmed).

use std::borrow::Borrow;

use bytes::{BufMut, Bytes, BytesMut};
use warren_stream::chunk::Entry;
use warren_stream::wire::put_opt_string;

use super::message::Message;

/// Write one message as a simple entry: what follows its publishing id on
/// the wire (a version 2 frame's filter value first).
#[inline]
pub(crate) fn put_simple(out: &mut BytesMut, m: &Message, filter_value: Option<&str>, v2: bool) {
    if m.application_properties.is_empty() && filter_value.is_none() {
        return put_body_only(out, &m.body, v2);
    }
    if v2 {
        put_opt_string(out, filter_value);
    }
    put_message(out, m);
}

/// [`put_simple`] of a message that is its body alone, with no filter
/// value (the usual case): every byte before the body built in a
/// register and written at once. A short put at a time, each checking
/// for room, was most of a 12 B message's cost; bytes stored one by one
/// into a stack array then read back whole stall the CPU (perf).
#[inline]
fn put_body_only(out: &mut BytesMut, body: &[u8], v2: bool) {
    out.reserve(BODY_HEAD_ROOM + body.len());
    put_body_head(out, body.len(), v2);
    out.extend_from_slice(body);
}

/// Room [`put_body_head`] needs (it writes 16 bytes, then keeps at most
/// 14).
const BODY_HEAD_ROOM: usize = 16;

/// Bodies of at least this many bytes a producer may lend to its frame
/// rather than copy ([`lends_body`]).
pub(crate) const LEND_MIN: usize = 512;

/// Whether [`put_simple`] of `m` would be its body after a head
/// [`put_body_head`] writes, and the body is large enough to lend.
#[inline]
pub(crate) fn lends_body(m: &Message, filter_value: Option<&str>) -> bool {
    m.body.len() >= LEND_MIN && m.application_properties.is_empty() && filter_value.is_none()
}

/// What [`put_body_only`] writes before a body of `n` bytes.
#[inline]
pub(crate) fn put_body_head(out: &mut BytesMut, n: usize, v2: bool) {
    // A version 2 frame's null filter value, the message's length, its
    // one data section's head (described by small ulong 0x75, then vbin8
    // or vbin32, as Message::encode writes it); each case's shifts known
    // when compiled.
    let (whole, bytes) = match (u8::try_from(n), v2) {
        (Ok(small), false) => top((5 + n as u128) << 40 | 0x0053_75a0 << 8 | small as u128, 9),
        (Ok(small), true) => top(
            0xffff << 72 | (5 + n as u128) << 40 | 0x0053_75a0 << 8 | small as u128,
            11,
        ),
        (Err(_), false) => top((8 + n as u128) << 64 | 0x0053_75b0 << 32 | n as u128, 12),
        (Err(_), true) => top(
            0xffff << 96 | (8 + n as u128) << 64 | 0x0053_75b0 << 32 | n as u128,
            14,
        ),
    };
    out.extend_from_slice(&whole);
    out.truncate(out.len() - (whole.len() - bytes));
}

/// The low `bytes` bytes of `v`, big-endian, at the start of 16.
#[inline(always)]
fn top(v: u128, bytes: usize) -> ([u8; 16], usize) {
    ((v << (128 - 8 * bytes)).to_be_bytes(), bytes)
}

/// A sub-entry batch of `messages`, compressed with `codec` (the
/// protocol's code), and each message's given publishing id, in order.
pub(crate) fn sub_batch<M: Borrow<Message>>(
    messages: impl Iterator<Item = M>,
    codec: u8,
) -> (Entry, Vec<Option<u64>>) {
    let mut plain = BytesMut::new();
    let mut ids = Vec::new();
    for m in messages {
        let m = m.borrow();
        ids.push(m.publishing_id);
        put_message(&mut plain, m);
    }
    let uncompressed_length = plain.len() as u32;
    let body = match codec {
        0 => plain.freeze(),
        c => Bytes::from(warren_stream::compression::compress(c, &plain).expect("a known codec")),
    };
    let entry = Entry::SubBatch {
        compression: codec,
        records: ids.len() as u16,
        uncompressed_length,
        body,
    };
    (entry, ids)
}

/// Write a sub-entry batch: what follows its publishing id on the wire
/// (producers that filter do not batch sub-entries, so a version 2
/// frame's filter value is empty).
pub(crate) fn put_sub_batch(out: &mut BytesMut, e: &Entry, v2: bool) {
    if v2 {
        put_opt_string(out, None);
    }
    e.encode(out)
}

/// A message with its 4-byte length before it, encoded in place.
#[inline]
fn put_message(out: &mut BytesMut, m: &Message) {
    let len_at = out.len();
    out.put_u32(0);
    m.encode(out);
    let len = (out.len() - len_at - 4) as u32;
    out[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_stream::command::{begin_publish, end_frame};

    #[test]
    fn a_body_alone_encodes_as_the_general_path() {
        for n in [0usize, 12, 255, 256, 70_000] {
            for v2 in [false, true] {
                let m = Message::new(vec![7u8; n]);
                let mut fast = BytesMut::new();
                put_simple(&mut fast, &m, None, v2);
                let mut general = BytesMut::new();
                if v2 {
                    put_opt_string(&mut general, None);
                }
                put_message(&mut general, &m);
                assert_eq!(fast, general, "{n} bytes, v2 {v2}");
            }
        }
    }

    #[test]
    fn entries_encode_as_the_codec_reads_them() {
        let (sub, ids) = sub_batch([Message::new("b"), Message::new("cc").publishing_id(4)].iter(), 4);
        assert_eq!(ids, vec![None, Some(4)]);
        let mut out = BytesMut::new();
        let at = begin_publish(&mut out, 3, 2);
        out.put_u64(7);
        put_simple(&mut out, &Message::new("a"), None, false);
        out.put_u64(9);
        put_sub_batch(&mut out, &sub, false);
        end_frame(&mut out, at);
        let frame = warren_stream::command::parse_frame(&mut out, 1 << 20)
            .unwrap()
            .unwrap();
        let (publisher_id, entries) = warren_stream::publish::parse_publish(frame).unwrap();
        assert_eq!(publisher_id, 3);
        assert_eq!(entries[0].publishing_id, 7);
        assert_eq!(entries[1].publishing_id, 9);
        assert_eq!(entries[1].entry, sub);
        let Entry::SubBatch { records: 2, .. } = entries[1].entry else {
            panic!("a sub-entry batch of two")
        };
    }
}
