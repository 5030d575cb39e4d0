//! The connection reader's buffer, and the buffers it read into before.
//!
//! Delivered chunks are handed out as slices of the buffer they were read
//! into, so while a consumer holds one the reader cannot reuse that memory
//! and must read on elsewhere. Allocating a fresh buffer each time cost a
//! page fault for every 4 KiB read (the allocator returns large freed
//! blocks to the system). The reader keeps the buffers it left instead,
//! and reads into the first one no chunk holds any more; at most
//! [`SPARES`] are kept, so memory stays bounded by the consumers' credit.
//!
//! What was read of a frame not yet whole moves with it when the reader
//! changes buffers, so a read stops at the end of a large frame begun:
//! the next frame's start is then read alone ([`READ_AHEAD`]), and at most
//! that much moves (reading on into the next large frame moved most of
//! it, ~2 % of a 1 KB message's CPU).

use bytes::BytesMut;

/// What a read takes beyond the frame begun (or when none is).
pub(crate) const READ_AHEAD: usize = 64 * 1024;
/// Buffers kept for reuse beside the one being read into.
const SPARES: usize = 4;
/// Smallest buffer allocated: room for several chunks, so one serves
/// many reads before it must be left.
const MIN_ALLOCATION: usize = 1 << 20;

/// The buffer the reader reads into, with room made on demand.
#[derive(Debug)]
pub(crate) struct ReadBuffer {
    /// What has been read and not yet parsed.
    pub(crate) buf: BytesMut,
    /// Buffers left while chunks still pointed into them, emptied.
    spares: Vec<BytesMut>,
}

impl ReadBuffer {
    pub(crate) fn new(buf: BytesMut) -> Self {
        ReadBuffer {
            buf,
            spares: Vec::new(),
        }
    }

    /// Make room for the next read, and say how much it may take: the
    /// rest of the frame begun (whose size the first bytes read give,
    /// up to `frame_max`), or [`READ_AHEAD`] if that is more.
    pub(crate) fn prepare_read(&mut self, frame_max: usize) -> usize {
        let begun = match self.buf.get(..4) {
            Some(h) => (u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize + 4).min(frame_max + 4),
            None => 0,
        };
        let want = begun.saturating_sub(self.buf.len()).max(READ_AHEAD);
        if self.buf.capacity() - self.buf.len() < want {
            self.reserve(want);
        }
        want
    }

    /// Make room for at least `additional` more bytes after what is
    /// unparsed: in place when nothing else holds the buffer, else in a
    /// spare nothing holds any more, else in a new allocation.
    fn reserve(&mut self, additional: usize) {
        if self.buf.try_reclaim(additional) {
            return;
        }
        let len = self.buf.len();
        let mut fresh = match self
            .spares
            .iter_mut()
            .position(|s| s.try_reclaim(len + additional))
        {
            Some(i) => self.spares.remove(i),
            None => BytesMut::with_capacity((len + additional).max(MIN_ALLOCATION)),
        };
        fresh.extend_from_slice(&self.buf);
        let mut left = std::mem::replace(&mut self.buf, fresh);
        left.clear();
        // The oldest goes first: one too small for the chunks now read
        // (the handshake's) is never taken, and must not stay.
        if self.spares.len() == SPARES {
            self.spares.remove(0);
        }
        self.spares.push(left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frame `n` of `len` bytes in all: its size, then `n` repeated.
    fn frame(n: u8, len: usize) -> Vec<u8> {
        let mut f = ((len - 4) as u32).to_be_bytes().to_vec();
        f.resize(len, n);
        f
    }

    #[test]
    fn a_read_stops_at_the_end_of_a_large_frame_begun() {
        let mut r = ReadBuffer::new(BytesMut::with_capacity(4096));
        assert_eq!(r.prepare_read(1 << 20), READ_AHEAD, "nothing begun");
        let big = frame(1, 300_000);
        r.buf.extend_from_slice(&big[..1000]);
        assert_eq!(r.prepare_read(1 << 20), 299_000, "the rest of the frame");
        assert!(r.buf.capacity() >= 300_000);
        assert_eq!(&r.buf[..], &big[..1000], "what was read moved with it");
        r.buf.extend_from_slice(&big[1000..]);
        let held = r.buf.split_to(300_000).freeze();
        // A small frame begun: a read takes the usual amount.
        r.buf.extend_from_slice(&frame(2, 100)[..10]);
        assert_eq!(r.prepare_read(1 << 20), READ_AHEAD);
        // A frame larger than the frame_max allowed asks no more than it.
        let mut over = BytesMut::new();
        over.extend_from_slice(&u32::MAX.to_be_bytes());
        let mut r2 = ReadBuffer::new(over);
        assert_eq!(r2.prepare_read(1 << 20), 1 << 20);
        drop(held);
    }

    /// Read `bytes` as the reader does: room made first, at most what
    /// it allows per read.
    fn read(r: &mut ReadBuffer, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let n = r.prepare_read(1 << 20).min(bytes.len());
            r.buf.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
    }

    #[test]
    fn a_buffer_let_go_by_every_chunk_is_read_into_again() {
        const LEN: usize = 400_000;
        let mut r = ReadBuffer::new(BytesMut::with_capacity(16));
        read(&mut r, &frame(1, LEN));
        let first = r.buf.as_ptr();
        let a = r.buf.split_to(LEN).freeze();
        read(&mut r, &frame(2, LEN));
        let b = r.buf.split_to(LEN).freeze();
        // No room left for a third: it begins in a new buffer, what was
        // read of it moved there.
        read(&mut r, &frame(3, 100)[..0]);
        read(&mut r, &frame(3, LEN)[..100]);
        r.prepare_read(1 << 20);
        let second = r.buf.as_ptr();
        assert!(second < first || second >= first.wrapping_add(MIN_ALLOCATION));
        assert_eq!(&r.buf[..], &frame(3, LEN)[..100]);
        read(&mut r, &frame(3, LEN)[100..]);
        let c = r.buf.split_to(LEN).freeze();
        drop((a, b, c));
        read(&mut r, &frame(4, LEN));
        let d = r.buf.split_to(LEN).freeze();
        // Full again: the first buffer, let go by its chunks, is taken.
        read(&mut r, &frame(5, LEN));
        assert_eq!(r.buf.as_ptr(), first);
        assert_eq!(&r.buf[..], &frame(5, LEN)[..]);
        assert_eq!(&d[..], &frame(4, LEN)[..]);
        assert!(r.spares.len() <= SPARES);
    }
}
