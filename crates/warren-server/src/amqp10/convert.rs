//! Converting messages between AMQP 1.0 and the broker's message (which
//! keeps AMQP 0-9-1 properties), after RabbitMQ 4's mapping (mc_amqpl):
//! header durable/priority/ttl <-> delivery-mode/priority/expiration; the
//! properties section <-> the 0-9-1 property fields; application-properties
//! <-> headers; data sections <-> the body.
//!
//! A 1.0 message is converted once, at publish; a delivery to a 1.0
//! consumer is converted back. (RabbitMQ 4 keeps the 1.0 bare message
//! unaltered for 1.0 consumers; Warren does not yet, so 1.0 sections with
//! no 0-9-1 counterpart, such as footers, are not carried.)

use bytes::{Bytes, BytesMut};
use warren_amqp091::{BasicProperties, FieldTable, FieldValue, ShortStr};
use warren_amqp10::composite::{composite, opt};
use warren_amqp10::messaging::{self, APPLICATION_PROPERTIES, DATA, HEADER, PROPERTIES};
use warren_amqp10::{CodecError, Value};

/// A 1.0 message as the broker stores it.
#[derive(Debug)]
pub struct Converted {
    pub properties: BasicProperties,
    pub body: Bytes,
    /// The `to` property (for the null target).
    pub to: Option<String>,
    /// The `subject` property.
    pub subject: Option<String>,
}

fn field_value(v: &Value) -> Option<FieldValue> {
    Some(match v {
        Value::Bool(b) => FieldValue::Bool(*b),
        Value::Ubyte(x) => FieldValue::U8(*x),
        Value::Byte(x) => FieldValue::I8(*x),
        Value::Ushort(x) => FieldValue::U16(*x),
        Value::Short(x) => FieldValue::I16(*x),
        Value::Uint(x) => FieldValue::I64(*x as i64),
        Value::Int(x) => FieldValue::I32(*x),
        Value::Ulong(x) => FieldValue::I64(*x as i64),
        Value::Long(x) => FieldValue::I64(*x),
        Value::Float(x) => FieldValue::F32(*x),
        Value::Double(x) => FieldValue::F64(*x),
        Value::Timestamp(ms) => FieldValue::Timestamp((*ms / 1000) as u64),
        Value::String(s) | Value::Symbol(s) => FieldValue::LongStr(Bytes::from(s.clone())),
        Value::Binary(b) => FieldValue::Bytes(b.clone()),
        _ => return None,
    })
}

fn value_of(f: &FieldValue) -> Option<Value> {
    Some(match f {
        FieldValue::Bool(b) => Value::Bool(*b),
        FieldValue::I8(x) => Value::Byte(*x),
        FieldValue::U8(x) => Value::Ubyte(*x),
        FieldValue::I16(x) => Value::Short(*x),
        FieldValue::U16(x) => Value::Ushort(*x),
        FieldValue::I32(x) => Value::Int(*x),
        FieldValue::U32(x) => Value::Uint(*x),
        FieldValue::I64(x) => Value::Long(*x),
        FieldValue::F32(x) => Value::Float(*x),
        FieldValue::F64(x) => Value::Double(*x),
        FieldValue::Timestamp(s) => Value::Timestamp(*s as i64 * 1000),
        FieldValue::LongStr(b) => match std::str::from_utf8(b) {
            Ok(s) => Value::String(s.to_string()),
            Err(_) => Value::Binary(b.clone()),
        },
        FieldValue::Bytes(b) => Value::Binary(b.clone()),
        _ => return None,
    })
}

/// An id property (message-id, correlation-id): string, ulong, uuid or
/// binary in 1.0; a short string in 0-9-1.
fn id_string(v: &Value) -> Option<ShortStr> {
    match v {
        Value::String(s) => Some(s.as_str().into()),
        Value::Ulong(n) => Some(n.to_string().into()),
        Value::Uuid(u) => Some(u.iter().map(|b| format!("{b:02x}")).collect::<String>().into()),
        Value::Binary(b) => std::str::from_utf8(b).ok().map(ShortStr::from),
        _ => None,
    }
}

fn str_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) | Value::Symbol(s) => Some(s.clone()),
        _ => None,
    }
}

/// Read a 1.0 message (its sections, in order).
pub fn from_amqp10(message: &[u8]) -> Result<Converted, CodecError> {
    let mut p = BasicProperties::default();
    let mut headers = FieldTable::new();
    let mut body = BytesMut::new();
    let mut to = None;
    let mut subject = None;
    for (code, v) in messaging::sections(message)? {
        match (code, &v) {
            (HEADER, Value::List(f)) => {
                let durable = matches!(f.first(), Some(Value::Bool(true)));
                p.delivery_mode = Some(if durable { 2 } else { 1 });
                if let Some(Value::Ubyte(pr)) = f.get(1) {
                    p.priority = Some(*pr);
                }
                if let Some(Value::Uint(ttl)) = f.get(2) {
                    p.expiration = Some(ttl.to_string().into());
                }
            }
            (PROPERTIES, Value::List(f)) => {
                let get = |i: usize| f.get(i).filter(|v| !v.is_null());
                p.message_id = get(0).and_then(id_string);
                p.user_id = get(1).and_then(|v| match v {
                    Value::Binary(b) => std::str::from_utf8(b).ok().map(ShortStr::from),
                    _ => None,
                });
                to = get(2).and_then(str_of);
                subject = get(3).and_then(str_of);
                p.reply_to = get(4).and_then(str_of).map(ShortStr::from);
                p.correlation_id = get(5).and_then(id_string);
                p.content_type = get(6).and_then(str_of).map(ShortStr::from);
                p.content_encoding = get(7).and_then(str_of).map(ShortStr::from);
                if let Some(Value::Timestamp(ms)) = get(9) {
                    p.timestamp = Some((*ms / 1000) as u64);
                }
            }
            (APPLICATION_PROPERTIES, Value::Map(pairs)) => {
                for (k, v) in pairs {
                    if let (Some(k), Some(v)) = (str_of(k), field_value(v)) {
                        headers.insert(&k, v);
                    }
                }
            }
            (DATA, Value::Binary(b)) => body.extend_from_slice(b),
            (messaging::AMQP_VALUE, Value::Binary(b)) => body.extend_from_slice(b),
            (messaging::AMQP_VALUE, Value::String(s)) => body.extend_from_slice(s.as_bytes()),
            _ => {}
        }
    }
    if !headers.is_empty() {
        p.headers = Some(headers);
    }
    Ok(Converted {
        properties: p,
        body: body.freeze(),
        to,
        subject,
    })
}

/// Write a stored message as a 1.0 message: header, properties,
/// application-properties, one data section.
pub fn to_amqp10(raw_properties: &Bytes, body: &[u8], redelivered: bool, out: &mut BytesMut) {
    let p = BasicProperties::decode(raw_properties.clone()).unwrap_or_default();
    composite(
        HEADER,
        vec![
            Value::Bool(p.delivery_mode == Some(2)),
            opt(p.priority, Value::Ubyte),
            opt(
                p.expiration.as_ref().and_then(|e| e.to_str_lossy().parse().ok()),
                Value::Uint,
            ),
            Value::Bool(!redelivered),
        ],
    )
    .encode(out);
    let s = |v: &Option<ShortStr>| opt(v.as_ref(), |x| Value::String(x.to_str_lossy().into_owned()));
    let props = composite(
        PROPERTIES,
        vec![
            s(&p.message_id),
            opt(p.user_id.as_ref(), |u| Value::Binary(u.clone().into_bytes())),
            Value::Null,
            Value::Null,
            s(&p.reply_to),
            s(&p.correlation_id),
            opt(p.content_type.as_ref(), |x| {
                Value::Symbol(x.to_str_lossy().into_owned())
            }),
            opt(p.content_encoding.as_ref(), |x| {
                Value::Symbol(x.to_str_lossy().into_owned())
            }),
            Value::Null,
            opt(p.timestamp, |t| Value::Timestamp(t as i64 * 1000)),
        ],
    );
    if matches!(props.as_described(), Some((_, Value::List(l))) if !l.is_empty()) {
        props.encode(out);
    }
    if let Some(h) = &p.headers {
        let pairs: Vec<(Value, Value)> = h
            .iter()
            .filter_map(|(k, v)| Some((Value::String(k.to_str_lossy().into_owned()), value_of(v)?)))
            .collect();
        if !pairs.is_empty() {
            Value::described(APPLICATION_PROPERTIES, Value::Map(pairs)).encode(out);
        }
    }
    Value::described(DATA, Value::Binary(Bytes::copy_from_slice(body))).encode(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_1_0_message_maps_to_0_9_1_and_back() {
        let mut m = BytesMut::new();
        composite(
            HEADER,
            vec![Value::Bool(true), Value::Ubyte(3), Value::Uint(5000)],
        )
        .encode(&mut m);
        composite(
            PROPERTIES,
            vec![
                Value::string("id-1"),
                Value::Null,
                Value::string("/queues/q"),
                Value::string("subj"),
                Value::string("replies"),
                Value::Ulong(42),
                Value::symbol("text/plain"),
            ],
        )
        .encode(&mut m);
        Value::described(
            APPLICATION_PROPERTIES,
            Value::Map(vec![
                (Value::string("k"), Value::Long(7)),
                (Value::string("s"), Value::string("v")),
            ]),
        )
        .encode(&mut m);
        Value::described(DATA, Value::Binary(Bytes::from_static(b"hel"))).encode(&mut m);
        Value::described(DATA, Value::Binary(Bytes::from_static(b"lo"))).encode(&mut m);

        let c = from_amqp10(&m).unwrap();
        assert_eq!(&c.body[..], b"hello");
        assert_eq!(c.to.as_deref(), Some("/queues/q"));
        assert_eq!(c.subject.as_deref(), Some("subj"));
        let p = &c.properties;
        assert_eq!((p.delivery_mode, p.priority), (Some(2), Some(3)));
        assert_eq!(p.expiration.as_ref().map(|e| e.to_string()), Some("5000".into()));
        assert_eq!(p.message_id.as_ref().map(|e| e.to_string()), Some("id-1".into()));
        assert_eq!(
            p.correlation_id.as_ref().map(|e| e.to_string()),
            Some("42".into())
        );
        assert_eq!(
            p.content_type.as_ref().map(|e| e.to_string()),
            Some("text/plain".into())
        );
        let h = p.headers.as_ref().unwrap();
        assert_eq!(h.get("k"), Some(&FieldValue::I64(7)));

        // And back, as a 1.0 consumer gets it.
        let mut out = BytesMut::new();
        to_amqp10(&p.to_bytes(), &c.body, false, &mut out);
        let again = from_amqp10(&out).unwrap();
        assert_eq!(&again.body[..], b"hello");
        assert_eq!(again.properties.delivery_mode, Some(2));
        assert_eq!(
            again.properties.headers.as_ref().unwrap().get("s"),
            Some(&FieldValue::LongStr(Bytes::from_static(b"v")))
        );
        assert_eq!(again.properties.message_id, p.message_id);
    }

    #[test]
    fn a_bare_body_and_garbage() {
        let mut m = BytesMut::new();
        Value::described(messaging::AMQP_VALUE, Value::string("text")).encode(&mut m);
        assert_eq!(&from_amqp10(&m).unwrap().body[..], b"text");
        assert!(from_amqp10(&[0xff]).is_err());
        assert!(from_amqp10(&[0x40]).is_err(), "a section must be described");
    }
}
