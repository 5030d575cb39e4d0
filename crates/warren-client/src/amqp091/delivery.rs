//! A delivery as the application gets it (from a consumer or
//! basic.get): its fields, its properties decoded when first read, the
//! trace context it carries, and the [`Acker`] that settles it from any
//! task.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use warren_amqp091::frame::write_method;
use warren_amqp091::methods::*;
use warren_amqp091::{BasicProperties, FieldValue, Method, ShortStr};

use super::error::Error;
use super::outbound::Outbound;
use crate::trace::{TraceContext, TRACEPARENT, TRACESTATE};

/// A message delivered to a consumer (or got with basic.get).
#[derive(Debug)]
pub struct Delivery {
    /// The broker's number for it on its channel (what an ack names).
    pub delivery_tag: u64,
    /// Delivered before and not acknowledged (requeued, or the
    /// connection was lost).
    pub redelivered: bool,
    /// The exchange it was published to (empty: the default exchange).
    pub exchange: ShortStr,
    /// The routing key it was published with.
    pub routing_key: ShortStr,
    /// The consumer's tag (empty for basic.get).
    pub consumer_tag: ShortStr,
    /// The body, as it came off the socket.
    pub body: Bytes,
    /// The properties as they came (their layout checked on arrival).
    raw_properties: Bytes,
    /// Decoded on first use: a consumer of many small messages that never
    /// reads them pays nothing for them.
    properties: OnceLock<Box<BasicProperties>>,
    pub(crate) acker: Acker,
}

impl Delivery {
    /// A delivery of `body` with `raw_properties`, checked by
    /// [`check_properties`] on arrival.
    // One argument per field of basic.deliver and the content: a struct
    // to gather them would be this one.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        delivery_tag: u64,
        redelivered: bool,
        exchange: ShortStr,
        routing_key: ShortStr,
        consumer_tag: ShortStr,
        raw_properties: Bytes,
        body: Bytes,
        acker: Acker,
    ) -> Delivery {
        Delivery {
            delivery_tag,
            redelivered,
            exchange,
            routing_key,
            consumer_tag,
            body,
            raw_properties,
            properties: OnceLock::new(),
            acker,
        }
    }

    /// Its properties (headers, content type, correlation id, ...).
    ///
    /// They are decoded the first time this is called. Their layout was
    /// checked when the delivery arrived; a headers table whose contents
    /// do not decode (a broker bug) reads as no properties, with a warning
    /// logged.
    ///
    /// ```no_run
    /// # async fn f(consumer: &mut warren_client::amqp091::Consumer) {
    /// if let Some(d) = consumer.next().await {
    ///     let kind = d.properties().content_type.as_ref().map(|c| c.to_str_lossy());
    ///     println!("{kind:?}");
    /// }
    /// # }
    /// ```
    pub fn properties(&self) -> &BasicProperties {
        self.properties
            .get_or_init(|| match BasicProperties::decode(self.raw_properties.clone()) {
                Ok(p) => Box::new(p),
                Err(e) => {
                    tracing::warn!(
                        delivery_tag = self.delivery_tag,
                        "a delivery's properties do not decode: {e}"
                    );
                    Box::default()
                }
            })
    }

    /// Whether its properties carry a headers table (read from the
    /// property flags, without decoding).
    fn has_headers(&self) -> bool {
        self.raw_properties
            .first()
            .is_some_and(|flags| flags & HEADERS_FLAG != 0)
    }

    /// Acknowledge this delivery.
    pub async fn ack(&self) -> Result<(), Error> {
        self.acker.ack(false).await
    }

    /// Reject it; `requeue` puts it back in the queue, otherwise it is
    /// dead-lettered or dropped.
    pub async fn nack(&self, requeue: bool) -> Result<(), Error> {
        self.acker.nack(false, requeue).await
    }

    /// The handle that settles this delivery, to move to another task.
    pub fn acker(&self) -> Acker {
        self.acker.clone()
    }

    /// The W3C trace context its publisher sent (`traceparent`, with
    /// `tracestate`), if any and well formed.
    pub fn trace_context(&self) -> Option<TraceContext> {
        if !self.has_headers() {
            return None;
        }
        let headers = self.properties().headers.as_ref()?;
        let text = |name| match headers.get(name)? {
            FieldValue::LongStr(b) | FieldValue::Bytes(b) => std::str::from_utf8(b).ok().map(str::to_owned),
            _ => None,
        };
        let context = TraceContext::parse(&text(TRACEPARENT)?)?;
        Some(match text(TRACESTATE) {
            Some(state) => context.with_tracestate(state),
            None => context,
        })
    }

    /// The body as a value, in the codec's format (feature `serde`;
    /// `Json` with `json`). A content type other than the codec's is
    /// refused; none at all is read as the codec's.
    ///
    #[cfg(feature = "serde")]
    pub fn decode<C: crate::codec::Codec, T: serde::de::DeserializeOwned>(&self) -> Result<T, Error> {
        if let Some(ct) = &self.properties().content_type {
            // Parameters (`; charset=utf-8`) do not change the format.
            let ct = ct.to_str_lossy();
            let essence = ct.split(';').next().unwrap_or_default().trim();
            if !essence.eq_ignore_ascii_case(C::CONTENT_TYPE) {
                return Err(crate::codec::CodecError::new(
                    C::CONTENT_TYPE,
                    format!("the message's content type is {ct}"),
                )
                .into());
            }
        }
        Ok(C::decode(&self.body)?)
    }
}

/// The headers bit of a content header's property flags (the first of
/// their two bytes: bit 13 of the 16).
const HEADERS_FLAG: u8 = 0x20;

/// Check a delivery's properties' layout (flags, lengths) without
/// decoding them: what arrives malformed is refused then, not when the
/// application first reads the properties.
pub(crate) fn check_properties(raw: &[u8]) -> Result<(), warren_amqp091::CodecError> {
    warren_amqp091::properties::RoutingHints::scan(raw).map(|_| ())
}

/// Settles one delivery (and, with `multiple`, every earlier one of its
/// channel).
#[derive(Clone)]
pub struct Acker {
    pub(crate) wire: Arc<Outbound>,
    pub(crate) channel: u16,
    pub(crate) tag: u64,
}

impl std::fmt::Debug for Acker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acker")
            .field("channel", &self.channel)
            .field("tag", &self.tag)
            .finish()
    }
}

impl Acker {
    async fn send(&self, m: Method) -> Result<(), Error> {
        // Only on the wire that brought the delivery (it fails once that
        // has ended): on another its tag would name another message.
        self.wire
            .send_with(|buf| write_method(buf, self.channel, &m))
            .await
            .map_err(|_| Error::ConnectionLost("the connection ended before the ack".into()))
    }

    /// basic.ack. After the connection that brought the delivery was
    /// lost this is [`Error::ConnectionLost`]: the broker has put the
    /// message back and delivers it again.
    pub async fn ack(&self, multiple: bool) -> Result<(), Error> {
        self.send(Method::BasicAck(BasicAck {
            delivery_tag: self.tag,
            multiple,
        }))
        .await
    }

    /// basic.nack.
    pub async fn nack(&self, multiple: bool, requeue: bool) -> Result<(), Error> {
        self.send(Method::BasicNack(BasicNack {
            delivery_tag: self.tag,
            multiple,
            requeue,
        }))
        .await
    }

    /// basic.reject.
    pub async fn reject(&self, requeue: bool) -> Result<(), Error> {
        self.send(Method::BasicReject(BasicReject {
            delivery_tag: self.tag,
            requeue,
        }))
        .await
    }
}
