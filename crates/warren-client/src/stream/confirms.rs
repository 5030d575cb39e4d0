//! A producer's publishes awaiting the broker's word, and the in-flight
//! limit they fill: the connection's reader settles them (PublishConfirm,
//! PublishError) by publishing id, and a publish waits for room while
//! `max_unconfirmed` are out. Entries are kept a frame at a time, in the
//! order they were sent (ids grow), each frame with its send call's
//! [`Batch`] and its entries' encoding (to send them again after a
//! recovery): settling an entry is a lookup in the first frame or two,
//! and no per-message allocation or reference count is made. The
//! application's messages are let go as soon as they are encoded.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use bytes::{BufMut, Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use warren_stream::command::{put_publish_head, PUBLISH_HEAD};

use super::confirm::{Batch, Word};
use super::error::{Error, ResponseCode};
use super::metrics::Metrics;
use super::outbox::{Lent, Outbox};

/// A frame's entries as they are encoded (before the outbox's lock is
/// taken), then numbered (under it), then registered with
/// [`Confirms::register`].
pub(crate) struct Frame {
    messages: usize,
    /// Each message's publishing id, given or None; empty while none is
    /// given (the usual case: then the frame's ids follow each other).
    given: Vec<Option<u64>>,
    /// Each message's publishing id, once numbered.
    ids: Vec<u64>,
    entries: Vec<Entry>,
    /// The Publish frame as it is encoded: room for its head, then each
    /// entry's publishing id (written once numbered) and encoding, but
    /// for the bodies lent.
    encoded: BytesMut,
    /// Bodies the frame refers to rather than copies ([`Frame::entry_lent`]):
    /// each goes after `encoded[..at]`.
    lent: Vec<(u32, Bytes)>,
    /// Their bytes.
    lent_len: usize,
    /// The frame once sealed, its lent bodies with it.
    sealed: Option<Arc<Lent>>,
}

/// What waits under one publishing id on the wire: a message, or a
/// sub-entry batch's messages (`count` of its frame's from `first`), and
/// where its encoding (what follows its publishing id) lies in its
/// frame's (`start..end`).
struct Entry {
    wire: u64,
    first: u32,
    count: u32,
    start: u32,
    end: u32,
    /// The index of its body among the frame's lent ones, or [`NOT_LENT`]
    /// (a lent body follows `end`).
    lent: u32,
    settled: bool,
}

const NOT_LENT: u32 = u32::MAX;

impl Frame {
    /// Room for `entries` entries of about `bytes` bytes in all.
    pub(crate) fn with_capacity(entries: usize, bytes: usize) -> Frame {
        Frame {
            messages: 0,
            given: Vec::new(),
            ids: Vec::new(),
            entries: Vec::with_capacity(entries),
            encoded: {
                let mut b = BytesMut::with_capacity(PUBLISH_HEAD + bytes);
                b.put_bytes(0, PUBLISH_HEAD);
                b
            },
            lent: Vec::new(),
            lent_len: 0,
            sealed: None,
        }
    }

    /// An entry of the messages whose given ids are `given`; `encode`
    /// writes it (what follows its publishing id on the wire).
    #[inline]
    pub(crate) fn entry(
        &mut self,
        given: impl Iterator<Item = Option<u64>>,
        encode: impl FnOnce(&mut BytesMut),
    ) {
        let first = self.messages as u32;
        for g in given {
            if g.is_some() && self.given.is_empty() {
                self.given.resize(self.messages, None);
            }
            if g.is_some() || !self.given.is_empty() {
                self.given.push(g);
            }
            self.messages += 1;
        }
        // Its publishing id goes here once numbered.
        self.encoded.put_u64(0);
        let start = self.encoded.len() as u32;
        encode(&mut self.encoded);
        self.entries.push(Entry {
            wire: 0,
            first,
            count: self.messages as u32 - first,
            start,
            end: self.encoded.len() as u32,
            lent: NOT_LENT,
            settled: false,
        });
    }

    /// An entry of one message whose given id is `given`: `head` writes
    /// what precedes its body, and the body is lent, not copied (the
    /// frame goes to the socket as pieces, the body one of them): a
    /// large body then costs a reference count, not a copy into memory
    /// the CPU's caches no longer hold (the frame is kept until
    /// confirmed).
    pub(crate) fn entry_lent(&mut self, given: Option<u64>, head: impl FnOnce(&mut BytesMut), body: &Bytes) {
        self.entry(std::iter::once(given), head);
        let e = self.entries.last_mut().expect("just pushed");
        e.lent = self.lent.len() as u32;
        self.lent.push((e.end, body.clone()));
        self.lent_len += body.len();
    }

    /// Number the messages without a given id from `next` on (which
    /// moves past every id used); each entry goes under its last
    /// message's id.
    pub(crate) fn number(&mut self, next: &mut u64) {
        if self.given.is_empty() {
            let from = *next;
            *next += self.messages as u64;
            self.ids = (from..*next).collect();
        } else {
            self.ids = self.number_given(next);
        }
        for e in &mut self.entries {
            e.wire = self.ids[(e.first + e.count - 1) as usize];
            let at = e.start as usize - 8;
            self.encoded[at..at + 8].copy_from_slice(&e.wire.to_be_bytes());
        }
    }

    /// The numbered frame, its head written for this publisher and
    /// frame version, queued for the socket in `out` (the producer keeps
    /// it too, until its entries are confirmed): one reference count
    /// however many bodies it lends.
    pub(crate) fn seal_into(&mut self, publisher_id: u8, version: u16, out: &mut Outbox) {
        self.seal(publisher_id, version);
        let sealed = self.sealed.as_ref().expect("just sealed");
        if sealed.bodies.is_empty() {
            out.hand_over(sealed.bytes.clone());
        } else {
            out.hand_over_lent(sealed.clone());
        }
    }

    fn seal(&mut self, publisher_id: u8, version: u16) {
        put_publish_head(
            &mut self.encoded,
            publisher_id,
            self.entries.len() as u32,
            version,
        );
        if self.lent_len > 0 {
            // The size counts the bodies lent too.
            let size = (self.encoded.len() - 4 + self.lent_len) as u32;
            self.encoded[..4].copy_from_slice(&size.to_be_bytes());
        }
        let bytes = std::mem::take(&mut self.encoded).freeze();
        self.sealed = Some(Arc::new(Lent::new(bytes, std::mem::take(&mut self.lent))));
    }

    /// Its bytes, sealed or not, but for the bodies lent.
    fn frame_bytes(&self) -> &[u8] {
        match &self.sealed {
            Some(s) => &s.bytes,
            None => &self.encoded,
        }
    }

    /// Number around the given ids.
    fn number_given(&self, next: &mut u64) -> Vec<u64> {
        self.given
            .iter()
            .map(|g| match *g {
                Some(id) => {
                    *next = (*next).max(id + 1);
                    id
                }
                None => {
                    *next += 1;
                    *next - 1
                }
            })
            .collect()
    }

    /// Its messages.
    pub(crate) fn messages(&self) -> usize {
        self.messages
    }

    /// Bytes encoded, lent bodies included.
    pub(crate) fn bytes(&self) -> usize {
        self.frame_bytes().len() + self.lent_len
    }

    /// Each entry's wire id and encoding, in order.
    #[cfg(test)]
    fn entries(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.entries
            .iter()
            .map(|e| (e.wire, &self.frame_bytes()[e.start as usize..e.end as usize]))
    }

    /// Its entries.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// A registered frame: its entries by wire id, their encoding, and its
/// call's batch.
struct Sent {
    batch: Arc<Batch>,
    /// The index in its batch of its first message.
    base: u32,
    /// Each message's publishing id.
    ids: Vec<u64>,
    entries: Vec<Entry>,
    /// The frame as sealed, with the bodies it lends.
    frame: Arc<Lent>,
    /// Entries not settled yet.
    open: usize,
    /// The lowest and highest wire id in it.
    low: u64,
    high: u64,
    /// Its entries' ids grow (given ids may break that).
    sorted: bool,
    /// Entries before this one are settled: where the next confirm
    /// usually is (confirms come in order).
    cursor: usize,
}

impl Sent {
    /// Entry `e`'s encoding (what follows its publishing id).
    fn entry_bytes(&self, e: &Entry) -> Bytes {
        let own = self.frame.bytes.slice(e.start as usize..e.end as usize);
        match self.frame.bodies.get(e.lent as usize) {
            None => own,
            Some((_, body)) => {
                let mut b = BytesMut::with_capacity(own.len() + body.len());
                b.extend_from_slice(&own);
                b.extend_from_slice(body);
                b.freeze()
            }
        }
    }

    /// Tell the messages `first..first + count` of the frame `word`.
    fn tell(&self, first: u32, count: u32, word: &Word<'_>) {
        let ids = &self.ids[first as usize..(first + count) as usize];
        self.batch.lock().tell(self.base + first, ids, word);
    }
}

#[derive(Default)]
struct Pending {
    frames: VecDeque<Sent>,
    /// Messages not settled yet.
    messages: usize,
    /// Every frame's ids lie above the frame's before it (given ids may
    /// break that; then lookups walk the frames).
    ordered: bool,
}

impl Pending {
    /// The frame and entry under wire id `id`, if it is outstanding;
    /// looked for first in frame `near` (where the id before it was) and
    /// the one after it.
    fn find(&self, id: u64, near: usize) -> Option<(usize, usize)> {
        let in_frame = |f: &Sent| {
            if id < f.low || id > f.high {
                return None;
            }
            // Read in order, the entries stay in the cache lines the
            // hardware fetches ahead.
            if f.entries
                .get(f.cursor)
                .is_some_and(|e| e.wire == id && !e.settled)
            {
                return Some(f.cursor);
            }
            if f.sorted {
                if let Ok(e) = f.entries.binary_search_by_key(&id, |e| e.wire) {
                    if !f.entries[e].settled {
                        return Some(e);
                    }
                }
            }
            f.entries.iter().position(|e| e.wire == id && !e.settled)
        };
        // Confirms come in order: in the frame of the id before, or the
        // next one, nearly always.
        for at in [near, near + 1] {
            if let Some(e) = self.frames.get(at).and_then(in_frame) {
                return Some((at, e));
            }
        }
        if self.ordered {
            let at = self.frames.partition_point(|f| f.high < id);
            let e = in_frame(self.frames.get(at)?)?;
            return Some((at, e));
        }
        self.frames
            .iter()
            .enumerate()
            .find_map(|(i, f)| in_frame(f).map(|e| (i, e)))
    }
}

/// One producer's outstanding publishes and the in-flight limit's free
/// places (taken a frame at a time, given back as confirms settle).
pub(crate) struct Confirms {
    pending: Mutex<Pending>,
    slots: Semaphore,
    max: usize,
    /// What the producer does when its connection is lost (recover);
    /// without it, every outstanding publish fails.
    on_lost: OnceLock<Box<dyn Fn(Error) + Send + Sync>>,
    /// Where confirmed and failed counts go, and the stream to name.
    metrics: Option<(Arc<dyn Metrics>, Arc<str>)>,
}

impl Confirms {
    pub(crate) fn new(max_unconfirmed: usize) -> Confirms {
        let max = max_unconfirmed.max(1);
        Confirms {
            pending: Mutex::new(Pending {
                ordered: true,
                ..Default::default()
            }),
            slots: Semaphore::new(max),
            max,
            on_lost: OnceLock::new(),
            metrics: None,
        }
    }

    /// Count confirmed and failed publishes of `stream` into `metrics`.
    pub(crate) fn with_metrics(mut self, metrics: Option<Arc<dyn Metrics>>, stream: &str) -> Confirms {
        self.metrics = metrics.map(|m| (m, Arc::from(stream)));
        self
    }

    /// What to do when the producer's connection is lost.
    pub(crate) fn set_on_lost(&self, f: Box<dyn Fn(Error) + Send + Sync>) {
        let _ = self.on_lost.set(f);
    }

    /// The producer's connection was lost, or its stream moved.
    pub(crate) fn lost(&self, why: Error) {
        match self.on_lost.get() {
            Some(f) => f(why),
            None => self.fail_all(&why),
        }
    }

    /// Give back `n` places taken for publishes that were not sent.
    pub(crate) fn give_back(&self, n: usize) {
        self.slots.add_permits(n);
    }

    /// The entries not yet confirmed, in publishing id order, to send
    /// again: each one's wire id and encoding.
    pub(crate) fn unconfirmed(&self) -> Vec<(u64, Bytes)> {
        let p = self.pending.lock();
        let mut v: Vec<(u64, Bytes)> = p
            .frames
            .iter()
            .flat_map(|f| {
                f.entries
                    .iter()
                    .filter(|e| !e.settled)
                    .map(|e| (e.wire, f.entry_bytes(e)))
            })
            .collect();
        if !p.ordered {
            v.sort_by_key(|(wire, _)| *wire);
        }
        v
    }

    /// The in-flight limit.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// `n` places under the in-flight limit (at most the limit), waiting
    /// while they are not free. They come back as the publishes settle.
    pub(crate) async fn take(&self, n: usize) {
        debug_assert!(n <= self.max);
        self.slots
            .acquire_many(n as u32)
            .await
            .expect("the semaphore is never closed")
            .forget();
    }

    /// A sealed frame's entries are on their way, holding places taken
    /// for its messages: their words go to `batch` (the send call's),
    /// after the messages registered there before.
    pub(crate) fn register(&self, frame: Frame, batch: &Arc<Batch>) {
        let sealed = frame.sealed.expect("registered once sealed");
        let messages = frame.ids.len();
        let base = batch.lock().append(messages);
        let entries = frame.entries;
        let (low, high, sorted) = match (&entries[..], frame.given.is_empty()) {
            // Numbered here: in order.
            ([first, .., last], true) => (first.wire, last.wire, true),
            ([one], true) => (one.wire, one.wire, true),
            _ => {
                let (low, high) = entries
                    .iter()
                    .fold((u64::MAX, 0), |(l, h), e| (l.min(e.wire), h.max(e.wire)));
                (low, high, entries.windows(2).all(|w| w[0].wire < w[1].wire))
            }
        };
        let mut p = self.pending.lock();
        if p.frames.back().is_some_and(|f| f.high >= low) {
            p.ordered = false;
        }
        p.messages += messages;
        p.frames.push_back(Sent {
            batch: batch.clone(),
            base,
            ids: frame.ids,
            open: entries.len(),
            entries,
            frame: sealed,
            low,
            high,
            sorted,
            cursor: 0,
        });
    }

    /// Settle what waits under these wire ids with the broker's `word`,
    /// giving their places back and counting them (`report`) into the
    /// metrics.
    fn settle(&self, ids: &[u64], word: Word<'_>, report: fn(&dyn Metrics, &str, u64)) {
        let mut settled = 0usize;
        // Frames are dropped after the lock is let go.
        let mut done = Vec::new();
        {
            let mut p = self.pending.lock();
            // Entries settled one after another in one frame are told in
            // one go (one lock of their batch): confirms come in order.
            let mut run: Option<(usize, u32, u32)> = None;
            let mut near = 0;
            let mut i = 0;
            while i < ids.len() {
                let Some((f, e)) = p.find(ids[i], near) else {
                    i += 1;
                    continue;
                };
                near = f;
                let frame = &mut p.frames[f];
                // This entry, and those after it that the next ids name:
                // settled in one sweep.
                let (mut k, mut count) = (e, 0u32);
                while let Some(x) = frame
                    .entries
                    .get_mut(k)
                    .filter(|x| i < ids.len() && x.wire == ids[i] && !x.settled)
                {
                    x.settled = true;
                    count += x.count;
                    (k, i) = (k + 1, i + 1);
                }
                let first = frame.entries[e].first;
                frame.open -= k - e;
                while frame.entries.get(frame.cursor).is_some_and(|e| e.settled) {
                    frame.cursor += 1;
                }
                settled += count as usize;
                match &mut run {
                    Some((rf, rfirst, rcount)) if *rf == f && *rfirst + *rcount == first => *rcount += count,
                    _ => {
                        if let Some((rf, rfirst, rcount)) = run.replace((f, first, count)) {
                            p.frames[rf].tell(rfirst, rcount, &word);
                        }
                    }
                }
            }
            if let Some((rf, rfirst, rcount)) = run {
                p.frames[rf].tell(rfirst, rcount, &word);
            }
            p.messages -= settled;
            while p.frames.front().is_some_and(|f| f.open == 0) {
                done.extend(p.frames.pop_front());
            }
            if p.frames.is_empty() {
                p.ordered = true;
            }
        }
        drop(done);
        if settled > 0 {
            self.slots.add_permits(settled);
            if let Some((m, stream)) = &self.metrics {
                report(&**m, stream, settled as u64);
            }
        }
    }

    /// PublishConfirm: these ids are stored.
    pub(crate) fn confirmed(&self, ids: &[u64]) {
        self.settle(ids, Word::Confirmed, |m, s, n| m.confirmed(s, n));
    }

    /// PublishError: this id was refused.
    pub(crate) fn rejected(&self, wire: u64, code: u16) {
        self.settle(
            &[wire],
            Word::Rejected(ResponseCode::from_u16(code)),
            |m, s, n| m.errored(s, n),
        );
    }

    /// The producer or its connection ended: every outstanding publish
    /// learns why (it may or may not have been stored).
    pub(crate) fn fail_all(&self, why: &Error) {
        let all: Vec<u64> = {
            let p = self.pending.lock();
            p.frames
                .iter()
                .flat_map(|f| f.entries.iter())
                .filter(|e| !e.settled)
                .map(|e| e.wire)
                .collect()
        };
        self.settle(&all, Word::Failed(why), |m, s, n| m.errored(s, n));
    }

    /// How many publishes await their confirm.
    pub(crate) fn outstanding(&self) -> usize {
        self.pending.lock().messages
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::confirm::{Confirm, Confirmation};

    /// Register one entry per id (each id its own message, given that
    /// id, encoded as the id in text) as one frame.
    fn send(c: &Confirms, batch: &Arc<Batch>, ids: &[u64]) {
        let mut f = Frame::with_capacity(ids.len(), 64);
        for &id in ids {
            f.entry([Some(id)].into_iter(), |out| {
                out.extend_from_slice(id.to_string().as_bytes())
            });
        }
        f.number(&mut 0);
        f.seal(0, 1);
        c.register(f, batch);
    }

    #[tokio::test]
    async fn confirms_and_errors_settle_their_publishes_and_free_their_places() {
        let c = Confirms::new(2);
        c.take(2).await;
        let batch = Batch::each();
        send(&c, &batch, &[1, 2]);
        let mut each = Confirm::each_of(&batch);
        let (a, b) = (each.next().unwrap(), each.next().unwrap());
        assert_eq!(c.slots.available_permits(), 0);
        assert_eq!(
            c.unconfirmed(),
            vec![(1, Bytes::from_static(b"1")), (2, Bytes::from_static(b"2"))]
        );
        c.confirmed(&[1, 7]);
        c.rejected(2, 0x06);
        assert_eq!(a.await.unwrap(), Confirmation::Confirmed { publishing_id: 1 });
        assert_eq!(
            b.await.unwrap(),
            Confirmation::Rejected {
                publishing_id: 2,
                code: ResponseCode::StreamNotAvailable
            }
        );
        assert_eq!(c.slots.available_permits(), 2);
        c.take(1).await;
        let batch = Batch::each();
        send(&c, &batch, &[3]);
        let d = Confirm::each_of(&batch).next().unwrap();
        c.lost(Error::Closed);
        assert!(
            matches!(d.await, Err(Error::Closed)),
            "no recovery: lost is failed"
        );
        assert_eq!(c.outstanding(), 0);
        // A sub-entry batch: one confirm under its last id settles all.
        c.take(2).await;
        let batch = Batch::each();
        let mut f = Frame::with_capacity(1, 8);
        f.entry([None, None].into_iter(), |out| out.extend_from_slice(b"4 and 5"));
        let mut next = 4;
        f.number(&mut next);
        assert_eq!((next, f.entries().next().unwrap().0), (6, 5), "under the last id");
        f.seal(0, 1);
        c.register(f, &batch);
        assert_eq!(c.outstanding(), 2);
        c.confirmed(&[5]);
        let mut each = Confirm::each_of(&batch);
        let (e, f) = (each.next().unwrap(), each.next().unwrap());
        assert_eq!(e.await.unwrap(), Confirmation::Confirmed { publishing_id: 4 });
        assert_eq!(f.await.unwrap(), Confirmation::Confirmed { publishing_id: 5 });
        assert_eq!(c.slots.available_permits(), 2);
    }

    #[tokio::test]
    async fn frames_settle_in_any_order_and_given_ids_out_of_order_are_found() {
        let c = Confirms::new(100);
        c.take(9).await;
        let all = Batch::counted();
        send(&c, &all, &[10, 11, 12]);
        send(&c, &all, &[13, 14]);
        // Given ids below those sent before, and not growing in a frame.
        send(&c, &all, &[7, 5, 6, 20]);
        all.seal();
        assert_eq!(c.outstanding(), 9);
        assert_eq!(
            c.unconfirmed().iter().map(|(w, _)| *w).collect::<Vec<_>>(),
            vec![5, 6, 7, 10, 11, 12, 13, 14, 20]
        );
        assert!(c.unconfirmed().iter().all(|(w, e)| e == w.to_string().as_bytes()));
        c.confirmed(&[14, 6, 11, 20, 10]);
        c.rejected(5, 0x02);
        c.confirmed(&[12, 13, 7, 13]);
        assert_eq!(c.outstanding(), 0);
        assert_eq!(c.slots.available_permits(), 100);
        let outcome = crate::stream::confirm::BatchConfirm::new(all).await;
        assert_eq!(outcome.confirmed, 8);
        assert_eq!(outcome.rejected, vec![(5, ResponseCode::StreamDoesNotExist)]);
        assert!(!outcome.all_confirmed());
    }

    #[test]
    fn a_frame_numbers_around_ids_given_after_others_were_not() {
        let mut f = Frame::with_capacity(3, 8);
        f.entry([None].into_iter(), |out| {
            out.put_u32(1);
            out.put_slice(b"a")
        });
        f.entry([Some(100)].into_iter(), |out| {
            out.put_u32(1);
            out.put_slice(b"b")
        });
        f.entry([None].into_iter(), |out| {
            out.put_u32(1);
            out.put_slice(b"c")
        });
        let mut next = 4;
        f.number(&mut next);
        assert_eq!(f.entries().map(|(w, _)| w).collect::<Vec<_>>(), vec![4, 100, 101]);
        assert_eq!(next, 102);
        let mut plain = Frame::with_capacity(2, 8);
        plain.entry([None, None].into_iter(), |out| out.extend_from_slice(b"ab"));
        plain.entry([None].into_iter(), |out| out.extend_from_slice(b"c"));
        plain.number(&mut next);
        assert_eq!(
            plain.entries().map(|(w, _)| w).collect::<Vec<_>>(),
            vec![103, 104]
        );
        assert_eq!((next, plain.messages()), (105, 3));
        // Sealed, it is the Publish frame: the ids written in place.
        f.seal(9, 1);
        let mut sealed = BytesMut::from(&f.sealed.as_ref().unwrap().bytes[..]);
        let parsed = warren_stream::command::parse_frame(&mut sealed, 1 << 20)
            .unwrap()
            .unwrap();
        let (publisher, entries) = warren_stream::publish::parse_publish(parsed).unwrap();
        assert_eq!(publisher, 9);
        let ids: Vec<u64> = entries.iter().map(|e| e.publishing_id).collect();
        assert_eq!(ids, vec![4, 100, 101]);
        assert!(sealed.is_empty(), "one whole frame");
        assert_eq!(
            f.entries().map(|(_, e)| e.to_vec()).collect::<Vec<_>>(),
            vec![
                b"\0\0\0\x01a".to_vec(),
                b"\0\0\0\x01b".to_vec(),
                b"\0\0\0\x01c".to_vec()
            ]
        );
    }

    /// What the writer writes of `pieces`.
    fn written(pieces: &[super::super::outbox::Piece]) -> Vec<u8> {
        use crate::socket::Piece as _;
        let mut all = Vec::new();
        for p in pieces {
            let mut slices = vec![std::io::IoSlice::new(&[]); 16];
            let n = p.slices(0, &mut slices);
            slices[..n].iter().for_each(|s| all.extend_from_slice(s));
        }
        all
    }

    /// A frame with bodies lent goes out as pieces that together are the
    /// frame the bodies copied in would be; sent again, its entries are
    /// whole.
    #[test]
    fn lent_bodies_make_the_same_frame_in_pieces() {
        let bodies: Vec<Bytes> = (0..3u8).map(|i| Bytes::from(vec![b'a' + i; 600])).collect();
        let head = |out: &mut BytesMut| out.put_u32(600);
        let mut copied = Frame::with_capacity(3, 64);
        let mut lent = Frame::with_capacity(3, 64);
        for (i, b) in bodies.iter().enumerate() {
            copied.entry([None].into_iter(), |out| {
                head(out);
                out.extend_from_slice(b)
            });
            if i == 1 {
                lent.entry([None].into_iter(), |out| {
                    head(out);
                    out.extend_from_slice(b)
                });
            } else {
                lent.entry_lent(None, head, b);
            }
        }
        assert_eq!(lent.bytes(), copied.bytes());
        let (mut a, mut b) = (0, 0);
        copied.number(&mut a);
        lent.number(&mut b);
        let mut out = Outbox::with_capacity(16);
        copied.seal_into(3, 1, &mut out);
        let mut one = Vec::new();
        out.take(&mut one);
        lent.seal_into(3, 1, &mut out);
        let mut pieces = Vec::new();
        out.take(&mut pieces);
        assert_eq!(one.len(), 1);
        assert_eq!(pieces.len(), 1, "one frame, its bodies lent");
        let (one, pieces) = (written(&one), written(&pieces));
        assert_eq!(pieces, one);
        let c = Confirms::new(10);
        c.register(lent, &Batch::each());
        let again = c.unconfirmed();
        for ((wire, e), (i, body)) in again.iter().zip(bodies.iter().enumerate()) {
            assert_eq!(*wire, i as u64);
            assert_eq!(&e[..4], &600u32.to_be_bytes());
            assert_eq!(&e[4..], &body[..]);
        }
        assert_eq!(again.len(), 3);
    }
}
