//! An entry of a Publish frame as a producer builds it: one message or a
//! sub-entry batch (its messages encoded together, and compressed), with
//! its messages' given publishing ids, until it is encoded into its frame
//! (which keeps the encoding until the entry is confirmed).

use bytes::{BufMut, Bytes, BytesMut};
use warren_stream::chunk::Entry;
use warren_stream::wire::put_opt_string;

use super::message::Message;

/// An entry of a frame being built: what goes on the wire, and a
/// sub-entry batch's messages' given publishing ids (None: numbered in
/// the outbox; a single message's is its own).
pub(crate) struct Pending {
    pub(crate) body: Body,
    sub_ids: Vec<Option<u64>>,
}

pub(crate) enum Body {
    /// One message.
    Simple(Message),
    /// A sub-entry batch, encoded (and compressed) beforehand.
    SubBatch(Entry),
}

impl Pending {
    pub(crate) fn simple(m: Message) -> Pending {
        Pending {
            body: Body::Simple(m),
            sub_ids: Vec::new(),
        }
    }

    /// Each message's given publishing id, in order.
    pub(crate) fn given_ids(&self) -> impl Iterator<Item = Option<u64>> + '_ {
        let single = match &self.body {
            Body::Simple(m) => Some(m.publishing_id),
            Body::SubBatch(_) => None,
        };
        single.into_iter().chain(self.sub_ids.iter().copied())
    }

    pub(crate) fn sub_entry(messages: impl Iterator<Item = Message>, codec: u8) -> Pending {
        let mut plain = BytesMut::new();
        let mut ids = Vec::new();
        for m in messages {
            ids.push(m.publishing_id);
            put_message(&mut plain, &m);
        }
        let uncompressed_length = plain.len() as u32;
        let body = match codec {
            0 => plain.freeze(),
            c => Bytes::from(warren_stream::compression::compress(c, &plain).expect("a known codec")),
        };
        Pending {
            body: Body::SubBatch(Entry::SubBatch {
                compression: codec,
                records: ids.len() as u16,
                uncompressed_length,
                body,
            }),
            sub_ids: ids,
        }
    }

    /// The entry as a Publish frame holds it (after its publishing id;
    /// a version 2 frame's filter value first).
    pub(crate) fn encode(&self, out: &mut BytesMut, v2: bool) {
        self.body.encode(out, v2)
    }
}

impl Body {
    /// The entry as a Publish frame holds it (after its publishing id;
    /// a version 2 frame's filter value first: producers that filter do
    /// not batch sub-entries).
    pub(crate) fn encode(&self, out: &mut BytesMut, v2: bool) {
        match self {
            Body::Simple(m) => {
                if v2 {
                    put_opt_string(out, m.filter_value.as_deref());
                }
                put_message(out, m)
            }
            Body::SubBatch(e) => {
                if v2 {
                    put_opt_string(out, None);
                }
                e.encode(out)
            }
        }
    }
}

/// A message with its 4-byte length before it, encoded in place.
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
        let simple = Pending::simple(Message::new("a"));
        let sub = Pending::sub_entry([Message::new("b"), Message::new("cc")].into_iter(), 4);
        let mut out = BytesMut::new();
        let at = begin_publish(&mut out, 3, 2);
        for (id, e) in [(7u64, &simple), (9, &sub)] {
            out.put_u64(id);
            e.encode(&mut out, false);
        }
        end_frame(&mut out, at);
        let frame = warren_stream::command::parse_frame(&mut out, 1 << 20)
            .unwrap()
            .unwrap();
        let (publisher_id, entries) = warren_stream::publish::parse_publish(frame).unwrap();
        assert_eq!(publisher_id, 3);
        assert_eq!(entries[0].publishing_id, 7);
        let Body::SubBatch(sent) = &sub.body else {
            panic!("a sub-entry batch")
        };
        assert_eq!(&entries[1].entry, sent);
        assert_eq!(sub.given_ids().collect::<Vec<_>>(), vec![None, None]);
        assert_eq!(simple.given_ids().collect::<Vec<_>>(), vec![None]);
        let Entry::SubBatch { records: 2, .. } = entries[1].entry else {
            panic!("a sub-entry batch of two")
        };
    }
}
