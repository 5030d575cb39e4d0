//! The cluster: several Warren nodes that are one broker. Built in steps
//! (issue 16). What exists: the `[cluster]` settings (`settings.rs`), the
//! inter-node handshake (`link.rs`), the links between nodes with their
//! failure detector (`links.rs`), which `/api/nodes` reports, and the
//! metadata Raft group over them (`meta.rs`: a replicated, durable log
//! that topology changes will ride on; none does yet). No queue or
//! message crosses a link yet. A node with no `[cluster]` settings starts
//! none of this.

pub mod command;
pub mod link;
pub mod links;
pub mod meta;
pub mod settings;

pub use links::{Cluster, PeerStatus};
pub use settings::{ClusterSettings, PeerConfig};
