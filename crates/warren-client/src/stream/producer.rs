//! Producers: messages published to one stream, each with a publishing
//! id, confirmed as futures, under an in-flight limit; a named producer's
//! ids carry on from what the broker stored (deduplication across
//! restarts of the application). A lost connection or a leader that
//! moves is recovered by a task of its own: attached to the new leader,
//! the producer sends its unconfirmed entries again first.

use std::borrow::Borrow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes};
use tokio::sync::watch;
use warren_stream::command::{begin_publish_version, end_frame, key, Command};

use super::claim::{Claim, Claimed};
use super::confirm::{Batch, BatchConfirm, Confirm};
use super::confirms::{Confirms, Frame};
use super::connection::Connection;
use super::entry::{lends_body, put_body_head, put_simple, put_sub_batch, sub_batch, LEND_MIN};
use super::environment::Environment;
use super::error::{recoverable, Error};
use super::message::Message;
use super::metadata::Role;

/// Publishes in flight per producer before `send` waits (the Java
/// client's default).
pub const DEFAULT_MAX_UNCONFIRMED: usize = 10_000;

/// Messages encoded into one Publish frame at most.
const BATCH_MESSAGES: usize = 256;

/// How a producer compresses its sub-entry batches (the stream protocol's
/// codes; the framed snappy and lz4 formats of RabbitMQ's Java client).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Compression {
    /// Stored as they are.
    #[default]
    None,
    /// gzip (code 1).
    Gzip,
    /// Snappy, framed (code 2).
    Snappy,
    /// LZ4, framed (code 3).
    Lz4,
    /// Zstandard (code 4).
    Zstd,
}

impl Compression {
    fn code(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }
}

/// A producer's settings, then [`Self::build`].
///
/// ```no_run
/// # async fn run(env: warren_client::stream::Environment) -> Result<(), warren_client::stream::Error> {
/// let producer = env.producer().name("orders-writer").max_unconfirmed(1_000).build("orders").await?;
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until built"]
#[derive(Clone)]
pub struct ProducerBuilder {
    env: Environment,
    name: Option<String>,
    max_unconfirmed: usize,
    sub_entry_size: usize,
    compression: Compression,
    recovery: bool,
    filter_value: Option<FilterValueOf>,
}

/// Draws a message's filter value.
type FilterValueOf = Arc<dyn Fn(&Message) -> Option<String> + Send + Sync>;

impl Environment {
    /// A producer's settings.
    pub fn producer(&self) -> ProducerBuilder {
        ProducerBuilder::new(self.clone())
    }
}

impl ProducerBuilder {
    pub(crate) fn environment(&self) -> &Environment {
        &self.env
    }

    fn new(env: Environment) -> ProducerBuilder {
        ProducerBuilder {
            env,
            name: None,
            max_unconfirmed: DEFAULT_MAX_UNCONFIRMED,
            sub_entry_size: 1,
            compression: Compression::None,
            recovery: true,
            filter_value: None,
        }
    }

    /// Give each message the filter value `f` draws from it (RabbitMQ
    /// 3.13 and later, and Warren): the broker keeps a Bloom filter of
    /// each chunk's values, and consumers that filter skip the chunks
    /// without theirs (see [`super::ConsumerBuilder::filter`]). Not with
    /// sub-entry batching.
    ///
    /// ```no_run
    /// use warren_client::stream::Message;
    ///
    /// # async fn run(env: warren_client::stream::Environment) -> Result<(), warren_client::stream::Error> {
    /// let producer = env
    ///     .producer()
    ///     .filter_value(|m: &Message| m.application_property_value("region").map(str::to_string))
    ///     .build("orders")
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn filter_value<F>(mut self, f: F) -> ProducerBuilder
    where
        F: Fn(&Message) -> Option<String> + Send + Sync + 'static,
    {
        self.filter_value = Some(Arc::new(f));
        self
    }

    /// Attach again by itself when the connection is lost or the
    /// stream's leader moves (on by default): to the leader the broker's
    /// metadata names then, sending the unconfirmed messages again under
    /// their publishing ids first (a named producer's broker stores none
    /// twice). Meanwhile `send` waits. Off, unconfirmed publishes fail
    /// with the error.
    pub fn recovery(mut self, on: bool) -> ProducerBuilder {
        self.recovery = on;
        self
    }

    /// Messages of a batch go `n` to an entry (sub-entry batching): fewer
    /// entries for the broker to index, and together they compress
    /// better. Each sub-entry goes under its last message's publishing
    /// id, so deduplication holds per sub-entry. 1 (the default) sends
    /// each message as an entry of its own.
    pub fn sub_entry_size(mut self, n: u16) -> ProducerBuilder {
        self.sub_entry_size = n.max(1) as usize;
        self
    }

    /// Compress sub-entries (with [`Self::sub_entry_size`] above 1).
    pub fn compression(mut self, compression: Compression) -> ProducerBuilder {
        self.compression = compression;
        self
    }

    /// A name (the protocol's publisher reference): the broker keeps the
    /// last publishing id it stored for it, drops messages under ids it
    /// has already stored, and a producer of that name built later
    /// numbers on from there.
    pub fn name(mut self, name: impl Into<String>) -> ProducerBuilder {
        self.name = Some(name.into());
        self
    }

    /// Publishes awaiting their confirm before `send` waits (default
    /// [`DEFAULT_MAX_UNCONFIRMED`]).
    pub fn max_unconfirmed(mut self, n: usize) -> ProducerBuilder {
        self.max_unconfirmed = n.max(1);
        self
    }

    /// Declare the producer on `stream`.
    pub async fn build(self, stream: &str) -> Result<Producer, Error> {
        if self.filter_value.is_some() && self.sub_entry_size > 1 {
            return Err(Error::Misconfigured(
                "filter values and sub-entry batching do not go together".into(),
            ));
        }
        let confirms = Confirms::new(self.max_unconfirmed).with_metrics(self.env.metrics().cloned(), stream);
        let shared = Arc::new(Shared {
            env: self.env,
            stream: stream.to_string(),
            name: self.name,
            confirms: Arc::new(confirms),
            link: watch::channel(Link::Recovering).0,
            next: AtomicU64::new(0),
            sub_entry_size: self.sub_entry_size,
            compression: self.compression,
            recovery: self.recovery,
            closed: AtomicBool::new(false),
            filter_value: self.filter_value,
        });
        let (conn, id) = shared.attach().await?;
        if let Some(name) = &shared.name {
            let r = conn
                .call("query publisher sequence", |c| Command::QueryPublisherSequence {
                    correlation_id: c,
                    reference: name.clone(),
                    stream: stream.to_string(),
                })
                .await?;
            shared.next.store(
                warren_stream::wire::Reader::new(r.rest).u64()? + 1,
                Ordering::Relaxed,
            );
        }
        shared.link.send_replace(Link::Up(conn, id));
        let weak = Arc::downgrade(&shared);
        shared.confirms.set_on_lost(Box::new(move |why| {
            if let Some(s) = weak.upgrade() {
                s.lost(why);
            }
        }));
        Ok(Producer {
            shared,
            closed: false,
        })
    }
}

/// Where a producer publishes now.
#[derive(Clone)]
enum Link {
    /// On this connection, under this publisher id.
    Up(Arc<Connection>, u8),
    /// Attaching again after a loss.
    Recovering,
    /// Ended for good.
    Failed(Error),
}

/// A producer's state, shared with its recovery task.
struct Shared {
    env: Environment,
    stream: String,
    name: Option<String>,
    confirms: Arc<Confirms>,
    link: watch::Sender<Link>,
    next: AtomicU64,
    sub_entry_size: usize,
    compression: Compression,
    recovery: bool,
    closed: AtomicBool,
    /// Its filter-value extractor: frames go as Publish version 2.
    filter_value: Option<FilterValueOf>,
}

/// How long recovery waits between tries, at first and at most.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(3);

impl Shared {
    /// Declare the publisher on the stream's leader now, and send what
    /// is unconfirmed again (before anything new: senders wait for the
    /// link).
    async fn attach(&self) -> Result<(Arc<Connection>, u8), Error> {
        let conn = self.env.connection_for(&self.stream, Role::Leader).await?;
        if self.filter_value.is_some() && !conn.supports(key::PUBLISH, 2).await? {
            return Err(Error::Misconfigured(
                "the broker does not take filter values (RabbitMQ 3.13 and later do)".into(),
            ));
        }
        let id = conn.add_publisher(&self.stream, self.confirms.clone())?;
        let claim = Claim::new(&conn, Claimed::Publisher(id));
        conn.call("declare publisher", |c| Command::DeclarePublisher {
            correlation_id: c,
            publisher_id: id,
            reference: self.name.clone(),
            stream: self.stream.clone(),
        })
        .await?;
        let again = self.confirms.unconfirmed();
        if !again.is_empty() {
            let frame_bytes = conn.frame_max as usize / 2;
            let (version, _) = self.publish_version();
            conn.send_with(|buf| {
                for frame in frames(&again, frame_bytes) {
                    let at = begin_publish_version(buf, id, frame.len() as u32, version);
                    for (wire, entry) in frame {
                        buf.put_u64(*wire);
                        buf.extend_from_slice(entry);
                    }
                    end_frame(buf, at);
                }
            })
            .await?;
            tracing::info!(stream = %self.stream, count = again.len(), "stream producer sent its unconfirmed entries again");
        }
        claim.keep();
        Ok((conn, id))
    }

    /// The Publish version its frames go as, and whether that is 2.
    fn publish_version(&self) -> (u16, bool) {
        match self.filter_value {
            Some(_) => (2, true),
            None => (1, false),
        }
    }

    /// The connection was lost (or the leader moved): recover, or fail
    /// what is outstanding.
    fn lost(self: Arc<Self>, why: Error) {
        if !self.recovery || !recoverable(&why) || self.closed.load(Ordering::Acquire) {
            self.link.send_replace(Link::Failed(why.clone()));
            self.confirms.fail_all(&why);
            return;
        }
        if matches!(*self.link.borrow(), Link::Recovering) {
            return;
        }
        self.link.send_replace(Link::Recovering);
        tracing::info!(stream = %self.stream, "stream producer recovering: {why}");
        tokio::spawn(self.recover());
    }

    async fn recover(self: Arc<Self>) {
        let mut wait = RETRY_FIRST;
        loop {
            tokio::time::sleep(wait).await;
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            match self.attach().await {
                Ok((conn, id)) => {
                    tracing::info!(stream = %self.stream, "stream producer recovered");
                    self.link.send_replace(Link::Up(conn, id));
                    return;
                }
                Err(e) if recoverable(&e) => wait = (wait * 2).min(RETRY_MAX),
                Err(e) => {
                    self.link.send_replace(Link::Failed(e.clone()));
                    self.confirms.fail_all(&e);
                    return;
                }
            }
        }
    }

    /// The connection and publisher id to publish on, waiting while the
    /// producer recovers.
    async fn current(&self) -> Result<(Arc<Connection>, u8), Error> {
        let mut rx = self.link.subscribe();
        loop {
            match &*rx.borrow_and_update() {
                Link::Up(c, id) => return Ok((c.clone(), *id)),
                Link::Failed(e) => return Err(e.clone()),
                Link::Recovering => {}
            }
            if rx.changed().await.is_err() {
                return Err(Error::Closed);
            }
        }
    }
}

/// Entries in frames of at most [`BATCH_MESSAGES`] entries and about
/// `bytes` bytes.
fn frames(entries: &[(u64, Bytes)], bytes: usize) -> Vec<&[(u64, Bytes)]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut size = 0;
    for (i, (_, e)) in entries.iter().enumerate() {
        let e = e.len() + 8;
        if i > start && (i - start >= BATCH_MESSAGES || size + e > bytes) {
            out.push(&entries[start..i]);
            start = i;
            size = 0;
        }
        size += e;
    }
    if start < entries.len() {
        out.push(&entries[start..]);
    }
    out
}

/// Publishes to one stream. Dropping it deletes it on the broker (as
/// [`Self::close`] does, without waiting).
///
/// ```no_run
/// use warren_client::stream::{Environment, Message};
///
/// # async fn run() -> Result<(), warren_client::stream::Error> {
/// let env = Environment::connect("rabbitmq-stream://guest:guest@localhost:5552/%2f").await?;
/// let producer = env.producer().build("orders").await?;
/// let confirm = producer.send(Message::new("order 1")).await?;
/// assert!(confirm.await?.is_confirmed());
/// # Ok(()) }
/// ```
pub struct Producer {
    shared: Arc<Shared>,
    closed: bool,
}

impl Producer {
    /// The stream it publishes to.
    pub fn stream(&self) -> &str {
        &self.shared.stream
    }

    /// The publishing id the next message without one gets.
    pub fn next_publishing_id(&self) -> u64 {
        self.shared.next.load(Ordering::Relaxed)
    }

    /// Publishes awaiting their confirm.
    pub fn unconfirmed(&self) -> usize {
        self.shared.confirms.outstanding()
    }

    /// Publish one message: once it is queued for the socket, the future
    /// of its confirm. Waits while `max_unconfirmed` are in flight.
    pub async fn send(&self, message: Message) -> Result<Confirm, Error> {
        let mut confirms = self.send_batch([message]).await?;
        Ok(confirms.pop().expect("one confirm per message"))
    }

    /// Publish messages in order, as few frames as possible; one confirm
    /// per message, in order. Waits, as [`Self::send`] does, while the
    /// in-flight limit is reached or the producer recovers. Messages
    /// without a publishing id are numbered as their frame goes into the
    /// outbox, so ids follow the order on the wire (what deduplication
    /// needs) even when tasks share the producer. Messages may be given
    /// or lent (`&Message`): each is read once, as it is encoded. On a
    /// TCP connection (not TLS) a body of 512 bytes or more is not
    /// copied: the frame keeps a share of its `Bytes` until confirmed.
    /// A call dropped before it returns (a `select!`, a timeout) has
    /// published the frames that went into the outbox, not the rest, and
    /// their confirms reach no one (their places under the limit come
    /// back as the broker confirms them).
    pub async fn send_batch<I, M>(&self, messages: I) -> Result<Vec<Confirm>, Error>
    where
        I: IntoIterator<Item = M>,
        M: Borrow<Message>,
    {
        let batch = Batch::each();
        self.send_into(messages, &batch).await?;
        Ok(Confirm::each_of(&batch).collect())
    }

    /// Publish messages as [`Self::send_batch`] does, with one future for
    /// them all, which resolves once each is settled: the cheaper way to
    /// publish a lot when the count of what was stored is enough.
    ///
    /// ```no_run
    /// use warren_client::stream::Message;
    ///
    /// # async fn run(producer: warren_client::stream::Producer) -> Result<(), warren_client::stream::Error> {
    /// let all = producer.send_all((0..1000).map(|i| Message::new(format!("event {i}")))).await?;
    /// let outcome = all.await;
    /// assert!(outcome.all_confirmed(), "{} confirmed, {:?} refused", outcome.confirmed, outcome.rejected);
    /// # Ok(()) }
    /// ```
    pub async fn send_all<I, M>(&self, messages: I) -> Result<BatchConfirm, Error>
    where
        I: IntoIterator<Item = M>,
        M: Borrow<Message>,
    {
        let batch = Batch::counted();
        self.send_into(messages, &batch).await?;
        batch.seal();
        Ok(BatchConfirm::new(batch))
    }

    /// Publish `messages`, their words going to `batch`.
    async fn send_into<I, M>(&self, messages: I, batch: &Arc<Batch>) -> Result<(), Error>
    where
        I: IntoIterator<Item = M>,
        M: Borrow<Message>,
    {
        let s = &*self.shared;
        let per_entry = s.sub_entry_size;
        let per_frame = BATCH_MESSAGES.min(s.confirms.max() / per_entry).max(1);
        let mut it = messages.into_iter().peekable();
        let (_, v2) = s.publish_version();
        while it.peek().is_some() {
            let (conn, _) = s.current().await?;
            let frame_bytes = conn.frame_max as usize / 2;
            // A frame's worth of entries, encoded (and compressed) before
            // the outbox's lock is taken (the application's messages go
            // as soon as they are); then their places under the
            // in-flight limit (this may wait).
            // Room for what the call says it brings (a single `send` is
            // one small entry), not a whole frame's worth up front, each
            // taken to be about as large as the first (growing the buffer
            // as it fills copies it again: at 1 KB a message was copied
            // nearly twice).
            let expected = it.size_hint().0.clamp(1, per_frame);
            let each = match it.peek().map(|m| m.borrow().body.len()) {
                Some(n) if n < LEND_MIN || !conn.lends => n + 64,
                _ => 64,
            };
            let mut frame = Frame::with_capacity(expected, expected.saturating_mul(each).min(frame_bytes));
            while it.peek().is_some()
                && frame.len() < per_frame
                && (frame.len() == 0 || frame.bytes() < frame_bytes)
            {
                if per_entry == 1 {
                    let m = it.next().expect("peeked");
                    let m = m.borrow();
                    let filter = s.filter_value.as_ref().and_then(|f| f(m));
                    if conn.lends && lends_body(m, filter.as_deref()) {
                        frame.entry_lent(
                            m.publishing_id,
                            |out| put_body_head(out, m.body.len(), v2),
                            &m.body,
                        );
                    } else {
                        frame.entry(std::iter::once(m.publishing_id), |out| {
                            put_simple(out, m, filter.as_deref(), v2)
                        });
                    }
                } else {
                    let (e, ids) = sub_batch(it.by_ref().take(per_entry), s.compression.code());
                    frame.entry(ids.into_iter(), |out| put_sub_batch(out, &e, v2));
                }
            }
            let messages = frame.messages();
            let mut frame = Some(frame);
            let places = messages.min(s.confirms.max());
            s.confirms.take(places).await;
            // Given back unless the frame is registered: on an error, and
            // when this call is dropped while it waits below.
            let mut held = Places {
                confirms: &s.confirms,
                n: places,
            };
            loop {
                let (conn, pid) = s.current().await?;
                let (version, _) = s.publish_version();
                let sent = conn
                    .send_with(|buf| {
                        // Numbered here, under the outbox's lock: no other
                        // sender of this producer numbers meanwhile.
                        let mut frame = frame.take().expect("sent once");
                        let mut next = s.next.load(Ordering::Relaxed);
                        frame.number(&mut next);
                        frame.seal_into(pid, version, buf);
                        s.next.store(next, Ordering::Relaxed);
                        s.confirms.register(frame, batch);
                        held.n = 0;
                    })
                    .await;
                match sent {
                    Ok(()) => {
                        if let Some(m) = s.env.metrics() {
                            m.published(&s.stream, messages as u64);
                        }
                        break;
                    }
                    // The connection ended before the frame went into its
                    // outbox (nothing of it was numbered): once the
                    // producer has recovered, on the new one.
                    Err(e) if s.recovery && recoverable(&e) => {
                        if matches!(&*s.link.borrow(), Link::Up(c, _) if Arc::ptr_eq(c, &conn)) {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Delete the producer on the broker. Publishes still unconfirmed
    /// resolve to [`Error::Closed`].
    pub async fn close(mut self) -> Result<(), Error> {
        self.closed = true;
        self.shared.closed.store(true, Ordering::Release);
        let link = self.shared.link.borrow().clone();
        let r = match link {
            Link::Up(conn, id) => {
                let r = conn
                    .call("delete publisher", |c| Command::DeletePublisher {
                        correlation_id: c,
                        publisher_id: id,
                    })
                    .await;
                conn.remove_publisher(id);
                r.map(|_| ())
            }
            _ => Ok(()),
        };
        self.shared.link.send_replace(Link::Failed(Error::Closed));
        self.shared.confirms.fail_all(&Error::Closed);
        r
    }
}

/// Places taken under the in-flight limit for a frame not yet
/// registered: given back when dropped.
struct Places<'a> {
    confirms: &'a Confirms,
    n: usize,
}

impl Drop for Places<'_> {
    fn drop(&mut self) {
        if self.n > 0 {
            self.confirms.give_back(self.n);
        }
    }
}

impl Drop for Producer {
    /// Delete the producer without waiting, unless [`Producer::close`]
    /// did. The request is queued before the id is freed, so it reaches
    /// the broker before any producer that takes the id next.
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        self.shared.closed.store(true, Ordering::Release);
        if let Link::Up(conn, id) = self.shared.link.borrow().clone() {
            conn.forget_publisher(id);
        }
        self.shared.link.send_replace(Link::Failed(Error::Closed));
        self.shared.confirms.fail_all(&Error::Closed);
    }
}
