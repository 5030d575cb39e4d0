//! Lists and maps read where they lie: a described value's numeric
//! descriptor, a list's fields into the caller's slots, a map's pairs one
//! at a time. A message section read this way builds no value tree around
//! its fields (no boxes, no list or pair vectors), which is what a
//! delivery's header, annotations and properties cost on the hot path.
//! The same checks hold as in [`Value::decode`]: sizes and counts are
//! trusted only as far as the bytes present.

use crate::error::CodecError;
use crate::value::{code, sized, take, u32_, u8_, Value};

/// The descriptor of the described value at the front of `buf` when it is
/// a number (small or full ulong), taken off; None, with `buf` untouched,
/// for anything else (a symbolic descriptor, or no descriptor).
pub fn described_code(buf: &mut &[u8]) -> Option<u64> {
    let all: &[u8] = buf;
    match all {
        [code::DESCRIBED, code::SMALLULONG, n, rest @ ..] => {
            *buf = rest;
            Some(*n as u64)
        }
        [code::DESCRIBED, code::ULONG, rest @ ..] if rest.len() >= 8 => {
            let (n, rest) = rest.split_at(8);
            *buf = rest;
            Some(u64::from_be_bytes(n.try_into().expect("8 bytes")))
        }
        _ => None,
    }
}

/// The body and element count of the compound at the front of `buf` (a
/// list when `list`, else a map), taken off. Null reads as empty: a
/// section's map may be written as null.
fn compound<'a>(buf: &mut &'a [u8], list: bool, what: &'static str) -> Result<(&'a [u8], usize), CodecError> {
    let c = u8_(buf)?;
    let wide = match (c, list) {
        (code::NULL, _) | (code::LIST0, true) => return Ok((&[], 0)),
        (code::LIST8, true) | (code::MAP8, false) => false,
        (code::LIST32, true) | (code::MAP32, false) => true,
        _ => {
            return Err(CodecError::invalid(
                what,
                format!("not a {}", if list { "list" } else { "map" }),
            ))
        }
    };
    let (size, count) = sized(buf, wide)?;
    Ok((take(buf, size, "compound body")?, count))
}

/// Reads the list at the front of `buf` into `slots`, field `i` into
/// `slots[i]`: fields past the slots are read and dropped, slots past the
/// fields are left as they are (so a caller that starts them at
/// [`Value::Null`] sees omitted trailing fields as null, as spec 1.4
/// says). Returns the number of fields.
///
/// ```
/// use warren_amqp10::compound::list_into;
/// use warren_amqp10::Value;
///
/// let mut bytes = bytes::BytesMut::new();
/// Value::List(vec![Value::Bool(true), Value::Null, Value::Uint(7)]).encode(&mut bytes);
/// let mut slots: [Value; 2] = [Value::Null, Value::Null];
/// let n = list_into(&mut &bytes[..], &mut slots).unwrap();
/// assert_eq!((n, &slots[0], &slots[1]), (3, &Value::Bool(true), &Value::Null));
/// ```
pub fn list_into(buf: &mut &[u8], slots: &mut [Value]) -> Result<usize, CodecError> {
    let (mut body, count) = compound(buf, true, "list")?;
    for i in 0..count {
        let v = Value::decode(&mut body)?;
        if let Some(slot) = slots.get_mut(i) {
            *slot = v;
        }
    }
    if !body.is_empty() {
        return Err(CodecError::invalid("compound", "size and count disagree"));
    }
    Ok(count)
}

/// A map key: text (a string or symbol, borrowed from the bytes) or any
/// other value.
#[derive(Debug, PartialEq)]
pub enum Key<'a> {
    /// A string or symbol key, as it lies in the bytes.
    Text(&'a str),
    /// A key of any other type (annotations may be keyed by ulong).
    Other(Value),
}

/// Calls `each` with every pair of the map at the front of `buf`, in
/// order, taking the map off. String and symbol keys are handed over as
/// text, unchecked for symbols' ASCII (a key's spelling is the caller's
/// to judge).
///
/// ```
/// use warren_amqp10::compound::{map_pairs, Key};
/// use warren_amqp10::Value;
///
/// let mut bytes = bytes::BytesMut::new();
/// Value::Map(vec![(Value::symbol("x-k"), Value::Long(1))]).encode(&mut bytes);
/// let mut seen = Vec::new();
/// map_pairs(&mut &bytes[..], |k, v| {
///     if let Key::Text(k) = k {
///         seen.push((k.to_string(), v));
///     }
///     Ok(())
/// })
/// .unwrap();
/// assert_eq!(seen, [("x-k".to_string(), Value::Long(1))]);
/// ```
pub fn map_pairs<'a>(
    buf: &mut &'a [u8],
    mut each: impl FnMut(Key<'a>, Value) -> Result<(), CodecError>,
) -> Result<(), CodecError> {
    let (mut body, count) = compound(buf, false, "map")?;
    if count % 2 != 0 {
        return Err(CodecError::invalid("map", "odd number of elements"));
    }
    for _ in 0..count / 2 {
        let key = key(&mut body)?;
        let value = Value::decode(&mut body)?;
        each(key, value)?;
    }
    if !body.is_empty() {
        return Err(CodecError::invalid("compound", "size and count disagree"));
    }
    Ok(())
}

fn key<'a>(buf: &mut &'a [u8]) -> Result<Key<'a>, CodecError> {
    let (what, wide) = match buf.first() {
        Some(&code::STR8) => ("string", false),
        Some(&code::STR32) => ("string", true),
        Some(&code::SYM8) => ("symbol", false),
        Some(&code::SYM32) => ("symbol", true),
        _ => return Ok(Key::Other(Value::decode(buf)?)),
    };
    *buf = &buf[1..];
    let n = if wide {
        u32_(buf)? as usize
    } else {
        u8_(buf)? as usize
    };
    let b = take(buf, n, "variable-width value")?;
    std::str::from_utf8(b)
        .map(Key::Text)
        .map_err(|_| CodecError::invalid(what, "not valid UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    fn bytes(v: &Value) -> BytesMut {
        let mut out = BytesMut::new();
        v.encode(&mut out);
        out
    }

    #[test]
    fn a_described_list_reads_as_the_general_decoder_reads_it() {
        let fields = vec![
            Value::Bool(true),
            Value::Null,
            Value::string("s"),
            Value::Uint(300),
        ];
        let all = bytes(&Value::described(0x70, Value::List(fields.clone())));
        let mut buf = &all[..];
        assert_eq!(described_code(&mut buf), Some(0x70));
        let mut slots: [Value; 5] = std::array::from_fn(|_| Value::Null);
        assert_eq!(list_into(&mut buf, &mut slots).unwrap(), 4);
        assert!(buf.is_empty());
        assert_eq!(&slots[..4], &fields[..]);
        assert_eq!(slots[4], Value::Null);
    }

    #[test]
    fn a_map_hands_over_text_keys_and_other_keys() {
        let wide = "k".repeat(300);
        let map = Value::Map(vec![
            (Value::symbol("x-a"), Value::string("v")),
            (Value::string(&wide), Value::Null),
            (Value::Ulong(9), Value::Bool(false)),
        ]);
        let all = bytes(&map);
        let mut got = Vec::new();
        map_pairs(&mut &all[..], |k, v| {
            got.push((format!("{k:?}"), v));
            Ok(())
        })
        .unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], ("Text(\"x-a\")".into(), Value::string("v")));
        assert!(got[1].0.contains(&wide));
        assert_eq!(got[2], ("Other(Ulong(9))".into(), Value::Bool(false)));
        // Null is an empty map; a list is not a map.
        map_pairs(&mut &[code::NULL][..], |_, _| panic!("no pairs")).unwrap();
        assert!(map_pairs(&mut &bytes(&Value::List(vec![]))[..], |_, _| Ok(())).is_err());
    }

    #[test]
    fn lies_in_sizes_and_counts_are_errors() {
        // list8 claiming more bytes than there are.
        assert!(list_into(&mut &[code::LIST8, 10, 1, code::NULL][..], &mut []).is_err());
        // Count and size disagree.
        assert!(list_into(&mut &[code::LIST8, 3, 1, code::NULL, code::NULL][..], &mut []).is_err());
        // An odd map.
        assert!(map_pairs(&mut &[code::MAP8, 2, 1, code::NULL][..], |_, _| Ok(())).is_err());
        // A key cut short, and one not UTF-8.
        assert!(map_pairs(&mut &[code::MAP8, 4, 2, code::SYM8, 5, b'a'][..], |_, _| Ok(())).is_err());
        assert!(map_pairs(
            &mut &[code::MAP8, 5, 2, code::STR8, 1, 0xff, code::NULL][..],
            |_, _| Ok(())
        )
        .is_err());
        // Not described by a number.
        let mut buf = &[code::DESCRIBED, code::SYM8, 1, b'x'][..];
        assert_eq!(described_code(&mut buf), None);
        assert_eq!(buf.len(), 4);
    }
}
