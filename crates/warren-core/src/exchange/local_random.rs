//! The `x-local-random` exchange (RabbitMQ 4.0): each message goes to
//! exactly one of the bound queues, chosen at random among those whose
//! leader is on the publishing node; on a single node that is every bound
//! queue. Used for request/reply fan-in where any local worker will do.
//! Bindings are queues with an empty key (checked by the vhost, which
//! knows queue types); the key a message carries is ignored.

use rand::Rng;

use super::binding::{Binding, Destination};
use super::fanout::FanoutIndex;

#[derive(Debug, Default)]
pub struct LocalRandomIndex {
    bound: FanoutIndex,
}

impl LocalRandomIndex {
    pub fn add(&mut self, b: &Binding) {
        self.bound.add(b);
    }

    pub fn remove(&mut self, b: &Binding) {
        self.bound.remove(b);
    }

    pub fn route(&self, out: &mut Vec<Destination>) {
        let all = self.bound.destinations();
        if !all.is_empty() {
            let pick = rand::thread_rng().gen_range(0..all.len());
            out.push(all[pick].0.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_amqp091::FieldTable;

    #[test]
    fn one_queue_per_message_and_every_queue_in_time() {
        let mut x = LocalRandomIndex::default();
        let mut out = vec![];
        x.route(&mut out);
        assert!(out.is_empty(), "no binding, no route");
        for q in ["a", "b", "c"] {
            x.add(&Binding {
                destination: Destination::Queue(q.into()),
                routing_key: "".into(),
                arguments: FieldTable::new(),
            });
        }
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..300 {
            out.clear();
            x.route(&mut out);
            assert_eq!(out.len(), 1);
            seen.insert(out[0].name().to_string());
        }
        assert_eq!(seen.len(), 3, "{seen:?}");
    }
}
