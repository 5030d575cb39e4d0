//! Converting messages between AMQP 1.0 and the broker's message (which
//! keeps AMQP 0-9-1 properties), as RabbitMQ 4 maps them (its mc_amqpl):
//!
//! - header: durable / priority / ttl <-> delivery-mode / priority /
//!   expiration. A message without `durable` is durable (RabbitMQ 4's
//!   choice); first-acquirer and delivery-count come from the queue.
//! - properties <-> the 0-9-1 property fields (ids: strings as they are,
//!   ulong as decimal, uuid as `urn:uuid:...`; binary or over-long ids go
//!   to `x-message-id` / `x-correlation-id` headers); group-id <-> app-id;
//!   creation-time <-> timestamp (ms <-> s).
//! - application-properties <-> headers (types as mc_amqpl's `to_091`:
//!   uint is an unsigned int, binary a byte array, symbols strings);
//!   message-annotations with `x-` keys <-> `x-` headers (`x-cc` <->
//!   `CC`). A 1.0 consumer also gets `x-exchange` and `x-routing-key`.
//! - body: data sections <-> the body. Any other body (amqp-value,
//!   amqp-sequence) is kept as its encoded sections, marked with the 0-9-1
//!   `type` property `amqp-1.0`, so a 1.0 consumer gets it back as sent and
//!   a 0-9-1 consumer gets the encoded bytes, as from RabbitMQ 4.
//!
//! RabbitMQ 4 stores a 1.0 message as it came, so a 1.0 consumer reads it
//! unchanged. Warren stores the 0-9-1 form, and keeps what that form would
//! lose the way RabbitMQ's mc_amqpl does when it stores 0-9-1: a
//! properties section the fields above cannot carry exactly (to, subject,
//! absolute-expiry-time, group-sequence, reply-to-group-id, a typed id,
//! the milliseconds of creation-time) travels whole in the
//! `x-amqp-1.0-properties` header, and application properties of types
//! 0-9-1 lacks in `x-amqp-1.0-app-properties`; a 1.0 delivery writes those
//! sections back byte for byte. A 0-9-1 consumer sees the mapped fields
//! and, only for such messages, those headers (as RabbitMQ 3.13 showed
//! them). Delivery-annotations, annotations without an `x-` key and a
//! footer after data sections are not carried.

use bytes::{Bytes, BytesMut};
use warren_amqp091::{BasicProperties, FieldTable, FieldValue, ShortStr};
use warren_amqp10::composite::{composite, opt};
use warren_amqp10::messaging::{
    AMQP_SEQUENCE, AMQP_VALUE, APPLICATION_PROPERTIES, DATA, FOOTER, HEADER, MESSAGE_ANNOTATIONS, PROPERTIES,
};
use warren_amqp10::{CodecError, Value};

/// The 0-9-1 `type` that marks a body holding encoded 1.0 body sections.
pub const AMQP10_TYPE: &str = "amqp-1.0";

/// RabbitMQ's headers for 1.0 sections kept as encoded (mc_amqpl): a
/// 1.0 consumer gets the section from them as it was sent.
const AMQP10_PROPERTIES_HEADER: &str = "x-amqp-1.0-properties";
const AMQP10_APP_PROPERTIES_HEADER: &str = "x-amqp-1.0-app-properties";

/// A header holding one encoded section of kind `code`: its bytes, to be
/// written as they came (the bare message stays immutable, as AMQP 1.0
/// §3.2 asks), or None if the header holds anything else.
fn kept_section<'a>(headers: Option<&'a FieldTable>, name: &str, code: u64) -> Option<&'a [u8]> {
    let whole = headers?.get(name)?.as_bytes()?;
    let mut rest = whole;
    let v = Value::decode(&mut rest).ok()?;
    match v.as_described() {
        Some((c, _)) if c == code && rest.is_empty() => Some(whole),
        _ => None,
    }
}

/// A 1.0 message as the broker stores it.
#[derive(Debug)]
pub struct Converted {
    pub properties: BasicProperties,
    pub body: Bytes,
    /// The `to` property (for the null target).
    pub to: Option<String>,
    /// The `subject` property.
    pub subject: Option<String>,
    /// The x-exchange and x-routing-key annotations (a message that went
    /// through the broker before, e.g. into a stream).
    pub exchange: Option<String>,
    pub routing_key: Option<String>,
}

/// What a 1.0 delivery says besides the stored message: where it was
/// published and what the queue knows of earlier attempts.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryInfo<'a> {
    pub exchange: &'a str,
    pub routing_key: &'a str,
    pub redelivered: bool,
    /// Failed attempts (the modified outcome's delivery-failed).
    pub delivery_count: u32,
}

/// A 1.0 value as a 0-9-1 field value (None: no counterpart, dropped).
pub fn field_value(v: &Value) -> Option<FieldValue> {
    Some(match v {
        Value::Bool(b) => FieldValue::Bool(*b),
        Value::Ubyte(x) => FieldValue::U8(*x),
        Value::Byte(x) => FieldValue::I8(*x),
        Value::Ushort(x) => FieldValue::U16(*x),
        Value::Short(x) => FieldValue::I16(*x),
        Value::Uint(x) => FieldValue::U32(*x),
        Value::Int(x) => FieldValue::I32(*x),
        Value::Ulong(x) => FieldValue::I64(*x as i64),
        Value::Long(x) => FieldValue::I64(*x),
        Value::Float(x) => FieldValue::F32(*x),
        Value::Double(x) => FieldValue::F64(*x),
        Value::Timestamp(ms) => FieldValue::Timestamp((*ms / 1000) as u64),
        Value::String(s) | Value::Symbol(s) => FieldValue::LongStr(Bytes::from(s.clone())),
        Value::Binary(b) => FieldValue::Bytes(b.clone()),
        Value::Uuid(u) => FieldValue::LongStr(Bytes::from(urn_uuid(u))),
        Value::List(items) | Value::Array(items) => {
            FieldValue::Array(items.iter().filter_map(field_value).collect())
        }
        Value::Map(pairs) => {
            let mut t = FieldTable::new();
            for (k, v) in pairs {
                if let (Some(k), Some(v)) = (key_str(k), field_value(v)) {
                    t.insert(k, v);
                }
            }
            FieldValue::Table(t)
        }
        _ => return None,
    })
}

/// A 1.0 map (open's properties, say) as a JSON object, the way the
/// management API shows a connection's client properties.
pub fn json_map(v: &Value) -> serde_json::Map<String, serde_json::Value> {
    match field_value(v) {
        Some(FieldValue::Table(t)) => warren_node::definitions::table_to_json(&t),
        _ => Default::default(),
    }
}

/// A 0-9-1 field value as a 1.0 value.
pub fn value_of(f: &FieldValue) -> Option<Value> {
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
        FieldValue::LongStr(b) => long_str(b),
        FieldValue::Bytes(b) => Value::Binary(b.clone()),
        FieldValue::Array(items) => Value::List(items.iter().filter_map(value_of).collect()),
        FieldValue::Table(t) => Value::Map(
            t.iter()
                .filter_map(|(k, v)| Some((Value::String(k.to_str_lossy().into_owned()), value_of(v)?)))
                .collect(),
        ),
        _ => return None,
    })
}

/// A 0-9-1 long string: utf8 when it is short text, binary otherwise
/// (RabbitMQ 4's rule: valid UTF-8, no NUL, at most 4096 bytes).
fn long_str(b: &Bytes) -> Value {
    match std::str::from_utf8(b) {
        Ok(s) if b.len() <= 4096 && !s.contains('\0') => Value::String(s.to_string()),
        _ => Value::Binary(b.clone()),
    }
}

fn key_str(v: &Value) -> Option<&str> {
    match v {
        Value::String(s) | Value::Symbol(s) if s.len() <= 255 => Some(s),
        _ => None,
    }
}

fn str_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) | Value::Symbol(s) => Some(s.clone()),
        _ => None,
    }
}

fn short(s: &str) -> Option<ShortStr> {
    (s.len() <= 255).then(|| ShortStr::from(s))
}

fn urn_uuid(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "urn:uuid:{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

fn parse_urn_uuid(s: &str) -> Option<[u8; 16]> {
    let hex: String = s
        .strip_prefix("urn:uuid:")?
        .chars()
        .filter(|&c| c != '-')
        .collect();
    if hex.len() != 32 || s.len() != 9 + 36 {
        return None;
    }
    let mut u = [0u8; 16];
    for (i, b) in u.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(u)
}

/// A 1.0 message-id or correlation-id: the 0-9-1 property when it fits a
/// short string, else a header (`x-message-id` / `x-correlation-id`).
fn message_id(v: &Value, header: &str, headers: &mut FieldTable) -> Option<ShortStr> {
    match v {
        Value::String(s) if s.len() <= 255 => Some(s.as_str().into()),
        Value::String(s) => {
            headers.insert(header, FieldValue::LongStr(Bytes::from(s.clone())));
            None
        }
        Value::Ulong(n) => Some(n.to_string().into()),
        Value::Uuid(u) => Some(urn_uuid(u).into()),
        Value::Binary(b) => {
            headers.insert(header, FieldValue::Bytes(b.clone()));
            None
        }
        _ => None,
    }
}

/// Read a 1.0 message (its sections, in order).
pub fn from_amqp10(message: &[u8]) -> Result<Converted, CodecError> {
    let mut p = BasicProperties::default();
    let mut headers = FieldTable::new();
    let mut data = BytesMut::new();
    let mut to = None;
    let mut subject = None;
    let mut exchange = None;
    let mut routing_key = None;
    let mut durable = true;
    // Where the first non-data body section starts, if any.
    let mut encoded_body: Option<usize> = None;
    let mut rest = message;
    while !rest.is_empty() {
        let at = message.len() - rest.len();
        let v = Value::decode(&mut rest)?;
        let section = &message[at..message.len() - rest.len()];
        let Some((code, v)) = v.as_described() else {
            return Err(CodecError::invalid("message", "a section is not described"));
        };
        match (code, v) {
            (HEADER, Value::List(f)) => {
                if let Some(Value::Bool(d)) = f.first() {
                    durable = *d;
                }
                if let Some(Value::Ubyte(pr)) = f.get(1) {
                    p.priority = Some(*pr);
                }
                if let Some(Value::Uint(ttl)) = f.get(2) {
                    p.expiration = Some(ttl.to_string().into());
                }
            }
            (MESSAGE_ANNOTATIONS, Value::Map(pairs)) => {
                for (k, v) in pairs {
                    let Value::Symbol(k) = k else { continue };
                    match (k.as_str(), v) {
                        ("x-exchange", Value::String(x)) => exchange = Some(x.clone()),
                        ("x-routing-key", Value::String(r)) => routing_key = Some(r.clone()),
                        _ => {}
                    }
                    if k.len() > 255 || !k.starts_with("x-") || skipped_annotation(k) {
                        continue;
                    }
                    let name = if k == "x-cc" { "CC" } else { k.as_str() };
                    if let Some(v) = field_value(v) {
                        headers.insert(name, v);
                    }
                }
            }
            (PROPERTIES, Value::List(f)) => {
                let get = |i: usize| f.get(i).filter(|v| !v.is_null());
                p.message_id = get(0).and_then(|v| message_id(v, "x-message-id", &mut headers));
                p.user_id = get(1).and_then(|v| match v {
                    Value::Binary(b) => std::str::from_utf8(b).ok().and_then(short),
                    _ => None,
                });
                to = get(2).and_then(str_of);
                subject = get(3).and_then(str_of);
                p.reply_to = get(4).and_then(str_of).as_deref().and_then(short);
                p.correlation_id = get(5).and_then(|v| message_id(v, "x-correlation-id", &mut headers));
                p.content_type = get(6).and_then(str_of).as_deref().and_then(short);
                p.content_encoding = get(7).and_then(str_of).as_deref().and_then(short);
                if let Some(Value::Timestamp(ms)) = get(9) {
                    p.timestamp = Some((*ms / 1000) as u64);
                }
                p.app_id = get(10).and_then(str_of).as_deref().and_then(short);
                // What the 0-9-1 fields cannot carry (to, subject, expiry,
                // group-sequence, reply-to-group-id, typed ids, ms of the
                // creation time) travels as the section itself.
                if !properties_exact(f) {
                    headers.insert(
                        AMQP10_PROPERTIES_HEADER,
                        FieldValue::LongStr(Bytes::copy_from_slice(section)),
                    );
                }
            }
            (APPLICATION_PROPERTIES, Value::Map(pairs)) => {
                let mut exact = true;
                for (k, v) in pairs {
                    let converted = match k {
                        Value::String(k) if k.len() <= 255 => field_value(v).map(|fv| (k, fv)),
                        _ => None,
                    };
                    match converted {
                        Some((k, fv)) => {
                            exact &= simple_exact(v);
                            headers.insert(k, fv);
                        }
                        None => exact = false,
                    }
                }
                // Types 0-9-1 has no match for (ulong, symbol, uuid, ms
                // timestamps, ...) keep the section as sent.
                if !exact {
                    headers.insert(
                        AMQP10_APP_PROPERTIES_HEADER,
                        FieldValue::LongStr(Bytes::copy_from_slice(section)),
                    );
                }
            }
            (DATA, Value::Binary(b)) if encoded_body.is_none() => data.extend_from_slice(b),
            (DATA | AMQP_VALUE | AMQP_SEQUENCE, _) => {
                encoded_body.get_or_insert(at);
            }
            _ => {}
        }
    }
    p.delivery_mode = Some(if durable { 2 } else { 1 });
    let body = match encoded_body {
        // The body sections (and any footer) as they came.
        Some(at) => {
            p.kind = Some(AMQP10_TYPE.into());
            Bytes::copy_from_slice(&message[at..])
        }
        None => data.freeze(),
    };
    if !headers.is_empty() {
        p.headers = Some(headers);
    }
    Ok(Converted {
        properties: p,
        body,
        to,
        subject,
        exchange,
        routing_key,
    })
}

/// Annotations RabbitMQ does not turn into headers: its own routing
/// annotations and the 0-9-1 property stand-ins.
fn skipped_annotation(k: &str) -> bool {
    k.starts_with("x-basic-") || matches!(k, "x-routing-key" | "x-exchange" | "x-death" | "x-opt-deaths")
}

/// Is `body` a run of encoded 1.0 body sections (and a footer)?
fn encoded_sections(body: &[u8]) -> bool {
    let mut rest = body;
    let mut any = false;
    while !rest.is_empty() {
        let Ok(v) = Value::decode(&mut rest) else {
            return false;
        };
        match v.as_described() {
            Some((DATA | AMQP_VALUE | AMQP_SEQUENCE | FOOTER, _)) => any = true,
            _ => return false,
        }
    }
    any
}

/// Write a stored message as a 1.0 message: header, message-annotations,
/// properties, application-properties, then the body.
pub fn to_amqp10(raw_properties: &Bytes, body: &[u8], info: DeliveryInfo, out: &mut BytesMut) {
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
            Value::Bool(!info.redelivered && info.delivery_count == 0),
            opt(
                (info.delivery_count > 0).then_some(info.delivery_count),
                Value::Uint,
            ),
        ],
    )
    .encode(out);

    let mut annotations = vec![
        (Value::symbol("x-exchange"), Value::string(info.exchange)),
        (Value::symbol("x-routing-key"), Value::string(info.routing_key)),
    ];
    let kept_props = kept_section(p.headers.as_ref(), AMQP10_PROPERTIES_HEADER, PROPERTIES);
    let kept_app = kept_section(
        p.headers.as_ref(),
        AMQP10_APP_PROPERTIES_HEADER,
        APPLICATION_PROPERTIES,
    );
    let mut app = Vec::new();
    if let Some(h) = &p.headers {
        for (k, v) in h.iter() {
            let k = k.to_str_lossy();
            if k == AMQP10_PROPERTIES_HEADER || k == AMQP10_APP_PROPERTIES_HEADER {
                continue;
            }
            if k.starts_with("x-") {
                if let Some(v) = value_of(v) {
                    annotations.push((Value::Symbol(k.into_owned()), v));
                }
            } else if k == "CC" && matches!(v, FieldValue::Array(_)) {
                if let Some(v) = value_of(v) {
                    annotations.push((Value::symbol("x-cc"), v));
                }
            } else if !matches!(v, FieldValue::Array(_) | FieldValue::Table(_)) {
                if let Some(v) = value_of(v) {
                    app.push((Value::String(k.into_owned()), v));
                }
            }
        }
    }
    let amqp10_body = p
        .kind
        .as_ref()
        .is_some_and(|t| t.as_bytes() == AMQP10_TYPE.as_bytes());
    if let (Some(t), false) = (&p.kind, amqp10_body) {
        annotations.push((
            Value::symbol("x-basic-type"),
            Value::String(t.to_str_lossy().into_owned()),
        ));
    }
    Value::described(MESSAGE_ANNOTATIONS, Value::Map(annotations)).encode(out);

    match kept_props {
        Some(section) => out.extend_from_slice(section),
        None => {
            let props = properties_of(&p);
            if matches!(props.as_described(), Some((_, Value::List(l))) if !l.is_empty()) {
                props.encode(out);
            }
        }
    }
    match kept_app {
        Some(section) => out.extend_from_slice(section),
        None if !app.is_empty() => Value::described(APPLICATION_PROPERTIES, Value::Map(app)).encode(out),
        None => {}
    }
    if amqp10_body && encoded_sections(body) {
        out.extend_from_slice(body);
    } else {
        Value::described(DATA, Value::Binary(Bytes::copy_from_slice(body))).encode(out);
    }
}

/// Does an application property's value come back from its 0-9-1 header
/// as it was ([`field_value`] then [`value_of`])? By type, without
/// allocating.
fn simple_exact(v: &Value) -> bool {
    match v {
        Value::Bool(_)
        | Value::Ubyte(_)
        | Value::Byte(_)
        | Value::Ushort(_)
        | Value::Short(_)
        | Value::Uint(_)
        | Value::Int(_)
        | Value::Long(_)
        | Value::Float(_)
        | Value::Double(_)
        | Value::Binary(_) => true,
        Value::String(s) => s.len() <= 4096 && !s.contains('\0'),
        Value::Timestamp(ms) => ms % 1000 == 0 && *ms >= 0,
        _ => false,
    }
}

/// Do the 0-9-1 fields carry this properties list exactly, so that
/// [`properties_of`] gives it back? Checked field by field, without
/// allocating: this runs for every 1.0 message published.
fn properties_exact(f: &[Value]) -> bool {
    let short = |s: &str| s.len() <= 255;
    // An id comes back a uuid when its text reads as one, else a string.
    let id = |v: &Value| match v {
        Value::Null => true,
        Value::String(s) => short(s) && parse_urn_uuid(s).is_none(),
        Value::Uuid(_) => true,
        _ => false,
    };
    f.iter().enumerate().all(|(i, v)| match (i, v) {
        (_, Value::Null) => true,
        (0 | 5, v) => id(v),
        (1, Value::Binary(b)) => b.len() <= 255 && std::str::from_utf8(b).is_ok(),
        (4 | 10, Value::String(s)) => short(s),
        (6 | 7, Value::Symbol(s)) => short(s),
        (9, Value::Timestamp(ms)) => ms % 1000 == 0 && *ms >= 0,
        // to, subject, absolute-expiry-time, group-sequence,
        // reply-to-group-id, and any other type.
        _ => false,
    })
}

/// The 1.0 properties section of 0-9-1 properties (RabbitMQ 4's
/// mc_amqpl): ids that read as `urn:uuid:` become uuids, user-id binary,
/// content-type and -encoding symbols, timestamp in milliseconds, app-id
/// as group-id.
fn properties_of(p: &BasicProperties) -> Value {
    let s = |v: &Option<ShortStr>| opt(v.as_ref(), |x| Value::String(x.to_str_lossy().into_owned()));
    let id = |v: &Option<ShortStr>| {
        opt(v.as_ref(), |x| {
            let x = x.to_str_lossy();
            match parse_urn_uuid(&x) {
                Some(u) => Value::Uuid(u),
                None => Value::String(x.into_owned()),
            }
        })
    };
    composite(
        PROPERTIES,
        vec![
            id(&p.message_id),
            opt(p.user_id.as_ref(), |u| Value::Binary(u.clone().into_bytes())),
            Value::Null,
            Value::Null,
            s(&p.reply_to),
            id(&p.correlation_id),
            opt(p.content_type.as_ref(), |x| {
                Value::Symbol(x.to_str_lossy().into_owned())
            }),
            opt(p.content_encoding.as_ref(), |x| {
                Value::Symbol(x.to_str_lossy().into_owned())
            }),
            Value::Null,
            opt(p.timestamp, |t| Value::Timestamp(t as i64 * 1000)),
            s(&p.app_id),
        ],
    )
}

/// How streams store messages routed to them, and hand them to AMQP
/// 0-9-1 and 1.0 consumers: AMQP 1.0 (RabbitMQ stores them so too, so
/// stream clients read them).
pub const STREAM_CODEC: warren_core::queue::StreamCodec = warren_core::queue::StreamCodec {
    encode: stream_encode,
    decode: stream_decode,
};

fn stream_encode(m: &warren_core::message::Message) -> Bytes {
    let mut out = BytesMut::new();
    let info = DeliveryInfo {
        exchange: &m.exchange.to_str_lossy(),
        routing_key: &m.routing_key.to_str_lossy(),
        redelivered: false,
        delivery_count: 0,
    };
    to_amqp10(&m.raw_properties, &m.body, info, &mut out);
    out.freeze()
}

fn stream_decode(b: &[u8]) -> Option<warren_core::message::Message> {
    let c = from_amqp10(b).ok()?;
    let exchange = c.exchange.as_deref().unwrap_or("");
    let key = c.routing_key.as_deref().unwrap_or("");
    warren_core::message::Message::from_publish(exchange.into(), key.into(), c.properties.to_bytes(), c.body)
        .ok()
        .map(|m| m.0)
}

/// The modified outcome's message-annotations (§3.4.5), merged into a
/// stored message's properties as `x-` headers (RabbitMQ takes only
/// `x-` keys). Returns None when nothing changes.
pub fn merge_annotations(raw_properties: &Bytes, annotations: &Value) -> Option<Bytes> {
    let Value::Map(pairs) = annotations else {
        return None;
    };
    let mut p = BasicProperties::decode(raw_properties.clone()).ok()?;
    let mut headers = p.headers.take().unwrap_or_default();
    let mut changed = false;
    for (k, v) in pairs {
        let Value::Symbol(k) = k else { continue };
        if k.len() > 255 || !k.starts_with("x-") || skipped_annotation(k) {
            continue;
        }
        if let Some(v) = field_value(v) {
            headers.insert(k, v);
            changed = true;
        }
    }
    if !changed {
        return None;
    }
    p.headers = Some(headers);
    Some(p.to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_amqp10::messaging;

    fn info() -> DeliveryInfo<'static> {
        DeliveryInfo {
            exchange: "",
            routing_key: "q",
            redelivered: false,
            delivery_count: 0,
        }
    }

    fn sections(b: &[u8]) -> Vec<(u64, Value)> {
        messaging::sections(b).unwrap()
    }

    fn section(b: &[u8], code: u64) -> Option<Value> {
        sections(b).into_iter().find(|s| s.0 == code).map(|s| s.1)
    }

    fn map_get<'a>(m: &'a Value, key: &str) -> Option<&'a Value> {
        let Value::Map(pairs) = m else { return None };
        pairs
            .iter()
            .find(|(k, _)| matches!(k, Value::String(s) | Value::Symbol(s) if s == key))
            .map(|(_, v)| v)
    }

    #[test]
    fn a_1_0_message_maps_to_0_9_1_and_back() {
        let mut m = BytesMut::new();
        composite(
            HEADER,
            vec![Value::Bool(true), Value::Ubyte(3), Value::Uint(5000)],
        )
        .encode(&mut m);
        Value::described(
            MESSAGE_ANNOTATIONS,
            Value::Map(vec![
                (Value::symbol("x-opt-tenant"), Value::string("t1")),
                (Value::symbol("x-routing-key"), Value::string("dropped")),
                (Value::symbol("not-x"), Value::string("dropped")),
            ]),
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
                Value::Null,
                Value::Null,
                Value::Timestamp(1_700_000_000_123),
                Value::string("group"),
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
        assert_eq!(p.kind, None, "data sections are a plain body");
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
        assert_eq!(p.timestamp, Some(1_700_000_000));
        assert_eq!(p.app_id.as_ref().map(|e| e.to_string()), Some("group".into()));
        let h = p.headers.as_ref().unwrap();
        assert_eq!(h.get("k"), Some(&FieldValue::I64(7)));
        assert_eq!(
            h.get("x-opt-tenant"),
            Some(&FieldValue::LongStr(Bytes::from_static(b"t1")))
        );
        assert_eq!(h.get("x-routing-key"), None);
        assert_eq!(h.get("not-x"), None);

        // And back, as a 1.0 consumer gets it.
        let mut out = BytesMut::new();
        to_amqp10(&p.to_bytes(), &c.body, info(), &mut out);
        let again = from_amqp10(&out).unwrap();
        assert_eq!(&again.body[..], b"hello");
        assert_eq!(again.properties.delivery_mode, Some(2));
        let h = again.properties.headers.as_ref().unwrap();
        assert_eq!(h.get("s"), Some(&FieldValue::LongStr(Bytes::from_static(b"v"))));
        assert_eq!(again.properties.message_id, p.message_id);
        let ma = section(&out, MESSAGE_ANNOTATIONS).unwrap();
        assert_eq!(map_get(&ma, "x-opt-tenant"), Some(&Value::string("t1")));
        assert_eq!(map_get(&ma, "x-routing-key"), Some(&Value::string("q")));
        assert_eq!(map_get(&ma, "x-exchange"), Some(&Value::string("")));
        let ap = section(&out, APPLICATION_PROPERTIES).unwrap();
        assert!(
            map_get(&ap, "x-opt-tenant").is_none(),
            "x- headers are annotations"
        );
    }

    #[test]
    fn an_amqp_value_body_survives_the_round_trip() {
        let mut m = BytesMut::new();
        let body = Value::Map(vec![(Value::string("a"), Value::Int(1))]);
        Value::described(AMQP_VALUE, body.clone()).encode(&mut m);
        let c = from_amqp10(&m).unwrap();
        assert_eq!(
            c.properties.kind.as_ref().map(|k| k.to_string()),
            Some(AMQP10_TYPE.into())
        );
        assert_eq!(&c.body[..], &m[..], "a 0-9-1 consumer gets the encoded section");
        let mut out = BytesMut::new();
        to_amqp10(&c.properties.to_bytes(), &c.body, info(), &mut out);
        assert_eq!(section(&out, AMQP_VALUE), Some(body));
        assert!(section(&out, DATA).is_none());
        assert!(section(&out, MESSAGE_ANNOTATIONS).is_some_and(|ma| map_get(&ma, "x-basic-type").is_none()));
    }

    #[test]
    fn a_0_9_1_message_that_only_claims_to_be_1_0_gets_a_data_section() {
        let p = BasicProperties {
            kind: Some(AMQP10_TYPE.into()),
            ..Default::default()
        };
        let mut out = BytesMut::new();
        to_amqp10(&p.to_bytes(), b"not sections", info(), &mut out);
        assert_eq!(
            section(&out, DATA),
            Some(Value::Binary(Bytes::from_static(b"not sections")))
        );
    }

    #[test]
    fn ids_durability_and_delivery_counts() {
        // No header: durable, as RabbitMQ 4 has it.
        let mut m = BytesMut::new();
        let uuid = [0x12u8; 16];
        composite(
            PROPERTIES,
            vec![
                Value::Uuid(uuid),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Binary(Bytes::from_static(b"\x00\x01")),
            ],
        )
        .encode(&mut m);
        Value::described(DATA, Value::Binary(Bytes::from_static(b"x"))).encode(&mut m);
        let c = from_amqp10(&m).unwrap();
        assert_eq!(c.properties.delivery_mode, Some(2));
        assert_eq!(
            c.properties.message_id.as_ref().map(|s| s.to_string()),
            Some("urn:uuid:12121212-1212-1212-1212-121212121212".into())
        );
        assert_eq!(c.properties.correlation_id, None);
        assert_eq!(
            c.properties.headers.as_ref().unwrap().get("x-correlation-id"),
            Some(&FieldValue::Bytes(Bytes::from_static(b"\x00\x01")))
        );
        let mut out = BytesMut::new();
        let i = DeliveryInfo {
            redelivered: true,
            delivery_count: 2,
            ..info()
        };
        to_amqp10(&c.properties.to_bytes(), &c.body, i, &mut out);
        let Some(Value::List(h)) = section(&out, HEADER) else {
            panic!()
        };
        assert_eq!(h.get(3), Some(&Value::Bool(false)), "first-acquirer");
        assert_eq!(h.get(4), Some(&Value::Uint(2)), "delivery-count");
        let Some(Value::List(props)) = section(&out, PROPERTIES) else {
            panic!()
        };
        assert_eq!(props.first(), Some(&Value::Uuid(uuid)), "the uuid comes back");

        // durable=false is transient.
        let mut m = BytesMut::new();
        composite(HEADER, vec![Value::Bool(false)]).encode(&mut m);
        assert_eq!(from_amqp10(&m).unwrap().properties.delivery_mode, Some(1));
    }

    #[test]
    fn modified_annotations_merge_into_x_headers() {
        let mut h = FieldTable::new();
        h.insert("k", FieldValue::I32(1));
        let p = BasicProperties {
            headers: Some(h),
            ..Default::default()
        };
        let ann = Value::Map(vec![
            (Value::symbol("x-opt-reason"), Value::string("busy")),
            (Value::symbol("plain"), Value::string("ignored")),
        ]);
        let merged = merge_annotations(&p.to_bytes(), &ann).unwrap();
        let p = BasicProperties::decode(merged).unwrap();
        let h = p.headers.unwrap();
        assert_eq!(h.get("k"), Some(&FieldValue::I32(1)));
        assert_eq!(
            h.get("x-opt-reason"),
            Some(&FieldValue::LongStr(Bytes::from_static(b"busy")))
        );
        assert_eq!(h.get("plain"), None);
        assert!(merge_annotations(&Bytes::new(), &Value::Map(vec![])).is_none());
    }

    /// Random bytes, and random cuts and flips of a real message, never
    /// panic the decoder or the encoder behind it.
    /// `properties_exact` says yes exactly when the 0-9-1 fields give the
    /// list back.
    #[test]
    fn the_exactness_check_agrees_with_the_round_trip() {
        let uuid = [9u8; 16];
        let samples = [
            Value::Null,
            Value::string("id-1"),
            Value::string(urn_uuid(&uuid).as_str()),
            Value::String("x".repeat(256)),
            Value::Ulong(5),
            Value::Uuid(uuid),
            Value::Binary(Bytes::from_static(b"guest")),
            Value::Binary(Bytes::from_static(&[0xff, 0xfe])),
            Value::symbol("text/plain"),
            Value::Timestamp(1_764_000_000_000),
            Value::Timestamp(1_764_000_000_001),
            Value::Uint(3),
        ];
        for field in 0..13 {
            for v in &samples {
                let mut f = vec![Value::Null; 13];
                f[field] = v.clone();
                let mut m = BytesMut::new();
                composite(PROPERTIES, f.clone()).encode(&mut m);
                let c = from_amqp10(&m).unwrap();
                let round_trip = properties_of(&c.properties) == composite(PROPERTIES, f.clone());
                assert_eq!(properties_exact(&f), round_trip, "field {field}: {v:?}");
            }
        }
    }

    #[test]
    fn the_simple_value_check_agrees_with_the_round_trip() {
        let samples = [
            Value::Bool(true),
            Value::Ubyte(1),
            Value::Ushort(2),
            Value::Uint(3),
            Value::Ulong(4),
            Value::Int(-5),
            Value::Long(-6),
            Value::Double(0.5),
            Value::string("text"),
            Value::String("x".repeat(5000)),
            Value::string("nul\0inside"),
            Value::symbol("sym"),
            Value::Binary(Bytes::from_static(&[0, 1])),
            Value::Uuid([1; 16]),
            Value::Timestamp(5_000),
            Value::Timestamp(5_001),
            Value::Null,
        ];
        for v in &samples {
            let round_trip = field_value(v).and_then(|f| value_of(&f)).as_ref() == Some(v);
            assert_eq!(simple_exact(v), round_trip, "{v:?}");
        }
    }

    #[test]
    fn random_input_is_an_error_not_a_panic() {
        let mut real = BytesMut::new();
        composite(HEADER, vec![Value::Bool(true)]).encode(&mut real);
        Value::described(
            MESSAGE_ANNOTATIONS,
            Value::Map(vec![(Value::symbol("x-a"), Value::List(vec![Value::Int(1)]))]),
        )
        .encode(&mut real);
        Value::described(AMQP_VALUE, Value::Map(vec![(Value::string("k"), Value::Long(1))]))
            .encode(&mut real);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..20_000 {
            let mut m = if i % 2 == 0 {
                real.to_vec()
            } else {
                (0..next() % 64).map(|_| next() as u8).collect()
            };
            if !m.is_empty() {
                let at = next() as usize % m.len();
                m[at] ^= next() as u8;
                m.truncate(next() as usize % (m.len() + 1));
            }
            if let Ok(c) = from_amqp10(&m) {
                let mut out = BytesMut::new();
                to_amqp10(&c.properties.to_bytes(), &c.body, info(), &mut out);
            }
        }
    }

    #[test]
    fn a_bare_body_and_garbage() {
        let mut m = BytesMut::new();
        Value::described(AMQP_VALUE, Value::string("text")).encode(&mut m);
        let c = from_amqp10(&m).unwrap();
        assert_eq!(&c.body[..], &m[..]);
        assert!(from_amqp10(&[0xff]).is_err());
        assert!(from_amqp10(&[0x40]).is_err(), "a section must be described");
    }
}
