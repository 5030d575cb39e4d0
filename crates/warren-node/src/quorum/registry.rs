//! Which Raft group is which quorum queue on this node, and its members:
//! `DATA_DIR/quorum/groups.json`, replaced whole (it changes only when a
//! quorum queue is declared or deleted). A group's id is chosen when its
//! queue is declared, at random, so a queue deleted and declared again
//! never meets the old incarnation's Raft messages or log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupEntry {
    pub group: u64,
    pub vhost: String,
    pub queue: String,
    /// Raft ids of its members.
    pub members: Vec<u64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    groups: Vec<GroupEntry>,
}

#[derive(Debug)]
pub struct Registry {
    path: PathBuf,
    by_name: BTreeMap<(String, String), GroupEntry>,
}

impl Registry {
    pub fn load(dir: &Path) -> std::io::Result<Registry> {
        let path = dir.join("groups.json");
        let file: File = crate::definitions::read_json_or_default(&path)?;
        let by_name = file
            .groups
            .into_iter()
            .map(|g| ((g.vhost.clone(), g.queue.clone()), g))
            .collect();
        Ok(Registry { path, by_name })
    }

    pub fn get(&self, vhost: &str, queue: &str) -> Option<&GroupEntry> {
        self.by_name.get(&(vhost.to_string(), queue.to_string()))
    }

    pub fn all(&self) -> impl Iterator<Item = &GroupEntry> {
        self.by_name.values()
    }

    /// Add (or replace) `entry`, durably.
    pub fn put(&mut self, entry: GroupEntry) -> std::io::Result<()> {
        self.by_name
            .insert((entry.vhost.clone(), entry.queue.clone()), entry);
        self.save()
    }

    /// Remove `group`'s entry, durably; false if there was none.
    pub fn remove(&mut self, group: u64) -> std::io::Result<bool> {
        let before = self.by_name.len();
        self.by_name.retain(|_, g| g.group != group);
        if self.by_name.len() == before {
            return Ok(false);
        }
        self.save().map(|_| true)
    }

    fn save(&self) -> std::io::Result<()> {
        let file = File {
            groups: self.by_name.values().cloned().collect(),
        };
        let bytes = serde_json::to_vec_pretty(&file).expect("the registry encodes");
        crate::definitions::replace_file(&self.path, &bytes)
    }
}
