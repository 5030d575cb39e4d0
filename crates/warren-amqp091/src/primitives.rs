//! The wire's primitive types (0-9-1 §4.2.5): integers in network order,
//! short strings (u8 length) and long strings (u32 length). [`Reader`] reads
//! them from a frame payload without copying: strings come back as slices of
//! the payload's [`Bytes`].

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::CodecError;

/// A short string: at most 255 octets. The spec says UTF-8 for names but
/// brokers pass the octets through, so this keeps bytes and shows them lossily.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShortStr(Bytes);

impl ShortStr {
    pub const fn from_static(s: &'static str) -> ShortStr {
        ShortStr(Bytes::from_static(s.as_bytes()))
    }

    /// Wrap bytes; the caller keeps them at most 255 long (longer ones are
    /// cut at 255 when encoded).
    pub fn from_bytes(b: Bytes) -> ShortStr {
        ShortStr(b)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    /// The string when it is valid UTF-8, else a lossy copy.
    pub fn to_str_lossy(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.0)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn starts_with(&self, prefix: &str) -> bool {
        self.0.starts_with(prefix.as_bytes())
    }
}

impl Deref for ShortStr {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl Borrow<[u8]> for ShortStr {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

/// Compares the octets with the string's UTF-8.
impl PartialEq<str> for ShortStr {
    fn eq(&self, other: &str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<&str> for ShortStr {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl From<&str> for ShortStr {
    fn from(s: &str) -> ShortStr {
        ShortStr(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<&String> for ShortStr {
    fn from(s: &String) -> ShortStr {
        ShortStr::from(s.as_str())
    }
}

impl From<String> for ShortStr {
    fn from(s: String) -> ShortStr {
        ShortStr(Bytes::from(s))
    }
}

impl fmt::Display for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_str_lossy())
    }
}

impl fmt::Debug for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_str_lossy())
    }
}

/// Write a short string, cut at 255 octets (the u8 length allows no more).
pub fn put_shortstr(buf: &mut BytesMut, s: &[u8]) {
    let n = s.len().min(255);
    buf.put_u8(n as u8);
    buf.put_slice(&s[..n]);
}

pub fn put_longstr(buf: &mut BytesMut, s: &[u8]) {
    buf.put_u32(s.len() as u32);
    buf.put_slice(s);
}

/// A bounds-checked cursor over one frame payload.
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

    pub fn octet(&mut self) -> Result<u8, CodecError> {
        self.need(1, "octet")?;
        Ok(self.buf.get_u8())
    }

    pub fn u8(&mut self) -> Result<u8, CodecError> {
        self.octet()
    }

    pub fn short(&mut self) -> Result<u16, CodecError> {
        self.need(2, "short")?;
        Ok(self.buf.get_u16())
    }

    pub fn long(&mut self) -> Result<u32, CodecError> {
        self.need(4, "long")?;
        Ok(self.buf.get_u32())
    }

    pub fn longlong(&mut self) -> Result<u64, CodecError> {
        self.need(8, "longlong")?;
        Ok(self.buf.get_u64())
    }

    pub fn timestamp(&mut self) -> Result<u64, CodecError> {
        self.longlong()
    }

    /// `n` raw octets as a slice of the payload (no copy).
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<Bytes, CodecError> {
        self.need(n, what)?;
        Ok(self.buf.split_to(n))
    }

    pub fn shortstr(&mut self) -> Result<ShortStr, CodecError> {
        let n = self.octet()? as usize;
        Ok(ShortStr(self.take(n, "shortstr")?))
    }

    pub fn longstr(&mut self) -> Result<Bytes, CodecError> {
        let n = self.long()? as usize;
        self.take(n, "longstr")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortstr_roundtrip_and_truncation() {
        let mut b = BytesMut::new();
        put_shortstr(&mut b, b"hello");
        assert_eq!(&b[..], b"\x05hello");
        let mut r = Reader::new(b.clone().freeze());
        assert_eq!(r.shortstr().unwrap().as_bytes(), b"hello");
        let mut r = Reader::new(b.freeze().slice(..4));
        assert_eq!(r.shortstr(), Err(CodecError::Truncated("shortstr")));
    }

    #[test]
    fn shortstr_is_cut_at_255() {
        let mut b = BytesMut::new();
        put_shortstr(&mut b, &[b'a'; 300]);
        assert_eq!(b[0], 255);
        assert_eq!(b.len(), 256);
    }

    #[test]
    fn longstr_length_beyond_payload_is_truncated_not_allocated() {
        let mut r = Reader::new(Bytes::from_static(b"\xff\xff\xff\xffab"));
        assert_eq!(r.longstr(), Err(CodecError::Truncated("longstr")));
    }

    #[test]
    fn integers_are_network_order() {
        let mut r = Reader::new(Bytes::from_static(
            b"\x01\x02\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x04",
        ));
        assert_eq!(r.short().unwrap(), 0x0102);
        assert_eq!(r.long().unwrap(), 3);
        assert_eq!(r.longlong().unwrap(), 4);
        assert_eq!(r.octet(), Err(CodecError::Truncated("octet")));
    }
}
