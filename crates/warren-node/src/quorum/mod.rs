//! Quorum queues' Raft groups on this node: one group per
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

pub mod call;
mod checkpoint;
mod driver;
pub mod registry;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use warren_amqp091::ShortStr;
use warren_core::queue::{Queue, QuorumSystem};
use warren_core::Broker;
use warren_raft::RaftNode;

use crate::cluster::links::Cluster;
use crate::cluster::nodes::NodeTable;
use crate::cluster::replicas::QuorumGroups;
use crate::timers::Timers;
use call::{Answer, CallError, Op};
use driver::{Driver, Input};
use registry::{GroupEntry, Registry};

/// How a clustered node reaches the members of its groups: set once the
/// cluster's links and node table exist (after the queues are restored).
#[derive(Default)]
pub struct Links {
    pub cluster: OnceLock<Arc<Cluster>>,
    pub table: OnceLock<Arc<NodeTable>>,
}

pub struct Quorum {
    me: u64,
    /// This node's name (a single node names itself with it).
    node_name: String,
    links: Arc<Links>,
    dir: PathBuf,
    tx: mpsc::Sender<Input>,
    registry: Mutex<Registry>,
    /// The driver, until `run` starts its thread.
    driver: Mutex<Option<(Driver, mpsc::Receiver<Input>)>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Bodies the node's quorum queues hold in memory (they page past a
    /// node-wide window too).
    bodies: Arc<warren_core::queue::MemoryGauge>,
    /// This node's calls on other nodes' members, waiting for the reply.
    calls: Mutex<HashMap<u64, tokio::sync::oneshot::Sender<Answer>>>,
    next_call: AtomicU64,
}

/// How long a call waits for its answer (the member's own wait for a
/// change to apply is shorter).
const CALL_WAIT: Duration = Duration::from_secs(12);

impl Quorum {
    /// Open this node's quorum log under `dir` (its groups come back as
    /// their queues are restored and attach); nothing is applied until
    /// [`Quorum::run`].
    pub fn open(
        dir: &Path,
        me: u64,
        node_name: &str,
        broker: Arc<Broker>,
        timers: Arc<Timers>,
    ) -> Result<Arc<Quorum>, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let registry = Registry::load(dir).map_err(|e| e.to_string())?;
        let applied = checkpoint::indexes(dir);
        let node = RaftNode::open(dir, me, &[me], &applied).map_err(|e| e.to_string())?;
        let (tx, rx) = mpsc::channel();
        let links = Arc::new(Links::default());
        let driver = Driver::new(node, dir.to_path_buf(), broker, timers, links.clone(), tx.clone());
        Ok(Arc::new(Quorum {
            me,
            node_name: node_name.to_string(),
            links,
            dir: dir.to_path_buf(),
            tx,
            registry: Mutex::new(registry),
            driver: Mutex::new(Some((driver, rx))),
            thread: Mutex::new(None),
            bodies: Arc::default(),
            calls: Mutex::new(HashMap::new()),
            next_call: AtomicU64::new(1),
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

    /// The cluster's links and node table (a clustered node, once they
    /// exist): Raft messages go to peers from then on.
    pub fn set_links(&self, cluster: Arc<Cluster>, table: Arc<NodeTable>) {
        let _ = self.links.cluster.set(cluster);
        let _ = self.links.table.set(table);
    }

    /// A group this node is a member of, as a cluster declared it (before
    /// the queue is made, which then finds it here).
    pub fn register(&self, vhost: &str, queue: &str, group: u64, members: Vec<u64>) -> Result<(), String> {
        self.registry
            .lock()
            .put(GroupEntry {
                group,
                vhost: vhost.to_string(),
                queue: queue.to_string(),
                members,
            })
            .map_err(|e| format!("the quorum group registry: {e}"))
    }

    /// How many of the groups this node knows each node is a member of
    /// (where new groups' members go: the fewest first).
    pub fn memberships(&self) -> std::collections::HashMap<String, usize> {
        let mut out = std::collections::HashMap::new();
        let Some(table) = self.links.table.get() else {
            return out;
        };
        for g in self.registry.lock().all() {
            for m in &g.members {
                if let Some(n) = table.name(*m) {
                    *out.entry(n).or_insert(0) += 1;
                }
            }
        }
        out
    }

    /// The group of `queue`, if this node is a member.
    pub fn group_of(&self, vhost: &str, queue: &str) -> Option<u64> {
        let reg = self.registry.lock();
        reg.get(vhost, queue)
            .filter(|g| g.members.contains(&self.me))
            .map(|g| g.group)
    }

    /// `queue`'s members in the order the metadata gave them (the first
    /// is its home), if this node is one.
    pub fn members_of(&self, vhost: &str, queue: &str) -> Vec<u64> {
        let reg = self.registry.lock();
        reg.get(vhost, queue)
            .map(|g| g.members.clone())
            .unwrap_or_default()
    }

    /// Ask the member on `node` (this one, or another over the link) to
    /// carry out `op` on `queue`'s group.
    pub async fn call(&self, node: &str, vhost: &str, queue: &str, op: Op) -> Answer {
        if node == self.node_name {
            let group = self.group_of(vhost, queue).ok_or(CallError::NoGroup)?;
            return self.call_here(group, op).await;
        }
        let Some(cluster) = self.links.cluster.get() else {
            return Err(CallError::Failed(format!("no link to {node}")));
        };
        let id = call::CALL_ID_BIT | self.next_call.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.calls.lock().insert(id, tx);
        let request = call::Request {
            vhost: vhost.to_string(),
            queue: queue.to_string(),
            op,
        };
        let mut body = vec![crate::cluster::links::request::QUORUM_CALL];
        body.extend(serde_json::to_vec(&request).expect("a request encodes"));
        let sent = cluster.send(
            node,
            warren_peer::Message::Request {
                id,
                body: bytes::Bytes::from(body),
            },
        );
        let answer = if sent {
            match tokio::time::timeout(CALL_WAIT, rx).await {
                Ok(Ok(a)) => a,
                Ok(Err(_)) => Err(CallError::Failed("this node is stopping".into())),
                Err(_) => Err(CallError::Failed(format!("{node} did not answer in time"))),
            }
        } else {
            Err(CallError::Failed(format!("{node} is not reachable")))
        };
        self.calls.lock().remove(&id);
        answer
    }

    /// `op` on a group of this node, by its Raft thread.
    async fn call_here(&self, group: u64, op: Op) -> Answer {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.tx.send(Input::Call(group, op, tx)).is_err() {
            return Err(CallError::Failed("this node is stopping".into()));
        }
        match tokio::time::timeout(CALL_WAIT, rx).await {
            Ok(Ok(a)) => a,
            _ => Err(CallError::Failed(
                "this node's quorum queues did not answer".into(),
            )),
        }
    }

    /// A call from `from` (`request::QUORUM_CALL`): answered with a Reply
    /// once this node's Raft thread has.
    pub fn request(self: &Arc<Self>, from: &str, id: u64, body: &[u8]) {
        let Some(cluster) = self.links.cluster.get().cloned() else {
            return;
        };
        let (me, from, body) = (self.clone(), from.to_string(), body.to_vec());
        tokio::spawn(async move {
            let answer: Answer = match serde_json::from_slice::<call::Request>(&body) {
                Ok(r) => match me.group_of(&r.vhost, &r.queue) {
                    Some(g) => me.call_here(g, r.op).await,
                    None => Err(CallError::NoGroup),
                },
                Err(e) => Err(CallError::Failed(format!("a call that does not decode: {e}"))),
            };
            let body = serde_json::to_vec(&answer).expect("an answer encodes");
            cluster.send(
                &from,
                warren_peer::Message::Reply {
                    id,
                    ok: true,
                    body: bytes::Bytes::from(body),
                },
            );
        });
    }

    /// The reply to one of this node's calls.
    pub fn reply(&self, id: u64, body: &[u8]) {
        let answer = serde_json::from_slice::<Answer>(body)
            .unwrap_or_else(|e| Err(CallError::Failed(format!("an answer that does not decode: {e}"))));
        if let Some(tx) = self.calls.lock().remove(&id) {
            let _ = tx.send(answer);
        }
    }

    /// An entry a member forwarded (it proposed before it knew the
    /// leader): proposed here if this node leads, else dropped.
    pub fn forwarded(&self, group: u64, entry: Vec<u8>) {
        let _ = self.tx.send(Input::Forwarded(group, entry));
    }

    /// A frame of Raft messages from a peer for quorum groups.
    pub fn received(&self, steps: Vec<(u64, warren_raft::RaftMessage)>) {
        let _ = self.tx.send(Input::Step(steps));
    }

    pub fn peer_up(&self, node: &str) {
        if let Some(id) = self.links.table.get().and_then(|t| t.id(node)) {
            let _ = self.tx.send(Input::PeerUp(id));
        }
    }

    pub fn peer_down(&self, node: &str) {
        if let Some(id) = self.links.table.get().and_then(|t| t.id(node)) {
            let _ = self.tx.send(Input::PeerDown(id));
        }
    }
}

impl QuorumGroups for Quorum {
    fn register(&self, vhost: &str, queue: &str, group: u64, members: Vec<u64>) -> Result<(), String> {
        Quorum::register(self, vhost, queue, group, members)
    }

    fn forwarded(&self, group: u64, entry: Vec<u8>) {
        Quorum::forwarded(self, group, entry)
    }

    fn received(&self, steps: Vec<(u64, warren_raft::RaftMessage)>) {
        Quorum::received(self, steps)
    }

    fn call_from(self: Arc<Self>, from: &str, id: u64, body: &[u8]) {
        self.request(from, id, body)
    }

    fn reply(&self, id: u64, body: &[u8]) {
        Quorum::reply(self, id, body)
    }

    fn peer_up(&self, node: &str) {
        Quorum::peer_up(self, node)
    }

    fn peer_down(&self, node: &str) {
        Quorum::peer_down(self, node)
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

    fn is_member(&self, vhost: &str, name: &ShortStr) -> bool {
        let queue = name.to_str_lossy();
        self.registry
            .lock()
            .get(vhost, &queue)
            .is_some_and(|g| g.members.contains(&self.me))
    }

    fn node_name(&self, id: u64) -> Option<ShortStr> {
        match self.links.table.get() {
            Some(t) => t.name(id).map(|n| ShortStr::from(n.as_str())),
            // A single node: its groups are its own.
            None => (id == self.me).then(|| ShortStr::from(self.node_name.as_str())),
        }
    }

    fn members(&self, group: u64) -> Vec<u64> {
        let reg = self.registry.lock();
        let found = reg.all().find(|e| e.group == group).map(|e| e.members.clone());
        found.unwrap_or_default()
    }

    fn is_up(&self, id: u64) -> bool {
        if id == self.me {
            return true;
        }
        let (Some(cluster), Some(table)) = (self.links.cluster.get(), self.links.table.get()) else {
            return false;
        };
        let Some(name) = table.name(id) else { return false };
        cluster.peers().iter().any(|p| p.node == name && p.running)
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

    fn body_dir(&self, group: u64) -> Option<std::path::PathBuf> {
        Some(self.dir.join(format!("{group:016x}")))
    }

    fn body_gauge(&self) -> Arc<warren_core::queue::MemoryGauge> {
        self.bodies.clone()
    }
}
