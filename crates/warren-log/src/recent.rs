//! The newest chunks a leader wrote, kept whole in memory for its
//! replication readers.
//!
//! A replicated stream's leader sends every chunk to each replica right
//! after writing it. Reading each back from the segment file cost a
//! `pread` copy per replica and a fresh buffer every time: a third of a
//! leader's CPU at 1 KB messages on three nodes (perf), where the leader
//! sets the pace. The writer already holds the chunk in one buffer, so it
//! keeps it here, shared: replication readers find it by where it lies in
//! the log and send it as it is.
//!
//! The cache holds nothing unless the owner asks ([`crate::View::keep_recent`],
//! a leader with replicas), at most its capacity in bytes, and drops what
//! every replication reader has passed ([`crate::View::release_recent`]).
//! A miss only means a read from the file.

use std::collections::VecDeque;

use bytes::Bytes;

/// Where a chunk lies: its segment (named by its first offset) and its
/// position in it. Later chunks compare greater.
pub type Place = (u64, u64);

#[derive(Default)]
pub(crate) struct Recent {
    capacity: usize,
    bytes: usize,
    chunks: VecDeque<(Place, Bytes)>,
}

impl std::fmt::Debug for Recent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recent")
            .field("chunks", &self.chunks.len())
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl Recent {
    /// Keep at most `capacity` bytes; 0 keeps nothing (and drops all).
    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.trim();
    }

    /// A chunk just written at `at`, whole (header, bloom filter, data,
    /// trailer).
    pub(crate) fn push(&mut self, at: Place, chunk: Bytes) {
        if self.capacity == 0 {
            return;
        }
        self.bytes += chunk.len();
        self.chunks.push_back((at, chunk));
        self.trim();
    }

    /// The chunk written at `at`, if it is still here.
    pub(crate) fn get(&self, at: Place) -> Option<Bytes> {
        // Readers ask for the oldest few: a short scan from the front.
        self.chunks
            .iter()
            .take_while(|(p, _)| *p <= at)
            .find(|(p, _)| *p == at)
            .map(|(_, c)| c.clone())
    }

    /// Drop the chunks before `at` (every reader is past them).
    pub(crate) fn release_before(&mut self, at: Place) {
        while self.chunks.front().is_some_and(|(p, _)| *p < at) {
            self.pop();
        }
    }

    /// Drop everything (the log was cut: places may be reused).
    pub(crate) fn clear(&mut self) {
        self.chunks.clear();
        self.bytes = 0;
    }

    fn trim(&mut self) {
        while self.bytes > self.capacity && !self.chunks.is_empty() {
            self.pop();
        }
    }

    fn pop(&mut self) {
        if let Some((_, c)) = self.chunks.pop_front() {
            self.bytes -= c.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(n: usize) -> Bytes {
        Bytes::from(vec![7u8; n])
    }

    #[test]
    fn keeps_nothing_until_asked() {
        let mut r = Recent::default();
        r.push((0, 8), chunk(10));
        assert!(r.get((0, 8)).is_none());
        r.set_capacity(100);
        r.push((0, 8), chunk(10));
        assert_eq!(r.get((0, 8)).map(|c| c.len()), Some(10));
    }

    #[test]
    fn bounded_by_capacity_oldest_first() {
        let mut r = Recent::default();
        r.set_capacity(25);
        r.push((0, 8), chunk(10));
        r.push((0, 18), chunk(10));
        r.push((0, 28), chunk(10));
        assert!(r.get((0, 8)).is_none());
        assert!(r.get((0, 18)).is_some());
        assert!(r.get((0, 28)).is_some());
        assert_eq!(r.bytes, 20);
        r.set_capacity(0);
        assert!(r.get((0, 28)).is_none());
        assert_eq!(r.bytes, 0);
    }

    #[test]
    fn release_and_places_across_segments() {
        let mut r = Recent::default();
        r.set_capacity(1000);
        r.push((0, 8), chunk(10));
        r.push((0, 18), chunk(10));
        r.push((5, 8), chunk(10));
        assert!(r.get((0, 28)).is_none());
        r.release_before((5, 8));
        assert!(r.get((0, 18)).is_none());
        assert!(r.get((5, 8)).is_some());
        r.clear();
        assert!(r.get((5, 8)).is_none());
    }
}
