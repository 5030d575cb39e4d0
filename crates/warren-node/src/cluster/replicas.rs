//! The replication this node runs over the cluster, as the cluster sees
//! it: the quorum queues' Raft groups ([`QuorumGroups`], run by
//! `crate::quorum`) and the replicated streams ([`StreamReplicas`], run by
//! `crate::stream_replicas`). The metadata commands place replicas and
//! the links hand on their messages through these traits, so the cluster
//! stands below the replication that uses its links.

use warren_core::{BrokerError, VHost};
use warren_peer::stream::StreamMsg;

use super::links::DataSender;
use crate::definitions::records::Placement;

/// This node's quorum queue groups.
pub trait QuorumGroups: Send + Sync {
    /// Note `group`, whose voters are the Raft ids `members`, as queue
    /// `queue` of `vhost`'s, so the queue made next here is a member's.
    fn register(&self, vhost: &str, queue: &str, group: u64, members: Vec<u64>) -> Result<(), String>;

    /// An entry a member forwarded before it knew its group's leader.
    fn forwarded(&self, group: u64, entry: Vec<u8>);

    /// Raft messages from a peer, by group.
    fn received(&self, steps: Vec<(u64, warren_raft::RaftMessage)>);

    /// A call on a group from node `from`, answered with a reply of `id`.
    fn call_from(self: std::sync::Arc<Self>, from: &str, id: u64, body: &[u8]);

    /// The reply to one of this node's calls.
    fn reply(&self, id: u64, body: &[u8]);

    /// The link to `node` is up.
    fn peer_up(&self, node: &str);

    /// The link to `node` is down.
    fn peer_down(&self, node: &str);
}

/// This node's part in the replicated streams: every stream's placement
/// (every node keeps them all) and the members it holds.
pub trait StreamReplicas: Send + Sync {
    /// A new stream is placed (its first leader and epoch 1).
    fn placed(&self, placement: Placement) -> Result<(), String>;

    /// Stream `name` of `vhost` was deleted.
    fn removed(&self, vhost: &str, name: &str);

    /// The metadata log chose `leader` for `epoch` of stream `name`.
    fn new_leader(&self, vh: &VHost, name: &str, epoch: u64, leader: &str) -> Result<(), BrokerError>;

    /// Stream `name`'s members changed.
    fn set_members(&self, vh: &VHost, name: &str, members: &[String]) -> Result<(), BrokerError>;

    /// Every placement (a metadata snapshot carries them).
    fn placements(&self) -> Vec<Placement>;

    /// A snapshot is installed: the placements become exactly `want`.
    fn install_placements(&self, want: &[Placement]) -> Result<(), String>;

    /// After a snapshot's queues are made: each member here takes the
    /// role its placement gives it.
    fn settle_placements(&self, broker: &warren_core::Broker) -> Result<(), BrokerError>;

    /// The link to `node` is up; stream messages go through `data`.
    fn up(&self, node: &str, data: DataSender);

    /// The link to `node` is down.
    fn down(&self, node: &str);

    /// A stream replication message from `from`.
    fn received(&self, from: &str, m: StreamMsg);
}
