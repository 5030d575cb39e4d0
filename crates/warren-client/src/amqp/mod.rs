//! AMQP 1.0 as RabbitMQ 4 serves it, in the shape of RabbitMQ's AMQP 1.0
//! client family (Java, .NET, Go, Python): a [`Connection`] gives a
//! [`Management`] (queues, exchanges and bindings through the broker's
//! `/management` node), [`Publisher`]s whose messages each get an
//! [`Outcome`], and [`Consumer`]s with a window of credit whose
//! deliveries are accepted, discarded or requeued. Addresses are
//! RabbitMQ 4's (v2): `/queues/:q`, `/exchanges/:x/:key`.
//!
//! The connection runs two tasks on the application's runtime (a reader
//! and a writer) and one session shared by its links. Messages are
//! durable unless made [`Message::transient`].
//!
//! ```no_run
//! use warren_client::amqp::{Connection, Message, Outcome, QueueSpec};
//!
//! # async fn run() -> Result<(), warren_client::amqp::Error> {
//! let conn = Connection::open("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
//! conn.management().await?.declare_queue(&QueueSpec::quorum("jobs")).await?;
//!
//! let publisher = conn.publisher().queue("jobs").build().await?;
//! let outcome = publisher.publish(Message::new("job 1")).await?.await?;
//! assert_eq!(outcome, Outcome::Accepted);
//!
//! let mut consumer = conn.consumer().queue("jobs").build().await?;
//! let job = consumer.receive().await?;
//! assert_eq!(job.message.data(), Some(&b"job 1"[..]));
//! job.accept();
//! conn.close().await;
//! # Ok(())
//! # }
//! ```

pub mod address;
mod connection;
mod consumer;
mod error;
mod link;
mod management;
mod message;
mod publisher;
mod session;
mod spec;

pub use connection::{Connection, ConnectionBuilder, SaslMechanism};
pub use consumer::{Consumer, ConsumerBuilder, Delivery, StreamOffset, DEFAULT_INITIAL_CREDIT};
pub use error::{Condition, Error};
pub use management::Management;
pub use message::{Body, Message, MessageId, Properties};
pub use publisher::{Published, Publisher, PublisherBuilder, DEFAULT_MAX_IN_FLIGHT};
pub use session::Outcome;
pub use spec::{BindingSpec, Destination, ExchangeSpec, QueueInfo, QueueSpec, QueueType};
/// AMQP 1.0 values (application properties, annotations, bodies).
pub use warren_amqp10::Value;
