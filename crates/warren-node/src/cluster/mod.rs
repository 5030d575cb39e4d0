//! The cluster: several Warren nodes that are one broker. Its parts: the
//! `[cluster]` settings (`settings.rs`), the
//! inter-node handshake (`link.rs`, inside TLS with `link_tls.rs`), the
//! links between nodes with their
//! failure detector (`links.rs`), which `/api/nodes` reports, and the
//! metadata Raft group over them (`meta.rs`: a replicated, durable log,
//! compacted behind snapshots of the state it builds, `snapshot.rs`),
//! the changes that ride on it (`command.rs`), and the topology changes
//! as the front ends make them (`topology.rs`); and the queue protocol
//! (`queues.rs`, `queue_client.rs`, `queue_host.rs`), through which a
//! connection on one node publishes to, consumes from and settles with a
//! classic queue whose home is another; the node table (`nodes.rs`) and
//! joining a running cluster (`join.rs`). A node with no `[cluster]`
//! settings starts none of this.

pub mod command;
pub mod join;
pub mod link;
pub mod link_tls;
pub mod links;
pub mod meta;
pub mod nodes;
pub mod queue_client;
pub mod queue_host;
pub mod queues;
pub mod snapshot;
pub mod topology;

pub use links::{Cluster, PeerStatus};
