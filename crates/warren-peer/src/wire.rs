//! Reading and writing the protocol's primitive fields.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::CodecError;

pub struct Reader {
    b: Bytes,
}

impl Reader {
    pub fn new(b: Bytes) -> Reader {
        Reader { b }
    }

    fn need(&self, n: usize, what: &'static str) -> Result<(), CodecError> {
        if self.b.len() < n {
            return Err(CodecError::Truncated(what));
        }
        Ok(())
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, CodecError> {
        self.need(1, what)?;
        Ok(self.b.get_u8())
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16, CodecError> {
        self.need(2, what)?;
        Ok(self.b.get_u16())
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, CodecError> {
        self.need(4, what)?;
        Ok(self.b.get_u32())
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, CodecError> {
        self.need(8, what)?;
        Ok(self.b.get_u64())
    }

    pub fn bool(&mut self, what: &'static str) -> Result<bool, CodecError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(CodecError::Invalid(format!("{what}: {v} is not a boolean"))),
        }
    }

    pub fn array32(&mut self, what: &'static str) -> Result<[u8; 32], CodecError> {
        self.need(32, what)?;
        let mut a = [0u8; 32];
        self.b.copy_to_slice(&mut a);
        Ok(a)
    }

    /// A 1-byte length and UTF-8.
    pub fn name(&mut self, what: &'static str) -> Result<String, CodecError> {
        let n = self.u8(what)? as usize;
        self.need(n, what)?;
        let b = self.b.split_to(n);
        String::from_utf8(b.to_vec()).map_err(|_| CodecError::Invalid(format!("{what}: not UTF-8")))
    }

    /// A 4-byte length and bytes (shared with the frame, not copied).
    pub fn blob(&mut self, what: &'static str) -> Result<Bytes, CodecError> {
        let n = self.u32(what)? as usize;
        self.need(n, what)?;
        Ok(self.b.split_to(n))
    }

    /// `n` bytes (shared with the frame, not copied).
    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<Bytes, CodecError> {
        self.need(n, what)?;
        Ok(self.b.split_to(n))
    }

    pub fn remaining(&self) -> usize {
        self.b.len()
    }

    /// Every field read: anything left over is an error, not ignored.
    pub fn finish(self) -> Result<(), CodecError> {
        match self.b.len() {
            0 => Ok(()),
            n => Err(CodecError::Trailing(n)),
        }
    }
}

/// Names are at most 255 bytes: longer ones are refused when configured,
/// so this cut (at a character boundary) is a last resort.
pub fn put_name(out: &mut BytesMut, s: &str) {
    let mut end = s.len().min(255);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let b = &s.as_bytes()[..end];
    out.put_u8(b.len() as u8);
    out.put_slice(b);
}

pub fn put_blob(out: &mut BytesMut, b: &[u8]) {
    out.put_u32(b.len() as u32);
    out.put_slice(b);
}
