//! A connection's outbox: the frames waiting for its writer task, in the
//! order they were queued. Small frames (credit, requests) are encoded
//! into the outbox's own buffer; a producer's Publish frames are handed
//! over whole, as the bytes the producer keeps until they are confirmed
//! (with the bodies they lend, [`Lent`]), so a message is copied at most
//! once, when it is encoded, never again on its way to the socket (the
//! writer writes the pieces with one vectored write).

use std::io::IoSlice;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::socket;

/// A sealed Publish frame whose large bodies are lent, not copied: its
/// own bytes, and each body with where it goes (after `bytes[..at]`).
/// The producer keeps it until its entries are confirmed; the outbox
/// holds it by one reference count, not one per body.
pub(crate) struct Lent {
    pub(crate) bytes: Bytes,
    pub(crate) bodies: Vec<(u32, Bytes)>,
    /// All its bytes, bodies included.
    len: usize,
}

impl Lent {
    pub(crate) fn new(bytes: Bytes, bodies: Vec<(u32, Bytes)>) -> Lent {
        let len = bytes.len() + bodies.iter().map(|(_, b)| b.len()).sum::<usize>();
        Lent { bytes, bodies, len }
    }

    /// Its bytes from byte `from` on as slices in `out`, in wire order
    /// (its own bytes up to each body, the body, and its own bytes after
    /// the last), as many as fit; how many. Empty parts are left out.
    fn slices<'a>(&'a self, mut from: usize, out: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        let mut put = |part: &'a [u8], n: &mut usize| {
            if from >= part.len() {
                from -= part.len();
            } else {
                out[*n] = IoSlice::new(&part[from..]);
                from = 0;
                *n += 1;
            }
            *n < out.len()
        };
        let mut own = 0;
        for (at, body) in &self.bodies {
            let at = *at as usize;
            if !put(&self.bytes[own..at], &mut n) || !put(body, &mut n) {
                return n;
            }
            own = at;
        }
        put(&self.bytes[own..], &mut n);
        n
    }
}

/// One thing the outbox holds for the writer.
pub(crate) enum Piece {
    Bytes(Bytes),
    Lent(Arc<Lent>),
}

impl socket::Piece for Piece {
    fn len(&self) -> usize {
        match self {
            Piece::Bytes(b) => b.len(),
            Piece::Lent(l) => l.len,
        }
    }

    fn slices<'a>(&'a self, from: usize, out: &mut [IoSlice<'a>]) -> usize {
        match self {
            Piece::Bytes(b) => b.slices(from, out),
            Piece::Lent(_) if out.is_empty() => 0,
            Piece::Lent(l) => l.slices(from, out),
        }
    }
}

pub(crate) struct Outbox {
    /// What was queued before the tail, in order: runs of the tail and
    /// frames handed over.
    pieces: Vec<Piece>,
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
            self.pieces.push(Piece::Bytes(frame));
        }
    }

    /// Queue a frame whose bodies are lent after what is queued.
    pub(crate) fn hand_over_lent(&mut self, frame: Arc<Lent>) {
        self.end_tail();
        self.pieces_len += frame.len;
        self.pieces.push(Piece::Lent(frame));
    }

    /// Take everything queued, in order, into `out`; the outbox is left
    /// empty.
    pub(crate) fn take(&mut self, out: &mut Vec<Piece>) {
        self.end_tail();
        out.append(&mut self.pieces);
        self.pieces_len = 0;
    }

    /// What the tail holds becomes a piece.
    fn end_tail(&mut self) {
        if !self.tail.is_empty() {
            let run = self.tail.split().freeze();
            self.pieces_len += run.len();
            self.pieces.push(Piece::Bytes(run));
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
    use crate::socket::Piece as _;
    use bytes::BufMut;

    /// A piece's bytes from `from` on, read through its slices a few at
    /// a time, as the writer does.
    fn bytes_of(p: &Piece, mut from: usize, at_once: usize) -> Vec<u8> {
        let mut all = Vec::new();
        while from < p.len() {
            let mut out = vec![IoSlice::new(&[]); at_once];
            let n = p.slices(from, &mut out);
            assert!(n > 0, "room and bytes left, so at least one slice");
            for s in &out[..n] {
                all.extend_from_slice(s);
                from += s.len();
            }
        }
        all
    }

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
        let each: Vec<Vec<u8>> = out.iter().map(|p| bytes_of(p, 0, 4)).collect();
        assert_eq!(each, vec![b"ab".to_vec(), b"frame".to_vec(), b"cd".to_vec()]);
        o.put_slice(b"e");
        o.hand_over_lent(Arc::new(Lent::new(
            Bytes::from_static(b"HxyT"),
            vec![(1, Bytes::from_static(b"one")), (3, Bytes::from_static(b"two"))],
        )));
        o.put_slice(b"f");
        assert_eq!(o.len(), 12);
        o.take(&mut out);
        let all: Vec<u8> = out.iter().flat_map(|p| bytes_of(p, 0, 4)).collect();
        assert_eq!(all, b"abframecdeHonexytwoTf");
    }

    #[test]
    fn a_lent_frame_resumes_from_any_byte_however_few_slices_fit() {
        let lent = Piece::Lent(Arc::new(Lent::new(
            Bytes::from_static(b"headmidtail"),
            vec![
                (4, Bytes::from_static(b"BODY1")),
                (7, Bytes::from_static(b"B2")),
                (7, Bytes::from_static(b"B3")),
            ],
        )));
        let whole = b"headBODY1midB2B3tail";
        assert_eq!(lent.len(), whole.len());
        for from in 0..=whole.len() {
            for at_once in 1..4 {
                assert_eq!(
                    bytes_of(&lent, from, at_once),
                    whole[from..],
                    "from {from}, {at_once} at once"
                );
            }
        }
    }
}
