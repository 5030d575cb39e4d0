//! Producers: messages published to one stream, each with a publishing
//! id, confirmed as futures, under an in-flight limit; a named producer's
//! ids carry on from what the broker stored (deduplication across
//! restarts of the application).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
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
}

impl ProducerBuilder {
    pub(crate) fn new(env: Environment) -> ProducerBuilder {
        ProducerBuilder {
            env,
            name: None,
            max_unconfirmed: DEFAULT_MAX_UNCONFIRMED,
        }
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
                out.push(self.confirms.wait(id, slot));
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
