//! Producers: messages published to one stream, each with a publishing
//! id, confirmed as futures, under an in-flight limit; a named producer's
//! ids carry on from what the broker stored (deduplication across
//! restarts of the application).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use warren_stream::chunk::Entry;
use warren_stream::command::{begin_publish, end_frame, Command};

use super::confirms::{Confirm, Confirms};
use super::connection::Connection;
use super::environment::{Environment, Role};
use super::error::Error;
use super::message::Message;

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
pub struct ProducerBuilder {
    env: Environment,
    name: Option<String>,
    max_unconfirmed: usize,
    sub_entry_size: usize,
    compression: Compression,
}

impl ProducerBuilder {
    pub(crate) fn new(env: Environment) -> ProducerBuilder {
        ProducerBuilder {
            env,
            name: None,
            max_unconfirmed: DEFAULT_MAX_UNCONFIRMED,
            sub_entry_size: 1,
            compression: Compression::None,
        }
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
        let conn = self.env.connection_for(stream, Role::Leader).await?;
        let confirms = Arc::new(Confirms::new(self.max_unconfirmed));
        let id = conn.add_publisher(stream, confirms.clone())?;
        let declared = conn
            .call("declare publisher", |c| Command::DeclarePublisher {
                correlation_id: c,
                publisher_id: id,
                reference: self.name.clone(),
                stream: stream.to_string(),
            })
            .await;
        if let Err(e) = declared {
            conn.remove_publisher(id);
            return Err(e);
        }
        let next = match &self.name {
            Some(name) => {
                let r = conn
                    .call("query publisher sequence", |c| Command::QueryPublisherSequence {
                        correlation_id: c,
                        reference: name.clone(),
                        stream: stream.to_string(),
                    })
                    .await?;
                warren_stream::wire::Reader::new(r.rest).u64()? + 1
            }
            None => 0,
        };
        Ok(Producer {
            conn,
            id,
            stream: stream.to_string(),
            confirms,
            next: AtomicU64::new(next),
            sub_entry_size: self.sub_entry_size,
            compression: self.compression,
            closed: false,
        })
    }
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
    conn: Arc<Connection>,
    id: u8,
    stream: String,
    confirms: Arc<Confirms>,
    next: AtomicU64,
    sub_entry_size: usize,
    compression: Compression,
    closed: bool,
}

impl Producer {
    /// The stream it publishes to.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The publishing id the next message without one gets.
    pub fn next_publishing_id(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    /// Publishes awaiting their confirm.
    pub fn unconfirmed(&self) -> usize {
        self.confirms.outstanding()
    }

    /// Publish one message: once it is queued for the socket, the future
    /// of its confirm. Waits while `max_unconfirmed` are in flight.
    pub async fn send(&self, message: Message) -> Result<Confirm, Error> {
        let mut confirms = self.send_batch([message]).await?;
        Ok(confirms.pop().expect("one confirm per message"))
    }

    /// Publish messages in order, as few frames as possible; one confirm
    /// per message, in order. Waits, as [`Self::send`] does, while the
    /// in-flight limit is reached. Messages without a publishing id are
    /// numbered as their frame goes into the outbox, so ids follow the
    /// order on the wire (what deduplication needs) even when tasks
    /// share the producer.
    pub async fn send_batch<I>(&self, messages: I) -> Result<Vec<Confirm>, Error>
    where
        I: IntoIterator<Item = Message>,
    {
        let per_entry = self.sub_entry_size;
        let per_frame = BATCH_MESSAGES.min(self.confirms.max() / per_entry).max(1);
        let frame_bytes = self.conn.frame_max as usize / 2;
        let mut out = Vec::new();
        let mut it = messages.into_iter().peekable();
        let mut entries: Vec<Pending> = Vec::new();
        while it.peek().is_some() {
            // A frame's worth of entries, encoded (and compressed) before
            // the outbox's lock is taken; then their places under the
            // in-flight limit (this may wait).
            let (mut bytes, mut messages) = (0usize, 0usize);
            while it.peek().is_some()
                && entries.len() < per_frame
                && (entries.is_empty() || bytes < frame_bytes)
            {
                let e = match per_entry {
                    1 => Pending::simple(it.next().expect("peeked")),
                    n => Pending::sub_entry(it.by_ref().take(n), self.compression.code()),
                };
                bytes += e.size();
                messages += e.ids.len();
                entries.push(e);
            }
            self.confirms.take(messages.min(self.confirms.max())).await;
            let (pid, next, confirms) = (self.id, &self.next, &self.confirms);
            let sent = self
                .conn
                .send_with(|buf| {
                    let at = begin_publish(buf, pid, entries.len() as u32);
                    for e in &mut entries {
                        let mut wire = 0;
                        for id in e.ids.iter_mut() {
                            *id = match *id {
                                Some(given) => {
                                    next.fetch_max(given + 1, Ordering::Relaxed);
                                    Some(given)
                                }
                                None => Some(next.fetch_add(1, Ordering::Relaxed)),
                            };
                            wire = id.expect("numbered");
                        }
                        for id in &e.ids {
                            out.push(confirms.wait(wire, id.expect("numbered")));
                        }
                        buf.put_u64(wire);
                        e.encode(buf);
                    }
                    end_frame(buf, at);
                })
                .await;
            if let Err(e) = sent {
                self.confirms.fail_all(&e);
                return Err(e);
            }
            entries.clear();
        }
        Ok(out)
    }

    /// Delete the producer on the broker. Publishes still unconfirmed
    /// resolve to [`Error::Closed`].
    pub async fn close(mut self) -> Result<(), Error> {
        self.closed = true;
        let id = self.id;
        let r = self
            .conn
            .call("delete publisher", |c| Command::DeletePublisher {
                correlation_id: c,
                publisher_id: id,
            })
            .await;
        self.conn.remove_publisher(id);
        self.confirms.fail_all(&Error::Closed);
        r.map(|_| ())
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
        self.conn.push(&Command::DeletePublisher {
            correlation_id: 0,
            publisher_id: self.id,
        });
        self.conn.remove_publisher(self.id);
        self.confirms.fail_all(&Error::Closed);
    }
}

/// An entry of a frame being built: its messages' publishing ids (given,
/// or None until numbered in the outbox) and what goes on the wire.
struct Pending {
    ids: Vec<Option<u64>>,
    body: Body,
}

enum Body {
    /// One message, encoded in place in the outbox.
    Simple(Message),
    /// A sub-entry batch, encoded (and compressed) beforehand.
    SubBatch(Entry),
}

impl Pending {
    fn simple(m: Message) -> Pending {
        Pending {
            ids: vec![m.publishing_id],
            body: Body::Simple(m),
        }
    }

    fn sub_entry(messages: impl Iterator<Item = Message>, codec: u8) -> Pending {
        let mut plain = BytesMut::new();
        let mut ids = Vec::new();
        for m in messages {
            ids.push(m.publishing_id);
            put_message(&mut plain, &m);
        }
        let uncompressed_length = plain.len() as u32;
        let body = match codec {
            0 => plain.freeze(),
            c => Bytes::from(warren_stream::compression::compress(c, &plain).expect("a known codec")),
        };
        Pending {
            body: Body::SubBatch(Entry::SubBatch {
                compression: codec,
                records: ids.len() as u16,
                uncompressed_length,
                body,
            }),
            ids,
        }
    }

    /// Bytes on the wire, about.
    fn size(&self) -> usize {
        match &self.body {
            Body::Simple(m) => m.body.len() + 16,
            Body::SubBatch(Entry::SubBatch { body, .. }) => body.len() + 19,
            Body::SubBatch(Entry::Simple(b)) => b.len() + 12,
        }
    }

    /// The entry as a Publish frame holds it (after its publishing id).
    fn encode(&self, out: &mut BytesMut) {
        match &self.body {
            Body::Simple(m) => put_message(out, m),
            Body::SubBatch(e) => e.encode(out),
        }
    }
}

/// A message with its 4-byte length before it, encoded in place.
fn put_message(out: &mut BytesMut, m: &Message) {
    let len_at = out.len();
    out.put_u32(0);
    m.encode(out);
    let len = (out.len() - len_at - 4) as u32;
    out[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_encode_as_the_codec_reads_them() {
        let simple = Pending::simple(Message::new("a"));
        let sub = Pending::sub_entry([Message::new("b"), Message::new("cc")].into_iter(), 4);
        let mut out = BytesMut::new();
        let at = begin_publish(&mut out, 3, 2);
        for (id, e) in [(7u64, &simple), (9, &sub)] {
            out.put_u64(id);
            e.encode(&mut out);
        }
        end_frame(&mut out, at);
        let frame = warren_stream::command::parse_frame(&mut out, 1 << 20)
            .unwrap()
            .unwrap();
        let (publisher_id, entries) = warren_stream::publish::parse_publish(frame).unwrap();
        assert_eq!(publisher_id, 3);
        assert_eq!(entries[0].publishing_id, 7);
        let Body::SubBatch(sent) = &sub.body else {
            panic!("a sub-entry batch")
        };
        assert_eq!(&entries[1].entry, sent);
        assert_eq!(sub.ids, vec![None, None]);
        let Entry::SubBatch { records: 2, .. } = entries[1].entry else {
            panic!("a sub-entry batch of two")
        };
    }
}
