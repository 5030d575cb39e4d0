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
    if v2 {
        put_opt_string(out, filter_value);
    }
    put_message(out, m);
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
