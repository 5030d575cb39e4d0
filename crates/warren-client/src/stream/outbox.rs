//! A connection's outbox: the frames waiting for its writer task, in the
//! order they were queued. Small frames (credit, requests) are encoded
//! into the outbox's own buffer; a producer's Publish frames are handed
//! over whole, as the bytes the producer keeps until they are confirmed,
//! so a message is copied once, when it is encoded, never again on its
//! way to the socket (the writer writes the pieces with one vectored
//! write).

use std::ops::{Deref, DerefMut};

use bytes::{Bytes, BytesMut};

pub(crate) struct Outbox {
    /// What was queued before the tail, in order: runs of the tail and
    /// frames handed over.
    pieces: Vec<Bytes>,
    /// Their bytes.
    pieces_len: usize,
    /// Frames encoded here since the last piece.
    tail: BytesMut,
}

impl Outbox {
    pub(crate) fn with_capacity(bytes: usize) -> Outbox {
        Outbox {
            pieces: Vec::new(),
            pieces_len: 0,
            tail: BytesMut::with_capacity(bytes),
        }
    }

    /// Bytes queued.
    pub(crate) fn len(&self) -> usize {
        self.pieces_len + self.tail.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queue a whole encoded frame (or frames) after what is queued.
    pub(crate) fn hand_over(&mut self, frame: Bytes) {
        self.end_tail();
        if !frame.is_empty() {
            self.pieces_len += frame.len();
            self.pieces.push(frame);
        }
    }

    /// Take everything queued, in order, into `out`; the outbox is left
    /// empty.
    pub(crate) fn take(&mut self, out: &mut Vec<Bytes>) {
        self.end_tail();
        out.append(&mut self.pieces);
        self.pieces_len = 0;
    }

    /// What the tail holds becomes a piece.
    fn end_tail(&mut self) {
        if !self.tail.is_empty() {
            let run = self.tail.split().freeze();
            self.pieces_len += run.len();
            self.pieces.push(run);
        }
    }
}

/// Frames are encoded at the tail.
impl Deref for Outbox {
    type Target = BytesMut;

    fn deref(&self) -> &BytesMut {
        &self.tail
    }
}

impl DerefMut for Outbox {
    fn deref_mut(&mut self) -> &mut BytesMut {
        &mut self.tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    #[test]
    fn pieces_come_out_in_the_order_they_were_queued() {
        let mut o = Outbox::with_capacity(16);
        assert!(o.is_empty());
        o.put_slice(b"ab");
        o.hand_over(Bytes::from_static(b"frame"));
        o.hand_over(Bytes::new());
        o.put_slice(b"c");
        o.put_slice(b"d");
        assert_eq!(o.len(), 9);
        let mut out = Vec::new();
        o.take(&mut out);
        assert!(o.is_empty());
        assert_eq!(
            out,
            vec![
                Bytes::from_static(b"ab"),
                Bytes::from_static(b"frame"),
                Bytes::from_static(b"cd")
            ]
        );
        o.put_slice(b"e");
        o.take(&mut out);
        assert_eq!(out.concat(), b"abframecde");
    }
}
