//! The protocol's primitive types (PROTOCOL.adoc, "Types"): big-endian
//! integers, `string` (int16 length, -1 for null), `bytes` (int32 length,
//! -1 for null) and arrays (int32 count). The reader never trusts a length
//! or count beyond the bytes present.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::CodecError;

pub struct Reader {
    buf: Bytes,
}

impl Reader {
    pub fn new(buf: Bytes) -> Reader {
        Reader { buf }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn need(&self, n: usize, what: &'static str) -> Result<(), CodecError> {
        if self.buf.len() < n {
            Err(CodecError::Truncated(what))
        } else {
            Ok(())
        }
    }

    pub fn u8(&mut self) -> Result<u8, CodecError> {
        self.need(1, "uint8")?;
        Ok(self.buf.get_u8())
    }
    pub fn u16(&mut self) -> Result<u16, CodecError> {
        self.need(2, "uint16")?;
        Ok(self.buf.get_u16())
    }
    pub fn u32(&mut self) -> Result<u32, CodecError> {
        self.need(4, "uint32")?;
        Ok(self.buf.get_u32())
    }
    pub fn i32(&mut self) -> Result<i32, CodecError> {
        self.need(4, "int32")?;
        Ok(self.buf.get_i32())
    }
    pub fn u64(&mut self) -> Result<u64, CodecError> {
        self.need(8, "uint64")?;
        Ok(self.buf.get_u64())
    }
    pub fn i64(&mut self) -> Result<i64, CodecError> {
        self.need(8, "int64")?;
        Ok(self.buf.get_i64())
    }

    pub fn take(&mut self, n: usize, what: &'static str) -> Result<Bytes, CodecError> {
        self.need(n, what)?;
        Ok(self.buf.split_to(n))
    }

    pub fn rest(&mut self) -> Bytes {
        std::mem::take(&mut self.buf)
    }

    /// A `string`; None for null (length -1).
    pub fn opt_string(&mut self) -> Result<Option<String>, CodecError> {
        self.need(2, "string length")?;
        let n = self.buf.get_i16();
        if n < 0 {
            return Ok(None);
        }
        let b = self.take(n as usize, "string")?;
        String::from_utf8(b.to_vec())
            .map(Some)
            .map_err(|_| CodecError::Invalid("string is not UTF-8".into()))
    }

    /// A `string` as raw bytes (filter values need not be UTF-8); None
    /// for null.
    pub fn opt_string_bytes(&mut self) -> Result<Option<Bytes>, CodecError> {
        self.need(2, "string length")?;
        let n = self.buf.get_i16();
        if n < 0 {
            return Ok(None);
        }
        self.take(n as usize, "string").map(Some)
    }

    pub fn string(&mut self) -> Result<String, CodecError> {
        Ok(self.opt_string()?.unwrap_or_default())
    }

    /// `bytes`; None for null (length -1).
    pub fn opt_bytes(&mut self) -> Result<Option<Bytes>, CodecError> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(None);
        }
        self.take(n as usize, "bytes").map(Some)
    }

    /// An array count, checked against the bytes left (each element takes
    /// at least `min_size`).
    pub fn count(&mut self, min_size: usize) -> Result<usize, CodecError> {
        let n = self.i32()?;
        if n < 0 {
            return Err(CodecError::Invalid(format!("negative array count {n}")));
        }
        let n = n as usize;
        if n.saturating_mul(min_size.max(1)) > self.buf.len() {
            return Err(CodecError::Truncated("array"));
        }
        Ok(n)
    }

    /// `[Key Value]` of strings (properties, arguments).
    pub fn pairs(&mut self) -> Result<Vec<(String, String)>, CodecError> {
        let n = self.count(4)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push((self.string()?, self.string()?));
        }
        Ok(out)
    }
}

pub fn put_string(out: &mut BytesMut, s: &str) {
    let b = &s.as_bytes()[..s.len().min(i16::MAX as usize)];
    out.put_i16(b.len() as i16);
    out.put_slice(b);
}

pub fn put_opt_string(out: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(out, s),
        None => out.put_i16(-1),
    }
}

pub fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_i32(b.len() as i32);
    out.put_slice(b);
}

pub fn put_pairs(out: &mut BytesMut, pairs: &[(String, String)]) {
    out.put_i32(pairs.len() as i32);
    for (k, v) in pairs {
        put_string(out, k);
        put_string(out, v);
    }
}
