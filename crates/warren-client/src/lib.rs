//! Warren's client for Rust.
//!
//! [`amqp091`] speaks AMQP 0-9-1 to Warren or RabbitMQ on tokio: one
//! reader and one writer task per connection and no thread of its own,
//! publishes whose confirms are futures, consumers that are streams
//! bounded by their prefetch. The plan it grows to (recovery, dispatch
//! concurrency, TLS, the stream protocol, AMQP 1.0) is in the project's
//! `docs/client.md`.
//!
//! ```no_run
//! use warren_client::amqp091::{Confirmation, Connection, Properties, QueueOptions};
//!
//! # async fn run() -> Result<(), warren_client::amqp091::Error> {
//! let conn = Connection::open("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
//! let ch = conn.channel().await?;
//! ch.confirm_select().await?;
//! let q = ch.queue_declare("greetings", QueueOptions::default()).await?;
//! let confirm = ch.publish("", &q.name, Properties::default(), "hello".into()).await?;
//! assert_eq!(confirm.await?, Confirmation::Ack);
//! conn.close().await?;
//! # Ok(())
//! # }
//! ```

pub mod amqp091;
pub mod uri;
