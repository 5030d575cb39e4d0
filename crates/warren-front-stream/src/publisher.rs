//! A publisher's state on its connection: the stream it writes, the
//! entries gathered while its last chunk is at the writer, and how the
//! next chunk is cut (osiris's batching: from a small chunk, doubling while
//! a burst fills it, halving when a flush fits in one).

use std::sync::Arc;

use warren_core::queue::{Queue, StreamLog};
use warren_log::Message;
use warren_stream::publish::Published;

/// Entries in a chunk: at least this many may go in one (osiris's
/// writer starts its batches at 32)...
pub(crate) const MIN_CHUNK: usize = 32;
/// ...and at most this many (its largest batch).
pub(crate) const MAX_CHUNK: usize = 8192;

pub struct Publisher {
    pub stream: String,
    pub log: Arc<StreamLog>,
    /// The stream as a queue: its `message_stats` count what is published.
    pub(crate) queue: Arc<Queue>,
    pub reference: Option<String>,
    /// Entries received, waiting to be written.
    pub(crate) pending: Vec<Published>,
    /// Bytes of the frames they came in.
    pub(crate) pending_bytes: usize,
    /// Chunks of this publisher at the writer.
    pub(crate) in_flight: usize,
    /// The last publishing id stored (named publishers), cached.
    pub(crate) last_stored: Option<u64>,
    /// Entries the next chunk may take (see [`Publisher::cut`]).
    pub(crate) chunk: usize,
    /// The stream's epoch when it was declared (see
    /// `Conn::drop_deleted_streams`).
    pub epoch: u64,
}

impl Publisher {
    /// The next chunk of what gathered, cut as osiris's writer cuts its
    /// batches: at most `chunk` entries; a chunk filled with more still
    /// waiting doubles it (up to [`MAX_CHUNK`]), and one that takes all
    /// with room to spare halves it (down to [`MIN_CHUNK`]). So 1,000
    /// entries in one frame on a quiet stream make chunks of 32, 64, 128,
    /// 256, 512 and 8 entries (RabbitMQ's are alike), while a steady
    /// flood soon writes thousands per chunk. One chunk at a time: the
    /// next is cut once this one is written, as before, so a publisher
    /// never has two chunks under way (a failed one could otherwise be
    /// passed by the next, and its resent messages taken for duplicates).
    /// At most `limit` entries are taken: where another publisher's
    /// frames came in between (see `Conn::flush_publishers`).
    /// Returns the entries and the bytes of frames they stand for.
    pub(crate) fn next_chunk(&mut self, limit: usize) -> (Vec<Published>, usize) {
        let all = self.pending.len();
        if all < self.chunk && all <= limit {
            self.chunk = (self.chunk / 2).max(MIN_CHUNK);
            return (
                std::mem::take(&mut self.pending),
                std::mem::take(&mut self.pending_bytes),
            );
        }
        let rest = self.pending.split_off(self.chunk.min(limit).min(all));
        let taken = std::mem::replace(&mut self.pending, rest);
        if !self.pending.is_empty() && taken.len() == self.chunk {
            self.chunk = (self.chunk * 2).min(MAX_CHUNK);
        }
        // Frames are not cut with their entries: their bytes go pro rata.
        let bytes = if self.pending.is_empty() {
            std::mem::take(&mut self.pending_bytes)
        } else {
            let b = self.pending_bytes * taken.len() / all;
            self.pending_bytes -= b;
            b
        };
        (taken, bytes)
    }

    /// Chunks it may have at the writer at once: one for a named
    /// publisher (a failed chunk passed by the next would have its
    /// resent messages taken for duplicates), two otherwise, so that
    /// publishers taking turns on a connection keep the writer busy
    /// while they wait for one another's chunk.
    pub(crate) fn max_in_flight(&self) -> usize {
        if self.reference.is_some() {
            1
        } else {
            2
        }
    }

    /// Of entries about to be written, the ones to store (into
    /// `messages`): a named publisher's entry whose publishing id is not
    /// above the last one stored under its name (by this connection or
    /// another) is a duplicate, confirmed but not stored again. Returns
    /// every entry's id (all are confirmed) and the name's new last id.
    pub(crate) fn keep_new(
        &self,
        pending: Vec<Published>,
        messages: &mut Vec<Message>,
    ) -> (Vec<u64>, Option<u64>) {
        let mut ids = Vec::with_capacity(pending.len());
        let mut last = match (&self.reference, self.last_stored) {
            (Some(r), cached) => cached.max(self.log.sequence(r)),
            (None, _) => None,
        };
        for e in pending {
            ids.push(e.publishing_id);
            if self.reference.is_some() {
                if last.is_some_and(|l| e.publishing_id <= l) {
                    continue;
                }
                last = Some(e.publishing_id);
            }
            messages.push(Message {
                entry: e.entry,
                filter: e.filter.filter(|f| !f.is_empty()),
            });
        }
        (ids, last)
    }

    /// The first `n` entries gathered (all, if fewer), as they are: a run
    /// that joins a chunk another publisher's entries began, cut by
    /// that chunk's size rather than this publisher's.
    pub(crate) fn take(&mut self, n: usize) -> (Vec<Published>, usize) {
        let all = self.pending.len();
        if n >= all {
            return (
                std::mem::take(&mut self.pending),
                std::mem::take(&mut self.pending_bytes),
            );
        }
        let rest = self.pending.split_off(n);
        let taken = std::mem::replace(&mut self.pending, rest);
        let bytes = self.pending_bytes * n / all;
        self.pending_bytes -= bytes;
        (taken, bytes)
    }
}
