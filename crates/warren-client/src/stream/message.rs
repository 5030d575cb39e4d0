//! Messages as streams store them: AMQP 1.0 encoded (application
//! properties, then one data section holding the body), as RabbitMQ's
//! stream clients write them, so each reads the others' messages and
//! AMQP 0-9-1 and 1.0 consumers of the stream read them too.

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

    /// Under this publishing id.
    pub fn publishing_id(mut self, id: u64) -> Message {
        self.publishing_id = Some(id);
        self
    }

    /// Append the message's AMQP 1.0 encoding.
    pub(crate) fn encode(&self, out: &mut BytesMut) {
        if !self.application_properties.is_empty() {
            let map = self
                .application_properties
                .iter()
                .map(|(k, v)| (Value::String(k.clone()), Value::String(v.clone())))
                .collect();
            Value::described(APPLICATION_PROPERTIES, Value::Map(map)).encode(out);
        }
        Value::described(DATA, Value::Binary(self.body.clone())).encode(out);
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
        assert!(
            decode(&[0x00, 0x53]).is_err(),
            "a cut section is an error, not a panic"
        );
    }
}
