//! Publishers: a sending link to a queue, an exchange (with a routing
//! key), or no target (each message's `to` says), whose messages each
//! get their outcome as a future. At most `max_in_flight` wait for theirs;
//! past that, and while the broker gives no credit, `publish` waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{oneshot, Semaphore};
use warren_amqp10::composite::composite;
use warren_amqp10::messaging::{self, TARGET};
use warren_amqp10::performative::Attach;
use warren_amqp10::Value;

use super::connection::Shared;
use super::error::Error;
use super::message::Message;
use super::session::{Kind, Outcome, Waiter};

/// Outcomes awaited at once, by default.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1000;

/// How to make a [`Publisher`] ([`Connection::publisher`](super::Connection::publisher)).
pub struct PublisherBuilder {
    pub(crate) shared: Arc<Shared>,
    pub(crate) address: Option<String>,
    pub(crate) max_in_flight: usize,
}

impl PublisherBuilder {
    /// To queue `name` (through the default exchange).
    pub fn queue(mut self, name: &str) -> Self {
        self.address = Some(super::address::queue(name));
        self
    }

    /// To exchange `name` with `routing_key` (may be empty).
    pub fn exchange(mut self, name: &str, routing_key: &str) -> Self {
        self.address = Some(super::address::exchange(name, routing_key));
        self
    }

    /// To an address as written (`/queues/q`, `/exchanges/x/k`).
    pub fn address(mut self, address: impl Into<String>) -> Self {
        self.address = Some(address.into());
        self
    }

    /// Outcomes awaited at once (default 1,000).
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n.max(1);
        self
    }

    /// Attach the link. A queue or exchange that does not exist makes
    /// the broker refuse it ([`Error::LinkRefused`]).
    pub async fn build(self) -> Result<Publisher, Error> {
        let handle = self.attach(false).await?;
        Ok(Publisher {
            anonymous: self.address.is_none(),
            shared: self.shared,
            handle,
            in_flight: Arc::new(Semaphore::new(self.max_in_flight)),
        })
    }

    /// Attach a link whose messages go settled: at most once, no outcome
    /// (what the broker cannot take is dropped). For throughput where a
    /// lost message does not matter.
    pub async fn build_pre_settled(self) -> Result<PreSettledPublisher, Error> {
        let handle = self.attach(true).await?;
        Ok(PreSettledPublisher {
            shared: self.shared,
            handle,
        })
    }

    async fn attach(&self, settled: bool) -> Result<u32, Error> {
        let target = match &self.address {
            Some(a) => messaging::target(a),
            None => composite(TARGET, vec![Value::Null]),
        };
        super::link::attach(
            &self.shared,
            Attach {
                name: self.shared.link_name("publisher"),
                snd_settle_mode: Some(if settled { 1 } else { 0 }),
                rcv_settle_mode: Some(0),
                source: Some(messaging::source("")),
                target: Some(target),
                ..Default::default()
            },
            Kind::sender(),
            false,
        )
        .await
    }
}

/// Sends messages and tells their outcomes.
///
/// ```no_run
/// use warren_client::amqp::{Connection, Message, Outcome};
///
/// # async fn run() -> Result<(), warren_client::amqp::Error> {
/// let conn = Connection::open("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
/// let publisher = conn.publisher().exchange("amq.topic", "orders.new").build().await?;
/// let mut pending = Vec::new();
/// for i in 0..100 {
///     pending.push(publisher.publish(Message::new(format!("order {i}"))).await?);
/// }
/// for p in pending {
///     match p.await? {
///         Outcome::Accepted => {}
///         Outcome::Released => eprintln!("no queue is bound for it"),
///         other => eprintln!("refused: {other:?}"),
///     }
/// }
/// # Ok(())
/// # }
/// ```
pub struct Publisher {
    /// No target: each message's `to` says where.
    anonymous: bool,
    shared: Arc<Shared>,
    handle: u32,
    in_flight: Arc<Semaphore>,
}

impl Publisher {
    /// Send `message`; once it is queued for the socket, the returned
    /// [`Published`] resolves to its outcome.
    ///
    /// On a publisher without a target, a message whose `to` is missing
    /// or not an address (`/queues/..`, `/exchanges/..`, or RabbitMQ
    /// 3.x's `/amq/queue/..`, `/exchange/..`) fails with
    /// [`Error::Address`] before it is sent.
    pub async fn publish(&self, message: Message) -> Result<Published, Error> {
        if self.anonymous {
            check_to(&message)?;
        }
        let permit = self
            .in_flight
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::ConnectionClosed("the publisher was closed".into()))?;
        let (tx, rx) = oneshot::channel();
        let waiter = Waiter {
            tx,
            place: Some(permit),
        };
        self.shared
            .transfer_message(self.handle, &message, Some(waiter))
            .await?;
        if let Some(m) = &self.shared.settings.metrics {
            m.published();
        }
        Ok(Published { outcome: rx })
    }

    /// Close the link; outcomes not yet told fail.
    pub fn close(self) {
        // The drop then finds the link gone.
        detach(&self.shared, self.handle);
    }
}

impl Drop for Publisher {
    /// Detach once the outcomes of what was published are told: they
    /// still reach the [`Published`] futures.
    fn drop(&mut self) {
        self.shared.with(|s| s.detach_when_settled(self.handle));
    }
}

/// A published message's outcome, to come. Its place among those in
/// flight is given back when the broker tells the outcome, whether or
/// not this is awaited.
pub struct Published {
    outcome: oneshot::Receiver<Result<Outcome, Error>>,
}

impl Future for Published {
    type Output = Result<Outcome, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.outcome)
            .poll(cx)
            .map(|r| r.unwrap_or_else(|_| Err(Error::ConnectionClosed("the connection ended".into()))))
    }
}

/// Sends messages settled, hearing no outcome
/// ([`PublisherBuilder::build_pre_settled`]).
///
/// ```no_run
/// use warren_client::amqp::{Connection, Message};
///
/// # async fn run() -> Result<(), warren_client::amqp::Error> {
/// let conn = Connection::open("amqp://guest:guest@127.0.0.1:5672/%2f").await?;
/// let metrics = conn.publisher().queue("metrics").build_pre_settled().await?;
/// for i in 0..1000 {
///     metrics.send(Message::new(format!("sample {i}")).transient()).await?;
/// }
/// # Ok(())
/// # }
/// ```
pub struct PreSettledPublisher {
    shared: Arc<Shared>,
    handle: u32,
}

impl PreSettledPublisher {
    /// Send `message` once the broker's credit allows.
    pub async fn send(&self, message: Message) -> Result<(), Error> {
        self.shared.transfer_message(self.handle, &message, None).await?;
        if let Some(m) = &self.shared.settings.metrics {
            m.published();
        }
        Ok(())
    }

    /// Close the link. Dropping the publisher does the same.
    pub fn close(self) {}
}

impl Drop for PreSettledPublisher {
    fn drop(&mut self) {
        detach(&self.shared, self.handle);
    }
}

/// Detach a publisher's link; sends waiting for credit on it end.
fn detach(shared: &Shared, handle: u32) {
    shared.with(|s| s.detach(handle));
    shared.changed.notify_waiters();
}

/// A message for a publisher without a target must say where it goes.
fn check_to(message: &Message) -> Result<(), Error> {
    match message.properties.to.as_deref() {
        None => Err(Error::Address(
            "a message to a publisher without a target needs `to`".into(),
        )),
        Some(to) if !to.starts_with('/') => Err(Error::Address(format!("`to` is not an address: {to}"))),
        Some(_) => Ok(()),
    }
}
