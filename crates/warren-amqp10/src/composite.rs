//! Composite types (spec 1.4: a described list of fields, trailing nulls
//! omissible): reading fields by position with their defaults, and
//! writing them with trailing nulls trimmed.

use crate::error::CodecError;
use crate::value::Value;

/// The fields of a composite value, read by position.
pub struct Fields<'a> {
    pub what: &'static str,
    items: &'a [Value],
}

impl<'a> Fields<'a> {
    /// The fields of `v`, which must be a described list with `code`.
    pub fn of(v: &'a Value, code: u64, what: &'static str) -> Result<Fields<'a>, CodecError> {
        match v.as_described() {
            Some((c, Value::List(items))) if c == code => Ok(Fields { what, items }),
            _ => Err(CodecError::invalid(
                what,
                "not a described list with the expected descriptor",
            )),
        }
    }

    /// Fields already taken out of their list (see
    /// [`crate::compound::list_into`]).
    pub fn new(items: &'a [Value], what: &'static str) -> Fields<'a> {
        Fields { what, items }
    }

    pub fn get(&self, i: usize) -> &'a Value {
        self.items.get(i).unwrap_or(&Value::Null)
    }

    fn bad(&self, i: usize, want: &str) -> CodecError {
        CodecError::invalid(self.what, format!("field {i} is not {want}: {:?}", self.get(i)))
    }

    pub fn opt_uint(&self, i: usize) -> Result<Option<u32>, CodecError> {
        match self.get(i) {
            Value::Null => Ok(None),
            Value::Uint(v) => Ok(Some(*v)),
            _ => Err(self.bad(i, "a uint")),
        }
    }

    pub fn uint(&self, i: usize) -> Result<u32, CodecError> {
        self.opt_uint(i)?.ok_or_else(|| self.bad(i, "a mandatory uint"))
    }

    pub fn opt_ulong(&self, i: usize) -> Result<Option<u64>, CodecError> {
        match self.get(i) {
            Value::Null => Ok(None),
            Value::Ulong(v) => Ok(Some(*v)),
            _ => Err(self.bad(i, "a ulong")),
        }
    }

    pub fn opt_ushort(&self, i: usize) -> Result<Option<u16>, CodecError> {
        match self.get(i) {
            Value::Null => Ok(None),
            Value::Ushort(v) => Ok(Some(*v)),
            _ => Err(self.bad(i, "a ushort")),
        }
    }

    pub fn opt_ubyte(&self, i: usize) -> Result<Option<u8>, CodecError> {
        match self.get(i) {
            Value::Null => Ok(None),
            Value::Ubyte(v) => Ok(Some(*v)),
            _ => Err(self.bad(i, "a ubyte")),
        }
    }

    pub fn opt_bool(&self, i: usize) -> Result<Option<bool>, CodecError> {
        match self.get(i) {
            Value::Null => Ok(None),
            Value::Bool(v) => Ok(Some(*v)),
            _ => Err(self.bad(i, "a boolean")),
        }
    }

    pub fn bool(&self, i: usize, default: bool) -> Result<bool, CodecError> {
        Ok(self.opt_bool(i)?.unwrap_or(default))
    }

    pub fn opt_string(&self, i: usize) -> Result<Option<String>, CodecError> {
        match self.get(i) {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s.clone())),
            _ => Err(self.bad(i, "a string")),
        }
    }

    pub fn opt_symbol(&self, i: usize) -> Result<Option<String>, CodecError> {
        match self.get(i) {
            Value::Null => Ok(None),
            Value::Symbol(s) => Ok(Some(s.clone())),
            _ => Err(self.bad(i, "a symbol")),
        }
    }

    /// A `multiple="true"` symbol field: one symbol or an array of them.
    pub fn symbols(&self, i: usize) -> Result<Vec<String>, CodecError> {
        match self.get(i) {
            Value::Null => Ok(Vec::new()),
            Value::Symbol(s) => Ok(vec![s.clone()]),
            Value::Array(a) => a
                .iter()
                .map(|v| match v {
                    Value::Symbol(s) => Ok(s.clone()),
                    _ => Err(self.bad(i, "an array of symbols")),
                })
                .collect(),
            _ => Err(self.bad(i, "symbols")),
        }
    }

    pub fn opt_binary(&self, i: usize) -> Result<Option<bytes::Bytes>, CodecError> {
        match self.get(i) {
            Value::Null => Ok(None),
            Value::Binary(b) => Ok(Some(b.clone())),
            _ => Err(self.bad(i, "binary")),
        }
    }

    /// Any value, kept as it is (sources, targets, states, maps).
    pub fn opt_value(&self, i: usize) -> Option<Value> {
        match self.get(i) {
            Value::Null => None,
            v => Some(v.clone()),
        }
    }
}

/// A described list of `fields` with trailing nulls dropped.
pub fn composite(code: u64, mut fields: Vec<Value>) -> Value {
    while fields.last().is_some_and(Value::is_null) {
        fields.pop();
    }
    Value::described(code, Value::List(fields))
}

pub fn opt<T>(v: Option<T>, f: impl FnOnce(T) -> Value) -> Value {
    v.map_or(Value::Null, f)
}

/// A `multiple="true"` symbol field (absent when empty).
pub fn symbols(v: &[String]) -> Value {
    if v.is_empty() {
        Value::Null
    } else {
        Value::Array(v.iter().map(|s| Value::Symbol(s.clone())).collect())
    }
}
