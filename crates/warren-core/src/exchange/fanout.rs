//! Fanout exchange (0-9-1 §3.1.3.2): every bound destination gets a copy;
//! routing keys are ignored.

use super::binding::{Binding, Destination};

#[derive(Debug, Default)]
pub struct FanoutIndex {
    /// Each destination once, with how many bindings lead to it.
    dests: Vec<(Destination, usize)>,
}

impl FanoutIndex {
    pub fn add(&mut self, b: &Binding) {
        match self.dests.iter_mut().find(|(d, _)| d == &b.destination) {
            Some((_, n)) => *n += 1,
            None => self.dests.push((b.destination.clone(), 1)),
        }
    }

    pub fn remove(&mut self, b: &Binding) {
        if let Some(i) = self.dests.iter().position(|(d, _)| d == &b.destination) {
            self.dests[i].1 -= 1;
            if self.dests[i].1 == 0 {
                self.dests.remove(i);
            }
        }
    }

    /// Each bound destination once, with its binding count.
    pub fn destinations(&self) -> &[(Destination, usize)] {
        &self.dests
    }

    pub fn route(&self, out: &mut Vec<Destination>) {
        out.extend(self.dests.iter().map(|(d, _)| d.clone()));
    }
}
