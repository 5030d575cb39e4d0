//! Messages as streams store them: AMQP 1.0 encoded (application
//! properties, then one data section holding the body), as RabbitMQ's
//! stream clients write them, so each reads the others' messages and
//! AMQP 0-9-1 and 1.0 consumers of the stream read them too.

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
use warren_amqp10::messaging::{sections, AMQP_VALUE, APPLICATION_PROPERTIES, DATA};
use warren_amqp10::value::Value;

use super::error::Error;

/// A message to publish.
///
/// ```
/// use warren_client::stream::Message;
///
/// let m = Message::new("hello").application_property("region", "eu");
/// assert_eq!(&m.body[..], b"hello");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Message {
    /// The body.
    pub body: Bytes,
    /// Application properties (string values).
    pub application_properties: Vec<(String, String)>,
    /// The publishing id to send it under; a producer numbers messages
    /// without one itself. A named producer's broker drops an id it has
    /// already stored (deduplication).
    pub publishing_id: Option<u64>,
}

impl Message {
    /// A message with this body.
    pub fn new(body: impl Into<Bytes>) -> Message {
        Message {
            body: body.into(),
            ..Default::default()
        }
    }

    /// With an application property.
    pub fn application_property(mut self, name: impl Into<String>, value: impl Into<String>) -> Message {
        self.application_properties.push((name.into(), value.into()));
        self
    }

    /// The value of application property `name`, if it has one.
    pub fn application_property_value(&self, name: &str) -> Option<&str> {
        self.application_properties
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Under this publishing id.
    pub fn publishing_id(mut self, id: u64) -> Message {
        self.publishing_id = Some(id);
        self
    }

    /// Append the message's AMQP 1.0 encoding.
    #[inline]
    pub(crate) fn encode(&self, out: &mut BytesMut) {
        if !self.application_properties.is_empty() {
            let map = self
                .application_properties
                .iter()
                .map(|(k, v)| (Value::String(k.clone()), Value::String(v.clone())))
                .collect();
            Value::described(APPLICATION_PROPERTIES, Value::Map(map)).encode(out);
        }
        // The data section written directly (described, small ulong code
        // 0x75, then vbin8 or vbin32): no value tree per message.
        out.extend_from_slice(&[0x00, 0x53, DATA as u8]);
        match u8::try_from(self.body.len()) {
            Ok(n) => out.extend_from_slice(&[0xa0, n]),
            Err(_) => {
                out.extend_from_slice(&[0xb0]);
                out.extend_from_slice(&(self.body.len() as u32).to_be_bytes());
            }
        }
        out.extend_from_slice(&self.body);
    }
}

/// A stored message's sections, read from its AMQP 1.0 encoding.
#[derive(Debug, Clone, Default)]
pub(crate) struct Decoded {
    pub(crate) body: Bytes,
    pub(crate) application_properties: Vec<(String, String)>,
}

/// Read a stored message: its data sections' bytes as the body (or an
/// amqp-value's binary or string), its application properties as text.
pub(crate) fn decode(raw: &[u8]) -> Result<Decoded, Error> {
    let mut d = Decoded::default();
    let mut body = BytesMut::new();
    let sections = sections(raw).map_err(|e| Error::Protocol(format!("a stored message: {e}")))?;
    for (code, v) in sections {
        match (code, v) {
            (DATA, Value::Binary(b)) => body.extend_from_slice(&b),
            (AMQP_VALUE, Value::Binary(b)) => body.extend_from_slice(&b),
            (AMQP_VALUE, Value::String(s)) => body.extend_from_slice(s.as_bytes()),
            (APPLICATION_PROPERTIES, Value::Map(m)) => {
                d.application_properties = m
                    .into_iter()
                    .filter_map(|(k, v)| Some((text(&k)?, text(&v)?)))
                    .collect();
            }
            _ => {}
        }
    }
    d.body = body.freeze();
    Ok(d)
}

/// The body of a stored message. A message that is one data section (as
/// stream clients write them) is sliced, not copied or decoded.
pub(crate) fn body(raw: &Bytes) -> Result<Bytes, Error> {
    match one_data_section(raw) {
        Some(head) => Ok(raw.slice(head..)),
        None => Ok(decode(raw)?.body),
    }
}

/// [`body`] of a lent message: borrowed when it is one data section.
pub(crate) fn body_of(raw: &[u8]) -> Result<Cow<'_, [u8]>, Error> {
    match one_data_section(raw) {
        Some(head) => Ok(Cow::Borrowed(&raw[head..])),
        None => Ok(Cow::Owned(decode(raw)?.body.to_vec())),
    }
}

/// Where the body begins when `raw` is one data section and nothing else.
fn one_data_section(raw: &[u8]) -> Option<usize> {
    let [0x00, 0x53, 0x75, rest @ ..] = raw else {
        return None;
    };
    let (len, head) = match rest {
        [0xa0, n, ..] => (*n as usize, 5),
        [0xb0, a, b, c, d, ..] => (u32::from_be_bytes([*a, *b, *c, *d]) as usize, 8),
        _ => return None,
    };
    (raw.len() - head == len).then_some(head)
}

/// A simple value as text (strings, symbols, numbers, booleans).
fn text(v: &Value) -> Option<String> {
    Some(match v {
        Value::String(s) | Value::Symbol(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Ubyte(n) => n.to_string(),
        Value::Ushort(n) => n.to_string(),
        Value::Uint(n) => n.to_string(),
        Value::Ulong(n) => n.to_string(),
        Value::Byte(n) => n.to_string(),
        Value::Short(n) => n.to_string(),
        Value::Int(n) => n.to_string(),
        Value::Long(n) => n.to_string(),
        Value::Timestamp(n) => n.to_string(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reads_back_as_written() {
        let m = Message::new("body").application_property("k", "v");
        let mut out = BytesMut::new();
        m.encode(&mut out);
        let d = decode(&out).unwrap();
        assert_eq!(&d.body[..], b"body");
        assert_eq!(d.application_properties, vec![("k".to_string(), "v".to_string())]);
        // The data section as the codec writes it, short and long, and
        // its body sliced back out.
        for n in [0usize, 255, 256, 70_000] {
            let payload = Bytes::from(vec![7u8; n]);
            let mut direct = BytesMut::new();
            Message::new(payload.clone()).encode(&mut direct);
            let mut coded = BytesMut::new();
            Value::described(DATA, Value::Binary(payload.clone())).encode(&mut coded);
            assert_eq!(direct, coded, "{n} bytes");
            assert_eq!(body(&direct.freeze()).unwrap(), payload);
        }
        // With more than the data section, the sections are decoded.
        let mut both = BytesMut::new();
        Message::new("x").application_property("a", "b").encode(&mut both);
        assert_eq!(&body(&both.freeze()).unwrap()[..], b"x");
        assert!(body(&Bytes::from_static(&[0x00, 0x53, 0x75, 0xa0, 9, 1])).is_err());
        assert!(
            decode(&[0x00, 0x53]).is_err(),
            "a cut section is an error, not a panic"
        );
    }
}
