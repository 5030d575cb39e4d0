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
//! durable unless made [`Message::transient`]. A lost connection
//! recovers by itself ([`RecoveryOptions`]): it connects again, declares
//! again what its [`Management`]s declared, and attaches its publishers
//! and consumers again; outcomes awaited at the loss fail with
//! [`Error::ConnectionLost`], and [`Connection::events`] tells.
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
mod events;
mod link;
mod management;
mod message;
mod metrics;
mod publisher;
mod recovery;
mod refresh;
mod rpc;
mod session;
mod spec;
mod topology;
mod wire;

pub use crate::recovery::RecoveryOptions;
pub use crate::token::Token;
pub use connection::{Connection, ConnectionBuilder, SaslMechanism};
pub use consumer::{Batch, Consumer, ConsumerBuilder, Delivery, StreamOffset, DEFAULT_INITIAL_CREDIT};
pub use error::{Condition, Error};
pub use events::{Event, Events};
pub use management::Management;
pub use message::{Body, Message, MessageId, Properties};
pub use metrics::{Metrics, Settlement};
pub use publisher::{PreSettledPublisher, Published, Publisher, PublisherBuilder, DEFAULT_MAX_IN_FLIGHT};
pub use rpc::{ReplyTo, RpcClient, RpcClientBuilder, RpcServer, DEFAULT_RPC_TIMEOUT};
pub use session::Outcome;
pub use spec::{BindingSpec, Destination, ExchangeSpec, QueueInfo, QueueSpec, QueueType};
/// AMQP 1.0 values (application properties, annotations, bodies).
pub use warren_amqp10::Value;

/// Entry points for the fuzz targets (`crates/warren-client/fuzz`): what
/// the broker sends, read as this client reads it. Not part of the API.
#[doc(hidden)]
pub mod fuzzing {
    use bytes::BytesMut;
    use warren_amqp10::performative::Attach;
    use warren_amqp10::{Frame, Performative};

    use super::session::{Kind, Session};

    /// Read `data` as a message, and as frames from the broker applied
    /// to a session with a sender and a receiver link attached (handles 0
    /// and 1 on both sides): no panic, no unbounded allocation.
    pub fn read(data: &[u8]) {
        let _ = super::message::Message::decode(data);
        let mut s = Session::new(100, 0, 1 << 16);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        for (name, kind) in [
            ("sender", Kind::sender()),
            ("receiver", Kind::receiver(tx.clone(), 4)),
        ] {
            let (handle, _) = s.attach(
                Attach {
                    name: name.into(),
                    ..Default::default()
                },
                kind,
                true,
            );
            let mut reply = Attach {
                name: name.into(),
                handle,
                ..Default::default()
            };
            reply.role = if name == "sender" {
                warren_amqp10::performative::Role::Receiver
            } else {
                warren_amqp10::performative::Role::Sender
            };
            let _ = s.handle(Performative::Attach(reply), bytes::Bytes::new());
        }
        s.grant(1);
        let mut buf = BytesMut::from(data);
        while let Ok(Some(f)) = Frame::parse(&mut buf, 1 << 16) {
            let Ok((p, payload)) = Performative::decode(&f.body) else {
                continue;
            };
            if s.handle(p, payload).is_err() {
                break;
            }
            s.out.clear();
        }
        drop((tx, rx));
    }
}
