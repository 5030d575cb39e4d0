//! The cluster: several Warren nodes that are one broker. Its parts: the
//! inter-node handshake (`link.rs`, inside TLS with `link_tls.rs`), the
//! links between nodes with their failure detector (`links.rs`), which
//! `/api/nodes` reports, and the metadata Raft group over them (`meta.rs`:
//! a replicated, durable log, compacted behind snapshots of the state it
//! builds, `snapshot.rs`), the changes that ride on it (`command.rs`),
//! and the ones a node makes by itself (`removals.rs`); the queue protocol
//! (`queues.rs`, `queue_client.rs`, `queue_host.rs`), through which a
//! connection on one node publishes to, consumes from and settles with a
//! classic queue whose home is another; the node table (`nodes.rs`) and
//! joining a running cluster (`join.rs`). Its settings are
//! [`crate::config::cluster`]'s; the topology changes the front ends make
//! through it are [`crate::topology`]'s. A node with no `[cluster]`
//! settings starts none of this.
//!
//! The metadata commands (`command.rs`, `meta.rs`, `snapshot.rs`,
//! `queues.rs`) hand placements and link events to the quorum groups
//! and stream replicas, which send over this module's links: `cluster/`,
//! `quorum/` and `stream_replicas/` import each other, the crate's one
//! circle and its two imports that run back up. Naming the replicas
//! through traits defined here would cut it.

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
pub mod removals;
pub mod snapshot;

pub use links::{Cluster, PeerStatus};
