//! What the application declared through a connection's [`Management`]s,
//! kept so recovery declares it again on the next wire: queues,
//! exchanges and bindings, in the order they were made. Deletes forget
//! what they delete (and the bindings that went with it).
//!
//! [`Management`]: super::Management

use super::spec::{BindingSpec, Destination, ExchangeSpec, QueueSpec};

#[derive(Debug, Default)]
pub(crate) struct Topology {
    pub(crate) exchanges: Vec<ExchangeSpec>,
    pub(crate) queues: Vec<QueueSpec>,
    pub(crate) bindings: Vec<BindingSpec>,
}

impl Topology {
    pub(crate) fn exchange(&mut self, e: &ExchangeSpec) {
        self.exchanges.retain(|x| x.name != e.name);
        self.exchanges.push(e.clone());
    }

    pub(crate) fn exchange_deleted(&mut self, name: &str) {
        self.exchanges.retain(|x| x.name != name);
        self.bindings
            .retain(|b| b.source != name && b.destination != Destination::Exchange(name.to_string()));
    }

    pub(crate) fn queue(&mut self, q: &QueueSpec) {
        self.queues.retain(|x| x.name != q.name);
        self.queues.push(q.clone());
    }

    pub(crate) fn queue_deleted(&mut self, name: &str) {
        self.queues.retain(|x| x.name != name);
        self.bindings
            .retain(|b| b.destination != Destination::Queue(name.to_string()));
    }

    pub(crate) fn bind(&mut self, b: &BindingSpec) {
        if !self.bindings.contains(b) {
            self.bindings.push(b.clone());
        }
    }

    pub(crate) fn unbind(&mut self, b: &BindingSpec) {
        self.bindings.retain(|x| x != b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletes_take_their_bindings() {
        let mut t = Topology::default();
        t.exchange(&ExchangeSpec::topic("x"));
        t.exchange(&ExchangeSpec::fanout("y"));
        t.queue(&QueueSpec::quorum("a"));
        t.queue(&QueueSpec::classic("b"));
        t.bind(&BindingSpec::to_queue("x", "a", "k"));
        t.bind(&BindingSpec::to_queue("x", "a", "k"));
        t.bind(&BindingSpec::to_queue("x", "b", "k"));
        t.bind(&BindingSpec::to_exchange("x", "y", "k"));
        assert_eq!(t.bindings.len(), 3, "a binding made twice is one");
        t.queue_deleted("a");
        assert_eq!(t.bindings.len(), 2);
        t.exchange_deleted("y");
        assert_eq!(t.bindings, vec![BindingSpec::to_queue("x", "b", "k")]);
        t.unbind(&BindingSpec::to_queue("x", "b", "k"));
        assert!(t.bindings.is_empty());
        t.queue(&QueueSpec::classic("b").exclusive());
        assert_eq!(t.queues.len(), 1, "declared again: replaced, not added");
        assert!(t.queues[0].exclusive);
    }
}
