//! A binding and where it leads: what every exchange type indexes.

use warren_amqp091::{FieldTable, ShortStr};

/// Where a binding leads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Destination {
    Queue(ShortStr),
    Exchange(ShortStr),
}

impl Destination {
    pub fn name(&self) -> &ShortStr {
        match self {
            Destination::Queue(n) | Destination::Exchange(n) => n,
        }
    }
}

/// One binding from an exchange (0-9-1 §3.1.3.3): destination, routing key
/// (or pattern) and arguments. Two bindings differ if any of the three do.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    pub destination: Destination,
    pub routing_key: ShortStr,
    pub arguments: FieldTable,
}
