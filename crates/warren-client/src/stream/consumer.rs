//! Consumers: a subscription to one stream from an offset specification,
//! read as a `futures` Stream of deliveries. Credit is granted a chunk at
//! a time as chunks are taken, so at most the initial credit's chunks are
//! buffered however slow the application is. A lost connection or a
//! member that moves is recovered by subscribing again after the last
//! message handed out. A single-active-consumer member answers the
//! broker's consumer updates as it is polled (see [`super::single_active`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;
use tokio::sync::mpsc;
use warren_stream::command::{key, Command};

use super::chunk::{ChunkReader, Place};
use super::chunk_messages::ChunkMessages;
use super::claim::{Claim, Claimed};
use super::commands;
use super::connection::{Connection, Event};
use super::environment::Environment;
use super::error::{recoverable, Error};
use super::message;
use super::metadata::Role;
use super::offset::OffsetSpecification;
use super::single_active::{self, Answer, ConsumerUpdate, OnUpdate};
use super::tracking::{Tracker, Tracking};

/// Chunks the broker may send ahead of the application (the Java
/// client's default initial credit).
pub const DEFAULT_INITIAL_CREDIT: u16 = 10;

/// A consumer's settings, then [`Self::build`].
#[must_use = "a builder does nothing until built"]
#[derive(Clone)]
pub struct ConsumerBuilder {
    env: Environment,
    offset: OffsetSpecification,
    credit: u16,
    check_crc: bool,
    name: Option<String>,
    tracking: Tracking,
    recovery: bool,
    single_active: bool,
    on_update: Option<OnUpdate>,
    /// The super stream whose partition it reads (a super stream
    /// consumer's member).
    super_stream: Option<String>,
    filter: Option<Filter>,
    manual_credit: bool,
}

/// A consumer's filter: the values the broker looks for in chunks' Bloom
/// filters, and the application's check of each message of the chunks
/// that pass (a Bloom filter lets through some chunks without the value).
#[derive(Clone)]
struct Filter {
    values: Vec<String>,
    match_unfiltered: bool,
    post: PostFilter,
}

/// The application's check of a message the broker's filter let through.
type PostFilter = Arc<dyn Fn(&Delivery) -> bool + Send + Sync>;

impl Environment {
    /// A consumer's settings.
    pub fn consumer(&self) -> ConsumerBuilder {
        ConsumerBuilder::new(self.clone())
    }
}

impl ConsumerBuilder {
    fn new(env: Environment) -> ConsumerBuilder {
        ConsumerBuilder {
            env,
            offset: OffsetSpecification::Next,
            credit: DEFAULT_INITIAL_CREDIT,
            check_crc: true,
            name: None,
            tracking: Tracking::default(),
            recovery: true,
            single_active: false,
            on_update: None,
            super_stream: None,
            filter: None,
            manual_credit: false,
        }
    }

    /// Read only the messages whose filter value is among `values`
    /// (RabbitMQ 3.13 and later, and Warren; see
    /// [`super::ProducerBuilder::filter_value`]). The broker skips the
    /// chunks whose Bloom filter has none of them; `post_filter` then
    /// keeps the messages of the chunks sent that the application wants
    /// (a Bloom filter has false positives, and a chunk holds messages of
    /// other values too).
    ///
    /// ```no_run
    /// use warren_client::stream::Delivery;
    ///
    /// # async fn run(env: warren_client::stream::Environment) -> Result<(), warren_client::stream::Error> {
    /// let consumer = env
    ///     .consumer()
    ///     .filter(["eu"], |d: &Delivery| {
    ///         d.application_property("region").ok().flatten().as_deref() == Some("eu")
    ///     })
    ///     .build("orders")
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn filter<I, S, F>(mut self, values: I, post_filter: F) -> ConsumerBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
        F: Fn(&Delivery) -> bool + Send + Sync + 'static,
    {
        self.filter = Some(Filter {
            values: values.into_iter().map(Into::into).collect(),
            match_unfiltered: false,
            post: Arc::new(post_filter),
        });
        self
    }

    /// With [`Self::filter`]: also read the chunks of messages published
    /// without a filter value (off by default).
    pub fn match_unfiltered(mut self, on: bool) -> ConsumerBuilder {
        if let Some(f) = self.filter.as_mut() {
            f.match_unfiltered = on;
        }
        self
    }

    pub(crate) fn environment(&self) -> &Environment {
        &self.env
    }

    pub(crate) fn tracking_of(&self) -> Option<Tracking> {
        self.name.as_ref().map(|_| self.tracking)
    }

    /// A member of a super stream consumer: as a single active consumer,
    /// its group is a partition's, which the broker shares out.
    pub(crate) fn of_super_stream(mut self, super_stream: &str) -> ConsumerBuilder {
        self.super_stream = Some(super_stream.to_string());
        self
    }

    /// Join the single-active-consumer group of the consumers of this
    /// stream with the same [`Self::name`] (required): one member at a
    /// time reads. RabbitMQ 3.11 and later (and Warren).
    pub fn single_active_consumer(mut self, on: bool) -> ConsumerBuilder {
        self.single_active = on;
        self
    }

    /// Decide where a single active consumer reads from when it becomes
    /// active (and learn that it steps down). By default it carries on
    /// after the offset stored under its name, or starts at
    /// [`Self::offset`] if none is.
    ///
    /// ```no_run
    /// use warren_client::stream::{ConsumerUpdate, OffsetSpecification};
    ///
    /// # async fn run(env: warren_client::stream::Environment) -> Result<(), warren_client::stream::Error> {
    /// let consumer = env
    ///     .consumer()
    ///     .name("billing")
    ///     .single_active_consumer(true)
    ///     .consumer_update(|update: ConsumerUpdate| async move {
    ///         match update.stored_offset().await {
    ///             Ok(Some(o)) => OffsetSpecification::Offset(o + 1),
    ///             _ => OffsetSpecification::First,
    ///         }
    ///     })
    ///     .build("invoices")
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn consumer_update<F, A>(mut self, f: F) -> ConsumerBuilder
    where
        F: Fn(ConsumerUpdate) -> A + Send + Sync + 'static,
        A: Future<Output = OffsetSpecification> + Send + 'static,
    {
        self.on_update = Some(Arc::new(move |u| -> Answer { Box::pin(f(u)) }));
        self
    }

    /// Subscribe again by itself when the connection is lost or the
    /// stream's member moves (on by default): after the last message
    /// handed out, on the member the broker's metadata names then. Off,
    /// the consumer ends with the error.
    pub fn recovery(mut self, on: bool) -> ConsumerBuilder {
        self.recovery = on;
        self
    }

    /// A name: the reference its offset is stored under (see
    /// [`Self::tracking`]). A named consumer whose stream holds an offset
    /// stored under its name starts just after it, whatever
    /// [`Self::offset`] says.
    pub fn name(mut self, name: impl Into<String>) -> ConsumerBuilder {
        self.name = Some(name.into());
        self
    }

    /// How a named consumer's offset is stored (default: automatically,
    /// every 10,000 messages, every 5 s while messages come, and on
    /// close).
    pub fn tracking(mut self, tracking: Tracking) -> ConsumerBuilder {
        self.tracking = tracking;
        self
    }

    /// Where to start (default [`OffsetSpecification::Next`]).
    pub fn offset(mut self, offset: OffsetSpecification) -> ConsumerBuilder {
        self.offset = offset;
        self
    }

    /// Chunks the broker may send ahead (default
    /// [`DEFAULT_INITIAL_CREDIT`]); one more is granted as each is taken.
    pub fn initial_credit(mut self, chunks: u16) -> ConsumerBuilder {
        self.credit = chunks.max(1);
        self
    }

    /// Grant credit by hand ([`Consumer::credit`]) rather than a chunk's
    /// as each chunk is taken: the broker sends more only when the
    /// application says it is ready. At most [`Self::initial_credit`]
    /// chunks are ever granted ahead, so the buffer stays as bounded.
    pub fn manual_credit(mut self, on: bool) -> ConsumerBuilder {
        self.manual_credit = on;
        self
    }

    /// Check each chunk's CRC-32 (on by default).
    pub fn check_crc(mut self, check: bool) -> ConsumerBuilder {
        self.check_crc = check;
        self
    }

    /// Subscribe to `stream`.
    pub async fn build(self, stream: &str) -> Result<Consumer, Error> {
        let mut offset = self.offset;
        let mut properties = Vec::new();
        if let Some(name) = &self.name {
            properties.push(("name".to_string(), name.clone()));
        }
        if self.single_active {
            if self.name.is_none() {
                return Err(Error::Misconfigured(
                    "a single active consumer needs a name".into(),
                ));
            }
            properties.push(("single-active-consumer".to_string(), "true".to_string()));
            if let Some(s) = &self.super_stream {
                properties.push(("super-stream".to_string(), s.clone()));
            }
        } else if let Some(name) = &self.name {
            // A single active consumer's start is the answer to its
            // consumer update.
            if let Some(stored) = self.env.query_offset(name, stream).await? {
                offset = OffsetSpecification::Offset(stored + 1);
            }
        }
        if let Some(f) = &self.filter {
            if f.values.is_empty() {
                return Err(Error::Misconfigured("a filter needs at least one value".into()));
            }
            for (i, v) in f.values.iter().enumerate() {
                properties.push((format!("filter.{i}"), v.clone()));
            }
            properties.push(("match-unfiltered".to_string(), f.match_unfiltered.to_string()));
        }
        let how = Subscribing {
            env: self.env,
            stream: stream.to_string(),
            credit: self.credit,
            properties,
            filtering: self.filter.is_some(),
        };
        let sub = how.subscribe(offset).await?;
        Ok(Consumer {
            from: match offset {
                OffsetSpecification::Offset(o) => o,
                _ => 0,
            },
            offset,
            sub,
            how: Arc::new(how),
            ready: None,
            last: None,
            check_crc: self.check_crc,
            tracker: self.name.as_ref().and_then(|_| Tracker::new(self.tracking)),
            name: self.name,
            recovery: self.recovery,
            recovering: None,
            closed: false,
            unsubscribed: false,
            on_update: self.on_update,
            stepped_down: false,
            updating: None,
            post_filter: self.filter.map(|f| f.post),
            lag: None,
            manual_credit: self.manual_credit,
            owed: 0,
        })
    }
}

/// What a consumer needs to subscribe (again).
struct Subscribing {
    env: Environment,
    stream: String,
    credit: u16,
    /// Its name, single-active-consumer group and so on.
    properties: Vec<(String, String)>,
    /// It asks the broker to filter (which brokers before 3.13 cannot).
    filtering: bool,
}

/// A subscription made: its connection, id and events.
struct Subscribed {
    conn: Arc<Connection>,
    id: u8,
    events: mpsc::Receiver<Event>,
}

/// A subscription being made again.
type Resubscribing = Pin<Box<dyn Future<Output = Result<Subscribed, Error>> + Send>>;

/// How long recovery waits between tries, at first and at most.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(3);

impl Subscribing {
    /// Subscribe from `offset` on the member the metadata names now.
    async fn subscribe(&self, offset: OffsetSpecification) -> Result<Subscribed, Error> {
        let conn = self.env.connection_for(&self.stream, Role::Replica).await?;
        if self.filtering && !conn.supports(key::PUBLISH, 2).await? {
            return Err(Error::Misconfigured(
                "the broker does not filter (RabbitMQ 3.13 and later do)".into(),
            ));
        }
        // Room for every chunk the credit lets the broker send, a
        // consumer update and an ending: the reader never waits on a
        // consumer within its credit.
        let (tx, events) = mpsc::channel(self.credit as usize + 2);
        let id = conn.add_subscription(&self.stream, tx)?;
        let claim = Claim::new(&conn, Claimed::Subscription(id));
        conn.call("subscribe", |c| Command::Subscribe {
            correlation_id: c,
            subscription_id: id,
            stream: self.stream.clone(),
            offset: offset.spec(),
            credit: self.credit,
            properties: self.properties.clone(),
        })
        .await?;
        claim.keep();
        Ok(Subscribed { conn, id, events })
    }

    /// Subscribe again after `why`, trying until it works or an error
    /// says it never will (the stream is gone, access is refused, the
    /// environment closed).
    async fn resubscribe(
        self: Arc<Self>,
        offset: OffsetSpecification,
        why: Error,
    ) -> Result<Subscribed, Error> {
        tracing::info!(stream = %self.stream, "stream consumer recovering: {why}");
        let mut wait = RETRY_FIRST;
        loop {
            tokio::time::sleep(wait).await;
            match self.subscribe(offset).await {
                Ok(s) => {
                    tracing::info!(stream = %self.stream, ?offset, "stream consumer recovered");
                    return Ok(s);
                }
                Err(e) if recoverable(&e) => {
                    tracing::debug!(stream = %self.stream, "stream consumer not recovered yet: {e}");
                    wait = (wait * 2).min(RETRY_MAX);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// A message read from a stream.
#[derive(Debug, Clone)]
pub struct Delivery {
    offset: u64,
    timestamp: i64,
    raw: Bytes,
}

impl Delivery {
    /// Its offset in the stream.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// When its chunk was written (ms since the epoch).
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The message as stored (its AMQP 1.0 encoding).
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// Its body: the data sections' bytes (or an amqp-value's binary or
    /// string).
    pub fn body(&self) -> Result<Bytes, Error> {
        message::body(&self.raw)
    }

    /// Its application properties, as text.
    pub fn application_properties(&self) -> Result<Vec<(String, String)>, Error> {
        Ok(message::decode(&self.raw)?.application_properties)
    }

    /// The value of application property `name`, as text, if it has one.
    pub fn application_property(&self, name: &str) -> Result<Option<String>, Error> {
        Ok(self
            .application_properties()?
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v))
    }
}

/// Reads one stream: a `Stream` of [`Delivery`] in offset order, ending
/// with an error if the subscription or its connection ends.
///
/// ```no_run
/// use futures_util::StreamExt;
/// use warren_client::stream::{Environment, OffsetSpecification};
///
/// # async fn run() -> Result<(), warren_client::stream::Error> {
/// let env = Environment::connect("rabbitmq-stream://guest:guest@localhost:5552/%2f").await?;
/// let mut consumer = env.consumer().offset(OffsetSpecification::First).build("orders").await?;
/// while let Some(delivery) = consumer.next().await {
///     let delivery = delivery?;
///     println!("{}: {:?}", delivery.offset(), delivery.body()?);
/// }
/// # Ok(()) }
/// ```
pub struct Consumer {
    sub: Subscribed,
    how: Arc<Subscribing>,
    /// Where it started.
    offset: OffsetSpecification,
    /// The chunk taken last, read as its messages are handed out.
    ready: Option<ChunkReader>,
    /// The last offset handed out.
    last: Option<u64>,
    /// Offsets below this are skipped (a chunk holds the asked-for
    /// offset, and those before it in the chunk).
    from: u64,
    check_crc: bool,
    /// Its name, the reference offsets are stored under.
    name: Option<String>,
    /// Automatic tracking's state (named consumers).
    tracker: Option<Tracker>,
    recovery: bool,
    /// A subscription being made again.
    recovering: Option<Resubscribing>,
    /// An error ended it: nothing more is read.
    closed: bool,
    /// [`Self::close`] unsubscribed it.
    unsubscribed: bool,
    /// The application's consumer-update callback.
    on_update: Option<OnUpdate>,
    /// A single active consumer told to step down: chunks still coming
    /// are dropped (and their credit given back).
    stepped_down: bool,
    /// A consumer update being answered: its correlation id, whether it
    /// became active, and the answer to come.
    updating: Option<(u32, bool, Answer)>,
    /// The application's check of each message a filtering broker sends.
    post_filter: Option<PostFilter>,
    /// See [`Self::lag`].
    lag: Option<u64>,
    /// Credit is given back by [`Self::credit`] only.
    manual_credit: bool,
    /// Chunks taken whose credit is not given back yet (manual credit).
    owed: u16,
}

impl Consumer {
    /// The stream it reads.
    pub fn stream(&self) -> &str {
        &self.how.stream
    }

    /// Store `offset` as this consumer's place (a named consumer; with
    /// automatic tracking this happens by itself). A consumer of the same
    /// name built later starts just after it.
    pub fn store_offset(&self, offset: u64) -> Result<(), Error> {
        let Some(reference) = &self.name else {
            return Err(Error::Misconfigured(
                "only a named consumer stores its offset".into(),
            ));
        };
        self.sub.conn.push(&Command::StoreOffset {
            reference: reference.clone(),
            stream: self.how.stream.clone(),
            offset,
        });
        Ok(())
    }

    /// The broker made this consumer active or asks it to step down:
    /// start answering. A member stepping down hands out nothing more,
    /// and stores its last offset first (automatic tracking).
    fn consumer_update(&mut self, correlation_id: u32, active: bool) {
        let mut flushed = None;
        if !active {
            self.stepped_down = true;
            self.ready = None;
            flushed = self.tracker.as_mut().and_then(Tracker::closing);
            if let Some(o) = flushed {
                let _ = self.store_offset(o);
            }
        }
        let update = ConsumerUpdate {
            stream: self.how.stream.clone(),
            name: self.name.clone().unwrap_or_default(),
            active,
            last_offset: self.last,
            env: self.how.env.clone(),
            conn: self.sub.conn.clone(),
        };
        let answer = single_active::answer(update, flushed, self.on_update.as_ref(), self.offset);
        self.updating = Some((correlation_id, active, answer));
    }

    /// The application answered: tell the broker; an active consumer
    /// hands out from there.
    fn answered(&mut self, correlation_id: u32, active: bool, from: OffsetSpecification) {
        self.sub.conn.push_with(|out| {
            commands::consumer_update_answer(
                out,
                correlation_id,
                warren_stream::command::code::OK,
                from.spec(),
            )
        });
        if active {
            self.stepped_down = false;
            self.from = match from {
                OffsetSpecification::Offset(o) => o,
                _ => 0,
            };
        }
    }

    /// Unsubscribe (storing the last offset handed out, with automatic
    /// tracking).
    pub async fn close(mut self) -> Result<(), Error> {
        if let Some(o) = self.tracker.as_mut().and_then(Tracker::closing) {
            self.store_offset(o)?;
        }
        self.unsubscribed = true;
        let id = self.sub.id;
        let r = self
            .sub
            .conn
            .call("unsubscribe", |c| Command::Unsubscribe {
                correlation_id: c,
                subscription_id: id,
            })
            .await;
        self.sub.conn.remove_subscription(id);
        r.map(|_| ())
    }

    /// Take a chunk: its messages go to `ready`, and the broker gets a
    /// credit for the next. `committed`: the stream's committed chunk id,
    /// if the broker said it.
    fn take(&mut self, chunk: Bytes, committed: Option<u64>) -> Result<(), Error> {
        // A member stepping down drops its chunks: their credit goes back
        // whatever the strategy, as the application never sees them.
        if self.manual_credit && !self.stepped_down {
            self.owed = self.owed.saturating_add(1);
        } else {
            self.sub.conn.push(&Command::Credit {
                subscription_id: self.sub.id,
                credit: 1,
            });
        }
        if self.stepped_down {
            return Ok(());
        }
        let Some(reader) = ChunkReader::new(&chunk, self.check_crc)? else {
            return Ok(());
        };
        if let Some(c) = committed {
            self.lag = Some(c.saturating_sub(reader.first_offset()));
        }
        if let Some(m) = self.how.env.metrics() {
            let stream = &self.how.stream;
            m.chunk(stream, reader.records() as u64);
            if let Some(l) = self.lag {
                m.lag(stream, l);
            }
        }
        self.ready = Some(reader);
        Ok(())
    }

    /// The next message of the chunk taken last that is the
    /// application's (at or after where it started, and kept by its
    /// post-filter), as handed out (its offset the last, tracked, and
    /// counted): its offset and where it lies in the chunk. None once the
    /// chunk is read; an error ends the consumer.
    #[inline]
    pub(crate) fn next_place(&mut self) -> Option<Result<(u64, Place), Error>> {
        loop {
            let reader = self.ready.as_mut()?;
            let (offset, p) = match reader.next_place() {
                Some(Ok(m)) => m,
                Some(Err(e)) => {
                    self.ready = None;
                    self.closed = true;
                    return Some(Err(e));
                }
                None => {
                    self.ready = None;
                    return None;
                }
            };
            if offset < self.from {
                continue;
            }
            if let Some(keep) = &self.post_filter {
                let d = Delivery {
                    offset,
                    timestamp: reader.timestamp(),
                    raw: reader.slice(&p),
                };
                if !keep(&d) {
                    continue;
                }
            }
            if let Some(m) = self.how.env.metrics() {
                m.consumed(&self.how.stream, 1);
            }
            self.last = Some(offset);
            if let Some(o) = self.tracker.as_mut().and_then(|t| t.handed_out(offset)) {
                let _ = self.store_offset(o);
            }
            return Some(Ok((offset, p)));
        }
    }

    /// The chunk timestamp and bytes of the message [`Self::next_place`]
    /// gave last.
    #[inline]
    pub(crate) fn message_at(&self, p: &Place) -> (i64, &[u8]) {
        self.ready
            .as_ref()
            .map_or((0, &[][..]), |r| (r.timestamp(), r.bytes(p)))
    }

    /// [`Self::next_place`]'s message as an owned delivery.
    #[inline]
    fn next_ready(&mut self) -> Option<Result<Delivery, Error>> {
        let (offset, p) = match self.next_place()? {
            Ok(m) => m,
            Err(e) => return Some(Err(e)),
        };
        let reader = self.ready.as_ref()?;
        Some(Ok(Delivery {
            offset,
            timestamp: reader.timestamp(),
            raw: reader.slice(&p),
        }))
    }

    /// The next chunk's messages, read in place: each message's bytes are
    /// lent, not shared out as [`Delivery`] does, so reading one costs
    /// no allocation and no reference count. Messages a chunk taken
    /// earlier still holds come first; what the application leaves
    /// unread comes next, by either way of reading. None once the
    /// consumer has ended.
    ///
    /// ```no_run
    /// use warren_client::stream::OffsetSpecification;
    ///
    /// # async fn run(env: warren_client::stream::Environment) -> Result<(), warren_client::stream::Error> {
    /// let mut consumer = env.consumer().offset(OffsetSpecification::First).build("orders").await?;
    /// let mut bytes = 0;
    /// while let Some(chunk) = consumer.next_chunk().await {
    ///     let mut chunk = chunk?;
    ///     while let Some(m) = chunk.next_message() {
    ///         bytes += m?.body()?.len();
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn next_chunk(&mut self) -> Option<Result<ChunkMessages<'_>, Error>> {
        match std::future::poll_fn(|cx| self.poll_chunk(cx)).await? {
            Ok(()) => Some(Ok(ChunkMessages::new(self))),
            Err(e) => Some(Err(e)),
        }
    }

    /// With [`ConsumerBuilder::manual_credit`]: let the broker send up to
    /// `chunks` more, no more than the chunks taken since the last call
    /// (so never more than the initial credit ahead).
    ///
    /// ```no_run
    /// use futures_util::StreamExt;
    ///
    /// # async fn run(env: warren_client::stream::Environment) -> Result<(), warren_client::stream::Error> {
    /// let mut consumer = env.consumer().manual_credit(true).initial_credit(2).build("orders").await?;
    /// while let Some(d) = consumer.next().await {
    ///     let _ = d?;
    ///     // Ready for more: one chunk's worth.
    ///     consumer.credit(1);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn credit(&mut self, chunks: u16) {
        let n = chunks.min(self.owed);
        if n > 0 {
            self.owed -= n;
            self.sub.conn.push(&Command::Credit {
                subscription_id: self.sub.id,
                credit: n,
            });
        }
    }

    /// How far the latest chunk is behind the stream's committed chunk,
    /// in offsets (None until a broker that tells has sent a chunk).
    pub fn lag(&self) -> Option<u64> {
        self.lag
    }
}

impl Consumer {
    /// Make sure a chunk is taken: ready once `ready` holds one (or the
    /// consumer ended); meanwhile recover, answer consumer updates and
    /// take the chunks the connection brings.
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<(), Error>>> {
        loop {
            if self.ready.is_some() {
                return Poll::Ready(Some(Ok(())));
            }
            if self.closed {
                return Poll::Ready(None);
            }
            if let Some(r) = self.recovering.as_mut() {
                match r.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(sub)) => {
                        self.sub = sub;
                        self.recovering = None;
                        // A new member of its group: inactive until told.
                        self.stepped_down = false;
                        self.updating = None;
                        // A new subscription has its initial credit.
                        self.owed = 0;
                        continue;
                    }
                    Poll::Ready(Err(e)) => {
                        self.recovering = None;
                        self.closed = true;
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
            if let Some((correlation_id, active, answer)) = self.updating.as_mut() {
                let (correlation_id, active) = (*correlation_id, *active);
                match answer.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(from) => {
                        self.updating = None;
                        self.answered(correlation_id, active, from);
                        continue;
                    }
                }
            }
            let next = match self.sub.events.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                // The connection dropped the subscription without a word
                // (its ending did not fit behind the chunks buffered).
                Poll::Ready(None) => Err(Error::ConnectionLost("the subscription ended".into())),
                Poll::Ready(Some(Event::Ended(e))) => Err(e),
                Poll::Ready(Some(Event::Chunk { chunk, committed })) => Ok((chunk, committed)),
                Poll::Ready(Some(Event::Update {
                    correlation_id,
                    active,
                })) => {
                    self.consumer_update(correlation_id, active);
                    continue;
                }
            };
            match next {
                Err(e) if self.recovery && recoverable(&e) => {
                    // After the last message handed out (`ready` is empty
                    // whenever the chunks are polled).
                    let offset = match self.last {
                        Some(o) => OffsetSpecification::Offset(o + 1),
                        None => self.offset,
                    };
                    if let OffsetSpecification::Offset(o) = offset {
                        self.from = o;
                    }
                    self.recovering = Some(Box::pin(self.how.clone().resubscribe(offset, e)));
                }
                Err(e) => {
                    self.closed = true;
                    return Poll::Ready(Some(Err(e)));
                }
                Ok((chunk, committed)) => {
                    if let Err(e) = self.take(chunk, committed) {
                        self.closed = true;
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
        }
    }
}

impl Stream for Consumer {
    type Item = Result<Delivery, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(d) = self.next_ready() {
                return Poll::Ready(Some(d));
            }
            match self.poll_chunk(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(()))) => {}
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => return Poll::Ready(None),
            }
        }
    }
}

impl Drop for Consumer {
    /// Unsubscribe without waiting, unless [`Consumer::close`] did. The
    /// request is queued before the id is freed, so it reaches the broker
    /// before any subscription that takes the id next.
    fn drop(&mut self) {
        if self.unsubscribed {
            return;
        }
        if let Some(o) = self.tracker.as_mut().and_then(Tracker::closing) {
            let _ = self.store_offset(o);
        }
        self.sub.conn.forget_subscription(self.sub.id);
    }
}
