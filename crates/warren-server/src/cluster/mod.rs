//! The cluster: several Warren nodes that are one broker. Built in steps
//! (issue 16); what exists so far is the inter-node link's handshake
//! (`link.rs`), which no listener runs yet: a node with no cluster
//! settings is one node exactly as before.

pub mod link;
