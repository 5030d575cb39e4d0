//! Consuming: a [`Consumer`] is a stream of [`Delivery`]s. Its buffer is
//! bounded by the channel's prefetch (the broker sends no more than that
//! unacknowledged), so a slow consumer holds the broker back, not the
//! client's heap. Each delivery carries an [`Acker`] usable from any task.

use std::future::Future;

use futures_util::future::Either;
use futures_util::stream::{FuturesUnordered, StreamExt as _};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use warren_amqp091::frame::write_method;
use warren_amqp091::methods::*;
use warren_amqp091::{BasicProperties, FieldValue, Method, ShortStr};

use super::channel::Channel;
use super::error::Error;
use super::wire::Wire;
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
    pub(crate) wire: Arc<Wire>,
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

/// A consumer: a stream of deliveries, which ends when the consumer is
/// cancelled (by this side or the broker) or its channel ends. It goes on
/// across a recovered connection.
pub struct Consumer {
    pub(crate) tag: String,
    /// Shared with the channel, which drops what is buffered when the
    /// connection is lost (those deliveries can no longer be acked).
    pub(crate) rx: Arc<Mutex<mpsc::Receiver<Delivery>>>,
    pub(crate) channel: Channel,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("tag", &self.tag)
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// The consumer tag (the broker's choice when none was given).
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The next delivery; None once the consumer has ended.
    pub async fn next(&mut self) -> Option<Delivery> {
        std::future::poll_fn(|cx| self.rx.lock().poll_recv(cx)).await
    }

    /// basic.cancel: no more deliveries after those already sent.
    pub async fn cancel(self) -> Result<(), Error> {
        self.channel.cancel(&self.tag).await
    }

    /// Run `handler` on each delivery, one at a time and in order, until
    /// the consumer ends. The connection's default concurrency
    /// ([`super::ConnectionBuilder::consumer_concurrency`]) applies when
    /// it is above 1, as [`Self::run_concurrently`].
    pub async fn run<F, Fut>(self, handler: F)
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let n = self.channel.default_concurrency();
        self.run_concurrently(n, handler).await
    }

    /// Run `handler` on up to `concurrency` deliveries at once, until the
    /// consumer ends. The handlers are polled by the task running this
    /// (so they overlap wherever they wait: I/O, timers, other services);
    /// work that needs other cores belongs in `tokio::spawn` or
    /// `spawn_blocking` inside the handler. At 1 deliveries are handled in
    /// order on the caller's task. Each handler acks (or not) its own
    /// delivery; the broker's prefetch bounds what waits, so a slow
    /// handler holds the broker back rather than filling memory.
    ///
    /// ```no_run
    /// use warren_client::amqp091::{ConsumeOptions, Consumer};
    ///
    /// # async fn work(consumer: Consumer) {
    /// consumer
    ///     .run_concurrently(8, |d| async move {
    ///         // ... handle d.body ...
    ///         let _ = d.ack().await;
    ///     })
    ///     .await;
    /// # }
    /// ```
    pub async fn run_concurrently<F, Fut>(mut self, concurrency: usize, handler: F)
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let handle = |d: Delivery| traced(&handler, d);
        if concurrency <= 1 {
            while let Some(d) = self.next().await {
                handle(d).await;
            }
            return;
        }
        // In this task: no hand-off between tasks per delivery. A handler
        // with CPU-heavy work spawns it.
        let mut running = FuturesUnordered::new();
        // A handler's future is polled once where it is made; one done at
        // once (a fast handler) leaves its box to the next, so such
        // handlers cost no allocation or shared queue each.
        let mut spare: Option<Pin<Box<Handled<Fut>>>> = None;
        let mut ended = false;
        std::future::poll_fn(|cx| loop {
            while let Poll::Ready(Some(())) = running.poll_next_unpin(cx) {}
            if ended {
                return match running.is_empty() {
                    true => Poll::Ready(()),
                    false => Poll::Pending,
                };
            }
            if running.len() >= concurrency {
                return Poll::Pending;
            }
            let d = match self.rx.lock().poll_recv(cx) {
                Poll::Ready(Some(d)) => d,
                Poll::Ready(None) => {
                    ended = true;
                    continue;
                }
                Poll::Pending => return Poll::Pending,
            };
            let mut work = match spare.take() {
                Some(mut b) => {
                    b.as_mut().set(handle(d));
                    b
                }
                None => Box::pin(handle(d)),
            };
            // Pending: it goes to the set, which polls it (with its own
            // waker) at once and whenever it is woken.
            match work.as_mut().poll(cx) {
                Poll::Ready(()) => spare = Some(work),
                Poll::Pending => running.push(work),
            }
        })
        .await
    }
}

/// A handler's future for one delivery, as [`traced`] makes it.
type Handled<Fut> = Either<Fut, Pin<Box<dyn Future<Output = ()> + Send>>>;

/// `handler` on `d`, inside a `tracing` span for the delivery (when such
/// spans are recorded) and, if its publisher sent a trace context, that
/// context's scope: what the handler publishes continues the trace.
/// Without either it is the handler's own future, unwrapped: the common
/// case adds nothing to what a concurrent consumer keeps per delivery.
fn traced<F, Fut>(handler: &F, d: Delivery) -> Handled<Fut>
where
    F: Fn(Delivery) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let context = d.trace_context();
    if context.is_none() && !tracing::enabled!(tracing::Level::DEBUG) {
        return Either::Left(handler(d));
    }
    let span = tracing::debug_span!(
        "amqp091.deliver",
        consumer_tag = %d.consumer_tag,
        routing_key = %d.routing_key,
        delivery_tag = d.delivery_tag,
        trace_id = context.as_ref().map(|c| c.trace_id()),
    );
    let work = tracing::Instrument::instrument(handler(d), span);
    Either::Right(match context {
        Some(c) => Box::pin(c.scope(work)),
        None => Box::pin(work),
    })
}

impl futures_core::Stream for Consumer {
    type Item = Delivery;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        self.rx.lock().poll_recv(cx)
    }
}
