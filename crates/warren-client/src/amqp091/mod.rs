//! AMQP 0-9-1, as RabbitMQ and Warren speak it.
//!
//! A [`Connection`] runs two tasks per socket on the caller's tokio
//! runtime: a reader that routes frames to channels, and a writer that
//! batches whatever is queued into one write. [`Channel`]s declare, bind,
//! publish and consume. In confirm mode each publish returns a
//! [`Confirm`], a future of the broker's [`Confirmation`]; a [`Consumer`]
//! is a stream of [`Delivery`]s whose buffer is bounded by the channel's
//! prefetch. When the socket is lost the connection recovers
//! ([`RecoveryOptions`]) and tells the application ([`Event`]).

mod channel;
mod channel_state;
mod connection;
mod consume;
mod core;
mod deferral;
mod delivery;
mod error;
mod events;
mod handshake;
mod io;
mod options;
mod outbound;
mod publish;
mod publishing;
mod recovery;
mod refresh;
mod replies;
mod rpc;
mod settings;
mod topology;
mod wire;

pub use crate::token::Token;
pub use channel::{Channel, DeclaredQueue, GetMessage};
pub use connection::{Connection, ConnectionBuilder};
pub use consume::Consumer;
pub use delivery::{Acker, Delivery};
pub use error::Error;
pub use events::{Event, Events};
pub use options::{
    ConsumeOptions, ExchangeKind, ExchangeOptions, PublishOptions, QueueOptions, RecoveryOptions,
};
pub use publish::{Confirm, Confirmation, Returned, DEFAULT_IN_FLIGHT};
pub use publishing::Message;
pub use rpc::{reply, RpcClient, DIRECT_REPLY_TO};
pub use warren_amqp091::{BasicProperties as Properties, FieldTable, FieldValue, ShortStr};
