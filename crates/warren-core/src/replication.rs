//! The hook through which a cluster takes over the queue removals the
//! broker decides by itself: auto-delete after the last consumer,
//! `x-expires`, an exclusive queue's owner closing. On a cluster every
//! node holds the queue (its home node the queue, the others a
//! reference to it), so such a removal must reach every node in the
//! metadata log's order: it is proposed there, not done here. A single
//! node has no hook and removes the queue at once.

use std::sync::{Arc, OnceLock};

use crate::queue::Queue;

pub trait Replication: Send + Sync {
    /// `queue`, in `vhost`, should go. Called with no lock held; must not
    /// block (the removal is applied later, on every node).
    fn remove_queue(&self, vhost: &str, queue: &Arc<Queue>);
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
