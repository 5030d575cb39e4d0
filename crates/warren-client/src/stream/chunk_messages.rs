//! Reading a consumer's chunks in place ([`super::Consumer::next_chunk`]):
//! a chunk's messages lent one at a time, for applications that look at
//! each message and move on (a counter, a parser into their own types),
//! where sharing every message out as a [`super::Delivery`] costs a
//! reference count each.

use std::borrow::Cow;

use super::consumer::Consumer;
use super::error::Error;
use super::message;

/// The messages of the chunk a consumer took, lent one at a time by
/// [`Self::next_message`]; each counts as handed out when it is lent
/// (for where recovery resumes and for offset tracking). Dropped before
/// the end, the rest come next from the consumer.
pub struct ChunkMessages<'a> {
    consumer: &'a mut Consumer,
}

impl<'a> ChunkMessages<'a> {
    pub(crate) fn new(consumer: &'a mut Consumer) -> ChunkMessages<'a> {
        ChunkMessages { consumer }
    }

    /// The chunk's next message that is the application's, or None once
    /// the chunk is read. An error (a chunk whose bytes do not hold what
    /// its header says) ends the consumer.
    ///
    /// ```no_run
    /// # async fn run(mut consumer: warren_client::stream::Consumer) -> Result<(), warren_client::stream::Error> {
    /// if let Some(chunk) = consumer.next_chunk().await {
    ///     let mut chunk = chunk?;
    ///     while let Some(m) = chunk.next_message() {
    ///         let m = m?;
    ///         println!("{} at {}: {} bytes", m.offset(), m.timestamp(), m.raw().len());
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn next_message(&mut self) -> Option<Result<MessageRef<'_>, Error>> {
        let (offset, p) = match self.consumer.next_place()? {
            Ok(m) => m,
            Err(e) => return Some(Err(e)),
        };
        let (timestamp, raw) = self.consumer.message_at(&p);
        Some(Ok(MessageRef {
            offset,
            timestamp,
            raw,
        }))
    }
}

/// A message lent by [`ChunkMessages::next_message`]: what a
/// [`super::Delivery`] tells, without owning its bytes.
#[derive(Debug, Clone, Copy)]
pub struct MessageRef<'a> {
    offset: u64,
    timestamp: i64,
    raw: &'a [u8],
}

impl<'a> MessageRef<'a> {
    /// Its offset in the stream.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// When its chunk was written (ms since the epoch).
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The message as stored (its AMQP 1.0 encoding).
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    /// Its body: the data sections' bytes (or an amqp-value's binary or
    /// string); borrowed when the message is one data section, as
    /// stream clients write them.
    pub fn body(&self) -> Result<Cow<'a, [u8]>, Error> {
        message::body_of(self.raw)
    }

    /// Its application properties, as text.
    pub fn application_properties(&self) -> Result<Vec<(String, String)>, Error> {
        Ok(message::decode(self.raw)?.application_properties)
    }
}
