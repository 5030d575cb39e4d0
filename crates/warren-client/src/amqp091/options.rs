//! The options of declares, consumes and publishes, each with RabbitMQ's
//! defaults (`Default`) and setters that read as a sentence.

use warren_amqp091::FieldTable;

/// exchange.declare's options.
#[derive(Debug, Clone, Default)]
pub struct ExchangeOptions {
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    /// Only check that it exists (404 NOT_FOUND closes the channel if not).
    pub passive: bool,
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
    Direct,
    Fanout,
    Topic,
    Headers,
    Other(String),
}

impl ExchangeKind {
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
    pub durable: bool,
    pub exclusive: bool,
    pub auto_delete: bool,
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
    pub exclusive: bool,
    pub arguments: FieldTable,
}

/// basic.publish's options.
#[derive(Debug, Clone, Default)]
pub struct PublishOptions {
    /// Return the message ([`super::Confirmation::Returned`]) if no queue
    /// takes it.
    pub mandatory: bool,
}
