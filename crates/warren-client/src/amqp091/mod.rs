//! AMQP 0-9-1, as RabbitMQ and Warren speak it.
//!
//! A [`Connection`] runs two tasks on the caller's tokio runtime: a reader
//! that routes frames to channels, and a writer that batches whatever is
//! queued into one write. [`Channel`]s declare, bind, publish and consume.
//! In confirm mode each publish returns a [`Confirm`], a future of the
//! broker's [`Confirmation`]; a [`Consumer`] is a stream of
//! [`Delivery`]s whose buffer is bounded by the channel's prefetch.

mod channel;
mod connection;
mod consume;
mod error;
mod io;
mod options;
mod publish;

pub use channel::{Channel, DeclaredQueue, GetMessage};
pub use connection::Connection;
pub use consume::{Acker, Consumer, Delivery};
pub use error::Error;
pub use options::{ConsumeOptions, ExchangeKind, ExchangeOptions, PublishOptions, QueueOptions};
pub use publish::{Confirm, Confirmation, Returned};
pub use warren_amqp091::{BasicProperties as Properties, FieldTable, FieldValue};
