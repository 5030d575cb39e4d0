//! Single active consumer on streams (RabbitMQ 3.11): subscriptions with
//! `single-active-consumer=true` and the same `name` on the same stream
//! form a group; one member at a time gets messages. The first to join is
//! active; when the active one leaves (unsubscribe, connection gone), the
//! next in line becomes active. The broker tells a member it became active
//! with ConsumerUpdate (active=1); the member answers with the offset
//! specification to resume from (usually its stored offset), and only then
//! do deliveries start.
//!
//! Members live on different connections: the coordinator keeps each
//! member's connection [`Wake`] and leaves the news there. Super-stream
//! groups (`super-stream` property) are kept per partition with the same
//! first-come rule (RabbitMQ rebalances them across members; not yet).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::connection::Wake;

/// A group: vhost, stream, consumer name.
pub type GroupKey = (String, String, String);

struct Member {
    connection: u64,
    subscription: u8,
    wake: Arc<Wake>,
}

#[derive(Default)]
pub struct Coordinator {
    /// Members in arrival order; the first is the active one.
    groups: Mutex<HashMap<GroupKey, Vec<Member>>>,
}

impl Coordinator {
    /// Join a group; true if this member is active at once.
    pub fn join(&self, key: GroupKey, connection: u64, subscription: u8, wake: Arc<Wake>) -> bool {
        let mut g = self.groups.lock();
        let members = g.entry(key).or_default();
        members.push(Member {
            connection,
            subscription,
            wake,
        });
        members.len() == 1
    }

    /// Leave a group; if the member was active, the next one is told.
    pub fn leave(&self, key: &GroupKey, connection: u64, subscription: u8) {
        let mut g = self.groups.lock();
        let Some(members) = g.get_mut(key) else { return };
        let Some(i) = members
            .iter()
            .position(|m| m.connection == connection && m.subscription == subscription)
        else {
            return;
        };
        members.remove(i);
        if i == 0 {
            if let Some(next) = members.first() {
                next.wake.activate(next.subscription);
            }
        }
        if members.is_empty() {
            g.remove(key);
        }
    }
}
