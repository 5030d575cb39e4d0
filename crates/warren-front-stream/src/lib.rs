//! The RabbitMQ Stream protocol front end (port 5552): one task per
//! connection ([`connection`]) that authenticates, then serves
//! publishers ([`publish`]: deduplication, one chunk per publisher per read
//! batch, confirms once written) and subscriptions ([`subscribe`]: chunks
//! read from the log as they are stored, within the subscription's chunk
//! credit), and the topology commands ([`admin`]: create and delete,
//! metadata, super streams, offsets, stats). Streams are queues of type
//! stream in their virtual host (`warren_core::queue::stream`).
//!
//! The handlers work on the connection's state ([`conn::Conn`], with
//! [`publisher`] and [`subscription`] state and what wakes it, [`wake`]);
//! they import that state, never the task.

pub mod admin;
pub mod conn;
pub mod connection;
pub mod publish;
pub mod publisher;
pub mod sac;
pub mod subscribe;
pub mod subscription;
pub mod upkeep;
pub mod wake;
pub mod writer;

/// What the stream front end's connections share on a node.
#[derive(Default)]
pub struct Shared {
    /// Single-active-consumer groups of stream subscriptions.
    pub sac: sac::Coordinator,
    /// Appends publishers' chunks off their connections' tasks.
    pub writer: writer::Writer,
}
