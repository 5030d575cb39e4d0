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
//! The metadata commands place quorum groups and stream replicas, and
//! the links hand on their messages, through the traits of `replicas.rs`,
//! which `crate::quorum` and `crate::stream_replicas` implement: the
//! replication stands above the cluster whose links it uses.
//!
//! Inside this module the metadata log (`meta.rs`), its commands
//! (`command.rs`, `snapshot.rs`), the links (`links.rs`) and joining
//! (`join.rs`) import each other: a join is a request on a link that the
//! metadata log answers, and the log's messages travel on the links.

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
pub mod replicas;
pub mod snapshot;

pub use links::{Cluster, PeerStatus};
