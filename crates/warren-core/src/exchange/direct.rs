//! Direct exchange (0-9-1 §3.1.3.1): a message goes to the bindings whose
//! key equals its routing key exactly. One hash lookup per publish.

use ahash::AHashMap as HashMap;

use warren_amqp091::ShortStr;

use super::binding::{Binding, Destination};

#[derive(Debug, Default)]
pub struct DirectIndex {
    /// Per key, each destination once with how many bindings lead to it
    /// (bindings may differ only in their arguments).
    by_key: HashMap<ShortStr, Vec<(Destination, usize)>>,
}

impl DirectIndex {
    pub fn add(&mut self, b: &Binding) {
        let v = self.by_key.entry(b.routing_key.clone()).or_default();
        match v.iter_mut().find(|(d, _)| d == &b.destination) {
            Some((_, n)) => *n += 1,
            None => v.push((b.destination.clone(), 1)),
        }
    }

    pub fn remove(&mut self, b: &Binding) {
        if let Some(v) = self.by_key.get_mut(&b.routing_key) {
            if let Some(i) = v.iter().position(|(d, _)| d == &b.destination) {
                v[i].1 -= 1;
                if v[i].1 == 0 {
                    v.remove(i);
                }
            }
            if v.is_empty() {
                self.by_key.remove(&b.routing_key);
            }
        }
    }

    pub fn route(&self, routing_key: &[u8], out: &mut Vec<Destination>) {
        if let Some(v) = self.by_key.get(routing_key) {
            out.extend(v.iter().map(|(d, _)| d.clone()));
        }
    }
}
