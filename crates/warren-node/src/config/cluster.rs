//! The `[cluster]` settings: the cluster's name, the shared secret, the
//! inter-node listener and the other nodes (a static list, as RabbitMQ's
//! classic config peer discovery has them).

use std::path::PathBuf;

use serde::Deserialize;

use super::Listen;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSettings {
    /// The cluster's name (RabbitMQ's cluster_name): a node of another
    /// cluster is refused.
    pub name: String,
    /// The secret every node shares (the role of Erlang's cookie)...
    pub secret: Option<String>,
    /// ...or a file that holds it (trailing whitespace ignored).
    pub secret_file: Option<PathBuf>,
    /// The inter-node listener (RabbitMQ's distribution port, 25672).
    pub listen: Listen,
    /// The other nodes: name and inter-node address.
    pub peers: Vec<PeerConfig>,
    /// Milliseconds between pings on each node pair's link.
    pub ping_interval: u64,
    /// A peer silent this many milliseconds is down (its link is closed
    /// and dialled again).
    pub down_after: u64,
    /// Metadata entries applied between compactions of the metadata log
    /// (a node further behind is sent a snapshot instead of entries).
    pub snapshot_interval: u64,
    /// TLS on the links (`[cluster.tls]`); None: plain TCP.
    pub tls: Option<LinkTlsSettings>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    pub node: String,
    /// host:port of its inter-node listener.
    pub address: String,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            name: "warren".into(),
            secret: None,
            secret_file: None,
            listen: Listen::at("0.0.0.0:25672"),
            peers: Vec::new(),
            ping_interval: 1000,
            down_after: 3000,
            snapshot_interval: 4096,
            tls: None,
        }
    }
}

impl ClusterSettings {
    pub fn validate(&self, node_name: &str) -> Result<(), String> {
        if self.name.is_empty() || self.name.len() > 255 {
            return Err("cluster.name must be 1 to 255 bytes".into());
        }
        if self.secret.is_some() == self.secret_file.is_some() {
            return Err("[cluster] needs exactly one of secret and secret_file".into());
        }
        if self.listen.0.is_none() {
            return Err("cluster.listen cannot be none: the other nodes dial it".into());
        }
        if self.ping_interval == 0 || self.down_after <= self.ping_interval {
            return Err("cluster.down_after must be longer than cluster.ping_interval (> 0)".into());
        }
        if self.snapshot_interval < 2 {
            return Err("cluster.snapshot_interval must be at least 2".into());
        }
        for p in &self.peers {
            if p.node == node_name {
                return Err(format!("cluster.peers lists this node ('{node_name}') itself"));
            }
            if p.node.is_empty() || p.node.len() > 255 {
                return Err("cluster.peers: node names are 1 to 255 bytes".into());
            }
        }
        Ok(())
    }

    /// The shared secret, read from `secret_file` when that is how it is
    /// given.
    pub fn load_secret(&self) -> Result<Vec<u8>, String> {
        let s = match (&self.secret, &self.secret_file) {
            (Some(s), _) => s.clone(),
            (None, Some(f)) => std::fs::read_to_string(f)
                .map_err(|e| format!("cannot read cluster.secret_file {}: {e}", f.display()))?
                .trim_end()
                .to_string(),
            (None, None) => return Err("no cluster secret".into()),
        };
        if s.is_empty() {
            return Err("the cluster secret is empty".into());
        }
        Ok(s.into_bytes())
    }
}

/// `[cluster.tls]`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LinkTlsSettings {
    /// This node's certificate (chain), for server and client auth.
    pub certfile: PathBuf,
    pub keyfile: PathBuf,
    /// The CA every node's certificate must chain to.
    pub cacertfile: PathBuf,
}
