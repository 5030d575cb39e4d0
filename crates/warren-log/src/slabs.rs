//! The buffers a replication reader reads chunks from the file into,
//! reused once the chunks read into them have been sent.
//!
//! A replica that falls behind the leader's recent chunks is sent chunks
//! read back from the segment file. Each read into a fresh buffer took
//! fresh pages from the kernel (a page fault and a zeroed page per 4 KiB,
//! and the allocator handing them back on free): on three nodes at 1 KB
//! messages that was a fifth of the leader's CPU, more than the copy
//! itself (perf). Here a reader keeps a few large buffers and hands out
//! each chunk as a shared slice of one; a buffer is taken again once every
//! slice of it has been dropped (written to the link), so its pages stay
//! mapped.
//!
//! Bounded: at most [`SLABS`] buffers of [`SLAB`] bytes per reader, and
//! none while the reader finds its chunks in memory. When every buffer is
//! still lent out, a new one replaces the oldest (whose memory goes when
//! its last slice does).

use std::collections::VecDeque;

use bytes::BytesMut;

/// Bytes in one buffer: several chunks of a batch at 1 KB messages.
pub const SLAB: usize = 2 << 20;
/// Buffers kept per reader: enough to cover what the link has not yet
/// written while the next ones are read.
pub const SLABS: usize = 4;
/// A buffer with less room than this is set aside before a read: most
/// chunks then fit, and a larger one still reads whole (the buffer grows
/// for it, once).
const ROOM: usize = SLAB / 4;

#[derive(Default)]
pub(crate) struct Slabs {
    /// The buffer being read into at the front, then the ones set aside,
    /// oldest last.
    ring: VecDeque<BytesMut>,
}

impl Slabs {
    /// A buffer with room for a chunk (at least [`ROOM`] bytes free):
    /// the current one, or the oldest set-aside one whose slices are all
    /// gone, or a new one.
    pub(crate) fn current(&mut self) -> &mut BytesMut {
        let has_room = self.ring.front().is_some_and(|b| b.capacity() - b.len() >= ROOM);
        if !has_room {
            self.rotate();
        }
        self.ring.front_mut().expect("rotate leaves one")
    }

    fn rotate(&mut self) {
        // Oldest first: the likeliest to have been written out.
        let free = (0..self.ring.len())
            .rev()
            .find(|&i| self.ring[i].is_empty() && self.ring[i].try_reclaim(SLAB));
        match free {
            Some(i) => {
                let b = self.ring.remove(i).expect("in range");
                self.ring.push_front(b);
            }
            None => {
                if self.ring.len() >= SLABS {
                    self.ring.pop_back();
                }
                self.ring.push_front(BytesMut::with_capacity(SLAB));
            }
        }
    }

    /// Let every buffer go (the reader reads from memory again).
    pub(crate) fn release(&mut self) {
        self.ring.clear();
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.ring.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fill the current buffer with one chunk of `n` bytes and hand it out.
    fn chunk(s: &mut Slabs, n: usize) -> bytes::Bytes {
        let b = s.current();
        b.extend_from_slice(&vec![7u8; n]);
        b.split().freeze()
    }

    #[test]
    fn a_buffer_is_read_into_again_once_its_chunks_are_dropped() {
        let mut s = Slabs::default();
        let a = chunk(&mut s, SLAB - ROOM + 1);
        let first = a.as_ptr();
        drop(a);
        // Too little room left: the same buffer comes back whole.
        let b = chunk(&mut s, 10);
        assert_eq!(b.as_ptr(), first);
        assert_eq!(s.held(), 1);
    }

    #[test]
    fn buffers_still_lent_out_are_not_reused_and_stay_bounded() {
        let mut s = Slabs::default();
        let mut lent = Vec::new();
        for _ in 0..(SLABS * 2) {
            lent.push(chunk(&mut s, SLAB - ROOM + 1));
        }
        assert_eq!(s.held(), SLABS);
        let starts: std::collections::HashSet<_> = lent.iter().map(|c| c.as_ptr()).collect();
        assert_eq!(starts.len(), lent.len(), "no buffer written over while lent");
        assert!(lent.iter().all(|c| c.iter().all(|&x| x == 7)));
        s.release();
        assert_eq!(s.held(), 0);
    }
}
