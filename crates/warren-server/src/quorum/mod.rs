//! Quorum queues' Raft groups on this node (issue 17): one group per
//! quorum queue, all driven by one thread over one write-ahead log
//! (`warren_raft::RaftNode` in `DATA_DIR/quorum/`), separate from the
//! metadata group's, as RabbitMQ keeps its quorum queues in a Ra system
//! of their own. One pass of the thread appends every group's new
//! entries with one write and one fdatasync, so many queues and many
//! publishes share each sync.
//!
//! The queue's rules are `warren_fifo`'s; the queue type that applies
//! them is `warren_core::queue::QuorumQueue`. This module owns what has
//! I/O: the groups' registry (`registry.rs`), the driver thread
//! (`driver.rs`: proposals, passes, applying committed entries to the
//! queues, telling them when leadership changes) and checkpoints
//! (`checkpoint.rs`: a queue's state written to its own file, after which
//! its log is compacted, so a restart replays only what came later).

mod checkpoint;
mod driver;
pub mod registry;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use warren_amqp091::ShortStr;
use warren_core::queue::{Queue, QuorumSystem};
use warren_core::Broker;
use warren_raft::RaftNode;

use crate::timers::Timers;
use driver::{Driver, Input};
use registry::{GroupEntry, Registry};

pub struct Quorum {
    me: u64,
    dir: PathBuf,
    tx: mpsc::Sender<Input>,
    registry: Mutex<Registry>,
    /// The driver, until `run` starts its thread.
    driver: Mutex<Option<(Driver, mpsc::Receiver<Input>)>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Quorum {
    /// Open this node's quorum log under `dir` (its groups come back as
    /// their queues are restored and attach); nothing is applied until
    /// [`Quorum::run`].
    pub fn open(
        dir: &Path,
        me: u64,
        broker: Arc<Broker>,
        timers: Arc<Timers>,
    ) -> Result<Arc<Quorum>, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let registry = Registry::load(dir).map_err(|e| e.to_string())?;
        let applied = checkpoint::indexes(dir);
        let node = RaftNode::open(dir, me, &[me], &applied).map_err(|e| e.to_string())?;
        let (tx, rx) = mpsc::channel();
        let driver = Driver::new(node, dir.to_path_buf(), broker, timers);
        Ok(Arc::new(Quorum {
            me,
            dir: dir.to_path_buf(),
            tx,
            registry: Mutex::new(registry),
            driver: Mutex::new(Some((driver, rx))),
            thread: Mutex::new(None),
        }))
    }

    /// Start the driver (after the restored queues have attached).
    pub fn run(self: &Arc<Self>) -> Result<(), String> {
        let Some((driver, rx)) = self.driver.lock().take() else {
            return Ok(());
        };
        let runtime = tokio::runtime::Handle::current();
        let t = std::thread::Builder::new()
            .name("warren-quorum".into())
            .spawn(move || {
                // Applying may arm timers and route dead letters.
                let _entered = runtime.enter();
                driver.run(rx)
            })
            .map_err(|e| e.to_string())?;
        *self.thread.lock() = Some(t);
        Ok(())
    }

    /// Stop the driver and wait for it.
    pub fn stop(&self) {
        let _ = self.tx.send(Input::Stop);
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl QuorumSystem for Quorum {
    fn node_id(&self) -> u64 {
        self.me
    }

    fn open(&self, vhost: &str, name: &ShortStr) -> Result<(u64, Option<Vec<u8>>), String> {
        let queue = name.to_str_lossy().to_string();
        let mut reg = self.registry.lock();
        if let Some(g) = reg.get(vhost, &queue) {
            let group = g.group;
            return Ok((group, checkpoint::load(&self.dir, group)));
        }
        // Not 0 (the metadata group's id on a cluster's links).
        let group = loop {
            let g: u64 = rand::random();
            if g != 0 && !reg.all().any(|e| e.group == g) {
                break g;
            }
        };
        reg.put(GroupEntry {
            group,
            vhost: vhost.to_string(),
            queue,
            members: vec![self.me],
        })
        .map_err(|e| format!("the quorum group registry: {e}"))?;
        Ok((group, None))
    }

    fn attach(&self, group: u64, queue: Weak<Queue>) {
        let members = {
            let reg = self.registry.lock();
            let found = reg.all().find(|e| e.group == group).map(|e| e.members.clone());
            found.unwrap_or_else(|| vec![self.me])
        };
        let _ = self.tx.send(Input::Attach(group, members, queue));
    }

    fn propose(&self, group: u64, entry: Vec<u8>) {
        let _ = self.tx.send(Input::Propose(group, entry));
    }

    fn remove(&self, group: u64) {
        if let Err(e) = self.registry.lock().remove(group) {
            tracing::error!("the quorum group registry: {e}");
        }
        let _ = self.tx.send(Input::Remove(group));
    }
}
