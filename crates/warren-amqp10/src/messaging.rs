//! Messaging (spec part 3): sources and targets as links use them, the
//! delivery states, and a bare message's sections (header, properties,
//! application-properties, data / amqp-value) as a sender writes them and
//! a receiver finds them.

use bytes::{Bytes, BytesMut};

use crate::composite::{composite, opt, Fields};
use crate::error::CodecError;
use crate::value::Value;

pub const SOURCE: u64 = 0x28;
pub const TARGET: u64 = 0x29;
pub const RECEIVED: u64 = 0x23;
pub const ACCEPTED: u64 = 0x24;
pub const REJECTED: u64 = 0x25;
pub const RELEASED: u64 = 0x26;
pub const MODIFIED: u64 = 0x27;

pub const HEADER: u64 = 0x70;
pub const DELIVERY_ANNOTATIONS: u64 = 0x71;
pub const MESSAGE_ANNOTATIONS: u64 = 0x72;
pub const PROPERTIES: u64 = 0x73;
pub const APPLICATION_PROPERTIES: u64 = 0x74;
pub const DATA: u64 = 0x75;
pub const AMQP_SEQUENCE: u64 = 0x76;
pub const AMQP_VALUE: u64 = 0x77;
pub const FOOTER: u64 = 0x78;

/// A source with just an address (what a receiving link needs).
pub fn source(address: &str) -> Value {
    composite(SOURCE, vec![Value::String(address.to_string())])
}

/// A target with just an address.
pub fn target(address: &str) -> Value {
    composite(TARGET, vec![Value::String(address.to_string())])
}

/// The address of a source or target value, if it has one.
pub fn address(v: &Value) -> Option<String> {
    let (code, _) = v.as_described()?;
    let f = Fields::of(v, code, "terminus").ok()?;
    f.opt_string(0).ok().flatten()
}

/// The outcome a delivery state stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Accepted,
    Rejected,
    Released,
    Modified,
    Received,
}

pub fn accepted() -> Value {
    Value::described(ACCEPTED, Value::List(vec![]))
}

pub fn released() -> Value {
    Value::described(RELEASED, Value::List(vec![]))
}

pub fn outcome(state: &Value) -> Option<Outcome> {
    match state.as_described()?.0 {
        ACCEPTED => Some(Outcome::Accepted),
        REJECTED => Some(Outcome::Rejected),
        RELEASED => Some(Outcome::Released),
        MODIFIED => Some(Outcome::Modified),
        RECEIVED => Some(Outcome::Received),
        _ => None,
    }
}

/// The header section (3.2.1).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Header {
    pub durable: bool,
    pub priority: Option<u8>,
    pub ttl: Option<u32>,
}

/// Encode a message: an optional header, then one data section.
pub fn encode_message(out: &mut BytesMut, header: &Header, body: &[u8]) {
    if header.durable || header.priority.is_some() || header.ttl.is_some() {
        composite(
            HEADER,
            vec![
                Value::Bool(header.durable),
                opt(header.priority, Value::Ubyte),
                opt(header.ttl, Value::Uint),
            ],
        )
        .encode(out);
    }
    Value::described(DATA, Value::Binary(Bytes::copy_from_slice(body))).encode(out);
}

/// The sections of a message, in order, with their descriptor codes.
pub fn sections(mut bytes: &[u8]) -> Result<Vec<(u64, Value)>, CodecError> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let v = Value::decode(&mut bytes)?;
        let Some((code, inner)) = v.as_described() else {
            return Err(CodecError::invalid("message", "a section is not described"));
        };
        out.push((code, inner.clone()));
    }
    Ok(out)
}

/// The body of a message with data sections, concatenated.
pub fn data_body(bytes: &[u8]) -> Result<Bytes, CodecError> {
    let mut body = BytesMut::new();
    for (code, v) in sections(bytes)? {
        if let (DATA, Value::Binary(b)) = (code, v) {
            body.extend_from_slice(&b);
        }
    }
    Ok(body.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_comes_apart_again() {
        let mut b = BytesMut::new();
        encode_message(
            &mut b,
            &Header {
                durable: true,
                ..Default::default()
            },
            b"hello",
        );
        let s = sections(&b).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].0, HEADER);
        assert_eq!(&data_body(&b).unwrap()[..], b"hello");
        let mut plain = BytesMut::new();
        encode_message(&mut plain, &Header::default(), b"x");
        assert_eq!(sections(&plain).unwrap().len(), 1, "no header when all defaults");
    }

    #[test]
    fn termini_and_outcomes() {
        assert_eq!(address(&source("/queues/q")).as_deref(), Some("/queues/q"));
        assert_eq!(address(&target("/amq/queue/x")).as_deref(), Some("/amq/queue/x"));
        assert_eq!(outcome(&accepted()), Some(Outcome::Accepted));
        assert_eq!(outcome(&released()), Some(Outcome::Released));
        assert_eq!(outcome(&Value::Null), None);
    }
}
