//! Consumers: a receiving link from a queue (or stream) with a window of
//! credit, topped up as the application settles what it was given, so
//! memory holds at most the window; each delivery is accepted,
//! discarded or requeued (with annotations, `modified`), or comes
//! pre-settled.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use warren_amqp10::composite::composite;
use warren_amqp10::messaging::{self, MODIFIED, REJECTED, SOURCE};
use warren_amqp10::performative::Attach;
use warren_amqp10::value::Descriptor;
use warren_amqp10::Value;

use super::connection::Shared;
use super::error::Error;
use super::message::Message;
use super::metrics::Settlement;
use super::session::{stream_offset, Activity, Incoming, Kind, Position, Wake};

/// The capability a direct reply-to source asks for (RabbitMQ 4.2).
const VOLATILE_QUEUE: &str = "rabbitmq:volatile-queue";

/// Credit a consumer starts with, by default.
pub const DEFAULT_INITIAL_CREDIT: u32 = 256;

/// Where a stream consumer starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamOffset {
    /// The first message the stream still holds.
    First,
    /// The last chunk written (its first message on).
    Last,
    /// What is written from now on.
    Next,
    /// This offset (or the first held, if it is older).
    Offset(u64),
    /// Milliseconds since the Unix epoch.
    Timestamp(i64),
}

/// How to make a [`Consumer`] ([`Connection::consumer`](super::Connection::consumer)).
pub struct ConsumerBuilder {
    pub(crate) shared: Arc<Shared>,
    pub(crate) address: Option<String>,
    pub(crate) credit: u32,
    pub(crate) pre_settled: bool,
    pub(crate) offset: Option<StreamOffset>,
    pub(crate) filter_values: Vec<String>,
    pub(crate) match_unfiltered: bool,
    /// Filter expressions (RabbitMQ 4.1, 4.2): properties fields,
    /// application properties, SQL.
    pub(crate) properties: Vec<(String, Value)>,
    pub(crate) application_properties: Vec<(String, Value)>,
    pub(crate) sql: Option<String>,
    /// Told each change of its single-active-consumer state.
    pub(crate) on_active_changed: Option<Box<dyn Fn(bool) + Send + Sync>>,
}

/// The labels the filter expressions go under in the source's filter
/// map (the broker reads their descriptors; the attach's answer names
/// those in force by them).
const PROPERTIES_FILTER: (&str, &str) = ("properties-filter", "amqp:properties-filter");
const APPLICATION_PROPERTIES_FILTER: (&str, &str) = (
    "application-properties-filter",
    "amqp:application-properties-filter",
);
const SQL_FILTER: (&str, &str) = ("sql-filter", "amqp:sql-filter");

impl ConsumerBuilder {
    /// From queue `name`.
    pub fn queue(mut self, name: &str) -> Self {
        self.address = Some(super::address::queue(name));
        self
    }

    /// From an address as written (a v1 address such as `/amq/queue/q`
    /// for RabbitMQ 3.x's plugin).
    pub fn address(mut self, address: impl Into<String>) -> Self {
        self.address = Some(address.into());
        self
    }

    /// The most deliveries it holds unsettled (default 256).
    pub fn initial_credit(mut self, credit: u32) -> Self {
        self.credit = credit.max(1);
        self
    }

    /// Deliveries come settled (at most once): nothing to accept.
    pub fn pre_settled(mut self) -> Self {
        self.pre_settled = true;
        self
    }

    /// A stream consumer: where it starts reading.
    pub fn stream_offset(mut self, offset: StreamOffset) -> Self {
        self.offset = Some(offset);
        self
    }

    /// A stream consumer: only chunks holding messages with one of these
    /// filter values (their `x-stream-filter-value` annotation); with
    /// `match_unfiltered`, messages without one too.
    pub fn stream_filter(mut self, values: &[&str], match_unfiltered: bool) -> Self {
        self.filter_values = values.iter().map(|v| v.to_string()).collect();
        self.match_unfiltered = match_unfiltered;
        self
    }

    /// A stream consumer: only messages whose properties field `field`
    /// (`subject`, `message-id`, `correlation-id`, `to`, `reply-to`,
    /// `content-type`, `group-id` ...) is `value`; a string value
    /// starting with `&p:` matches by prefix, `&s:` by suffix (RabbitMQ
    /// 4.1's properties filter). Several fields must all match.
    pub fn property_filter(mut self, field: &str, value: Value) -> Self {
        self.properties.push((field.to_string(), value));
        self
    }

    /// A stream consumer: only messages whose application property
    /// `key` is `value` (RabbitMQ 4.1's application-properties filter,
    /// prefix and suffix forms as [`ConsumerBuilder::property_filter`]).
    pub fn application_property_filter(mut self, key: &str, value: Value) -> Self {
        self.application_properties.push((key.to_string(), value));
        self
    }

    /// A stream consumer: only messages for which the SQL expression
    /// holds (RabbitMQ 4.2's SQL filter: `color = 'red' AND size > 3`,
    /// properties as `p.subject`, headers as `h.priority`). It replaces
    /// property filters (the broker takes one kind or the other).
    pub fn sql_filter(mut self, expression: &str) -> Self {
        self.sql = Some(expression.to_string());
        self
    }

    /// A pre-settled consumer of a direct reply-to node (RabbitMQ 4.2's
    /// volatile queue: a dynamic source the broker names, at most once),
    /// with the name, kept current across recoveries (each wire's attach
    /// is given a new one).
    pub(crate) async fn build_direct_reply_to(self) -> Result<(Consumer, Arc<Mutex<String>>), Error> {
        let (tx, rx) = mpsc::unbounded_channel();
        let kind = Kind::receiver(tx, self.credit);
        let position = kind.position().expect("a receiver");
        let source = composite(
            SOURCE,
            vec![
                Value::Null,                  // address: the broker's to choose
                Value::Uint(0),               // durable: none
                Value::symbol("link-detach"), // expiry-policy
                Value::Uint(0),               // timeout
                Value::Bool(true),            // dynamic
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Array(vec![Value::symbol(VOLATILE_QUEUE)]),
            ],
        );
        let (handle, reply) = super::link::attach_answered(
            &self.shared,
            Attach {
                name: self.shared.link_name("direct-reply-to"),
                snd_settle_mode: Some(1),
                rcv_settle_mode: Some(0),
                source: Some(source),
                target: Some(messaging::target("")),
                ..Default::default()
            },
            kind,
            false,
        )
        .await?;
        let Some(address) = reply.source.as_ref().and_then(messaging::address) else {
            self.shared.with(|s| s.detach(handle));
            return Err(Error::Protocol(
                "a dynamic source answered without an address".into(),
            ));
        };
        let named = Arc::new(Mutex::new(address));
        self.shared.with(|s| {
            if let Some(link) = s.links.get_mut(&handle) {
                link.named = Some(named.clone());
            }
            s.grant(handle);
        });
        let consumer = Consumer {
            shared: self.shared,
            handle,
            deliveries: rx,
            activity: Arc::new(Activity::new(None)),
            position,
        };
        Ok((consumer, named))
    }

    /// Call `handler` with `true` when the broker makes this consumer the
    /// single active consumer of its queue and `false` when it is (or
    /// becomes) one that waits: RabbitMQ 4.3 and Warren tell receivers
    /// of quorum queues with `x-single-active-consumer`, first once the
    /// consumer is in the queue, then at each change, before the first
    /// message an active consumer gets. It runs on the connection's
    /// reader: it should be quick and must not wait on the connection.
    ///
    /// ```no_run
    /// use warren_client::amqp::Connection;
    ///
    /// # async fn run() -> Result<(), warren_client::amqp::Error> {
    /// let conn = Connection::open("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
    /// let consumer = conn
    ///     .consumer()
    ///     .queue("invoices")
    ///     .on_active_changed(|active| println!("now {}", if active { "active" } else { "waiting" }))
    ///     .build()
    ///     .await?;
    /// # drop(consumer);
    /// # Ok(())
    /// # }
    /// ```
    pub fn on_active_changed(mut self, handler: impl Fn(bool) + Send + Sync + 'static) -> Self {
        self.on_active_changed = Some(Box::new(handler));
        self
    }

    /// Attach the link and give it its credit. A filter expression the
    /// broker does not take (not supported, or not valid) fails it with
    /// [`Error::FilterRefused`].
    pub async fn build(mut self) -> Result<Consumer, Error> {
        let Some(address) = &self.address else {
            return Err(Error::Uri("a consumer needs a queue".into()));
        };
        let activity = Arc::new(Activity::new(self.on_active_changed.take()));
        let (tx, rx) = mpsc::unbounded_channel();
        let kind = Kind::receiver(tx, self.credit).with_activity(activity.clone());
        let position = kind.position().expect("a receiver");
        let (handle, reply) = super::link::attach_answered(
            &self.shared,
            Attach {
                name: self.shared.link_name("consumer"),
                snd_settle_mode: Some(if self.pre_settled { 1 } else { 0 }),
                rcv_settle_mode: Some(0),
                source: Some(self.source(address)),
                target: Some(messaging::target("")),
                ..Default::default()
            },
            kind,
            false,
        )
        .await?;
        if let Some(missing) = self.refused_filter(reply.source.as_ref()) {
            self.shared.with(|s| s.detach(handle));
            return Err(Error::FilterRefused(missing.to_string()));
        }
        self.shared.with(|s| s.grant(handle));
        Ok(Consumer {
            shared: self.shared,
            handle,
            deliveries: rx,
            activity,
            position,
        })
    }

    /// The first filter expression asked for that the broker's source
    /// (its answer) does not hold: it did not take it.
    fn refused_filter(&self, answered: Option<&Value>) -> Option<&'static str> {
        let in_force = |label: &str| {
            matches!(
                answered.and_then(Value::as_described),
                Some((_, Value::List(f))) if matches!(f.get(7), Some(Value::Map(m))
                    if m.iter().any(|(k, _)| matches!(k, Value::Symbol(s) | Value::String(s) if s == label)))
            )
        };
        [
            (!self.properties.is_empty(), PROPERTIES_FILTER.0),
            (
                !self.application_properties.is_empty(),
                APPLICATION_PROPERTIES_FILTER.0,
            ),
            (self.sql.is_some(), SQL_FILTER.0),
        ]
        .into_iter()
        .find(|(asked, label)| *asked && !in_force(label))
        .map(|(_, label)| label)
    }

    /// Its source: the address, and the stream filters if any.
    fn source(&self, address: &str) -> Value {
        let named = |name: &str, v: Value| {
            Value::Described(Box::new(Descriptor::Symbol(name.to_string())), Box::new(v))
        };
        let mut filters = Vec::new();
        if !self.properties.is_empty() {
            let map = self
                .properties
                .iter()
                .map(|(k, v)| (Value::symbol(k), v.clone()))
                .collect();
            filters.push((
                Value::symbol(PROPERTIES_FILTER.0),
                named(PROPERTIES_FILTER.1, Value::Map(map)),
            ));
        }
        if !self.application_properties.is_empty() {
            let map = self
                .application_properties
                .iter()
                .map(|(k, v)| (Value::string(k), v.clone()))
                .collect();
            filters.push((
                Value::symbol(APPLICATION_PROPERTIES_FILTER.0),
                named(APPLICATION_PROPERTIES_FILTER.1, Value::Map(map)),
            ));
        }
        if let Some(sql) = &self.sql {
            filters.push((
                Value::symbol(SQL_FILTER.0),
                named(SQL_FILTER.1, Value::string(sql)),
            ));
        }
        if let Some(o) = self.offset {
            let v = match o {
                StreamOffset::First => Value::string("first"),
                StreamOffset::Last => Value::string("last"),
                StreamOffset::Next => Value::string("next"),
                StreamOffset::Offset(n) => Value::Ulong(n),
                StreamOffset::Timestamp(t) => Value::Timestamp(t),
            };
            filters.push((
                Value::symbol("rabbitmq:stream-offset-spec"),
                named("rabbitmq:stream-offset-spec", v),
            ));
        }
        if !self.filter_values.is_empty() {
            let values = self.filter_values.iter().map(|v| Value::string(v)).collect();
            filters.push((
                Value::symbol("rabbitmq:stream-filter"),
                named("rabbitmq:stream-filter", Value::List(values)),
            ));
            filters.push((
                Value::symbol("rabbitmq:stream-match-unfiltered"),
                named(
                    "rabbitmq:stream-match-unfiltered",
                    Value::Bool(self.match_unfiltered),
                ),
            ));
        }
        if filters.is_empty() {
            return messaging::source(address);
        }
        composite(
            SOURCE,
            vec![
                Value::string(address),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Map(filters),
            ],
        )
    }
}

/// Receives deliveries, at most its credit window unsettled.
///
/// ```no_run
/// use warren_client::amqp::Connection;
///
/// # async fn run() -> Result<(), warren_client::amqp::Error> {
/// let conn = Connection::open("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
/// let mut consumer = conn.consumer().queue("orders").initial_credit(64).build().await?;
/// while let Ok(delivery) = consumer.receive().await {
///     if delivery.message.data().is_some_and(|b| b.is_empty()) {
///         delivery.discard(); // dead-lettered, if the queue says where
///     } else {
///         delivery.accept();
///     }
/// }
/// # Ok(())
/// # }
/// ```
pub struct Consumer {
    shared: Arc<Shared>,
    handle: u32,
    deliveries: mpsc::UnboundedReceiver<Incoming>,
    activity: Arc<Activity>,
    /// A stream's offset of the last delivery handed over.
    position: Arc<Position>,
}

impl Consumer {
    /// The next delivery; Err once the link or connection is gone (with
    /// the broker's reason, e.g. the queue was deleted).
    ///
    /// Cancel-safe: a receive dropped before it is ready (the other arm
    /// of a `select!` won) takes no delivery with it.
    pub async fn receive(&mut self) -> Result<Delivery, Error> {
        loop {
            if self.shared.urgent.load(Ordering::Relaxed) && !self.deliveries.is_empty() {
                // Credit (or a disposition) waits for the writer: let it
                // go before the next delivery. This await comes before a
                // delivery is taken, so dropping the future here loses
                // nothing (receive is cancel-safe).
                tokio::task::yield_now().await;
            }
            let next = match self.deliveries.try_recv() {
                Ok(i) => Some(i),
                Err(_) => {
                    // Nothing more to take now: the accepts waiting to
                    // grow into one disposition go.
                    if self.shared.session.lock().has_accepts() {
                        self.shared.queued.notify_one();
                    }
                    self.deliveries.recv().await
                }
            };
            let Some(incoming) = next else {
                return Err(self
                    .shared
                    .session
                    .lock()
                    .why_gone(self.handle)
                    .unwrap_or_else(|| Error::ConnectionClosed("the consumer was closed".into())));
            };
            let current = self.shared.epoch() == incoming.epoch;
            if incoming.settled && current {
                let wake = self.shared.session.lock().done_with(self.handle);
                self.shared.wake(wake);
            }
            let message = match Message::decode_shared(&incoming.payload) {
                Ok(m) => m,
                Err(_) if !current => continue, // the broker took it back
                Err(e) => {
                    // A message we cannot read is refused (dead-lettered
                    // if the queue says where), so its credit comes back.
                    let e = Error::from(e);
                    tracing::warn!(error = %e, "an AMQP 1.0 delivery could not be read; rejected");
                    if !incoming.settled {
                        let rejected = Some(composite(REJECTED, vec![]));
                        let wake = self.shared.session.lock().settle(
                            self.handle,
                            incoming.delivery_id,
                            rejected,
                            incoming.epoch,
                        );
                        self.shared.wake(wake);
                    }
                    return Err(e);
                }
            };
            let offset = stream_offset(&message);
            if !incoming.settled && !current && offset.is_none() {
                // Given back to the queue when its wire was lost: it
                // comes again on this one.
                continue;
            }
            if let Some(n) = offset {
                // A stream's. Recovery attaches again after the last one
                // handed over, so one of a lost wire still on its way
                // comes again on the new one: handed over once.
                if self.position.get().is_some_and(|last| n <= last) {
                    if !incoming.settled {
                        let wake = self.shared.session.lock().settle(
                            self.handle,
                            incoming.delivery_id,
                            None,
                            incoming.epoch,
                        );
                        self.shared.wake(wake);
                    }
                    continue;
                }
                self.position.set(n);
            }
            if let Some(m) = &self.shared.settings.metrics {
                m.consumed();
            }
            return Ok(Delivery {
                message,
                shared: self.shared.clone(),
                handle: self.handle,
                delivery_id: incoming.delivery_id,
                settled: incoming.settled,
                epoch: incoming.epoch,
            });
        }
    }

    /// Whether the broker last said this is the single active consumer
    /// of its queue (see [`ConsumerBuilder::on_active_changed`]); None
    /// until it says (and always for queues that do not tell).
    pub fn is_active(&self) -> Option<bool> {
        self.activity.get()
    }

    /// Close the link: what it holds unsettled goes back to the queue.
    /// Dropping the consumer does the same.
    pub fn close(self) {}
}

impl Drop for Consumer {
    /// Detach: a consumer nothing reads from takes no more deliveries.
    fn drop(&mut self) {
        self.shared.with(|s| s.detach(self.handle));
    }
}

/// A message given to a consumer, to be settled once.
pub struct Delivery {
    /// What was delivered.
    pub message: Message,
    shared: Arc<Shared>,
    handle: u32,
    delivery_id: u32,
    settled: bool,
    epoch: u64,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("delivery_id", &self.delivery_id)
            .field("message", &self.message)
            .finish()
    }
}

impl Delivery {
    /// Done with it: the queue forgets it.
    pub fn accept(self) {
        self.settle(None, Settlement::Accepted);
    }

    /// Refused: dead-lettered if the queue has a dead-letter exchange,
    /// else dropped (`rejected`).
    pub fn discard(self) {
        self.settle(Some(composite(REJECTED, vec![])), Settlement::Discarded);
    }

    /// Refused with annotations (`x-` keys) added to the message as it
    /// is dead-lettered (`modified`, undeliverable here).
    pub fn discard_with(self, annotations: &[(&str, Value)]) {
        self.settle(Some(modified(true, true, annotations)), Settlement::Discarded);
    }

    /// Back to the queue, to be delivered again (`released`).
    pub fn requeue(self) {
        self.settle(Some(messaging::released()), Settlement::Requeued);
    }

    /// Back to the queue with annotations added (`modified`).
    pub fn requeue_with(self, annotations: &[(&str, Value)]) {
        self.settle(Some(modified(false, false, annotations)), Settlement::Requeued);
    }

    /// Settle with `state` (None: accepted); the writer is woken only
    /// when there is something new for it (accepts one after another go
    /// as one disposition).
    fn settle(self, state: Option<Value>, how: Settlement) {
        if self.settled {
            return; // pre-settled: nothing to say
        }
        if let Some(m) = &self.shared.settings.metrics {
            m.settled(how);
        }
        let wake = self
            .shared
            .session
            .lock()
            .settle(self.handle, self.delivery_id, state, self.epoch);
        self.shared.wake(wake);
    }
}

/// Deliveries settled together, as RabbitMQ's Java AMQP 1.0 client's
/// batch context: one lock of the session for all of them, and accepts
/// of deliveries one after another go as one disposition. For a
/// consumer that settles every so many deliveries (as 0-9-1's `multiple`
/// acks), it costs less than settling each.
///
/// ```no_run
/// use warren_client::amqp::{Batch, Connection};
///
/// # async fn run() -> Result<(), warren_client::amqp::Error> {
/// let conn = Connection::open("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
/// let mut consumer = conn.consumer().queue("events").build().await?;
/// let mut batch = Batch::with_capacity(100);
/// loop {
///     batch.push(consumer.receive().await?);
///     if batch.len() == 100 {
///         batch.accept();
///     }
/// }
/// # }
/// ```
#[derive(Debug, Default)]
pub struct Batch {
    deliveries: Vec<Delivery>,
}

impl Batch {
    /// An empty batch with room for `n` deliveries.
    pub fn with_capacity(n: usize) -> Batch {
        Batch {
            deliveries: Vec::with_capacity(n),
        }
    }

    /// Add a delivery, to be settled with the others.
    pub fn push(&mut self, d: Delivery) {
        self.deliveries.push(d);
    }

    /// How many deliveries wait to be settled.
    pub fn len(&self) -> usize {
        self.deliveries.len()
    }

    /// Whether none do.
    pub fn is_empty(&self) -> bool {
        self.deliveries.is_empty()
    }

    /// Accept them all (the batch is then empty, its room kept).
    pub fn accept(&mut self) {
        self.settle(None, Settlement::Accepted);
    }

    /// Discard them all (`rejected`).
    pub fn discard(&mut self) {
        self.settle(Some(composite(REJECTED, vec![])), Settlement::Discarded);
    }

    /// Requeue them all (`released`).
    pub fn requeue(&mut self) {
        self.settle(Some(messaging::released()), Settlement::Requeued);
    }

    fn settle(&mut self, state: Option<Value>, how: Settlement) {
        if self.deliveries.iter().all(|d| d.settled) {
            // Pre-settled: nothing to say.
            self.deliveries.clear();
            return;
        }
        let shared = self.deliveries[0].shared.clone();
        let mut wake = Wake::No;
        let mut others = Vec::new();
        {
            let mut s = shared.session.lock();
            // Read in place, not moved out (a delivery is a few hundred
            // bytes): dropped together below.
            for (i, d) in self.deliveries.iter().enumerate() {
                if d.settled {
                    continue;
                }
                if !Arc::ptr_eq(&d.shared, &shared) {
                    // Another connection's: settled on its own, after
                    // this lock is let go.
                    others.push(i);
                    continue;
                }
                if let Some(m) = &shared.settings.metrics {
                    m.settled(how);
                }
                wake = wake.max(s.settle(d.handle, d.delivery_id, state.clone(), d.epoch));
            }
        }
        shared.wake(wake);
        for i in others.into_iter().rev() {
            self.deliveries.swap_remove(i).settle(state.clone(), how);
        }
        self.deliveries.clear();
    }
}

fn modified(failed: bool, undeliverable: bool, annotations: &[(&str, Value)]) -> Value {
    let map = annotations
        .iter()
        .map(|(k, v)| (Value::symbol(k), v.clone()))
        .collect();
    composite(
        MODIFIED,
        vec![Value::Bool(failed), Value::Bool(undeliverable), Value::Map(map)],
    )
}

/// A stream consumer's source `source` made to start at `offset` (its
/// `rabbitmq:stream-offset-spec` filter set, or added).
pub(crate) fn from_offset(source: &Value, offset: u64) -> Value {
    const SPEC: &str = "rabbitmq:stream-offset-spec";
    let Some((_, Value::List(fields))) = source.as_described() else {
        return source.clone();
    };
    let mut fields = fields.clone();
    fields.resize(fields.len().max(8), Value::Null);
    let spec = Value::Described(
        Box::new(Descriptor::Symbol(SPEC.to_string())),
        Box::new(Value::Ulong(offset)),
    );
    let mut filters = match &fields[7] {
        Value::Map(m) => m.clone(),
        _ => Vec::new(),
    };
    filters.retain(|(k, _)| *k != Value::symbol(SPEC));
    filters.push((Value::symbol(SPEC), spec));
    fields[7] = Value::Map(filters);
    composite(SOURCE, fields)
}
