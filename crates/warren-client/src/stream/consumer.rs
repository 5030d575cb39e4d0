//! Consumers: a subscription to one stream from an offset specification,
//! read as a `futures` Stream of deliveries. Credit is granted a chunk at
//! a time as chunks are taken, so at most the initial credit's chunks are
//! buffered however slow the application is. A lost connection or a
//! member that moves is recovered by subscribing again after the last
//! message handed out.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;
use tokio::sync::mpsc;
use warren_stream::command::{Command, OffsetSpec};

use super::chunk::read_chunk;
use super::connection::Connection;
use super::environment::Environment;
use super::error::{recoverable, Error};
use super::message;
use super::metadata::Role;
use super::tracking::{Tracker, Tracking};

/// Chunks the broker may send ahead of the application (the Java
/// client's default initial credit).
pub const DEFAULT_INITIAL_CREDIT: u16 = 10;

/// Where a consumer starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OffsetSpecification {
    /// The first message the stream holds.
    First,
    /// The last chunk written.
    Last,
    /// What is written from now on.
    Next,
    /// This offset (or the first held, if it is gone).
    Offset(u64),
    /// The first chunk written at or after this time (ms since the epoch).
    Timestamp(i64),
}

impl OffsetSpecification {
    fn spec(self) -> OffsetSpec {
        match self {
            OffsetSpecification::First => OffsetSpec::First,
            OffsetSpecification::Last => OffsetSpec::Last,
            OffsetSpecification::Next => OffsetSpec::Next,
            OffsetSpecification::Offset(o) => OffsetSpec::Offset(o),
            OffsetSpecification::Timestamp(t) => OffsetSpec::Timestamp(t),
        }
    }
}

/// A consumer's settings, then [`Self::build`].
#[must_use = "a builder does nothing until built"]
pub struct ConsumerBuilder {
    env: Environment,
    offset: OffsetSpecification,
    credit: u16,
    check_crc: bool,
    name: Option<String>,
    tracking: Tracking,
    recovery: bool,
}

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
        }
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

    /// Check each chunk's CRC-32 (on by default).
    pub fn check_crc(mut self, check: bool) -> ConsumerBuilder {
        self.check_crc = check;
        self
    }

    /// Subscribe to `stream`.
    pub async fn build(self, stream: &str) -> Result<Consumer, Error> {
        let mut offset = self.offset;
        if let Some(name) = &self.name {
            if let Some(stored) = self.env.query_offset(name, stream).await? {
                offset = OffsetSpecification::Offset(stored + 1);
            }
        }
        let how = Subscribing {
            env: self.env,
            stream: stream.to_string(),
            credit: self.credit,
            name: self.name.clone(),
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
            ready: VecDeque::new(),
            last: None,
            check_crc: self.check_crc,
            tracker: self.name.as_ref().and_then(|_| Tracker::new(self.tracking)),
            name: self.name,
            recovery: self.recovery,
            recovering: None,
            closed: false,
            unsubscribed: false,
        })
    }
}

/// What a consumer needs to subscribe (again).
struct Subscribing {
    env: Environment,
    stream: String,
    credit: u16,
    name: Option<String>,
}

/// A subscription made: its connection, id and chunks.
struct Subscribed {
    conn: Arc<Connection>,
    id: u8,
    chunks: mpsc::Receiver<Result<Bytes, Error>>,
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
        let properties = match &self.name {
            Some(n) => vec![("name".to_string(), n.clone())],
            None => Vec::new(),
        };
        // Room for every chunk the credit lets the broker send, and an
        // ending: the reader never waits on a consumer within its credit.
        let (tx, chunks) = mpsc::channel(self.credit as usize + 1);
        let id = conn.add_subscription(&self.stream, tx)?;
        let subscribed = conn
            .call("subscribe", |c| Command::Subscribe {
                correlation_id: c,
                subscription_id: id,
                stream: self.stream.clone(),
                offset: offset.spec(),
                credit: self.credit,
                properties,
            })
            .await;
        if let Err(e) = subscribed {
            conn.remove_subscription(id);
            return Err(e);
        }
        Ok(Subscribed { conn, id, chunks })
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
    /// Messages of the chunk taken last, not yet handed out.
    ready: VecDeque<Delivery>,
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
            return Err(Error::Protocol("only a named consumer stores its offset".into()));
        };
        self.sub.conn.push(&Command::StoreOffset {
            reference: reference.clone(),
            stream: self.how.stream.clone(),
            offset,
        });
        Ok(())
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
    /// credit for the next.
    fn take(&mut self, chunk: Bytes) -> Result<(), Error> {
        self.sub.conn.push(&Command::Credit {
            subscription_id: self.sub.id,
            credit: 1,
        });
        let from = self.from;
        read_chunk(&chunk, self.check_crc, |offset, timestamp, raw| {
            if offset >= from {
                self.ready.push_back(Delivery {
                    offset,
                    timestamp,
                    raw,
                });
            }
        })
    }
}

impl Stream for Consumer {
    type Item = Result<Delivery, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(d) = self.ready.pop_front() {
                self.last = Some(d.offset);
                if let Some(o) = self.tracker.as_mut().and_then(|t| t.handed_out(d.offset)) {
                    let _ = self.store_offset(o);
                }
                return Poll::Ready(Some(Ok(d)));
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
                        continue;
                    }
                    Poll::Ready(Err(e)) => {
                        self.recovering = None;
                        self.closed = true;
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
            let next = match self.sub.chunks.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                // The connection dropped the subscription without a word
                // (its ending did not fit behind the chunks buffered).
                Poll::Ready(None) => Err(Error::ConnectionLost("the subscription ended".into())),
                Poll::Ready(Some(r)) => r,
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
                Ok(chunk) => {
                    if let Err(e) = self.take(chunk) {
                        self.closed = true;
                        return Poll::Ready(Some(Err(e)));
                    }
                }
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
        self.sub.conn.push(&Command::Unsubscribe {
            correlation_id: 0,
            subscription_id: self.sub.id,
        });
        self.sub.conn.remove_subscription(self.sub.id);
    }
}
