//! AMQP Filter Expressions (OASIS, working draft 09, section 4): the
//! `properties` and `application-properties` filters a receiver puts in
//! its source, and whether a message matches them, as RabbitMQ 4.1
//! evaluates them on streams.
//!
//! A filter is a map of at most [`MAX_FIELDS`] entries; a message matches
//! when every entry does. A properties filter names properties-section
//! fields by their spec names (`subject`, `group-sequence`, ...) with
//! values of the field's own type; an application-properties filter names
//! keys (utf8) with values of any simple type, and the key must be in the
//! message. A value matches the message's when they are equal (numbers
//! across types, 1 == 1.0; strings, symbols and binaries by their bytes),
//! or by a string form: `&p:x` for a prefix, `&s:x` for a suffix, `&&...`
//! for a value that starts with `&`. A null value in an
//! application-properties filter matches any value of a present key.
//! A filter that breaks these rules is not a filter ([`None`]): the
//! receiver's attach leaves it out, which tells the client.

use crate::messaging::{APPLICATION_PROPERTIES, HEADER, PROPERTIES};
use crate::sql_filter::{self, Expr, Fields, SQL_FILTER};
use crate::value::{Descriptor, Value};

/// Entries a filter may have (RabbitMQ's limit).
pub const MAX_FIELDS: usize = 16;

/// The descriptor of the properties filter: its name and code.
pub const PROPERTIES_FILTER: (&str, u64) = ("amqp:properties-filter", 0x173);
/// The descriptor of the application-properties filter.
pub const APPLICATION_PROPERTIES_FILTER: (&str, u64) = ("amqp:application-properties-filter", 0x174);

/// The properties section's fields, in their order in its list.
const FIELDS: [&str; 13] = [
    "message-id",
    "user-id",
    "to",
    "subject",
    "reply-to",
    "correlation-id",
    "content-type",
    "content-encoding",
    "absolute-expiry-time",
    "creation-time",
    "group-id",
    "group-sequence",
    "reply-to-group-id",
];

/// How one entry compares with the message's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Pattern {
    /// A null: any value of a present key.
    Any,
    Prefix(Vec<u8>),
    Suffix(Vec<u8>),
    Equals(Value),
}

/// A receiver's filters: every entry of each must match.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MessageFilter {
    /// By position in the properties list.
    pub properties: Vec<(usize, Pattern)>,
    pub application_properties: Vec<(String, Pattern)>,
    /// A SQL filter expression (RabbitMQ 4.2), which must be true.
    pub sql: Option<Expr>,
}

impl MessageFilter {
    pub fn is_empty(&self) -> bool {
        self.properties.is_empty() && self.application_properties.is_empty() && self.sql.is_none()
    }

    /// Does the encoded message (its sections) match? A message whose
    /// sections do not decode matches nothing.
    pub fn matches(&self, mut message: &[u8]) -> bool {
        let mut properties: Option<Vec<Value>> = None;
        let mut app: Option<Vec<(Value, Value)>> = None;
        let mut priority = None;
        let wanted = |c| c == PROPERTIES || c == APPLICATION_PROPERTIES || c == HEADER;
        while !message.is_empty() {
            // Stop at the body: it is never looked at (and may be large).
            let code = section_code(message);
            if code.is_some_and(|c| c > APPLICATION_PROPERTIES) {
                break;
            }
            let Ok(v) = Value::decode(&mut message) else {
                return false;
            };
            let Some((code, inner)) = v.as_described() else {
                return false;
            };
            if !wanted(code) {
                continue;
            }
            match (code, inner) {
                (PROPERTIES, Value::List(l)) => properties = Some(l.clone()),
                (APPLICATION_PROPERTIES, Value::Map(m)) => app = Some(m.clone()),
                (HEADER, Value::List(h)) => {
                    if let Some(Value::Ubyte(p)) = h.get(1) {
                        priority = Some(*p);
                    }
                }
                _ => {}
            }
        }
        let props = properties.unwrap_or_default();
        let fields_match = self.properties.iter().all(|(i, p)| match props.get(*i) {
            None | Some(Value::Null) => false,
            Some(v) => p.matches(v),
        });
        let app = app.unwrap_or_default();
        let app_match = self.application_properties.iter().all(|(k, p)| {
            app.iter()
                .find(|(key, _)| matches!(key, Value::String(s) if s == k))
                .is_some_and(|(_, v)| p.matches(v))
        });
        fields_match
            && app_match
            && self.sql.as_ref().is_none_or(|e| {
                e.matches(&Fields {
                    priority,
                    properties: &props,
                    application: &app,
                    now_ms: now_ms(),
                })
            })
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A SQL filter's expression, or None if it is not a valid one (its
/// value must be a string that parses).
pub fn sql(v: &Value) -> Option<Expr> {
    match v {
        Value::String(s) => sql_filter::parse(s).ok(),
        _ => None,
    }
}

/// The descriptor code of the section that starts `b`, when it has a
/// small ulong one (as sections do).
fn section_code(b: &[u8]) -> Option<u64> {
    match b {
        [0x00, 0x53, c, ..] => Some(*c as u64),
        [0x00, 0x80, rest @ ..] if rest.len() >= 8 => Some(u64::from_be_bytes(rest[..8].try_into().ok()?)),
        _ => None,
    }
}

impl Pattern {
    /// A filter entry's value: None when it is not one (an `&` form this
    /// spec does not define).
    fn of(v: &Value) -> Option<Pattern> {
        if let Value::String(s) | Value::Symbol(s) = v {
            if let Some(rest) = s.strip_prefix('&') {
                return if let Some(p) = rest.strip_prefix("p:") {
                    Some(Pattern::Prefix(p.as_bytes().to_vec()))
                } else if let Some(p) = rest.strip_prefix("s:") {
                    Some(Pattern::Suffix(p.as_bytes().to_vec()))
                } else if rest.starts_with('&') {
                    let literal = Value::String(rest.to_string());
                    Some(Pattern::Equals(if matches!(v, Value::Symbol(_)) {
                        Value::Symbol(rest.to_string())
                    } else {
                        literal
                    }))
                } else {
                    None
                };
            }
        }
        match v {
            Value::Null => Some(Pattern::Any),
            Value::List(_) | Value::Map(_) | Value::Array(_) | Value::Described(..) => None,
            v => Some(Pattern::Equals(v.clone())),
        }
    }

    fn matches(&self, v: &Value) -> bool {
        match self {
            Pattern::Any => true,
            Pattern::Prefix(p) => bytes_of(v).is_some_and(|b| b.starts_with(p)),
            Pattern::Suffix(s) => bytes_of(v).is_some_and(|b| b.ends_with(s)),
            Pattern::Equals(want) => equal(want, v),
        }
    }
}

/// A string's, symbol's or binary's bytes.
fn bytes_of(v: &Value) -> Option<&[u8]> {
    match v {
        Value::String(s) | Value::Symbol(s) => Some(s.as_bytes()),
        Value::Binary(b) => Some(b),
        _ => None,
    }
}

/// A number as one that compares across types.
fn number(v: &Value) -> Option<f64> {
    Some(match v {
        Value::Ubyte(n) => *n as f64,
        Value::Ushort(n) => *n as f64,
        Value::Uint(n) => *n as f64,
        Value::Ulong(n) => *n as f64,
        Value::Byte(n) => *n as f64,
        Value::Short(n) => *n as f64,
        Value::Int(n) => *n as f64,
        Value::Long(n) => *n as f64,
        Value::Float(n) => *n as f64,
        Value::Double(n) => *n,
        _ => return None,
    })
}

fn equal(a: &Value, b: &Value) -> bool {
    if let (Some(x), Some(y)) = (bytes_of(a), bytes_of(b)) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (number(a), number(b)) {
        return x == y;
    }
    a == b
}

/// The filter's name: a symbol descriptor's, or the name of a known code.
pub fn descriptor_name(d: &Descriptor) -> Option<&str> {
    match d {
        Descriptor::Symbol(s) => Some(s),
        Descriptor::Code(c) if *c == PROPERTIES_FILTER.1 => Some(PROPERTIES_FILTER.0),
        Descriptor::Code(c) if *c == APPLICATION_PROPERTIES_FILTER.1 => Some(APPLICATION_PROPERTIES_FILTER.0),
        Descriptor::Code(c) if *c == SQL_FILTER.1 => Some(SQL_FILTER.0),
        Descriptor::Code(_) => None,
    }
}

/// A properties filter's entries (by field position), or None if it is
/// not a valid one: a non-empty map of at most [`MAX_FIELDS`] symbol
/// keys naming properties fields, each value of that field's type (or an
/// `&` form where the field is a string).
pub fn properties_filter(v: &Value) -> Option<Vec<(usize, Pattern)>> {
    let Value::Map(m) = v else { return None };
    if m.is_empty() || m.len() > MAX_FIELDS {
        return None;
    }
    m.iter()
        .map(|(k, v)| {
            let Value::Symbol(name) = k else { return None };
            let i = FIELDS.iter().position(|f| f == name)?;
            let typed = matches!(
                (FIELDS[i], v),
                (
                    "to" | "subject" | "reply-to" | "group-id" | "reply-to-group-id",
                    Value::String(_)
                ) | ("content-type" | "content-encoding", Value::Symbol(_))
                    | ("absolute-expiry-time" | "creation-time", Value::Timestamp(_))
                    | ("group-sequence", Value::Uint(_))
                    | ("user-id", Value::Binary(_))
                    | (
                        "message-id" | "correlation-id",
                        Value::Ulong(_) | Value::Uuid(_) | Value::Binary(_) | Value::String(_)
                    )
            );
            if !typed {
                return None;
            }
            Some((i, Pattern::of(v)?))
        })
        .collect()
}

/// An application-properties filter's entries, or None if it is not a
/// valid one: a non-empty map of at most [`MAX_FIELDS`] utf8 keys with
/// values of simple types.
pub fn application_properties_filter(v: &Value) -> Option<Vec<(String, Pattern)>> {
    let Value::Map(m) = v else { return None };
    if m.is_empty() || m.len() > MAX_FIELDS {
        return None;
    }
    m.iter()
        .map(|(k, v)| {
            let Value::String(key) = k else { return None };
            Some((key.clone(), Pattern::of(v)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    fn message(properties: Vec<Value>, app: Vec<(Value, Value)>) -> Vec<u8> {
        let mut out = BytesMut::new();
        Value::described(PROPERTIES, Value::List(properties)).encode(&mut out);
        Value::described(APPLICATION_PROPERTIES, Value::Map(app)).encode(&mut out);
        Value::described(0x75, Value::Binary(bytes::Bytes::from_static(b"body"))).encode(&mut out);
        out.to_vec()
    }

    fn subject(s: &str) -> Vec<Value> {
        let mut p = vec![Value::Null; 4];
        p[3] = Value::String(s.into());
        p
    }

    #[test]
    fn properties_match_exactly_or_by_prefix_and_suffix() {
        let m = message(subject("order.created"), vec![]);
        let filter = |v: Value| MessageFilter {
            properties: properties_filter(&Value::Map(vec![(Value::symbol("subject"), v)])).unwrap(),
            ..Default::default()
        };
        assert!(filter(Value::string("order.created")).matches(&m));
        assert!(!filter(Value::string("order")).matches(&m));
        assert!(filter(Value::string("&p:order.")).matches(&m));
        assert!(filter(Value::string("&s:.created")).matches(&m));
        assert!(!filter(Value::string("&s:.deleted")).matches(&m));
        // A field the message does not have matches nothing.
        let other = MessageFilter {
            properties: properties_filter(&Value::Map(vec![(Value::symbol("to"), Value::string("x"))]))
                .unwrap(),
            ..Default::default()
        };
        assert!(!other.matches(&m));
    }

    #[test]
    fn application_properties_need_the_key_and_compare_numbers_across_types() {
        let m = message(
            vec![],
            vec![
                (Value::string("n"), Value::Long(1)),
                (Value::string("colour"), Value::string("&red")),
            ],
        );
        let filter = |pairs: Vec<(Value, Value)>| MessageFilter {
            application_properties: application_properties_filter(&Value::Map(pairs)).unwrap(),
            ..Default::default()
        };
        assert!(filter(vec![(Value::string("n"), Value::Double(1.0))]).matches(&m));
        assert!(!filter(vec![(Value::string("n"), Value::Int(2))]).matches(&m));
        assert!(filter(vec![(Value::string("n"), Value::Null)]).matches(&m));
        assert!(!filter(vec![(Value::string("absent"), Value::Null)]).matches(&m));
        assert!(filter(vec![(Value::string("colour"), Value::string("&&red"))]).matches(&m));
        // Every entry must match.
        assert!(!filter(vec![
            (Value::string("n"), Value::Long(1)),
            (Value::string("colour"), Value::string("blue")),
        ])
        .matches(&m));
    }

    #[test]
    fn malformed_filters_are_not_filters() {
        let one = |k: Value, v: Value| Value::Map(vec![(k, v)]);
        // A field of the wrong type, an unknown field, a string key.
        assert!(properties_filter(&one(Value::symbol("subject"), Value::Long(1))).is_none());
        assert!(properties_filter(&one(Value::symbol("colour"), Value::string("x"))).is_none());
        assert!(properties_filter(&one(Value::string("subject"), Value::string("x"))).is_none());
        assert!(properties_filter(&one(Value::symbol("subject"), Value::Null)).is_none());
        // An & form not in the spec; an empty or too large map; a symbol key.
        assert!(application_properties_filter(&one(Value::string("k"), Value::string("&x:y"))).is_none());
        assert!(application_properties_filter(&Value::Map(vec![])).is_none());
        let many = (0..17)
            .map(|i| (Value::String(format!("k{i}")), Value::Long(i)))
            .collect();
        assert!(application_properties_filter(&Value::Map(many)).is_none());
        assert!(application_properties_filter(&one(Value::symbol("k"), Value::Long(1))).is_none());
        // A message that does not decode matches nothing.
        let f = MessageFilter {
            application_properties: vec![("k".into(), Pattern::Any)],
            ..Default::default()
        };
        assert!(!f.matches(&[0x00, 0x53, 0x74, 0xff]));
    }
}
