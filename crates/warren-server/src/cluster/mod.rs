//! The cluster: several Warren nodes that are one broker. Built in steps
//! (issue 16). What exists: the `[cluster]` settings (`settings.rs`), the
//! inter-node handshake (`link.rs`) and the links between nodes with
//! their failure detector (`links.rs`), which `/api/nodes` reports. No
//! metadata, queue or message crosses a link yet. A node with no
//! `[cluster]` settings starts none of this.

pub mod link;
pub mod links;
pub mod settings;

pub use links::{Cluster, PeerStatus};
pub use settings::{ClusterSettings, PeerConfig};
