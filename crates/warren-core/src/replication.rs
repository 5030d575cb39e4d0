//! The hook through which a cluster takes part in what queues do.
//!
//! Removals the broker decides by itself (auto-delete after the last
//! consumer, `x-expires`, an exclusive queue's owner closing): on a
//! cluster every node holds the queue (its home node the queue, the
//! others a reference to it), so such a removal must reach every node in
//! the metadata log's order: it is proposed there, not done here.
//!
//! Queues whose home is another node ([`crate::queue::RemoteQueue`]):
//! their publishes, consumers and settlements are carried to the home by
//! the cluster's queue protocol, and confirms and deliveries come back
//! through it. A single node has no hook: it removes queues at once and
//! has no remote queues.
//!
//! This hook, the queue handle (`queue/mod.rs`) and the queue types that
//! call the hook (quorum, remote, stream) import each other: the crate's
//! one circle. The hook is handed the very queue a confirm or delivery
//! comes back to, and the handle builds the queue types; cutting the
//! circle would mean naming queues by id and finding them again on every
//! remote delivery, on the message path.

use std::sync::{Arc, OnceLock};

use warren_amqp091::ShortStr;

use crate::error::BrokerError;
use crate::message::MessageRef;
use crate::queue::{ConsumerSpec, FlowWaiter, Queue, RemoteConfirm, Settle};

/// A publish on its way to the queue's home.
#[derive(Debug)]
pub struct RemotePublish {
    /// Answered when the home confirms it (or cannot).
    pub confirm: Arc<RemoteConfirm>,
    /// The home has many of this node's publishes unconfirmed: the
    /// publisher should pause ([`Replication::wait_for_credit`]).
    pub flow: bool,
}

/// The calls below on remote queues are made with the queue's lock held:
/// they must not block and must not call into a queue.
pub trait Replication: Send + Sync {
    /// `queue`, in `vhost`, should go. Called with no lock held; must not
    /// block (the removal is applied later, on every node).
    fn remove_queue(&self, vhost: &str, queue: &Arc<Queue>);

    /// Send `msg` to `queue` at `home`. None when it cannot go (the home
    /// is down, or the message does not fit a link's frame): refused.
    fn publish(&self, queue: &Arc<Queue>, home: &ShortStr, msg: &MessageRef) -> Option<RemotePublish>;

    /// Add a consumer of `queue` at `home`. It gets no deliveries until
    /// [`Replication::pump`] (after the front end has answered the
    /// consume), so none can overtake the answer.
    fn consume(&self, queue: &Arc<Queue>, home: &ShortStr, spec: ConsumerSpec) -> Result<(), BrokerError>;

    /// Remove a consumer added by `consume`; true if it was there.
    fn cancel(&self, consumer_id: u64) -> bool;

    /// Settle deliveries (`seqs` as delivered; handles for gets, when
    /// `consumer_id` is None).
    fn settle(&self, home: &ShortStr, consumer_id: Option<u64>, seqs: Vec<u64>, how: Settle);

    /// Room may have freed up for `queue`'s consumers here: let their
    /// homes send more.
    fn pump(&self, queue: &Arc<Queue>);

    /// An AMQP 1.0 drain of `consumer_id` (a consumer here of a queue at
    /// its home): the home delivers what it can, then says it is done;
    /// false if it cannot be asked (no link), when the caller answers.
    fn drain(&self, consumer_id: u64) -> bool;

    /// Resume `waiter` once `home` has confirmed enough of this node's
    /// publishes; false (and no registration) if it already has.
    fn wait_for_credit(&self, home: &ShortStr, waiter: Arc<dyn FlowWaiter>) -> bool;
}

/// Set once, when the node joins its cluster (after the broker exists);
/// every vhost shares it.
#[derive(Clone, Default)]
pub struct ReplicationSlot(Arc<OnceLock<Arc<dyn Replication>>>);

impl ReplicationSlot {
    pub fn set(&self, r: Arc<dyn Replication>) {
        let _ = self.0.set(r);
    }

    pub fn get(&self) -> Option<&Arc<dyn Replication>> {
        self.0.get()
    }
}

impl std::fmt::Debug for ReplicationSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ReplicationSlot({})",
            if self.get().is_some() { "cluster" } else { "none" }
        )
    }
}
