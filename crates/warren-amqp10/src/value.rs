//! The AMQP 1.0 type system (spec part 1, types): every primitive type, the
//! compound ones (list, map, array) and described values, with the
//! encodings' format codes. Encoding always picks the smallest form;
//! decoding accepts every form, refuses nesting deeper than [`MAX_DEPTH`],
//! and never trusts a count or size beyond the bytes actually present.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::CodecError;

/// Deepest nesting of compound or described values accepted.
pub const MAX_DEPTH: usize = 32;

/// Format codes (spec 1.6).
pub mod code {
    pub const DESCRIBED: u8 = 0x00;
    pub const NULL: u8 = 0x40;
    pub const BOOLEAN: u8 = 0x56;
    pub const TRUE: u8 = 0x41;
    pub const FALSE: u8 = 0x42;
    pub const UBYTE: u8 = 0x50;
    pub const USHORT: u8 = 0x60;
    pub const UINT: u8 = 0x70;
    pub const SMALLUINT: u8 = 0x52;
    pub const UINT0: u8 = 0x43;
    pub const ULONG: u8 = 0x80;
    pub const SMALLULONG: u8 = 0x53;
    pub const ULONG0: u8 = 0x44;
    pub const BYTE: u8 = 0x51;
    pub const SHORT: u8 = 0x61;
    pub const INT: u8 = 0x71;
    pub const SMALLINT: u8 = 0x54;
    pub const LONG: u8 = 0x81;
    pub const SMALLLONG: u8 = 0x55;
    pub const FLOAT: u8 = 0x72;
    pub const DOUBLE: u8 = 0x82;
    pub const DECIMAL32: u8 = 0x74;
    pub const DECIMAL64: u8 = 0x84;
    pub const DECIMAL128: u8 = 0x94;
    pub const CHAR: u8 = 0x73;
    pub const TIMESTAMP: u8 = 0x83;
    pub const UUID: u8 = 0x98;
    pub const VBIN8: u8 = 0xa0;
    pub const VBIN32: u8 = 0xb0;
    pub const STR8: u8 = 0xa1;
    pub const STR32: u8 = 0xb1;
    pub const SYM8: u8 = 0xa3;
    pub const SYM32: u8 = 0xb3;
    pub const LIST0: u8 = 0x45;
    pub const LIST8: u8 = 0xc0;
    pub const LIST32: u8 = 0xd0;
    pub const MAP8: u8 = 0xc1;
    pub const MAP32: u8 = 0xd1;
    pub const ARRAY8: u8 = 0xe0;
    pub const ARRAY32: u8 = 0xf0;
}

/// A descriptor: a numeric code (domain << 32 | id) or a symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Descriptor {
    Code(u64),
    Symbol(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Ubyte(u8),
    Ushort(u16),
    Uint(u32),
    Ulong(u64),
    Byte(i8),
    Short(i16),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    Decimal32([u8; 4]),
    Decimal64([u8; 8]),
    Decimal128([u8; 16]),
    Char(char),
    /// Milliseconds since the Unix epoch.
    Timestamp(i64),
    Uuid([u8; 16]),
    Binary(Bytes),
    String(String),
    Symbol(String),
    List(Vec<Value>),
    Map(Vec<(Value, Value)>),
    /// All elements of one type (encoded with one constructor).
    Array(Vec<Value>),
    Described(Box<Descriptor>, Box<Value>),
}

impl Value {
    pub fn described(code: u64, v: Value) -> Value {
        Value::Described(Box::new(Descriptor::Code(code)), Box::new(v))
    }

    pub fn symbol(s: &str) -> Value {
        Value::Symbol(s.to_string())
    }

    pub fn string(s: &str) -> Value {
        Value::String(s.to_string())
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The descriptor code and value of a described value with a numeric
    /// descriptor.
    pub fn as_described(&self) -> Option<(u64, &Value)> {
        match self {
            Value::Described(d, v) => match **d {
                Descriptor::Code(c) => Some((c, v)),
                Descriptor::Symbol(_) => None,
            },
            _ => None,
        }
    }

    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            Value::Null => out.put_u8(code::NULL),
            Value::Bool(b) => out.put_u8(if *b { code::TRUE } else { code::FALSE }),
            Value::Ubyte(v) => {
                out.put_u8(code::UBYTE);
                out.put_u8(*v);
            }
            Value::Ushort(v) => {
                out.put_u8(code::USHORT);
                out.put_u16(*v);
            }
            Value::Uint(v) => match *v {
                0 => out.put_u8(code::UINT0),
                1..=255 => {
                    out.put_u8(code::SMALLUINT);
                    out.put_u8(*v as u8);
                }
                _ => {
                    out.put_u8(code::UINT);
                    out.put_u32(*v);
                }
            },
            Value::Ulong(v) => match *v {
                0 => out.put_u8(code::ULONG0),
                1..=255 => {
                    out.put_u8(code::SMALLULONG);
                    out.put_u8(*v as u8);
                }
                _ => {
                    out.put_u8(code::ULONG);
                    out.put_u64(*v);
                }
            },
            Value::Byte(v) => {
                out.put_u8(code::BYTE);
                out.put_i8(*v);
            }
            Value::Short(v) => {
                out.put_u8(code::SHORT);
                out.put_i16(*v);
            }
            Value::Int(v) => {
                if (-128..=127).contains(v) {
                    out.put_u8(code::SMALLINT);
                    out.put_i8(*v as i8);
                } else {
                    out.put_u8(code::INT);
                    out.put_i32(*v);
                }
            }
            Value::Long(v) => {
                if (-128..=127).contains(v) {
                    out.put_u8(code::SMALLLONG);
                    out.put_i8(*v as i8);
                } else {
                    out.put_u8(code::LONG);
                    out.put_i64(*v);
                }
            }
            Value::Float(v) => {
                out.put_u8(code::FLOAT);
                out.put_f32(*v);
            }
            Value::Double(v) => {
                out.put_u8(code::DOUBLE);
                out.put_f64(*v);
            }
            Value::Decimal32(b) => {
                out.put_u8(code::DECIMAL32);
                out.put_slice(b);
            }
            Value::Decimal64(b) => {
                out.put_u8(code::DECIMAL64);
                out.put_slice(b);
            }
            Value::Decimal128(b) => {
                out.put_u8(code::DECIMAL128);
                out.put_slice(b);
            }
            Value::Char(c) => {
                out.put_u8(code::CHAR);
                out.put_u32(*c as u32);
            }
            Value::Timestamp(t) => {
                out.put_u8(code::TIMESTAMP);
                out.put_i64(*t);
            }
            Value::Uuid(u) => {
                out.put_u8(code::UUID);
                out.put_slice(u);
            }
            Value::Binary(b) => variable(out, code::VBIN8, code::VBIN32, b),
            Value::String(s) => variable(out, code::STR8, code::STR32, s.as_bytes()),
            Value::Symbol(s) => variable(out, code::SYM8, code::SYM32, s.as_bytes()),
            Value::List(items) => {
                if items.is_empty() {
                    out.put_u8(code::LIST0);
                } else {
                    let mut body = BytesMut::new();
                    for v in items {
                        v.encode(&mut body);
                    }
                    compound(out, code::LIST8, code::LIST32, items.len(), &body);
                }
            }
            Value::Map(pairs) => {
                let mut body = BytesMut::new();
                for (k, v) in pairs {
                    k.encode(&mut body);
                    v.encode(&mut body);
                }
                compound(out, code::MAP8, code::MAP32, pairs.len() * 2, &body);
            }
            Value::Array(items) => encode_array(out, items),
            Value::Described(d, v) => {
                out.put_u8(code::DESCRIBED);
                match &**d {
                    Descriptor::Code(c) => Value::Ulong(*c).encode(out),
                    Descriptor::Symbol(s) => Value::Symbol(s.clone()).encode(out),
                }
                v.encode(out);
            }
        }
    }

    pub fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::new();
        self.encode(&mut b);
        b.freeze()
    }

    /// Decode one value from the front of `buf`, advancing it.
    pub fn decode(buf: &mut &[u8]) -> Result<Value, CodecError> {
        decode_value(buf, 0)
    }
}

fn variable(out: &mut BytesMut, short: u8, long: u8, b: &[u8]) {
    if b.len() < 256 {
        out.put_u8(short);
        out.put_u8(b.len() as u8);
    } else {
        out.put_u8(long);
        out.put_u32(b.len() as u32);
    }
    out.put_slice(b);
}

fn compound(out: &mut BytesMut, short: u8, long: u8, count: usize, body: &[u8]) {
    // size counts the count field and the body (spec 1.6.22-25).
    if body.len() + 1 < 256 && count < 256 {
        out.put_u8(short);
        out.put_u8((body.len() + 1) as u8);
        out.put_u8(count as u8);
    } else {
        out.put_u8(long);
        out.put_u32((body.len() + 4) as u32);
        out.put_u32(count as u32);
    }
    out.put_slice(body);
}

/// The constructor an array of `v`'s type uses, and how each element is
/// written after it (without its own constructor).
fn array_element(v: &Value, out: &mut BytesMut) {
    match v {
        Value::Null => {}
        Value::Bool(b) => out.put_u8(*b as u8),
        Value::Ubyte(x) => out.put_u8(*x),
        Value::Ushort(x) => out.put_u16(*x),
        Value::Uint(x) => out.put_u32(*x),
        Value::Ulong(x) => out.put_u64(*x),
        Value::Byte(x) => out.put_i8(*x),
        Value::Short(x) => out.put_i16(*x),
        Value::Int(x) => out.put_i32(*x),
        Value::Long(x) => out.put_i64(*x),
        Value::Float(x) => out.put_f32(*x),
        Value::Double(x) => out.put_f64(*x),
        Value::Decimal32(b) => out.put_slice(b),
        Value::Decimal64(b) => out.put_slice(b),
        Value::Decimal128(b) => out.put_slice(b),
        Value::Char(c) => out.put_u32(*c as u32),
        Value::Timestamp(t) => out.put_i64(*t),
        Value::Uuid(u) => out.put_slice(u),
        Value::Binary(b) => {
            out.put_u32(b.len() as u32);
            out.put_slice(b);
        }
        Value::String(s) | Value::Symbol(s) => {
            out.put_u32(s.len() as u32);
            out.put_slice(s.as_bytes());
        }
        // Compound elements: the 32-bit forms (the array's constructor
        // says list32 / map32 / array32), without a constructor of their own.
        Value::List(items) => {
            let mut body = BytesMut::new();
            for it in items {
                it.encode(&mut body);
            }
            out.put_u32((body.len() + 4) as u32);
            out.put_u32(items.len() as u32);
            out.put_slice(&body);
        }
        Value::Map(pairs) => {
            let mut body = BytesMut::new();
            for (k, v) in pairs {
                k.encode(&mut body);
                v.encode(&mut body);
            }
            out.put_u32((body.len() + 4) as u32);
            out.put_u32((pairs.len() * 2) as u32);
            out.put_slice(&body);
        }
        Value::Array(_) | Value::Described(..) => {
            let mut full = BytesMut::new();
            match v {
                Value::Array(items) => encode_array_wide(&mut full, items),
                _ => v.encode(&mut full),
            }
            out.put_slice(&full[1..]);
        }
    }
}

fn array_constructor(v: &Value) -> u8 {
    match v {
        Value::Null => code::NULL,
        Value::Bool(_) => code::BOOLEAN,
        Value::Ubyte(_) => code::UBYTE,
        Value::Ushort(_) => code::USHORT,
        Value::Uint(_) => code::UINT,
        Value::Ulong(_) => code::ULONG,
        Value::Byte(_) => code::BYTE,
        Value::Short(_) => code::SHORT,
        Value::Int(_) => code::INT,
        Value::Long(_) => code::LONG,
        Value::Float(_) => code::FLOAT,
        Value::Double(_) => code::DOUBLE,
        Value::Decimal32(_) => code::DECIMAL32,
        Value::Decimal64(_) => code::DECIMAL64,
        Value::Decimal128(_) => code::DECIMAL128,
        Value::Char(_) => code::CHAR,
        Value::Timestamp(_) => code::TIMESTAMP,
        Value::Uuid(_) => code::UUID,
        Value::Binary(_) => code::VBIN32,
        Value::String(_) => code::STR32,
        Value::Symbol(_) => code::SYM32,
        Value::List(_) => code::LIST32,
        Value::Map(_) => code::MAP32,
        Value::Array(_) => code::ARRAY32,
        Value::Described(..) => code::DESCRIBED,
    }
}

fn encode_array(out: &mut BytesMut, items: &[Value]) {
    encode_array_form(out, items, false)
}

fn encode_array_wide(out: &mut BytesMut, items: &[Value]) {
    encode_array_form(out, items, true)
}

fn encode_array_form(out: &mut BytesMut, items: &[Value], wide: bool) {
    let mut body = BytesMut::new();
    let ctor = items.first().map_or(code::NULL, array_constructor);
    if ctor == code::DESCRIBED {
        // A described array shares the descriptor; the first element's.
        if let Some(Value::Described(d, v)) = items.first() {
            body.put_u8(code::DESCRIBED);
            match &**d {
                Descriptor::Code(c) => Value::Ulong(*c).encode(&mut body),
                Descriptor::Symbol(s) => Value::Symbol(s.clone()).encode(&mut body),
            }
            let inner = array_constructor(v);
            body.put_u8(inner);
            for it in items {
                if let Value::Described(_, v) = it {
                    array_element(v, &mut body);
                }
            }
        }
    } else {
        body.put_u8(ctor);
        for it in items {
            array_element(it, &mut body);
        }
    }
    // size counts count + constructor + elements.
    if !wide && body.len() + 1 < 256 && items.len() < 256 {
        out.put_u8(code::ARRAY8);
        out.put_u8((body.len() + 1) as u8);
        out.put_u8(items.len() as u8);
    } else {
        out.put_u8(code::ARRAY32);
        out.put_u32((body.len() + 4) as u32);
        out.put_u32(items.len() as u32);
    }
    out.put_slice(&body);
}

pub(crate) fn take<'a>(buf: &mut &'a [u8], n: usize, what: &'static str) -> Result<&'a [u8], CodecError> {
    if buf.len() < n {
        return Err(CodecError::Truncated(what));
    }
    let (a, b) = buf.split_at(n);
    *buf = b;
    Ok(a)
}

pub(crate) fn u8_(buf: &mut &[u8]) -> Result<u8, CodecError> {
    Ok(take(buf, 1, "octet")?[0])
}
fn u16_(buf: &mut &[u8]) -> Result<u16, CodecError> {
    let b = take(buf, 2, "ushort")?;
    Ok(u16::from_be_bytes([b[0], b[1]]))
}
pub(crate) fn u32_(buf: &mut &[u8]) -> Result<u32, CodecError> {
    let b = take(buf, 4, "uint")?;
    Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}
fn u64_(buf: &mut &[u8]) -> Result<u64, CodecError> {
    let b = take(buf, 8, "ulong")?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Ok(u64::from_be_bytes(a))
}
fn arr<const N: usize>(buf: &mut &[u8]) -> Result<[u8; N], CodecError> {
    let b = take(buf, N, "fixed-width value")?;
    let mut a = [0u8; N];
    a.copy_from_slice(b);
    Ok(a)
}

fn utf8(b: &[u8], what: &'static str) -> Result<String, CodecError> {
    String::from_utf8(b.to_vec()).map_err(|_| CodecError::invalid(what, "not valid UTF-8"))
}

fn symbol(b: &[u8]) -> Result<String, CodecError> {
    if !b.is_ascii() {
        return Err(CodecError::invalid("symbol", "not ASCII"));
    }
    utf8(b, "symbol")
}

fn decode_value(buf: &mut &[u8], depth: usize) -> Result<Value, CodecError> {
    let c = u8_(buf)?;
    if c == code::DESCRIBED {
        if depth >= MAX_DEPTH {
            return Err(CodecError::TooDeep(MAX_DEPTH));
        }
        let d = match decode_value(buf, depth + 1)? {
            Value::Ulong(n) => Descriptor::Code(n),
            Value::Symbol(s) => Descriptor::Symbol(s),
            other => return Err(CodecError::invalid("descriptor", format!("{other:?}"))),
        };
        let v = decode_value(buf, depth + 1)?;
        return Ok(Value::Described(Box::new(d), Box::new(v)));
    }
    decode_with(buf, c, depth)
}

/// Size and count of a compound value, checked against what is left.
pub(crate) fn sized(buf: &mut &[u8], wide: bool) -> Result<(usize, usize), CodecError> {
    let (size, count) = if wide {
        let size = u32_(buf)? as usize;
        if size < 4 {
            return Err(CodecError::invalid("compound", "size too small"));
        }
        (size - 4, u32_(buf)? as usize)
    } else {
        let size = u8_(buf)? as usize;
        if size < 1 {
            return Err(CodecError::invalid("compound", "size too small"));
        }
        (size - 1, u8_(buf)? as usize)
    };
    if size > buf.len() {
        return Err(CodecError::Truncated("compound"));
    }
    // Every element takes at least one byte, except in arrays of zero-width
    // types; a count beyond the size is a lie either way.
    if count > size.max(1) * 8 {
        return Err(CodecError::invalid("compound", "count exceeds size"));
    }
    Ok((size, count))
}

fn decode_with(buf: &mut &[u8], c: u8, depth: usize) -> Result<Value, CodecError> {
    Ok(match c {
        code::NULL => Value::Null,
        code::TRUE => Value::Bool(true),
        code::FALSE => Value::Bool(false),
        code::BOOLEAN => match u8_(buf)? {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            x => return Err(CodecError::invalid("boolean", format!("{x}"))),
        },
        code::UBYTE => Value::Ubyte(u8_(buf)?),
        code::USHORT => Value::Ushort(u16_(buf)?),
        code::UINT => Value::Uint(u32_(buf)?),
        code::SMALLUINT => Value::Uint(u8_(buf)? as u32),
        code::UINT0 => Value::Uint(0),
        code::ULONG => Value::Ulong(u64_(buf)?),
        code::SMALLULONG => Value::Ulong(u8_(buf)? as u64),
        code::ULONG0 => Value::Ulong(0),
        code::BYTE => Value::Byte(u8_(buf)? as i8),
        code::SHORT => Value::Short(u16_(buf)? as i16),
        code::INT => Value::Int(u32_(buf)? as i32),
        code::SMALLINT => Value::Int(u8_(buf)? as i8 as i32),
        code::LONG => Value::Long(u64_(buf)? as i64),
        code::SMALLLONG => Value::Long(u8_(buf)? as i8 as i64),
        code::FLOAT => Value::Float(f32::from_bits(u32_(buf)?)),
        code::DOUBLE => Value::Double(f64::from_bits(u64_(buf)?)),
        code::DECIMAL32 => Value::Decimal32(arr(buf)?),
        code::DECIMAL64 => Value::Decimal64(arr(buf)?),
        code::DECIMAL128 => Value::Decimal128(arr(buf)?),
        code::CHAR => {
            let n = u32_(buf)?;
            Value::Char(char::from_u32(n).ok_or_else(|| CodecError::invalid("char", format!("{n:#x}")))?)
        }
        code::TIMESTAMP => Value::Timestamp(u64_(buf)? as i64),
        code::UUID => Value::Uuid(arr(buf)?),
        code::VBIN8 | code::STR8 | code::SYM8 | code::VBIN32 | code::STR32 | code::SYM32 => {
            let n = if c & 0xf0 == 0xa0 {
                u8_(buf)? as usize
            } else {
                u32_(buf)? as usize
            };
            let b = take(buf, n, "variable-width value")?;
            match c {
                code::VBIN8 | code::VBIN32 => Value::Binary(Bytes::copy_from_slice(b)),
                code::STR8 | code::STR32 => Value::String(utf8(b, "string")?),
                _ => Value::Symbol(symbol(b)?),
            }
        }
        code::LIST0 => Value::List(Vec::new()),
        code::LIST8 | code::LIST32 | code::MAP8 | code::MAP32 => {
            if depth >= MAX_DEPTH {
                return Err(CodecError::TooDeep(MAX_DEPTH));
            }
            let (size, count) = sized(buf, c == code::LIST32 || c == code::MAP32)?;
            let mut body = take(buf, size, "compound body")?;
            let mut items = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                items.push(decode_value(&mut body, depth + 1)?);
            }
            if !body.is_empty() {
                return Err(CodecError::invalid("compound", "size and count disagree"));
            }
            if c == code::MAP8 || c == code::MAP32 {
                if count % 2 != 0 {
                    return Err(CodecError::invalid("map", "odd number of elements"));
                }
                let mut pairs = Vec::with_capacity(count / 2);
                let mut it = items.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    pairs.push((k, v));
                }
                Value::Map(pairs)
            } else {
                Value::List(items)
            }
        }
        code::ARRAY8 | code::ARRAY32 => {
            if depth >= MAX_DEPTH {
                return Err(CodecError::TooDeep(MAX_DEPTH));
            }
            let (size, count) = sized(buf, c == code::ARRAY32)?;
            let mut body = take(buf, size, "array body")?;
            let mut ctor = u8_(&mut body)?;
            let mut descriptor = None;
            if ctor == code::DESCRIBED {
                descriptor = Some(match decode_value(&mut body, depth + 1)? {
                    Value::Ulong(n) => Descriptor::Code(n),
                    Value::Symbol(s) => Descriptor::Symbol(s),
                    other => return Err(CodecError::invalid("descriptor", format!("{other:?}"))),
                });
                ctor = u8_(&mut body)?;
            }
            if ctor == code::DESCRIBED {
                return Err(CodecError::invalid("array", "nested descriptor"));
            }
            let mut items = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                let v = decode_with(&mut body, ctor, depth + 1)?;
                items.push(match &descriptor {
                    Some(d) => Value::Described(Box::new(d.clone()), Box::new(v)),
                    None => v,
                });
            }
            if !body.is_empty() {
                return Err(CodecError::invalid("array", "size and count disagree"));
            }
            Value::Array(items)
        }
        other => return Err(CodecError::UnknownFormat(other)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(v: Value) -> Bytes {
        let b = v.to_bytes();
        let mut s = &b[..];
        assert_eq!(Value::decode(&mut s).unwrap(), v);
        assert!(s.is_empty());
        b
    }

    #[test]
    fn smallest_encodings() {
        assert_eq!(&roundtrip(Value::Uint(0))[..], &[0x43]);
        assert_eq!(&roundtrip(Value::Uint(7))[..], &[0x52, 7]);
        assert_eq!(&roundtrip(Value::Uint(256))[..], &[0x70, 0, 0, 1, 0]);
        assert_eq!(&roundtrip(Value::Ulong(0x10))[..], &[0x53, 0x10]);
        assert_eq!(&roundtrip(Value::Bool(true))[..], &[0x41]);
        assert_eq!(&roundtrip(Value::Int(-1))[..], &[0x54, 0xff]);
        assert_eq!(&roundtrip(Value::List(vec![]))[..], &[0x45]);
        assert_eq!(&roundtrip(Value::symbol("PLAIN"))[..], b"\xa3\x05PLAIN");
    }

    #[test]
    fn every_type_roundtrips() {
        let all = vec![
            Value::Null,
            Value::Ubyte(1),
            Value::Ushort(2),
            Value::Ulong(u64::MAX),
            Value::Byte(-3),
            Value::Short(-4),
            Value::Int(1 << 20),
            Value::Long(-(1 << 40)),
            Value::Float(1.5),
            Value::Double(-2.25),
            Value::Decimal32([1; 4]),
            Value::Decimal64([2; 8]),
            Value::Decimal128([3; 16]),
            Value::Char('é'),
            Value::Timestamp(1_700_000_000_000),
            Value::Uuid([9; 16]),
            Value::Binary(Bytes::from(vec![5u8; 300])),
            Value::String("x".repeat(300)),
            Value::Map(vec![(Value::symbol("k"), Value::Uint(1))]),
            Value::Array(vec![Value::symbol("a"), Value::symbol("bc")]),
            Value::Array(vec![Value::Uint(1), Value::Uint(1000)]),
            Value::Array(vec![Value::Bool(true), Value::Bool(false)]),
            Value::Array(vec![
                Value::described(0x24, Value::List(vec![])),
                Value::described(0x24, Value::List(vec![])),
            ]),
            Value::described(0x10, Value::List(vec![Value::string("c"), Value::Null])),
            Value::Described(Box::new(Descriptor::Symbol("x:y".into())), Box::new(Value::Null)),
        ];
        roundtrip(Value::List(all.clone()));
        for v in all {
            roundtrip(v);
        }
    }

    #[test]
    fn truncation_is_an_error_everywhere() {
        let b = Value::List(vec![
            Value::string("hello"),
            Value::Map(vec![(Value::Uint(1), Value::Long(1 << 40))]),
        ])
        .to_bytes();
        for cut in 0..b.len() {
            let mut s = &b[..cut];
            assert!(Value::decode(&mut s).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn lies_and_bombs_are_refused() {
        // A list32 claiming 4 billion elements in 8 bytes.
        let mut s: &[u8] = &[0xd0, 0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0x40, 0x40, 0x40, 0x40];
        assert!(Value::decode(&mut s).is_err());
        // An array of 4 billion nulls (zero-width elements).
        let mut s: &[u8] = &[0xf0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x40];
        assert!(Value::decode(&mut s).is_err());
        // Deep nesting.
        let mut deep = vec![];
        for _ in 0..100 {
            deep.extend_from_slice(&[0x00, 0x53, 0x01]);
        }
        deep.push(0x40);
        let mut s = &deep[..];
        assert_eq!(Value::decode(&mut s), Err(CodecError::TooDeep(MAX_DEPTH)));
        let mut s: &[u8] = &[0xa3, 2, 0xc3, 0xa9];
        assert!(Value::decode(&mut s).is_err(), "non-ASCII symbol");
        let mut s: &[u8] = &[0xff];
        assert_eq!(Value::decode(&mut s), Err(CodecError::UnknownFormat(0xff)));
    }
}
