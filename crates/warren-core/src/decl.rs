//! What a declare asks for, once its name is resolved: the records the
//! front ends hand to a vhost and the vhost hands on as durable changes.

use warren_amqp091::{FieldTable, ShortStr};

/// What an exchange.declare asks for.
#[derive(Debug, Clone)]
pub struct ExchangeDecl {
    pub name: ShortStr,
    pub kind: ShortStr,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    pub arguments: FieldTable,
}

/// What a queue.declare asks for (the name already resolved).
#[derive(Debug, Clone)]
pub struct QueueDecl {
    pub name: ShortStr,
    pub durable: bool,
    pub exclusive: bool,
    pub auto_delete: bool,
    pub arguments: FieldTable,
}
