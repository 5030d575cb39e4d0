//! An AMQP 1.0 message (spec part 3.2) as the application builds and
//! reads it: header, message annotations, properties, application
//! properties and a body. Messages are durable unless said otherwise,
//! as the RabbitMQ AMQP 1.0 clients make them.

mod decode;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use warren_amqp10::composite::{composite, opt};
use warren_amqp10::messaging::{
    AMQP_VALUE, APPLICATION_PROPERTIES, DATA, HEADER, MESSAGE_ANNOTATIONS, PROPERTIES,
};
use warren_amqp10::Value;

/// A message id or correlation id: the four types AMQP 1.0 allows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MessageId {
    /// An unsigned number.
    Ulong(u64),
    /// A UUID's 16 bytes.
    Uuid([u8; 16]),
    /// Opaque bytes.
    Binary(Bytes),
    /// Text.
    String(String),
}

impl MessageId {
    fn to_value(&self) -> Value {
        match self {
            MessageId::Ulong(n) => Value::Ulong(*n),
            MessageId::Uuid(u) => Value::Uuid(*u),
            MessageId::Binary(b) => Value::Binary(b.clone()),
            MessageId::String(s) => Value::String(s.clone()),
        }
    }

    pub(crate) fn from_value(v: &Value) -> Option<MessageId> {
        match v {
            Value::Ulong(n) => Some(MessageId::Ulong(*n)),
            Value::Uuid(u) => Some(MessageId::Uuid(*u)),
            Value::Binary(b) => Some(MessageId::Binary(b.clone())),
            Value::String(s) => Some(MessageId::String(s.clone())),
            _ => None,
        }
    }
}

impl From<u64> for MessageId {
    fn from(n: u64) -> MessageId {
        MessageId::Ulong(n)
    }
}

impl From<&str> for MessageId {
    fn from(s: &str) -> MessageId {
        MessageId::String(s.to_string())
    }
}

impl From<String> for MessageId {
    fn from(s: String) -> MessageId {
        MessageId::String(s)
    }
}

/// The body: data (bytes, what RabbitMQ's clients send by default) or
/// one AMQP value.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// Bytes (one or more data sections, joined).
    Data(Bytes),
    /// One AMQP value (an amqp-value section).
    Value(Value),
}

impl Default for Body {
    fn default() -> Body {
        Body::Data(Bytes::new())
    }
}

/// The properties section (3.2.4).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Properties {
    /// The application's id of the message.
    pub message_id: Option<MessageId>,
    /// The user the broker authenticated (it checks it if set).
    pub user_id: Option<Bytes>,
    /// The address a message goes to when its publisher has no target.
    pub to: Option<String>,
    /// What the message is about (a routing key, an RPC's method ...).
    pub subject: Option<String>,
    /// Where answers go.
    pub reply_to: Option<String>,
    /// The id of the message this one answers.
    pub correlation_id: Option<MessageId>,
    /// The body's MIME type.
    pub content_type: Option<String>,
    /// The body's encoding (e.g. `gzip`).
    pub content_encoding: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub absolute_expiry_time: Option<i64>,
    /// Milliseconds since the Unix epoch.
    pub creation_time: Option<i64>,
    /// The group it belongs to.
    pub group_id: Option<String>,
    /// Its place in its group.
    pub group_sequence: Option<u32>,
    /// The group answers go to.
    pub reply_to_group_id: Option<String>,
}

/// A message.
///
/// ```
/// use warren_client::amqp::{Message, Value};
///
/// let m = Message::new("hello")
///     .message_id(42u64)
///     .subject("greeting")
///     .application_property("lang", Value::string("en"))
///     .priority(5);
/// assert_eq!(m.data(), Some(&b"hello"[..]));
/// assert!(m.durable);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Header: kept on disk by durable queues (default true).
    pub durable: bool,
    /// Its priority (queues with priorities deliver higher first).
    pub priority: Option<u8>,
    /// How long it may wait in a queue.
    pub ttl: Option<Duration>,
    /// Set by the broker: no one acquired it before.
    pub first_acquirer: bool,
    /// Times delivered and not accepted before (set by the broker).
    pub delivery_count: u32,
    /// Message annotations (symbol keys), e.g. `x-stream-filter-value`.
    pub annotations: Vec<(String, Value)>,
    /// Its properties section.
    pub properties: Properties,
    /// Application properties (string keys, simple values).
    pub application_properties: Vec<(String, Value)>,
    /// Its body.
    pub body: Body,
}

impl Default for Message {
    fn default() -> Message {
        Message {
            durable: true,
            priority: None,
            ttl: None,
            first_acquirer: false,
            delivery_count: 0,
            annotations: Vec::new(),
            properties: Properties::default(),
            application_properties: Vec::new(),
            body: Body::default(),
        }
    }
}

impl Message {
    /// A durable message whose body is `data`.
    pub fn new(data: impl Into<Bytes>) -> Message {
        Message {
            body: Body::Data(data.into()),
            ..Default::default()
        }
    }

    /// A durable message whose body is one AMQP value.
    pub fn with_value(value: Value) -> Message {
        Message {
            body: Body::Value(value),
            ..Default::default()
        }
    }

    /// The body's bytes, when it is data.
    pub fn data(&self) -> Option<&[u8]> {
        match &self.body {
            Body::Data(b) => Some(b),
            Body::Value(_) => None,
        }
    }

    /// Its message id.
    pub fn message_id(mut self, id: impl Into<MessageId>) -> Self {
        self.properties.message_id = Some(id.into());
        self
    }

    /// Its correlation id.
    pub fn correlation_id(mut self, id: impl Into<MessageId>) -> Self {
        self.properties.correlation_id = Some(id.into());
        self
    }

    /// The address to send it to (a publisher without a target needs it).
    pub fn to(mut self, address: impl Into<String>) -> Self {
        self.properties.to = Some(address.into());
        self
    }

    /// Its subject.
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.properties.subject = Some(subject.into());
        self
    }

    /// Where answers go.
    pub fn reply_to(mut self, address: impl Into<String>) -> Self {
        self.properties.reply_to = Some(address.into());
        self
    }

    /// Its body's MIME type.
    pub fn content_type(mut self, content_type: impl Into<String>) -> Self {
        self.properties.content_type = Some(content_type.into());
        self
    }

    /// Its priority.
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = Some(priority);
        self
    }

    /// How long it may wait in a queue.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Not kept on disk.
    pub fn transient(mut self) -> Self {
        self.durable = false;
        self
    }

    /// An application property (headers exchanges and filters match
    /// on them).
    pub fn application_property(mut self, key: impl Into<String>, value: Value) -> Self {
        self.application_properties.push((key.into(), value));
        self
    }

    /// A message annotation (its key should start with `x-`).
    pub fn annotation(mut self, key: impl Into<String>, value: Value) -> Self {
        self.annotations.push((key.into(), value));
        self
    }

    /// Application property `key`, if set.
    pub fn property(&self, key: &str) -> Option<&Value> {
        self.application_properties
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// Message annotation `key`, if set.
    pub fn annotation_value(&self, key: &str) -> Option<&Value> {
        self.annotations.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Its bare message's encoding, its header first.
    pub(crate) fn encode(&self, out: &mut BytesMut) {
        let ttl = self.ttl.map(|t| t.as_millis().min(u32::MAX as u128) as u32);
        if self.durable && self.priority.is_none() && ttl.is_none() && !self.first_acquirer {
            // The common header written as bytes (no value tree per
            // message): described 0x70, a list8 of one field, true.
            out.extend_from_slice(&[0x00, 0x53, 0x70, 0xc0, 0x02, 0x01, 0x41]);
        } else if self.durable || self.priority.is_some() || ttl.is_some() || self.first_acquirer {
            composite(
                HEADER,
                vec![
                    Value::Bool(self.durable),
                    opt(self.priority, Value::Ubyte),
                    opt(ttl, Value::Uint),
                    Value::Bool(self.first_acquirer),
                ],
            )
            .encode(out);
        }
        if !self.annotations.is_empty() {
            let map = self
                .annotations
                .iter()
                .map(|(k, v)| (Value::symbol(k), v.clone()))
                .collect();
            Value::described(MESSAGE_ANNOTATIONS, Value::Map(map)).encode(out);
        }
        let p = &self.properties;
        if *p != Properties::default() {
            composite(
                PROPERTIES,
                vec![
                    opt(p.message_id.as_ref(), MessageId::to_value),
                    opt(p.user_id.clone(), Value::Binary),
                    opt(p.to.clone(), Value::String),
                    opt(p.subject.clone(), Value::String),
                    opt(p.reply_to.clone(), Value::String),
                    opt(p.correlation_id.as_ref(), MessageId::to_value),
                    opt(p.content_type.clone(), Value::Symbol),
                    opt(p.content_encoding.clone(), Value::Symbol),
                    opt(p.absolute_expiry_time, Value::Timestamp),
                    opt(p.creation_time, Value::Timestamp),
                    opt(p.group_id.clone(), Value::String),
                    opt(p.group_sequence, Value::Uint),
                    opt(p.reply_to_group_id.clone(), Value::String),
                ],
            )
            .encode(out);
        }
        if !self.application_properties.is_empty() {
            let map = self
                .application_properties
                .iter()
                .map(|(k, v)| (Value::string(k), v.clone()))
                .collect();
            Value::described(APPLICATION_PROPERTIES, Value::Map(map)).encode(out);
        }
        match &self.body {
            Body::Data(b) => {
                // Described 0x75, then the bytes as vbin8 or vbin32.
                out.reserve(b.len() + 8);
                out.extend_from_slice(&[0x00, 0x53, DATA as u8]);
                if b.len() < 256 {
                    out.extend_from_slice(&[0xa0, b.len() as u8]);
                } else {
                    out.extend_from_slice(&[0xb0]);
                    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
                }
                out.extend_from_slice(b);
            }
            Body::Value(v) => Value::described(AMQP_VALUE, v.clone()).encode(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_comes_back() {
        let mut m = Message::new("body")
            .message_id("m-1")
            .correlation_id(7u64)
            .to("/queues/q")
            .subject("s")
            .reply_to("$me")
            .content_type("text/plain")
            .priority(3)
            .ttl(Duration::from_secs(5))
            .application_property("n", Value::Long(-4))
            .annotation("x-opt-thing", Value::string("v"));
        m.properties.creation_time = Some(1_700_000_000_000);
        m.properties.group_sequence = Some(9);
        let mut out = BytesMut::new();
        m.encode(&mut out);
        let back = Message::decode(&out).unwrap();
        assert_eq!(back, m);
        let v = Message::with_value(Value::Map(vec![(Value::string("k"), Value::Bool(true))])).transient();
        let mut out = BytesMut::new();
        v.encode(&mut out);
        assert_eq!(Message::decode(&out).unwrap(), v);
    }

    #[test]
    fn data_sections_join_and_bad_input_is_an_error() {
        let mut out = BytesMut::new();
        Value::described(DATA, Value::Binary(Bytes::from_static(b"ab"))).encode(&mut out);
        Value::described(DATA, Value::Binary(Bytes::from_static(b"cd"))).encode(&mut out);
        let m = Message::decode(&out).unwrap();
        assert_eq!(m.data(), Some(&b"abcd"[..]));
        assert!(!m.durable, "no header: not durable");
        assert!(
            Message::decode(&[0x40]).is_err(),
            "a section that is not described"
        );
        assert!(Message::decode(&[0x00, 0x53, 0x75, 0xa0]).is_err(), "cut short");
    }
}
