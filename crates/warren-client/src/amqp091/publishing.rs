//! Publishing on a [`Channel`]: one message ([`Channel::publish`]) or a
//! batch ([`Channel::publish_batch`]), encoded straight into the
//! connection's outbox and, in confirm mode, numbered under the same lock
//! so confirms follow the order on the wire.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::sync::futures::Notified;
use warren_amqp091::frame::{
    write_basic_publish, write_body, write_content_header, write_content_header_raw,
};
use warren_amqp091::{BasicProperties, FieldValue, ShortStr};

use super::channel::Channel;
use super::channel_state::ChannelState;
use super::deferral::flush_here;
use super::error::Error;
use super::options::PublishOptions;
use super::publish::{Confirm, PUBLISH_SEQ_HEADER};
use super::wire::Wire;
use crate::trace::{TraceContext, TRACEPARENT, TRACESTATE};

/// The most bytes of one batch encoded under the outbox's lock at once;
/// a larger batch goes in several turns.
const BATCH_BYTES: usize = 256 * 1024;

/// A message to publish in a batch ([`Channel::publish_batch`]): where it
/// goes, whether it must be routed, its properties and body.
///
/// ```
/// use warren_client::amqp091::{Message, Properties};
///
/// let m = Message::new("orders", "eu.created", &b"{}"[..])
///     .properties(Properties { content_type: Some("application/json".into()), ..Default::default() })
///     .mandatory();
/// assert_eq!(m.routing_key, "eu.created");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Message {
    /// The exchange ("" for the default exchange). A [`ShortStr`] shares
    /// its bytes when cloned: messages of a batch to one queue can all
    /// hold the one name.
    pub exchange: ShortStr,
    /// The routing key.
    pub routing_key: ShortStr,
    /// Return the message if no queue takes it.
    pub mandatory: bool,
    /// Its properties.
    pub properties: BasicProperties,
    /// Its body.
    pub body: Bytes,
}

impl Message {
    /// A message for `exchange` with `routing_key`, default properties.
    ///
    /// The names may be `&str`, `String` or [`ShortStr`]; a `ShortStr`
    /// made once and cloned per message costs no allocation per message:
    ///
    /// ```
    /// use warren_client::amqp091::{Message, ShortStr};
    ///
    /// let queue = ShortStr::from("orders");
    /// let batch: Vec<Message> = (0..100)
    ///     .map(|i: u32| Message::new("", queue.clone(), i.to_be_bytes().to_vec()))
    ///     .collect();
    /// assert_eq!(batch[7].routing_key, "orders");
    /// ```
    pub fn new(
        exchange: impl Into<ShortStr>,
        routing_key: impl Into<ShortStr>,
        body: impl Into<Bytes>,
    ) -> Message {
        Message {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            mandatory: false,
            properties: BasicProperties::default(),
            body: body.into(),
        }
    }

    /// With these properties.
    pub fn properties(mut self, properties: BasicProperties) -> Message {
        self.properties = properties;
        self
    }

    /// Published with `mandatory`: returned
    /// ([`super::Confirmation::Returned`]) if no queue takes it.
    pub fn mandatory(mut self) -> Message {
        self.mandatory = true;
        self
    }

    /// A message whose body is `value` in the codec's format, its
    /// content type set to the codec's (feature `serde`; `Json` with
    /// `json`).
    ///
    /// ```
    /// # #[cfg(feature = "json")] {
    /// use warren_client::amqp091::Message;
    /// use warren_client::codec::Json;
    ///
    /// let m = Message::encode::<Json, _>("", "orders", &serde_json::json!({"id": 7})).unwrap();
    /// assert_eq!(m.properties.content_type.as_ref().unwrap().to_str_lossy(), "application/json");
    /// assert_eq!(&m.body[..], br#"{"id":7}"#);
    /// # }
    /// ```
    #[cfg(feature = "serde")]
    pub fn encode<C: crate::codec::Codec, T: serde::Serialize + ?Sized>(
        exchange: &str,
        routing_key: &str,
        value: &T,
    ) -> Result<Message, Error> {
        let body = C::encode(value)?;
        let mut m = Message::new(exchange, routing_key, body);
        m.properties.content_type = Some(C::CONTENT_TYPE.into());
        Ok(m)
    }
}

impl Channel {
    /// Publish `body` to `exchange` with `routing_key`.
    pub async fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        properties: BasicProperties,
        body: Bytes,
    ) -> Result<Confirm, Error> {
        self.publish_with(exchange, routing_key, PublishOptions::default(), properties, body)
            .await
    }

    /// [`Self::publish`] with options (`mandatory`). In confirm mode it
    /// waits while [`super::DEFAULT_IN_FLIGHT`] publishes await their confirms;
    /// it waits too while the broker has blocked publishing or the
    /// connection is recovering. A publish unconfirmed when the
    /// connection is lost resolves to [`Error::ConnectionLost`].
    pub async fn publish_with(
        &self,
        exchange: &str,
        routing_key: &str,
        options: PublishOptions,
        properties: BasicProperties,
        body: Bytes,
    ) -> Result<Confirm, Error> {
        let state = &self.inner.state;
        let id = state.id;
        let trace = self.current_trace();
        loop {
            let wire = self.publishing_wire().await?;
            let keep = state.republish.load(Ordering::Relaxed);
            let frame_max = wire.frame_max;
            let wait = {
                // Numbered and queued under the confirms lock, so sequence
                // numbers follow the order on the wire; a wire that ends
                // after this fails (or holds) what is pushed here.
                let mut confirms = state.confirms.lock();
                if confirms.room() == 0 {
                    // Registered before the lock goes: no confirm is missed.
                    Wait::slot(state)
                } else {
                    // A mandatory publish carries its id, for its return.
                    let publish_id = (options.mandatory && confirms.enabled).then(|| confirms.next_id());
                    let tagged = outgoing(&properties, publish_id, trace.as_ref());
                    let properties = tagged.as_ref().unwrap_or(&properties);
                    let mut encode = Some(|buf: &mut BytesMut| {
                        let start = buf.len();
                        encode_publish(
                            buf,
                            Target {
                                channel: id,
                                frame_max,
                            },
                            exchange.as_bytes(),
                            routing_key.as_bytes(),
                            options.mandatory,
                            Header::Properties(properties),
                            &body,
                        );
                        // Kept to publish again after a recovery, when asked for.
                        keep.then(|| Bytes::copy_from_slice(&buf[start..]))
                    });
                    let sent = match confirms.enabled {
                        true => wire.try_publish_with(&mut encode, confirms.max),
                        false => wire.try_send_with(&mut encode),
                    };
                    match sent {
                        Ok(Some(kept)) => {
                            return Ok(match confirms.enabled {
                                true => Confirm::waiting(confirms.push(kept)),
                                false => Confirm::sent(),
                            });
                        }
                        Ok(None) => Wait::Outbox,
                        // The wire ended: the next (after recovery) or the error.
                        Err(_) => Wait::Nothing,
                    }
                }
            };
            wait.until(&wire).await;
        }
    }

    /// The wire to publish on now: after a recovery or a broker's alarm,
    /// if one is under way, and only while the channel is open.
    async fn publishing_wire(&self) -> Result<Arc<Wire>, Error> {
        let wire = self.inner.core.wire().await?;
        self.inner.core.unblocked().await;
        self.inner.state.check()?;
        Ok(wire)
    }

    /// The trace context publishes carry a child of, if propagation is on.
    fn current_trace(&self) -> Option<TraceContext> {
        match self.inner.core.settings.trace_propagation {
            true => TraceContext::current(),
            false => None,
        }
    }

    /// Publish one [`Message`] (as [`Self::publish_with`]).
    pub async fn publish_message(&self, message: Message) -> Result<Confirm, Error> {
        let options = PublishOptions {
            mandatory: message.mandatory,
        };
        self.publish_with(
            &message.exchange.to_str_lossy(),
            &message.routing_key.to_str_lossy(),
            options,
            message.properties,
            message.body,
        )
        .await
    }

    /// Publish `messages` in order, as few writes as possible: as many as
    /// the in-flight limit lets go at once are encoded together into the
    /// connection's outbox and leave in one write. Returns one
    /// [`Confirm`] per message, in order. In confirm mode it waits, as
    /// [`Self::publish`] does, while the in-flight limit is reached, the
    /// broker has blocked publishing, or the connection is recovering;
    /// when it fails, the messages before the failure were published and
    /// their confirms are lost with the error (use [`Self::publish`] to
    /// follow each). The same holds when the call is dropped before it
    /// returns (a `select!`, a timeout): what went out is published,
    /// the rest is not, and no confirm reaches the caller.
    pub async fn publish_batch<I>(&self, messages: I) -> Result<Vec<Confirm>, Error>
    where
        I: IntoIterator<Item = Message>,
    {
        let trace = self.current_trace();
        self.publish_each(messages, |buf, at, m: Message, publish_id| {
            let publish_id = publish_id.filter(|_| m.mandatory);
            let tagged = outgoing(&m.properties, publish_id, trace.as_ref());
            encode_publish(
                buf,
                at,
                m.exchange.as_bytes(),
                m.routing_key.as_bytes(),
                m.mandatory,
                Header::Properties(tagged.as_ref().unwrap_or(&m.properties)),
                &m.body,
            );
        })
        .await
    }

    /// Publish each of `bodies`, in order, to `exchange` with
    /// `routing_key` and the same `properties`: [`Self::publish_batch`]
    /// for messages that differ only in their bodies, with the
    /// properties encoded once rather than per message (and no
    /// [`Message`] built for each). Not mandatory; publish a [`Message`]
    /// for that.
    ///
    /// ```no_run
    /// use bytes::Bytes;
    /// use warren_client::amqp091::{Confirmation, Connection, Properties};
    ///
    /// # async fn run() -> Result<(), warren_client::amqp091::Error> {
    /// let conn = Connection::open("amqp://guest:guest@localhost:5672/%2f").await?;
    /// let ch = conn.channel().await?;
    /// ch.confirm_select().await?;
    /// let persistent = Properties { delivery_mode: Some(2), ..Default::default() };
    /// let bodies = (0..100u32).map(|i| Bytes::from(i.to_string()));
    /// for confirm in ch.publish_bodies("", "orders", &persistent, bodies).await? {
    ///     assert_eq!(confirm.await?, Confirmation::Ack);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn publish_bodies<I>(
        &self,
        exchange: &str,
        routing_key: &str,
        properties: &BasicProperties,
        bodies: I,
    ) -> Result<Vec<Confirm>, Error>
    where
        I: IntoIterator<Item = Bytes>,
    {
        let trace = self.current_trace();
        let mut encoded = BytesMut::new();
        properties.encode(&mut encoded);
        self.publish_each(bodies, |buf, at, body: Bytes, _| {
            // Inside a trace scope each message carries a child context
            // of its own (unless the properties hold one already), so its
            // properties differ and are encoded each time.
            let tagged = trace.as_ref().and_then(|t| outgoing(properties, None, Some(t)));
            let header = match &tagged {
                Some(p) => Header::Properties(p),
                None => Header::Encoded(&encoded),
            };
            encode_publish(
                buf,
                at,
                exchange.as_bytes(),
                routing_key.as_bytes(),
                false,
                header,
                &body,
            );
        })
        .await
    }

    /// The batch loop under [`Self::publish_batch`] and
    /// [`Self::publish_bodies`]: as many items as may go at once are
    /// handed to `put` to encode into the outbox (with the id a
    /// mandatory publish would carry, in confirm mode), numbered under
    /// the confirms lock, and written in one go.
    async fn publish_each<T, I, F>(&self, items: I, mut put: F) -> Result<Vec<Confirm>, Error>
    where
        I: IntoIterator<Item = T>,
        F: FnMut(&mut BytesMut, Target, T, Option<u64>),
    {
        let state = &self.inner.state;
        let mut items = items.into_iter().peekable();
        let mut out = Vec::with_capacity(items.size_hint().0);
        while items.peek().is_some() {
            let wire = self.publishing_wire().await?;
            let keep = state.republish.load(Ordering::Relaxed);
            let at = Target {
                channel: state.id,
                frame_max: wire.frame_max,
            };
            let wait = {
                let mut confirms = state.confirms.lock();
                let room = confirms.room();
                let (confirming, first_id) = (confirms.enabled, confirms.next_id());
                let mut encode = Some(|buf: &mut BytesMut| {
                    // How many went, and their frames only when they are
                    // kept for republishing: a vector grown per publish
                    // cost large allocations per batch (about 3 % of a
                    // 12 B publisher's CPU at 1,000 in flight).
                    let (mut sent, mut kept) = (0, Vec::new());
                    let limit = buf.len() + BATCH_BYTES;
                    while buf.len() < limit && sent < room {
                        let Some(item) = items.next() else { break };
                        let start = buf.len();
                        let publish_id = confirming.then(|| first_id + sent as u64);
                        put(buf, at, item, publish_id);
                        if keep {
                            kept.push(Bytes::copy_from_slice(&buf[start..]));
                        }
                        sent += 1;
                    }
                    (sent, kept)
                });
                if room == 0 {
                    Wait::slot(state)
                } else {
                    // A batch is a write's worth already: it goes at
                    // once (deferring it only delays it), where single
                    // publishes wait for their task to write them.
                    match wire.try_send_with(&mut encode) {
                        Ok(Some((sent, kept))) => {
                            let mut kept = kept.into_iter();
                            for _ in 0..sent {
                                out.push(match confirms.enabled {
                                    true => Confirm::waiting(confirms.push(kept.next())),
                                    false => Confirm::sent(),
                                });
                            }
                            Wait::Nothing
                        }
                        Ok(None) => Wait::Outbox,
                        Err(_) => Wait::Nothing,
                    }
                }
            };
            wait.until(&wire).await;
        }
        Ok(out)
    }
}

/// Where a publish's frames go: the channel, in frames of at most
/// `frame_max`.
#[derive(Clone, Copy)]
struct Target {
    channel: u16,
    frame_max: u32,
}

/// The properties a publish goes out with when the client adds to the
/// application's: the id a mandatory publish in confirm mode carries for
/// its return, and a child of the trace context current in the task
/// (unless the message has a `traceparent` of its own). None: the
/// application's as they are, the common case, which copies nothing.
fn outgoing(
    properties: &BasicProperties,
    publish_id: Option<u64>,
    trace: Option<&TraceContext>,
) -> Option<BasicProperties> {
    let has_traceparent = || {
        properties
            .headers
            .as_ref()
            .is_some_and(|h| h.get(TRACEPARENT).is_some())
    };
    let trace = trace.filter(|_| !has_traceparent());
    if publish_id.is_none() && trace.is_none() {
        return None;
    }
    let mut p = properties.clone();
    let headers = p.headers.get_or_insert_with(Default::default);
    if let Some(id) = publish_id {
        headers.insert(PUBLISH_SEQ_HEADER, FieldValue::I64(id as i64));
    }
    if let Some(t) = trace {
        let child = t.child();
        headers.insert(
            TRACEPARENT,
            FieldValue::LongStr(child.traceparent().into_bytes().into()),
        );
        if let Some(state) = child.tracestate() {
            headers.insert(TRACESTATE, FieldValue::LongStr(state.as_bytes().to_vec().into()));
        }
    }
    Some(p)
}

/// What a publish that could not go at once waits for.
enum Wait<'a> {
    /// A confirm to free an in-flight slot.
    Slot(Pin<Box<Notified<'a>>>),
    /// The writer to make room in the outbox.
    Outbox,
    /// Nothing: look again (a wire that ended is replaced or fails).
    Nothing,
}

impl<'a> Wait<'a> {
    /// Wait for a confirm to free a slot: called under the confirms lock,
    /// so no confirm settled before the lock goes is missed. Built only
    /// on this path (a publish with room builds nothing).
    fn slot(state: &'a ChannelState) -> Wait<'a> {
        let mut freed = Box::pin(state.slot_freed.notified());
        freed.as_mut().enable();
        Wait::Slot(freed)
    }

    async fn until(self, wire: &Wire) {
        match self {
            Wait::Slot(freed) => {
                // The publishes that filled the window may be this
                // task's to write (see `deferral`).
                flush_here();
                wire.flush_deferred();
                freed.await
            }
            Wait::Outbox => wire.room().await,
            Wait::Nothing => {}
        }
    }
}

/// A publish's properties: to encode, or encoded already (one set for
/// many bodies, [`Channel::publish_bodies`]).
enum Header<'a> {
    Properties(&'a BasicProperties),
    Encoded(&'a [u8]),
}

/// basic.publish, its content header and body frames, appended to `buf`.
fn encode_publish(
    buf: &mut BytesMut,
    at: Target,
    exchange: &[u8],
    routing_key: &[u8],
    mandatory: bool,
    header: Header<'_>,
    body: &[u8],
) {
    buf.reserve(body.len() + 64 + exchange.len() + routing_key.len());
    write_basic_publish(buf, at.channel, exchange, routing_key, mandatory, false);
    let size = body.len() as u64;
    match header {
        Header::Properties(p) => write_content_header(buf, at.channel, 60, size, p),
        Header::Encoded(raw) => write_content_header_raw(buf, at.channel, 60, size, raw),
    }
    write_body(buf, at.channel, body, at.frame_max);
}
