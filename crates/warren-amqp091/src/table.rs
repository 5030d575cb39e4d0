//! Field tables and arrays (0-9-1 §4.2.5.5) with RabbitMQ's type tags, which
//! differ from the spec's grammar (RabbitMQ errata, "field types"): `b` i8,
//! `B` u8, `s` i16, `u` u16, `I` i32, `i` u32, `l` i64, `f` f32, `d` f64,
//! `D` decimal, `S` long string, `x` byte array, `A` array, `T` timestamp,
//! `F` table, `t` bool, `V` void.
//!
//! Tables keep their entries in wire order; lookups are linear because real
//! tables hold a handful of entries.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::CodecError;
use crate::primitives::{put_longstr, put_shortstr, Reader, ShortStr};

impl Reader {
    /// A field table (0-9-1 §4.2.5.5), as a method's arguments carry it.
    pub fn table(&mut self) -> Result<FieldTable, CodecError> {
        FieldTable::decode(self, 0)
    }
}

/// How deep tables and arrays may nest. A frame of 128 KiB could otherwise
/// nest tens of thousands deep and overflow the decoder's stack.
pub const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    Bool(bool),
    I8(i8),
    U8(u8),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    F32(f32),
    F64(f64),
    /// Scale (decimal places) and unscaled value.
    Decimal(u8, u32),
    LongStr(Bytes),
    Bytes(Bytes),
    Array(Vec<FieldValue>),
    Timestamp(u64),
    Table(FieldTable),
    Void,
}

impl FieldValue {
    /// The value as a signed integer, if it is any integer type.
    pub fn as_i64(&self) -> Option<i64> {
        Some(match *self {
            FieldValue::I8(v) => v as i64,
            FieldValue::U8(v) => v as i64,
            FieldValue::I16(v) => v as i64,
            FieldValue::U16(v) => v as i64,
            FieldValue::I32(v) => v as i64,
            FieldValue::U32(v) => v as i64,
            FieldValue::I64(v) => v,
            _ => return None,
        })
    }

    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            FieldValue::LongStr(b) | FieldValue::Bytes(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            FieldValue::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The type tag RabbitMQ writes for this value.
    pub fn tag(&self) -> u8 {
        match self {
            FieldValue::Bool(_) => b't',
            FieldValue::I8(_) => b'b',
            FieldValue::U8(_) => b'B',
            FieldValue::I16(_) => b's',
            FieldValue::U16(_) => b'u',
            FieldValue::I32(_) => b'I',
            FieldValue::U32(_) => b'i',
            FieldValue::I64(_) => b'l',
            FieldValue::F32(_) => b'f',
            FieldValue::F64(_) => b'd',
            FieldValue::Decimal(..) => b'D',
            FieldValue::LongStr(_) => b'S',
            FieldValue::Bytes(_) => b'x',
            FieldValue::Array(_) => b'A',
            FieldValue::Timestamp(_) => b'T',
            FieldValue::Table(_) => b'F',
            FieldValue::Void => b'V',
        }
    }

    /// RabbitMQ's short type names, used in error texts (e.g. "longstr").
    pub fn type_name(&self) -> &'static str {
        match self {
            FieldValue::Bool(_) => "bool",
            FieldValue::I8(_) => "byte",
            FieldValue::U8(_) => "unsignedbyte",
            FieldValue::I16(_) => "short",
            FieldValue::U16(_) => "unsignedshort",
            FieldValue::I32(_) => "signedint",
            FieldValue::U32(_) => "unsignedint",
            FieldValue::I64(_) => "long",
            FieldValue::F32(_) => "float",
            FieldValue::F64(_) => "double",
            FieldValue::Decimal(..) => "decimal",
            FieldValue::LongStr(_) => "longstr",
            FieldValue::Bytes(_) => "binary",
            FieldValue::Array(_) => "array",
            FieldValue::Timestamp(_) => "timestamp",
            FieldValue::Table(_) => "table",
            FieldValue::Void => "void",
        }
    }

    fn decode(r: &mut Reader, depth: usize) -> Result<FieldValue, CodecError> {
        let tag = r.octet()?;
        Ok(match tag {
            b't' => FieldValue::Bool(r.octet()? != 0),
            b'b' => FieldValue::I8(r.octet()? as i8),
            b'B' => FieldValue::U8(r.octet()?),
            b's' => FieldValue::I16(r.short()? as i16),
            b'u' => FieldValue::U16(r.short()?),
            b'I' => FieldValue::I32(r.long()? as i32),
            b'i' => FieldValue::U32(r.long()?),
            b'l' => FieldValue::I64(r.longlong()? as i64),
            b'f' => FieldValue::F32(f32::from_bits(r.long()?)),
            b'd' => FieldValue::F64(f64::from_bits(r.longlong()?)),
            b'D' => FieldValue::Decimal(r.octet()?, r.long()?),
            b'S' => FieldValue::LongStr(r.longstr()?),
            b'x' => FieldValue::Bytes(r.longstr()?),
            b'T' => FieldValue::Timestamp(r.longlong()?),
            b'V' => FieldValue::Void,
            b'F' => FieldValue::Table(FieldTable::decode(r, depth + 1)?),
            b'A' => {
                if depth + 1 > MAX_DEPTH {
                    return Err(CodecError::TooDeep(MAX_DEPTH));
                }
                let len = r.long()? as usize;
                let mut inner = Reader::new(r.take(len, "array")?);
                let mut items = Vec::new();
                while inner.remaining() > 0 {
                    items.push(FieldValue::decode(&mut inner, depth + 1)?);
                }
                FieldValue::Array(items)
            }
            _ => return Err(CodecError::Malformed("field value type")),
        })
    }

    pub fn encode(&self, buf: &mut BytesMut) {
        buf.put_u8(self.tag());
        match self {
            FieldValue::Bool(v) => buf.put_u8(*v as u8),
            FieldValue::I8(v) => buf.put_i8(*v),
            FieldValue::U8(v) => buf.put_u8(*v),
            FieldValue::I16(v) => buf.put_i16(*v),
            FieldValue::U16(v) => buf.put_u16(*v),
            FieldValue::I32(v) => buf.put_i32(*v),
            FieldValue::U32(v) => buf.put_u32(*v),
            FieldValue::I64(v) => buf.put_i64(*v),
            FieldValue::F32(v) => buf.put_f32(*v),
            FieldValue::F64(v) => buf.put_f64(*v),
            FieldValue::Decimal(s, v) => {
                buf.put_u8(*s);
                buf.put_u32(*v);
            }
            FieldValue::LongStr(b) | FieldValue::Bytes(b) => put_longstr(buf, b),
            FieldValue::Timestamp(v) => buf.put_u64(*v),
            FieldValue::Void => {}
            FieldValue::Table(t) => t.encode(buf),
            FieldValue::Array(items) => {
                let at = buf.len();
                buf.put_u32(0);
                for i in items {
                    i.encode(buf);
                }
                let n = (buf.len() - at - 4) as u32;
                buf[at..at + 4].copy_from_slice(&n.to_be_bytes());
            }
        }
    }
}

impl From<&str> for FieldValue {
    fn from(s: &str) -> FieldValue {
        FieldValue::LongStr(Bytes::copy_from_slice(s.as_bytes()))
    }
}

/// A field table: named values in wire order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldTable(pub Vec<(ShortStr, FieldValue)>);

impl FieldTable {
    pub fn new() -> FieldTable {
        FieldTable(Vec::new())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn get(&self, key: &str) -> Option<&FieldValue> {
        self.0
            .iter()
            .find(|(k, _)| k.as_bytes() == key.as_bytes())
            .map(|(_, v)| v)
    }

    /// Set `key`, replacing an existing entry in place.
    pub fn insert(&mut self, key: &str, value: FieldValue) {
        if let Some(e) = self.0.iter_mut().find(|(k, _)| k.as_bytes() == key.as_bytes()) {
            e.1 = value;
        } else {
            self.0.push((ShortStr::from(key), value));
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<FieldValue> {
        let i = self.0.iter().position(|(k, _)| k.as_bytes() == key.as_bytes())?;
        Some(self.0.remove(i).1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ShortStr, &FieldValue)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub(crate) fn decode(r: &mut Reader, depth: usize) -> Result<FieldTable, CodecError> {
        if depth > MAX_DEPTH {
            return Err(CodecError::TooDeep(MAX_DEPTH));
        }
        let len = r.long()? as usize;
        let mut inner = Reader::new(r.take(len, "table")?);
        let mut entries = Vec::new();
        while inner.remaining() > 0 {
            let k = inner.shortstr()?;
            let v = FieldValue::decode(&mut inner, depth)?;
            entries.push((k, v));
        }
        Ok(FieldTable(entries))
    }

    /// Decode a whole table (length prefix included) from `bytes`.
    pub fn decode_from(bytes: Bytes) -> Result<FieldTable, CodecError> {
        Reader::new(bytes).table()
    }

    pub fn encode(&self, buf: &mut BytesMut) {
        let at = buf.len();
        buf.put_u32(0);
        for (k, v) in &self.0 {
            put_shortstr(buf, k);
            v.encode(buf);
        }
        let n = (buf.len() - at - 4) as u32;
        buf[at..at + 4].copy_from_slice(&n.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> FieldTable {
        let mut inner = FieldTable::new();
        inner.insert("n", FieldValue::I64(-5));
        let mut t = FieldTable::new();
        t.insert("bool", FieldValue::Bool(true));
        t.insert("i8", FieldValue::I8(-1));
        t.insert("u8", FieldValue::U8(200));
        t.insert("i16", FieldValue::I16(-300));
        t.insert("u16", FieldValue::U16(60000));
        t.insert("i32", FieldValue::I32(-70000));
        t.insert("u32", FieldValue::U32(4_000_000_000));
        t.insert("i64", FieldValue::I64(i64::MIN));
        t.insert("f32", FieldValue::F32(1.5));
        t.insert("f64", FieldValue::F64(-2.25));
        t.insert("dec", FieldValue::Decimal(2, 12345));
        t.insert("str", FieldValue::from("hello"));
        t.insert("bin", FieldValue::Bytes(Bytes::from_static(b"\x00\x01")));
        t.insert("ts", FieldValue::Timestamp(1_700_000_000));
        t.insert("void", FieldValue::Void);
        t.insert("tbl", FieldValue::Table(inner));
        t.insert(
            "arr",
            FieldValue::Array(vec![FieldValue::I32(1), FieldValue::from("x")]),
        );
        t
    }

    #[test]
    fn roundtrip_every_type() {
        let t = sample();
        let mut b = BytesMut::new();
        t.encode(&mut b);
        assert_eq!(FieldTable::decode_from(b.freeze()).unwrap(), t);
    }

    #[test]
    fn exact_bytes() {
        let mut t = FieldTable::new();
        t.insert("a", FieldValue::I32(1));
        t.insert("b", FieldValue::from("xy"));
        let mut b = BytesMut::new();
        t.encode(&mut b);
        assert_eq!(
            &b[..],
            b"\x00\x00\x00\x10\x01aI\x00\x00\x00\x01\x01bS\x00\x00\x00\x02xy"
        );
    }

    #[test]
    fn truncated_input_is_an_error_at_every_cut() {
        let mut b = BytesMut::new();
        sample().encode(&mut b);
        let b = b.freeze();
        for cut in 0..b.len() {
            assert!(FieldTable::decode_from(b.slice(..cut)).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn unknown_tag_is_malformed() {
        let b = Bytes::from_static(b"\x00\x00\x00\x03\x01aZ");
        assert_eq!(
            FieldTable::decode_from(b),
            Err(CodecError::Malformed("field value type"))
        );
    }

    #[test]
    fn deep_nesting_is_refused() {
        // 100 nested tables, each holding the next under key "k".
        let mut t = FieldTable::new();
        for _ in 0..100 {
            let mut outer = FieldTable::new();
            outer.insert("k", FieldValue::Table(t));
            t = outer;
        }
        let mut b = BytesMut::new();
        t.encode(&mut b);
        assert_eq!(
            FieldTable::decode_from(b.freeze()),
            Err(CodecError::TooDeep(MAX_DEPTH))
        );
    }
}
