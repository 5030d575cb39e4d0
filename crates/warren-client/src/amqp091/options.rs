//! The options of declares, consumes, publishes and recovery, each with
//! RabbitMQ's defaults (`Default`) and setters that read as a sentence.

use warren_amqp091::FieldTable;

/// exchange.declare's options.
#[derive(Debug, Clone, Default)]
pub struct ExchangeOptions {
    /// Survives a broker restart.
    pub durable: bool,
    /// Deleted once its last binding goes.
    pub auto_delete: bool,
    /// Takes no publishes, only exchange-to-exchange routing.
    pub internal: bool,
    /// Only check that it exists (404 NOT_FOUND closes the channel if not).
    pub passive: bool,
    /// `alternate-exchange`, plugin arguments, ...
    pub arguments: FieldTable,
}

impl ExchangeOptions {
    /// Survives a broker restart.
    pub fn durable(mut self) -> Self {
        self.durable = true;
        self
    }
    /// Deleted once its last binding goes.
    pub fn auto_delete(mut self) -> Self {
        self.auto_delete = true;
        self
    }
}

/// The exchange types every RabbitMQ has, and any other by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExchangeKind {
    /// Routes on the whole routing key.
    Direct,
    /// Routes to every bound queue.
    Fanout,
    /// Routes on dotted patterns (`*` one word, `#` any).
    Topic,
    /// Routes on header values (`x-match` all or any).
    Headers,
    /// Any other type by name (`x-consistent-hash`, `x-local-random`, ...).
    Other(String),
}

impl ExchangeKind {
    /// The type's name on the wire.
    pub fn as_str(&self) -> &str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
            ExchangeKind::Other(s) => s,
        }
    }
}

/// queue.declare's options.
#[derive(Debug, Clone, Default)]
pub struct QueueOptions {
    /// Survives a broker restart.
    pub durable: bool,
    /// Used by this connection alone, and deleted with it.
    pub exclusive: bool,
    /// Deleted once its last consumer goes.
    pub auto_delete: bool,
    /// Only check that it exists (404 NOT_FOUND closes the channel if not).
    pub passive: bool,
    /// `x-queue-type`, `x-message-ttl`, ...
    pub arguments: FieldTable,
}

impl QueueOptions {
    /// Survives a broker restart.
    pub fn durable(mut self) -> Self {
        self.durable = true;
        self
    }
    /// Used by this connection alone, and deleted with it.
    pub fn exclusive(mut self) -> Self {
        self.exclusive = true;
        self
    }
    /// Deleted once its last consumer goes.
    pub fn auto_delete(mut self) -> Self {
        self.auto_delete = true;
        self
    }
}

/// basic.consume's options.
#[derive(Debug, Clone, Default)]
pub struct ConsumeOptions {
    /// The consumer tag; empty lets the broker choose one.
    pub tag: String,
    /// Deliveries count as acknowledged once sent (no acks).
    pub no_ack: bool,
    /// The queue's only consumer (403 ACCESS_REFUSED if it has others).
    pub exclusive: bool,
    /// `x-priority`, `x-stream-offset`, ...
    pub arguments: FieldTable,
}

impl ConsumeOptions {
    /// Under this consumer tag.
    pub fn tag(mut self, tag: &str) -> Self {
        self.tag = tag.into();
        self
    }
    /// Deliveries count as acknowledged once sent (no acks).
    pub fn no_ack(mut self) -> Self {
        self.no_ack = true;
        self
    }
    /// The queue's only consumer.
    pub fn exclusive(mut self) -> Self {
        self.exclusive = true;
        self
    }
}

/// basic.publish's options.
#[derive(Debug, Clone, Default)]
pub struct PublishOptions {
    /// Return the message ([`super::Confirmation::Returned`]) if no queue
    /// takes it.
    pub mandatory: bool,
}

pub use crate::recovery::RecoveryOptions;
