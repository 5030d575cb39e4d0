//! Which nodes make the cluster, and their Raft ids: the node table.
//!
//! The nodes listed in configuration (the static peer list, as RabbitMQ's
//! classic config peer discovery) number themselves by sorting their names,
//! so they agree without asking; they are the metadata group's first
//! voters. A node that joins later (`warrenctl join_cluster`) is given the
//! next free id by the metadata leader, and the membership change that adds
//! it carries its name, address and id (`Command::AddNode`), so every node
//! learns it at the same log index and keeps it in its definitions store.
//!
//! A joined node's own configuration lists no peers: what the leader told
//! it when it joined (every node's name, address and id, and the first
//! voters) is kept in `DATA_DIR/cluster.json`, and read at every start.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use crate::definitions::records::ClusterNode;

/// Names to ids and back, for the nodes this node knows of, and the
/// metadata group's first voters. Shared by the metadata driver (which
/// routes Raft messages by id) and what applies membership changes.
#[derive(Debug, Default)]
pub struct NodeTable {
    inner: RwLock<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    nodes: BTreeMap<String, ClusterNode>,
    bootstrap: Vec<u64>,
    /// Bumped on every change, so a reader knows to look again.
    version: u64,
}

impl NodeTable {
    pub fn new(nodes: impl IntoIterator<Item = ClusterNode>, bootstrap: Vec<u64>) -> NodeTable {
        let t = NodeTable::default();
        {
            let mut i = t.inner.write();
            i.bootstrap = bootstrap;
            for n in nodes {
                i.nodes.insert(n.name.clone(), n);
            }
        }
        t
    }

    pub fn id(&self, name: &str) -> Option<u64> {
        self.inner.read().nodes.get(name).map(|n| n.id)
    }

    pub fn name(&self, id: u64) -> Option<String> {
        self.inner
            .read()
            .nodes
            .values()
            .find(|n| n.id == id)
            .map(|n| n.name.clone())
    }

    pub fn get(&self, name: &str) -> Option<ClusterNode> {
        self.inner.read().nodes.get(name).cloned()
    }

    pub fn all(&self) -> Vec<ClusterNode> {
        self.inner.read().nodes.values().cloned().collect()
    }

    pub fn bootstrap(&self) -> Vec<u64> {
        self.inner.read().bootstrap.clone()
    }

    pub fn version(&self) -> u64 {
        self.inner.read().version
    }

    /// The id a node that joins now gets: one past every id ever given
    /// out that this node knows of.
    pub fn next_id(&self) -> u64 {
        let i = self.inner.read();
        i.nodes
            .values()
            .map(|n| n.id)
            .chain(i.bootstrap.iter().copied())
            .max()
            .unwrap_or(0)
            + 1
    }

    /// Add or update a node; false if nothing changed.
    pub fn put(&self, node: ClusterNode) -> bool {
        let mut i = self.inner.write();
        if i.nodes.get(&node.name) == Some(&node) {
            return false;
        }
        i.nodes.insert(node.name.clone(), node);
        i.version += 1;
        true
    }
}

/// What a joined node keeps of its joining (`DATA_DIR/cluster.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Joined {
    /// This node's Raft id.
    pub id: u64,
    /// Every node the leader knew of when this one joined (itself too).
    pub nodes: Vec<ClusterNode>,
    /// The metadata group's first voters (its log starts from them).
    pub bootstrap: Vec<u64>,
    /// Set when the join was agreed and the node's own data must go
    /// before it starts as a member (as `rabbitmqctl reset` before
    /// `join_cluster`); cleared once done.
    #[serde(default)]
    pub reset: bool,
}

impl Joined {
    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join("cluster.json")
    }

    pub fn load(data_dir: &Path) -> Result<Option<Joined>, String> {
        let p = Joined::path(data_dir);
        match std::fs::read(&p) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| format!("{}: {e}", p.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", p.display())),
        }
    }

    /// Write it whole or not at all.
    pub fn save(&self, data_dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(data_dir)?;
        let json = serde_json::to_vec_pretty(self).expect("plain data encodes");
        crate::definitions::replace_file(&Joined::path(data_dir), &json)
    }

    /// Remove everything under `data_dir` but this file: the node's own
    /// definitions, messages, streams and Raft log (it starts again from
    /// the cluster's).
    pub fn reset_data(data_dir: &Path) -> std::io::Result<()> {
        let keep = Joined::path(data_dir);
        for e in std::fs::read_dir(data_dir)? {
            let p = e?.path();
            if p == keep {
                continue;
            }
            if p.is_dir() {
                std::fs::remove_dir_all(&p)?;
            } else {
                std::fs::remove_file(&p)?;
            }
        }
        Ok(())
    }
}

/// The node table at start: the configured nodes numbered by their sorted
/// names (unless this node joined, when `cluster.json` numbers them), the
/// nodes that joined as the definitions store has them, and the first
/// voters.
pub fn at_start(
    me: &str,
    listen: &str,
    peers: &[crate::config::cluster::PeerConfig],
    joined: Option<&Joined>,
    stored: &[ClusterNode],
) -> NodeTable {
    let mut nodes: Vec<ClusterNode> = Vec::new();
    let bootstrap = match joined {
        Some(j) => {
            nodes.extend(j.nodes.iter().cloned());
            j.bootstrap.clone()
        }
        None => {
            let names: Vec<String> = peers.iter().map(|p| p.node.clone()).collect();
            let ids = super::meta::node_ids(me, &names);
            for (name, id) in &ids {
                let address = if name == me {
                    listen.to_string()
                } else {
                    peers
                        .iter()
                        .find(|p| &p.node == name)
                        .map(|p| p.address.clone())
                        .unwrap_or_default()
                };
                nodes.push(ClusterNode {
                    name: name.clone(),
                    address,
                    id: *id,
                });
            }
            ids.values().copied().collect()
        }
    };
    nodes.extend(stored.iter().cloned());
    NodeTable::new(nodes, bootstrap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(n: &str) -> crate::config::cluster::PeerConfig {
        crate::config::cluster::PeerConfig {
            node: n.into(),
            address: format!("{n}:25672"),
        }
    }

    #[test]
    fn configured_nodes_number_by_name_and_joined_ones_follow() {
        let stored = [ClusterNode {
            name: "d".into(),
            address: "d:1".into(),
            id: 4,
        }];
        let t = at_start("b", "b:25672", &[peer("c"), peer("a")], None, &stored);
        assert_eq!(t.id("a"), Some(1));
        assert_eq!(t.id("b"), Some(2));
        assert_eq!(t.id("c"), Some(3));
        assert_eq!(t.name(4).as_deref(), Some("d"));
        assert_eq!(t.bootstrap(), vec![1, 2, 3]);
        assert_eq!(t.next_id(), 5);
    }

    #[test]
    fn a_joined_node_numbers_as_it_was_told() {
        let j = Joined {
            id: 4,
            nodes: vec![
                ClusterNode {
                    name: "a".into(),
                    address: "a:1".into(),
                    id: 1,
                },
                ClusterNode {
                    name: "z".into(),
                    address: "z:1".into(),
                    id: 4,
                },
            ],
            bootstrap: vec![1],
            reset: false,
        };
        let t = at_start("z", "z:1", &[], Some(&j), &[]);
        assert_eq!(t.id("z"), Some(4));
        assert_eq!(t.bootstrap(), vec![1]);
        let dir = std::env::temp_dir().join(format!("warren-joined-{}", std::process::id()));
        j.save(&dir).unwrap();
        std::fs::write(dir.join("other"), b"x").unwrap();
        Joined::reset_data(&dir).unwrap();
        assert_eq!(Joined::load(&dir).unwrap(), Some(j));
        assert!(!dir.join("other").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
