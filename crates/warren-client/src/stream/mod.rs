//! The RabbitMQ Stream protocol (port 5552): an [`Environment`] that
//! knows the broker and manages streams, [`Producer`]s whose publishes
//! resolve to confirms under an in-flight limit (named ones deduplicated
//! by the broker), and [`Consumer`]s read as a `futures` Stream from an
//! offset specification, with credit granted as chunks are taken (or a
//! chunk at a time, its messages lent in place:
//! [`Consumer::next_chunk`]). It works against RabbitMQ as well as
//! Warren.
//!
//! ```no_run
//! use futures_util::StreamExt;
//! use warren_client::stream::{Environment, Message, OffsetSpecification, StreamOptions};
//!
//! # async fn run() -> Result<(), warren_client::stream::Error> {
//! let env = Environment::connect("rabbitmq-stream://guest:guest@localhost:5552/%2f").await?;
//! env.create_stream("events", &StreamOptions::default()).await?;
//!
//! let producer = env.producer().name("events-writer").build("events").await?;
//! let confirms = producer
//!     .send_batch((0..100).map(|i| Message::new(format!("event {i}"))))
//!     .await?;
//! for c in confirms {
//!     assert!(c.await?.is_confirmed());
//! }
//!
//! let mut consumer = env.consumer().offset(OffsetSpecification::First).build("events").await?;
//! let first = consumer.next().await.expect("a message")?;
//! assert_eq!(first.offset(), 0);
//! assert_eq!(&first.body()?[..], b"event 0");
//! # Ok(()) }
//! ```
//!
//! Producers connect to their stream's leader and consumers to a
//! replica when there is one (the broker's metadata says where), on
//! connections pooled by node; [`EnvironmentBuilder::load_balancer_mode`]
//! is for brokers behind a load balancer.
//!
//! Producers and consumers recover by themselves from a lost connection
//! or a member that moves: a producer sends its unconfirmed entries again
//! under their publishing ids, a consumer subscribes again after the
//! last message it handed out.
//!
//! Of RabbitMQ 3.11-3.13: single active consumers
//! ([`ConsumerBuilder::single_active_consumer`], [`single_active`]),
//! super streams ([`Environment::create_super_stream`],
//! [`Environment::super_stream_producer`],
//! [`Environment::super_stream_consumer`]), filtering
//! ([`ProducerBuilder::filter_value`], [`ConsumerBuilder::filter`]) and
//! [`Environment::stream_stats`].

mod chunk;
mod chunk_messages;
mod claim;
mod commands;
mod confirm;
mod confirms;
mod connection;
mod consumer;
mod entry;
mod environment;
mod error;
mod handshake;
mod message;
mod metadata;
mod metrics;
mod offset;
mod outbox;
mod producer;
mod read_buffer;
pub mod single_active;
mod super_consumer;
mod super_producer;
mod super_stream;
mod tracking;

pub use chunk_messages::{ChunkMessages, MessageRef};
pub use confirm::{BatchConfirm, BatchConfirmation, Confirm, Confirmation};
pub use consumer::{Consumer, ConsumerBuilder, Delivery, DEFAULT_INITIAL_CREDIT};
pub use environment::{Environment, EnvironmentBuilder, StreamOptions, StreamStats};
pub use error::{Error, ResponseCode};
pub use message::Message;
pub use metrics::Metrics;
pub use offset::OffsetSpecification;
pub use producer::{Compression, Producer, ProducerBuilder, DEFAULT_MAX_UNCONFIRMED};
pub use single_active::ConsumerUpdate;
pub use super_consumer::{PartitionDelivery, SuperStreamConsumer, SuperStreamConsumerBuilder};
pub use super_producer::{SuperStreamProducer, SuperStreamProducerBuilder};
pub use super_stream::{RoutingStrategy, SuperStreamSpec};
pub use tracking::Tracking;

/// Entry points for `crates/warren-client/fuzz` (not part of the API).
#[doc(hidden)]
pub mod fuzzing {
    /// Read `data` as each reply this client reads by hand: Route's and
    /// Partitions' lists, StreamStats, ExchangeCommandVersions, a
    /// ConsumerUpdate, a Metadata response.
    pub fn read_replies(data: &[u8]) {
        let b = bytes::Bytes::copy_from_slice(data);
        let _ = super::commands::strings(b.clone());
        let _ = super::commands::stats(b.clone());
        let _ = super::commands::versions(b.clone());
        let _ = super::commands::ConsumerUpdateRequest::decode(b.clone());
        let _ = super::metadata::parse_response(b);
    }

    /// Read `data` as a delivered chunk, as a consumer does (CRC checked
    /// and not; message by message owned and in place), and each message
    /// in it as a stored message.
    pub fn read_chunk(data: &[u8]) {
        let chunk = bytes::Bytes::copy_from_slice(data);
        for crc in [true, false] {
            if let Ok(Some(reader)) = super::chunk::ChunkReader::new(&chunk, crc) {
                for (_, _, raw) in reader.map_while(Result::ok) {
                    let _ = super::message::decode(&raw);
                    let _ = super::message::body(&raw);
                }
            }
            if let Ok(Some(mut reader)) = super::chunk::ChunkReader::new(&chunk, crc) {
                while let Some(Ok((_, p))) = reader.next_place() {
                    let _ = super::message::body_of(reader.bytes(&p));
                }
            }
        }
    }
}
