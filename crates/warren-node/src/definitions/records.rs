//! The cluster's own records that the definitions store keeps beside
//! RabbitMQ's definitions: the nodes this node knows of, and where each
//! replicated stream lives. Plain data, defined here so the store, the
//! cluster and the stream replicas all use them without importing each
//! other.

use serde::{Deserialize, Serialize};

/// One node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterNode {
    pub name: String,
    /// host:port of its inter-node listener.
    pub address: String,
    /// Its Raft id in the metadata group.
    pub id: u64,
}

/// A replicated stream's members and leader, as the metadata log placed
/// them (the stream coordinator's state for one stream).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub vhost: String,
    pub name: String,
    /// Every member, the first leader first.
    pub members: Vec<String>,
    /// The member that writes (None while one is being chosen).
    pub leader: Option<String>,
    /// One more for each new leader, from `first_epoch`, as osiris's.
    pub epoch: u64,
    /// The epoch it was declared with: the declare's index in the
    /// metadata log. Replication messages name a stream by name and
    /// epoch, so a stream declared again under a deleted one's name must
    /// never share an epoch with it; each of the deleted one's elections
    /// was an entry of that log after its declare, so its epochs all stay
    /// below the new declare's index. `stream_status` shows epochs counted
    /// from 1, as RabbitMQ's. 0 in records from before it (their epochs
    /// began at 1).
    #[serde(default)]
    pub first_epoch: u64,
}
