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
    /// One more for each new leader (the first is 1), as osiris's.
    pub epoch: u64,
}
