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
use super::environment::Environment;
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
        let conn = self.env.connection().await?;
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
    /// in-flight limit is reached.
    pub async fn send_batch<I>(&self, messages: I) -> Result<Vec<Confirm>, Error>
    where
        I: IntoIterator<Item = Message>,
    {
        if self.sub_entry_size > 1 {
            return self.send_sub_entries(messages).await;
        }
        let mut out = Vec::new();
        let mut batch = Vec::with_capacity(BATCH_MESSAGES);
        let mut it = messages.into_iter().peekable();
        while it.peek().is_some() {
            // Each message's place under the limit first (this may wait),
            // then the frame, encoded whole into the outbox.
            let mut bytes = 0usize;
            while let Some(m) = it.next_if(|m| {
                batch.len() < BATCH_MESSAGES
                    && (batch.is_empty() || bytes + m.body.len() + 64 < self.conn.frame_max as usize / 2)
            }) {
                bytes += m.body.len() + 64;
                let id = self.publishing_id(&m);
                let slot = self.confirms.slot().await;
                out.push(self.confirms.wait(id, id, slot));
                batch.push((id, m));
            }
            let pid = self.id;
            let sent = self.conn.send_with(|buf| encode_publish(buf, pid, &batch)).await;
            if let Err(e) = sent {
                self.confirms.fail_all(&e);
                return Err(e);
            }
            batch.clear();
        }
        Ok(out)
    }

    /// [`Self::send_batch`] with sub-entry batching: each sub-entry's
    /// messages are encoded and compressed together (outside the outbox's
    /// lock), and a frame carries several sub-entries.
    async fn send_sub_entries<I>(&self, messages: I) -> Result<Vec<Confirm>, Error>
    where
        I: IntoIterator<Item = Message>,
    {
        let codec = self.compression.code();
        let mut out = Vec::new();
        let mut it = messages.into_iter().peekable();
        let mut entries: Vec<(u64, Entry)> = Vec::new();
        while it.peek().is_some() {
            let mut bytes = 0usize;
            while it.peek().is_some()
                && entries.len() < BATCH_MESSAGES
                && (entries.is_empty() || bytes < self.conn.frame_max as usize / 2)
            {
                let mut plain = BytesMut::new();
                let mut ids = Vec::with_capacity(self.sub_entry_size);
                for m in it.by_ref().take(self.sub_entry_size) {
                    let id = self.publishing_id(&m);
                    ids.push((id, self.confirms.slot().await));
                    let len_at = plain.len();
                    plain.put_u32(0);
                    m.encode(&mut plain);
                    let len = (plain.len() - len_at - 4) as u32;
                    plain[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
                }
                let wire = ids.last().map(|(id, _)| *id).expect("at least one message");
                let records = ids.len() as u16;
                let uncompressed_length = plain.len() as u32;
                for (id, slot) in ids {
                    out.push(self.confirms.wait(wire, id, slot));
                }
                let body = match codec {
                    0 => plain.freeze(),
                    c => Bytes::from(warren_stream::compression::compress(c, &plain).expect("a known codec")),
                };
                bytes += body.len();
                entries.push((
                    wire,
                    Entry::SubBatch {
                        compression: codec,
                        records,
                        uncompressed_length,
                        body,
                    },
                ));
            }
            let pid = self.id;
            let sent = self
                .conn
                .send_with(|buf| {
                    let at = begin_publish(buf, pid, entries.len() as u32);
                    for (id, e) in &entries {
                        buf.put_u64(*id);
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

    fn publishing_id(&self, m: &Message) -> u64 {
        match m.publishing_id {
            Some(id) => {
                self.next.fetch_max(id + 1, Ordering::Relaxed);
                id
            }
            None => self.next.fetch_add(1, Ordering::Relaxed),
        }
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

/// One Publish frame (version 1) of `batch`: each message's publishing
/// id and its AMQP 1.0 encoding, written in place (no copy per message).
fn encode_publish(out: &mut BytesMut, publisher_id: u8, batch: &[(u64, Message)]) {
    let at = begin_publish(out, publisher_id, batch.len() as u32);
    for (id, m) in batch {
        out.put_u64(*id);
        let len_at = out.len();
        out.put_u32(0);
        m.encode(out);
        let len = (out.len() - len_at - 4) as u32;
        out[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
    }
    end_frame(out, at);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publish_frame_reads_back_as_its_messages() {
        let mut out = BytesMut::new();
        let batch = vec![
            (7, Message::new("a")),
            (8, Message::new("bb").application_property("k", "v")),
        ];
        encode_publish(&mut out, 3, &batch);
        let mut buf = out;
        let frame = warren_stream::command::parse_frame(&mut buf, 1 << 20)
            .unwrap()
            .unwrap();
        let Command::Publish {
            publisher_id,
            messages,
        } = Command::decode(frame).unwrap()
        else {
            panic!("a publish")
        };
        assert_eq!(publisher_id, 3);
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[1].0, 8);
        let d = super::super::message::decode(&messages[1].1).unwrap();
        assert_eq!(&d.body[..], b"bb");
    }
}
