//! The protocol-neutral message: what a publisher sent, kept as received.
//! Properties stay in their wire encoding so a delivery writes them out
//! without re-encoding; only the few fields routing and queues need are read
//! once, at publish. A message is shared (`Arc`) by every queue it lands in.

use std::sync::Arc;

use bytes::Bytes;
use warren_amqp091::properties::RoutingHints;
use warren_amqp091::{BasicProperties, CodecError, FieldTable, ShortStr};

use crate::error::BrokerError;

#[derive(Debug, Clone)]
pub struct Message {
    /// The exchange it was published to, as the delivery reports it.
    pub exchange: ShortStr,
    pub routing_key: ShortStr,
    /// 0-9-1 property flags and list, as on the wire.
    pub raw_properties: Bytes,
    pub body: Bytes,
    /// Priority property, 0 when absent (0-9-1 basic.priority).
    pub priority: u8,
    /// delivery_mode 2.
    pub persistent: bool,
    /// Per-message TTL from the expiration property, in milliseconds.
    pub expiration_ms: Option<u64>,
}

impl Message {
    /// Build a message from a publish, reading what routing needs. Returns
    /// the decoded properties too when the message has headers (headers
    /// exchanges and CC/BCC need them), reply_to or user_id (the front end
    /// checks those), so they are decoded once at most.
    pub fn from_publish(
        exchange: ShortStr,
        routing_key: ShortStr,
        raw_properties: Bytes,
        body: Bytes,
    ) -> Result<(Message, Option<BasicProperties>), BrokerError> {
        let bad = |e: CodecError| BrokerError::CommandInvalid(format!("malformed content header: {e}"));
        let hints = RoutingHints::scan(&raw_properties).map_err(bad)?;
        let mut decoded = None;
        let mut expiration_ms = None;
        if hints.has_headers || hints.has_expiration || hints.has_reply_to || hints.has_user_id {
            let p = BasicProperties::decode(raw_properties.clone()).map_err(bad)?;
            if let Some(e) = &p.expiration {
                expiration_ms = Some(parse_expiration(e)?);
            }
            if hints.has_headers || hints.has_reply_to || hints.has_user_id {
                decoded = Some(p);
            }
        }
        Ok((
            Message {
                exchange,
                routing_key,
                raw_properties,
                body,
                priority: hints.priority.unwrap_or(0),
                persistent: hints.delivery_mode == Some(2),
                expiration_ms,
            },
            decoded,
        ))
    }

    /// Bytes this message holds, for memory accounting and x-max-length-bytes
    /// (RabbitMQ counts body bytes only for the latter).
    pub fn body_size(&self) -> usize {
        self.body.len()
    }

    pub fn memory_size(&self) -> usize {
        self.body.len() + self.raw_properties.len() + self.routing_key.len() + 64
    }

    pub fn properties(&self) -> Result<BasicProperties, CodecError> {
        BasicProperties::decode(self.raw_properties.clone())
    }

    /// The same message with new properties (dead-lettering, reply-to).
    pub fn with_properties(&self, p: &BasicProperties) -> Message {
        let mut m = self.clone();
        m.raw_properties = p.to_bytes();
        m.expiration_ms = match &p.expiration {
            Some(e) => parse_expiration(e).ok(),
            None => None,
        };
        m
    }

    pub fn headers(&self) -> Option<FieldTable> {
        self.properties().ok().and_then(|p| p.headers)
    }
}

pub type MessageRef = Arc<Message>;

/// The expiration property is a decimal count of milliseconds
/// (RabbitMQ's per-message TTL); anything else is refused.
pub fn parse_expiration(e: &ShortStr) -> Result<u64, BrokerError> {
    let s = std::str::from_utf8(e).ok();
    match s.and_then(|s| s.parse::<u64>().ok()) {
        Some(v) => Ok(v),
        None => Err(BrokerError::PreconditionFailed(format!(
            "invalid expiration '{}': no_integer",
            e
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_hints_and_expiration() {
        let p = BasicProperties {
            delivery_mode: Some(2),
            priority: Some(3),
            expiration: Some("1500".into()),
            ..Default::default()
        };
        let (m, decoded) =
            Message::from_publish("x".into(), "k".into(), p.to_bytes(), Bytes::from_static(b"hi")).unwrap();
        assert!(m.persistent);
        assert_eq!(m.priority, 3);
        assert_eq!(m.expiration_ms, Some(1500));
        assert!(decoded.is_none());
    }

    #[test]
    fn bad_expiration_is_precondition_failed() {
        let p = BasicProperties {
            expiration: Some("soon".into()),
            ..Default::default()
        };
        let err = Message::from_publish("".into(), "k".into(), p.to_bytes(), Bytes::new()).unwrap_err();
        assert_eq!(err.reply_code(), 406);
    }
}
