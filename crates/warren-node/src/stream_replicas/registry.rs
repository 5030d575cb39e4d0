//! Where each replicated stream lives: its members (node names), the
//! node leading it and the epoch (the stream coordinator's state in
//! RabbitMQ, here applied from the metadata log by every node, so every
//! node can answer the stream protocol's Metadata).
//! `DATA_DIR/streams.json`, replaced whole on each change (streams are
//! declared, deleted and fail over rarely).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::definitions::records::Placement;

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    streams: Vec<Placement>,
}

#[derive(Debug)]
pub struct Registry {
    path: PathBuf,
    by_name: BTreeMap<(String, String), Placement>,
}

impl Registry {
    pub fn load(dir: &Path) -> std::io::Result<Registry> {
        let path = dir.join("streams.json");
        let file: File = crate::definitions::read_json_or_default(&path)?;
        let by_name = file
            .streams
            .into_iter()
            .map(|p| ((p.vhost.clone(), p.name.clone()), p))
            .collect();
        Ok(Registry { path, by_name })
    }

    pub fn get(&self, vhost: &str, name: &str) -> Option<&Placement> {
        self.by_name.get(&(vhost.to_string(), name.to_string()))
    }

    pub fn all(&self) -> impl Iterator<Item = &Placement> {
        self.by_name.values()
    }

    /// Add or replace `p`, durably.
    pub fn put(&mut self, p: Placement) -> std::io::Result<()> {
        self.by_name.insert((p.vhost.clone(), p.name.clone()), p);
        self.save()
    }

    /// Remove a stream's placement, durably; false if there was none.
    pub fn remove(&mut self, vhost: &str, name: &str) -> std::io::Result<bool> {
        if self
            .by_name
            .remove(&(vhost.to_string(), name.to_string()))
            .is_none()
        {
            return Ok(false);
        }
        self.save().map(|_| true)
    }

    fn save(&self) -> std::io::Result<()> {
        let file = File {
            streams: self.by_name.values().cloned().collect(),
        };
        let bytes = serde_json::to_vec_pretty(&file).expect("the registry encodes");
        crate::definitions::replace_file(&self.path, &bytes)
    }
}
