//! What the application declared through a connection, kept so recovery
//! can declare it again on the next one: exchanges, queues and bindings,
//! in the order they were made. Passive declares are not recorded;
//! deletes forget what they delete.

use warren_amqp091::FieldTable;

use super::options::{ExchangeKind, ExchangeOptions, QueueOptions};

#[derive(Debug, Clone)]
pub(crate) struct RecordedExchange {
    pub(crate) name: String,
    pub(crate) kind: ExchangeKind,
    pub(crate) options: ExchangeOptions,
}

#[derive(Debug, Clone)]
pub(crate) struct RecordedQueue {
    pub(crate) name: String,
    pub(crate) options: QueueOptions,
    /// Declared with an empty name: recovery asks for a new one.
    pub(crate) server_named: bool,
}

/// A binding of a queue (or, for exchange.bind, an exchange) to a source
/// exchange.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RecordedBinding {
    pub(crate) to_exchange: bool,
    pub(crate) destination: String,
    pub(crate) source: String,
    pub(crate) routing_key: String,
    pub(crate) arguments: FieldTable,
}

#[derive(Debug, Default)]
pub(crate) struct Topology {
    pub(crate) exchanges: Vec<RecordedExchange>,
    pub(crate) queues: Vec<RecordedQueue>,
    pub(crate) bindings: Vec<RecordedBinding>,
}

impl Topology {
    pub(crate) fn exchange(&mut self, e: RecordedExchange) {
        self.exchanges.retain(|x| x.name != e.name);
        self.exchanges.push(e);
    }

    pub(crate) fn exchange_deleted(&mut self, name: &str) {
        self.exchanges.retain(|x| x.name != name);
        self.bindings
            .retain(|b| b.source != name && !(b.to_exchange && b.destination == name));
    }

    pub(crate) fn queue(&mut self, q: RecordedQueue) {
        self.queues.retain(|x| x.name != q.name);
        self.queues.push(q);
    }

    pub(crate) fn queue_deleted(&mut self, name: &str) {
        self.queues.retain(|x| x.name != name);
        self.bindings.retain(|b| b.to_exchange || b.destination != name);
    }

    pub(crate) fn is_auto_delete_queue(&self, name: &str) -> bool {
        self.queues
            .iter()
            .any(|q| q.name == name && q.options.auto_delete)
    }

    pub(crate) fn bind(&mut self, b: RecordedBinding) {
        if !self.bindings.contains(&b) {
            self.bindings.push(b);
        }
    }

    pub(crate) fn unbind(&mut self, b: &RecordedBinding) {
        self.bindings.retain(|x| x != b);
    }

    /// A server-named queue came back under a new name.
    pub(crate) fn renamed(&mut self, old: &str, new: &str) {
        for q in self.queues.iter_mut().filter(|q| q.name == old) {
            q.name = new.to_string();
        }
        for b in self
            .bindings
            .iter_mut()
            .filter(|b| !b.to_exchange && b.destination == old)
        {
            b.destination = new.to_string();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(queue: &str, source: &str) -> RecordedBinding {
        RecordedBinding {
            to_exchange: false,
            destination: queue.into(),
            source: source.into(),
            routing_key: "k".into(),
            arguments: FieldTable::new(),
        }
    }

    #[test]
    fn deletes_take_their_bindings_and_renames_carry_them() {
        let mut t = Topology::default();
        t.exchange(RecordedExchange {
            name: "x".into(),
            kind: ExchangeKind::Direct,
            options: ExchangeOptions::default(),
        });
        for q in ["a", "b"] {
            t.queue(RecordedQueue {
                name: q.into(),
                options: QueueOptions::default(),
                server_named: false,
            });
            t.bind(binding(q, "x"));
        }
        t.bind(binding("a", "x"));
        assert_eq!(t.bindings.len(), 2, "a binding made twice is one");
        t.renamed("a", "a2");
        assert_eq!(t.bindings[0].destination, "a2");
        t.queue_deleted("a2");
        assert_eq!(t.bindings, vec![binding("b", "x")]);
        t.exchange_deleted("x");
        assert!(t.bindings.is_empty());
        assert_eq!(t.queues.len(), 1);
    }
}
