//! Warren's client for Rust: AMQP 0-9-1 ([`amqp091`]), the stream
//! protocol ([`stream`]) and AMQP 1.0 ([`amqp`]) for Warren and
//! RabbitMQ, on tokio.
//!
//! [`amqp091`] runs two tasks per connection on your runtime (no thread
//! of its own): a reader that routes frames to channels and a writer that
//! batches frames into one write. Publishes in confirm mode return
//! futures of the broker's answer; consumers are streams bounded by their
//! prefetch, or handlers run N at a time; a lost connection recovers by
//! itself, with everything declared through it. The plan it grows to
//! (TLS, OAuth 2, the stream protocol, AMQP 1.0) is in the project's
//! `docs/client.md`.
//!
//! # Publishing with confirms
//!
//! Each publish returns once its frames are queued; the [`Confirm`] it
//! returns resolves when the broker has taken the message (or refused
//! it, or returned it as unroutable). At most 256 wait at once per
//! channel unless [`Channel::set_max_in_flight`] says otherwise; past
//! that, `publish` waits.
//!
//! ```no_run
//! use warren_client::amqp091::{Confirmation, Connection, Properties, QueueOptions};
//!
//! # async fn run() -> Result<(), warren_client::amqp091::Error> {
//! let conn = Connection::open("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
//! let ch = conn.channel().await?;
//! ch.confirm_select().await?;
//! let q = ch.queue_declare("greetings", QueueOptions::default().durable()).await?;
//! let mut confirms = Vec::new();
//! for i in 0..1000 {
//!     let persistent = Properties { delivery_mode: Some(2), ..Default::default() };
//!     confirms.push(ch.publish("", &q.name, persistent, format!("hello {i}").into()).await?);
//! }
//! for c in confirms {
//!     assert_eq!(c.await?, Confirmation::Ack);
//! }
//! conn.close().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Batches, typed bodies and traces
//!
//! [`Channel::publish_batch`] encodes many messages under one lock and
//! sends them in one write; [`Channel::publish_bodies`] does the same for
//! bodies that share one destination and one set of properties, encoded
//! once. With the `json` feature, `Message::encode`
//! and `Delivery::decode` carry values as JSON (`codec::Codec`, feature
//! `serde`, for other formats). A publish made inside a [`trace::TraceContext`] scope
//! carries a child of it in `traceparent`, and a consumer's handler runs
//! in the scope of its delivery's context, so a trace goes on through
//! the hops.
//!
//! ```no_run
//! # #[cfg(feature = "json")]
//! # async fn run() -> Result<(), warren_client::amqp091::Error> {
//! use warren_client::amqp091::{Connection, Message};
//! use warren_client::codec::Json;
//! use warren_client::trace::TraceContext;
//!
//! let conn = Connection::open("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
//! let ch = conn.channel().await?;
//! ch.confirm_select().await?;
//! let orders = (0..100).map(|id| Message::encode::<Json, _>("", "orders", &serde_json::json!({ "id": id })));
//! let batch = orders.collect::<Result<Vec<_>, _>>()?;
//! let confirms = TraceContext::new_root().scope(ch.publish_batch(batch)).await?;
//! for c in confirms {
//!     c.await?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # A work queue, eight at a time
//!
//! The broker sends at most the prefetch unacknowledged, so a slow
//! handler holds the broker back rather than filling memory.
//!
//! ```no_run
//! use warren_client::amqp091::{Connection, ConsumeOptions};
//!
//! # async fn run() -> Result<(), warren_client::amqp091::Error> {
//! let conn = Connection::open("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
//! let ch = conn.channel().await?;
//! ch.basic_qos(32).await?;
//! let jobs = ch.consume("jobs", ConsumeOptions::default()).await?;
//! jobs.run_concurrently(8, |job| async move {
//!     // ... do the work in job.body ...
//!     let _ = job.ack().await;
//! })
//! .await;
//! # Ok(())
//! # }
//! ```
//!
//! # Requests and replies
//!
//! ```no_run
//! use std::time::Duration;
//! use warren_client::amqp091::{Connection, Properties, RpcClient};
//!
//! # async fn run() -> Result<(), warren_client::amqp091::Error> {
//! let conn = Connection::open("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
//! let rpc = RpcClient::new(&conn).await?;
//! let reply = rpc
//!     .call("", "time-service", Properties::default(), "now?".into(), Duration::from_secs(5))
//!     .await?;
//! println!("{}", String::from_utf8_lossy(&reply.body));
//! # Ok(())
//! # }
//! ```
//!
//! # Recovery
//!
//! On by default. When the connection is lost the client connects again
//! (to the next address, pausing longer after each failure), declares
//! again the exchanges, queues and bindings made through it, reopens its
//! channels and restarts its consumers; calls and publishes made
//! meanwhile wait. Publishes unconfirmed at the loss fail with
//! [`Error::ConnectionLost`], or are published again if asked. The
//! events say what happened.
//!
//! ```no_run
//! use warren_client::amqp091::{Connection, Event, RecoveryOptions};
//!
//! # async fn run() -> Result<(), warren_client::amqp091::Error> {
//! let conn = Connection::builder("amqp://guest:guest@node1:5672/%2f")
//!     .address("amqp://guest:guest@node2:5672/%2f")
//!     .recovery(RecoveryOptions::default().republish_unconfirmed())
//!     .open()
//!     .await?;
//! let mut events = conn.events();
//! tokio::spawn(async move {
//!     while let Some(e) = events.next().await {
//!         match e {
//!             Event::Disconnected { error } => eprintln!("lost: {error}"),
//!             Event::Recovered => eprintln!("back"),
//!             Event::QueueRenamed { old, new } => eprintln!("{old} is now {new}"),
//!             _ => {}
//!         }
//!     }
//! });
//! # Ok(())
//! # }
//! ```
//!
//! [`Confirm`]: amqp091::Confirm
//! [`Channel::publish_batch`]: amqp091::Channel::publish_batch
//! [`Channel::publish_bodies`]: amqp091::Channel::publish_bodies
//! [`Channel::set_max_in_flight`]: amqp091::Channel::set_max_in_flight
//! [`Error::ConnectionLost`]: amqp091::Error::ConnectionLost

#![warn(missing_docs)]

pub mod amqp;
pub mod amqp091;
mod awaiting;
pub mod codec;
pub mod events;
pub mod recovery;
mod socket;
pub mod stream;
pub mod tls;
mod token;
pub mod trace;
pub mod uri;
