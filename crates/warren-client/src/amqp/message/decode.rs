//! A message read from a delivery's bytes. The sections a broker writes
//! on every delivery (header, message annotations, properties,
//! application properties, data) are read where they lie, their fields
//! straight into the message, with no value tree around them; a data
//! section is shared, not copied. The rest (delivery annotations, a
//! footer, an amqp-value or amqp-sequence body) goes through the general
//! decoder.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use warren_amqp10::composite::Fields;
use warren_amqp10::compound::{described_code, list_into, map_pairs, Key};
use warren_amqp10::messaging::{
    APPLICATION_PROPERTIES, DATA, DELIVERY_ANNOTATIONS, FOOTER, HEADER, MESSAGE_ANNOTATIONS, PROPERTIES,
};
use warren_amqp10::{CodecError, Value};

use super::{Body, Message, MessageId, Properties};

/// Fields in a header (3.2.1) and a properties section (3.2.4).
const HEADER_FIELDS: usize = 5;
const PROPERTIES_FIELDS: usize = 13;

impl Message {
    /// A message from its encoding (as a transfer carries it). Data
    /// sections are joined; a message with no header is not durable.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Message, CodecError> {
        Message::decode_shared(&Bytes::copy_from_slice(bytes))
    }

    /// [`Message::decode`] of bytes already shared: a data section in
    /// its short form is taken where it lies, not copied.
    pub(crate) fn decode_shared(all: &Bytes) -> Result<Message, CodecError> {
        let mut m = Message {
            durable: false,
            ..Default::default()
        };
        let mut data = Data::None;
        let mut at = 0;
        while at < all.len() {
            if let Some((body, next)) = data_section(all, at)? {
                data.add(body);
                at = next;
                continue;
            }
            let section = &all[at..];
            let mut rest = section;
            match described_code(&mut rest) {
                Some(HEADER) => header(&mut rest, &mut m)?,
                Some(PROPERTIES) => m.properties = properties(&mut rest)?,
                Some(MESSAGE_ANNOTATIONS) => m.annotations = keyed(&mut rest, "message-annotations")?,
                Some(APPLICATION_PROPERTIES) => {
                    m.application_properties = keyed(&mut rest, "application-properties")?
                }
                _ => {
                    rest = section;
                    other_section(&mut rest, &mut m, &mut data)?;
                }
            }
            at = all.len() - rest.len();
        }
        match data {
            Data::None => {}
            Data::One(b) => m.body = Body::Data(b),
            Data::Joined(b) => m.body = Body::Data(b.freeze()),
        }
        Ok(m)
    }
}

fn header(buf: &mut &[u8], m: &mut Message) -> Result<(), CodecError> {
    let mut slots: [Value; HEADER_FIELDS] = std::array::from_fn(|_| Value::Null);
    list_into(buf, &mut slots)?;
    let f = Fields::new(&slots, "header");
    m.durable = f.bool(0, false)?;
    m.priority = f.opt_ubyte(1)?;
    m.ttl = f.opt_uint(2)?.map(|t| Duration::from_millis(t as u64));
    m.first_acquirer = f.bool(3, false)?;
    m.delivery_count = f.opt_uint(4)?.unwrap_or(0);
    Ok(())
}

fn properties(buf: &mut &[u8]) -> Result<Properties, CodecError> {
    let mut slots: [Value; PROPERTIES_FIELDS] = std::array::from_fn(|_| Value::Null);
    list_into(buf, &mut slots)?;
    let [message_id, user_id, to, subject, reply_to, correlation_id, content_type, content_encoding, absolute_expiry_time, creation_time, group_id, group_sequence, reply_to_group_id] =
        slots;
    let bad = |i: usize, want: &str, v: &Value| {
        CodecError::invalid("properties", format!("field {i} is not {want}: {v:?}"))
    };
    let text = |v: Value| match v {
        Value::String(s) | Value::Symbol(s) => Some(s),
        _ => None,
    };
    let timestamp = |v: Value| match v {
        Value::Timestamp(t) => Some(t),
        _ => None,
    };
    Ok(Properties {
        message_id: MessageId::from_value(&message_id),
        user_id: match user_id {
            Value::Null => None,
            Value::Binary(b) => Some(b),
            v => return Err(bad(1, "binary", &v)),
        },
        to: text(to),
        subject: text(subject),
        reply_to: text(reply_to),
        correlation_id: MessageId::from_value(&correlation_id),
        content_type: text(content_type),
        content_encoding: text(content_encoding),
        absolute_expiry_time: timestamp(absolute_expiry_time),
        creation_time: timestamp(creation_time),
        group_id: text(group_id),
        group_sequence: match group_sequence {
            Value::Null => None,
            Value::Uint(n) => Some(n),
            v => return Err(bad(11, "a uint", &v)),
        },
        reply_to_group_id: text(reply_to_group_id),
    })
}

/// A map section's entries, with string or symbol keys (null: none).
fn keyed(buf: &mut &[u8], what: &'static str) -> Result<Vec<(String, Value)>, CodecError> {
    let mut entries = Vec::new();
    map_pairs(buf, |k, v| match k {
        Key::Text(k) => {
            entries.push((k.to_owned(), v));
            Ok(())
        }
        Key::Other(_) => Err(CodecError::invalid(what, "a key is not a string")),
    })?;
    Ok(entries)
}

/// A section the readers above leave to the general decoder: delivery
/// annotations and a footer (skipped), a body that is a value, data in a
/// form other than the usual one.
fn other_section(buf: &mut &[u8], m: &mut Message, data: &mut Data) -> Result<(), CodecError> {
    let v = Value::decode(buf)?;
    let Some((code, _)) = v.as_described() else {
        return Err(CodecError::invalid("message", "a section is not described"));
    };
    let Value::Described(_, inner) = v else {
        unreachable!("described, as matched above")
    };
    match (code, *inner) {
        (DELIVERY_ANNOTATIONS | FOOTER, _) => {}
        (DATA, Value::Binary(b)) => data.add(b),
        (DATA, _) => return Err(CodecError::invalid("data", "not binary")),
        (_, inner) => m.body = Body::Value(inner),
    }
    Ok(())
}

/// A message's data sections so far: one is kept as it is, more joined.
enum Data {
    None,
    One(Bytes),
    Joined(BytesMut),
}

impl Data {
    fn add(&mut self, b: Bytes) {
        *self = match std::mem::replace(self, Data::None) {
            Data::None => Data::One(b),
            Data::One(first) => {
                let mut joined = BytesMut::from(&first[..]);
                joined.extend_from_slice(&b);
                Data::Joined(joined)
            }
            Data::Joined(mut joined) => {
                joined.extend_from_slice(&b);
                Data::Joined(joined)
            }
        };
    }
}

/// The data section at `at` when written in its usual form (described
/// by small ulong 0x75, vbin8 or vbin32): its bytes (shared) and where
/// the next section starts.
fn data_section(all: &Bytes, at: usize) -> Result<Option<(Bytes, usize)>, CodecError> {
    let rest = &all[at..];
    let (len, head) = match rest {
        [0x00, 0x53, 0x75, 0xa0, n, ..] => (*n as usize, 5),
        [0x00, 0x53, 0x75, 0xb0, a, b, c, d, ..] => (u32::from_be_bytes([*a, *b, *c, *d]) as usize, 8),
        _ => return Ok(None),
    };
    let start = at + head;
    let end = start
        .checked_add(len)
        .filter(|end| *end <= all.len())
        .ok_or_else(|| CodecError::invalid("data", "cut short"))?;
    Ok(Some((all.slice(start..end), end)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_amqp10::composite::composite;
    use warren_amqp10::messaging::AMQP_VALUE;

    /// `v` as a section described by the full-width ulong `code`.
    fn long_form(code: u64, v: Value, out: &mut BytesMut) {
        out.extend_from_slice(&[0x00, 0x80]);
        out.extend_from_slice(&code.to_be_bytes());
        v.encode(out);
    }

    #[test]
    fn a_broker_delivery_reads_whole_in_either_descriptor_form() {
        let header = vec![
            Value::Bool(false),
            Value::Null,
            Value::Uint(500),
            Value::Bool(true),
            Value::Uint(2),
        ];
        let annotations = Value::Map(vec![
            (Value::symbol("x-exchange"), Value::string("")),
            (Value::symbol("x-routing-key"), Value::string("q")),
        ]);
        let app = Value::Map(vec![(Value::string("n"), Value::Long(-1))]);
        let mut props = vec![Value::Null; PROPERTIES_FIELDS];
        props[0] = Value::Ulong(7);
        props[3] = Value::string("subject");
        props[6] = Value::symbol("text/plain");
        props[9] = Value::Timestamp(1_700_000_000_000);
        props[11] = Value::Uint(3);
        let body = vec![b'x'; 300];
        let want = |m: &Message| {
            assert!(!m.durable);
            assert_eq!(m.ttl, Some(Duration::from_millis(500)));
            assert!(m.first_acquirer);
            assert_eq!(m.delivery_count, 2);
            assert_eq!(m.annotation_value("x-routing-key"), Some(&Value::string("q")));
            assert_eq!(m.property("n"), Some(&Value::Long(-1)));
            assert_eq!(m.properties.message_id, Some(MessageId::Ulong(7)));
            assert_eq!(m.properties.subject.as_deref(), Some("subject"));
            assert_eq!(m.properties.content_type.as_deref(), Some("text/plain"));
            assert_eq!(m.properties.creation_time, Some(1_700_000_000_000));
            assert_eq!(m.properties.group_sequence, Some(3));
            assert_eq!(m.data(), Some(&body[..]));
        };
        let mut short = BytesMut::new();
        composite(HEADER, header.clone()).encode(&mut short);
        Value::described(MESSAGE_ANNOTATIONS, annotations.clone()).encode(&mut short);
        Value::described(PROPERTIES, Value::List(props.clone())).encode(&mut short);
        Value::described(APPLICATION_PROPERTIES, app.clone()).encode(&mut short);
        Value::described(DATA, Value::Binary(Bytes::from(body.clone()))).encode(&mut short);
        want(&Message::decode(&short).unwrap());

        let mut long = BytesMut::new();
        long_form(HEADER, Value::List(header), &mut long);
        long_form(MESSAGE_ANNOTATIONS, annotations, &mut long);
        long_form(PROPERTIES, Value::List(props), &mut long);
        long_form(APPLICATION_PROPERTIES, app, &mut long);
        long_form(DATA, Value::Binary(Bytes::from(body.clone())), &mut long);
        want(&Message::decode(&long).unwrap());
    }

    #[test]
    fn a_value_body_and_skipped_sections_go_through_the_general_decoder() {
        let mut out = BytesMut::new();
        Value::described(DELIVERY_ANNOTATIONS, Value::Map(vec![])).encode(&mut out);
        Value::described(AMQP_VALUE, Value::Long(5)).encode(&mut out);
        Value::described(FOOTER, Value::Map(vec![])).encode(&mut out);
        assert_eq!(Message::decode(&out).unwrap().body, Body::Value(Value::Long(5)));
    }

    #[test]
    fn wrong_types_are_errors() {
        let bad = |section: Value| {
            let mut out = BytesMut::new();
            section.encode(&mut out);
            Message::decode(&out).is_err()
        };
        assert!(
            bad(composite(HEADER, vec![Value::string("durable?")])),
            "durable not a boolean"
        );
        assert!(
            bad(Value::described(HEADER, Value::Map(vec![]))),
            "a header not a list"
        );
        assert!(
            bad(composite(PROPERTIES, vec![Value::Null, Value::string("user")])),
            "user-id not binary"
        );
        assert!(
            bad(Value::described(
                MESSAGE_ANNOTATIONS,
                Value::Map(vec![(Value::Long(1), Value::Null)])
            )),
            "a key not text"
        );
        assert!(
            bad(Value::described(DATA, Value::string("text"))),
            "data not binary"
        );
        assert!(
            bad(Value::Described(
                Box::new(warren_amqp10::value::Descriptor::Symbol(
                    "amqp:header:list".into()
                )),
                Box::new(Value::List(vec![]))
            )),
            "described by symbol"
        );
    }
}
