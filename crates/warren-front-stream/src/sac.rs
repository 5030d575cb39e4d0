//! Single active consumer on streams (RabbitMQ 3.11): subscriptions with
//! `single-active-consumer=true` and the same `name` on the same stream
//! form a group; one member at a time gets messages. The broker tells a
//! member it became active with ConsumerUpdate (active=1); the member
//! answers with the offset specification to resume from (usually its
//! stored offset), and only then do deliveries start.
//!
//! Which member is active, as RabbitMQ's rabbit_stream_sac_coordinator
//! decides it:
//! - A plain stream's group: the first to join; when the active one leaves,
//!   the next in line.
//! - A super stream partition's group (the `super-stream` property; the
//!   partition's index in its super stream): the member at position
//!   `index % members`, so a super stream's partitions spread over the
//!   application's instances. When a join or leave moves that position
//!   off the active member, the active one steps down first: it is told
//!   with ConsumerUpdate (active=0), stops getting chunks, and when it
//!   answers (or leaves) the member then at the position is activated.
//!   No two members of a group are ever active at once.
//!
//! Members live on different connections: the coordinator keeps each
//! member's connection [`Wake`] and leaves the news there.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::wake::Wake;

/// A group: vhost, stream, consumer name.
pub type GroupKey = (String, String, String);

/// A member: its connection's id and its subscription id there.
type MemberId = (u64, u8);

struct Member {
    id: MemberId,
    wake: Arc<Wake>,
}

struct Group {
    /// The partition's index in its super stream; None for a plain stream.
    partition: Option<usize>,
    /// In arrival order.
    members: Vec<Member>,
    active: Option<MemberId>,
    /// Told to step down, answer awaited.
    stepping_down: Option<MemberId>,
}

impl Group {
    /// Who should be active now.
    fn wanted(&self) -> Option<&Member> {
        let n = self.members.len();
        if n == 0 {
            return None;
        }
        self.members.get(self.partition.map_or(0, |p| p % n))
    }

    fn member(&self, id: MemberId) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    /// Make the wanted member active and tell it.
    fn activate_wanted(&mut self) {
        if let Some(m) = self.wanted() {
            m.wake.activate(m.id.1);
            self.active = Some(m.id);
        }
    }

    /// A super stream partition's group after a join or a leave: if the
    /// wanted member is not the active one, the active one steps down.
    fn rebalance(&mut self) {
        let (Some(_), Some(active)) = (self.partition, self.active) else {
            return;
        };
        if self.wanted().map(|m| m.id) == Some(active) {
            return;
        }
        if let Some(m) = self.member(active) {
            m.wake.deactivate(active.1);
        }
        self.active = None;
        self.stepping_down = Some(active);
    }
}

#[derive(Default)]
pub struct Coordinator {
    groups: Mutex<HashMap<GroupKey, Group>>,
}

impl Coordinator {
    /// Join a group (`partition`: the stream's index in the super stream
    /// the subscription named); true if this member is active at once.
    pub fn join(
        &self,
        key: GroupKey,
        partition: Option<usize>,
        connection: u64,
        subscription: u8,
        wake: Arc<Wake>,
    ) -> bool {
        let mut groups = self.groups.lock();
        let g = groups.entry(key).or_insert_with(|| Group {
            partition,
            members: Vec::new(),
            active: None,
            stepping_down: None,
        });
        let id = (connection, subscription);
        g.members.push(Member { id, wake });
        if g.members.len() == 1 {
            g.active = Some(id);
            return true;
        }
        g.rebalance();
        false
    }

    /// Leave a group: if the member was active (or stepping down), the
    /// member now wanted is activated; else the group may rebalance.
    pub fn leave(&self, key: &GroupKey, connection: u64, subscription: u8) {
        let mut groups = self.groups.lock();
        let Some(g) = groups.get_mut(key) else { return };
        let id = (connection, subscription);
        let Some(i) = g.members.iter().position(|m| m.id == id) else {
            return;
        };
        g.members.remove(i);
        if g.members.is_empty() {
            groups.remove(key);
            return;
        }
        if g.active == Some(id) || g.stepping_down == Some(id) {
            g.stepping_down = None;
            g.active = None;
            g.activate_wanted();
        } else {
            g.rebalance();
        }
    }

    /// A member that was told to step down answered: the member wanted now
    /// becomes active.
    pub fn stepped_down(&self, key: &GroupKey, connection: u64, subscription: u8) {
        let mut groups = self.groups.lock();
        let Some(g) = groups.get_mut(key) else { return };
        if g.stepping_down != Some((connection, subscription)) {
            return;
        }
        g.stepping_down = None;
        if g.active.is_none() {
            g.activate_wanted();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> GroupKey {
        ("/".into(), "invoices-1".into(), "app".into())
    }

    /// (subscription, active) news left for connection 1's members.
    fn news(w: &Wake) -> Vec<(u8, bool)> {
        w.take_activations()
    }

    #[test]
    fn a_plain_group_is_first_come_and_hands_over_in_order() {
        let c = Coordinator::default();
        let w = Arc::new(Wake::default());
        assert!(c.join(key(), None, 1, 0, w.clone()));
        assert!(!c.join(key(), None, 1, 1, w.clone()));
        assert!(!c.join(key(), None, 1, 2, w.clone()));
        assert!(news(&w).is_empty());
        c.leave(&key(), 1, 1); // an inactive one: nothing changes
        assert!(news(&w).is_empty());
        c.leave(&key(), 1, 0);
        assert_eq!(news(&w), vec![(2, true)]);
    }

    #[test]
    fn a_partition_group_steps_down_to_the_member_at_its_index() {
        let c = Coordinator::default();
        let w = Arc::new(Wake::default());
        // Partition 1 of a super stream.
        assert!(c.join(key(), Some(1), 1, 0, w.clone()));
        // Two members: 1 % 2 = the second should be active; the first
        // steps down, and nobody is active until it answers.
        assert!(!c.join(key(), Some(1), 1, 1, w.clone()));
        assert_eq!(news(&w), vec![(0, false)]);
        // Someone else answering changes nothing.
        c.stepped_down(&key(), 1, 1);
        assert!(news(&w).is_empty());
        c.stepped_down(&key(), 1, 0);
        assert_eq!(news(&w), vec![(1, true)]);
        // A third: 1 % 3 = still the second.
        assert!(!c.join(key(), Some(1), 1, 2, w.clone()));
        assert!(news(&w).is_empty());
        // The first leaves: 1 % 2 over [second, third] = the third.
        c.leave(&key(), 1, 0);
        assert_eq!(news(&w), vec![(1, false)]);
        // The one stepping down leaves instead of answering.
        c.leave(&key(), 1, 1);
        assert_eq!(news(&w), vec![(2, true)]);
        // The active one leaves last: the group is gone.
        c.leave(&key(), 1, 2);
        assert!(c.groups.lock().is_empty());
    }
}
