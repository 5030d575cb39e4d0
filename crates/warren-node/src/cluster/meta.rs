//! The metadata Raft group (group 0) every node of the cluster is a
//! member of: its driver thread, proposals and what has been applied.
//! What an entry means is the caller's (`command.rs`): the driver hands
//! each pass's committed entries to the apply function, in order, which
//! makes their effects and how far it has applied durable together (in
//! the definitions store), so a restart applies only what is newer.
//!
//! The driver is one OS thread per node (it fdatasyncs the node's Raft
//! log, which must not stall the async workers). It takes inputs from a
//! channel (messages from peers, proposals, links up and down), ticks
//! every `TICK`, runs a pass of `warren_raft::RaftNode::drive` after each
//! batch of inputs, and hands each peer its messages as one frame.
//!
//! Any node takes a proposal. The proposing node tags the entry with its
//! Raft id and a sequence number; a follower forwards the tagged entry to
//! the leader as a `Request` on their link (the leader answers only if it
//! cannot propose it). The caller is answered when its own node applies
//! the entry, with what applying it gave (created, refused, ...), which
//! every node computes alike: so what the caller changed, it reads.
//!
//! Compaction: every `snapshot_interval` entries applied, the log forgets
//! all but the last half interval of them (the definitions store holds
//! their effect). A follower that needs a forgotten entry is sent the
//! leader's state instead (`snapshot.rs`), which the apply function
//! installs in place of its own; what follows comes as entries.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;
use warren_peer::message::RaftEnvelope;
use warren_peer::Message;
use warren_raft::{Membership, ProposeError, RaftMessage, RaftNode};

use super::command::Command;
use super::links::request::{FORGET as REQ_FORGET, PROPOSE as REQ_PROPOSE};
use super::links::Cluster;
use super::nodes::{Joined, NodeTable};
use serde::{Deserialize, Serialize};

/// The metadata group's id.
pub const META: u64 = 0;
/// Raft's clock: elections after 10 to 20 ticks without a leader.
const TICK: Duration = Duration::from_millis(100);
/// How soon a proposal that found no leader is offered again.
const RETRY: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    #[error("this node is not the metadata leader (the leader is {0})")]
    NotLeader(String),
    #[error("no metadata leader: this node cannot reach a majority of the cluster")]
    NoLeader,
    #[error("the change was not committed in time (no majority reachable?)")]
    Timeout,
    #[error("the metadata store has stopped")]
    Stopped,
}

/// What applying an entry gave, for its proposer (see [`ApplyFn`]).
type Reply = oneshot::Sender<Result<Vec<u8>, MetaError>>;

enum Input {
    /// A frame's Raft messages: (group, message).
    Step(Vec<(u64, RaftMessage)>),
    Propose(Vec<u8>, Reply),
    /// A tagged entry a follower forwarded: its node and request id.
    Forwarded(String, u64, Vec<u8>),
    /// The leader could not propose a forwarded entry (request id = the
    /// entry's sequence number).
    Refused(u64, MetaError),
    /// Remove a node from the group for good.
    Forget(String, Reply),
    /// A follower asks this node (the leader) to remove a node.
    ForwardedForget(String, u64, String),
    PeerUp(u64),
    PeerDown(u64),
    /// A node asks to join: its name and inter-node address.
    Join(String, String, JoinAnswer),
    Stop,
}

/// Why a node may not join (sent to it as JSON on its link).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum JoinRefusal {
    /// Ask the leader instead.
    #[error("not the metadata leader; '{node}' at {address} is")]
    NotLeader { node: String, address: String },
    #[error("{0}")]
    Refused(String),
}

/// The answer to a node that asks to join: a [`Joined`] as JSON.
pub type JoinAnswer = oneshot::Sender<Result<Vec<u8>, JoinRefusal>>;

/// Node names to Raft ids: every node sorts the same configured names,
/// so all agree without asking.
pub fn node_ids(me: &str, peers: &[String]) -> BTreeMap<String, u64> {
    let mut all: Vec<&str> = peers.iter().map(String::as_str).chain([me]).collect();
    all.sort_unstable();
    all.dedup();
    all.into_iter()
        .enumerate()
        .map(|(i, n)| (n.to_string(), i as u64 + 1))
        .collect()
}

/// One committed entry to apply (`data` empty for Raft's own), or the
/// leader's state at `index` to install in place of this node's.
pub struct Applying<'a> {
    pub index: u64,
    pub data: &'a [u8],
    pub snapshot: bool,
}

/// Applies committed entries to this node's state, in log order. Returns
/// each one's outcome, which goes to its proposer if that is this node.
/// Before returning it must make the entries' effects, and the fact that
/// every entry up to the last index is applied, durable together.
pub type ApplyFn = Arc<dyn Fn(&[Applying]) -> Vec<Vec<u8>> + Send + Sync>;

/// This node's state as a snapshot's data (taken on the Raft thread, after
/// a pass's entries were applied).
pub type TakeFn = Arc<dyn Fn() -> Vec<u8> + Send + Sync>;

pub struct Meta {
    tx: mpsc::Sender<Input>,
    table: Arc<NodeTable>,
    leader: Arc<AtomicU64>,
    applied: Arc<AtomicU64>,
    /// The voters the driver last applied.
    voter_ids: Arc<parking_lot::Mutex<Vec<u64>>>,
    thread: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The node's quorum queue groups: their Raft messages and the links'
    /// ups and downs go there too (groups other than this one's).
    pub quorum: std::sync::OnceLock<Arc<dyn super::replicas::QuorumGroups>>,
    /// This node's start is in the log (`Command::NodeStarted`, see
    /// `removals.rs`): its own changes wait for it.
    started: tokio::sync::watch::Sender<bool>,
}

impl Meta {
    /// Open this node's Raft log under `dir` and start the driver, which
    /// applies entries after `was_applied` (what this node's state already
    /// has) and compacts every `interval` of them.
    pub fn start(
        dir: &Path,
        cluster: Arc<Cluster>,
        table: Arc<NodeTable>,
        apply: ApplyFn,
        take: TakeFn,
        was_applied: u64,
        interval: u64,
    ) -> Result<Arc<Meta>, String> {
        let me = table
            .id(cluster.node())
            .ok_or_else(|| format!("node '{}' has no Raft id in the node table", cluster.node()))?;
        let voters = table.bootstrap();
        let mut node =
            RaftNode::open(dir, me, &voters, &[(META, was_applied)].into()).map_err(|e| e.to_string())?;
        node.add_group(META).map_err(|e| e.to_string())?;
        let mut was_applied = was_applied;
        // A snapshot this node's log had installed but its state had not
        // made its own before it stopped.
        for s in node.take_startup() {
            apply(&[Applying {
                index: s.index,
                data: &s.data,
                snapshot: true,
            }]);
            was_applied = s.index;
        }
        let applied = Arc::new(AtomicU64::new(was_applied));
        let at = applied.clone();
        node.set_snapshot_source(META, Arc::new(move || (at.load(Ordering::Relaxed), take())))
            .map_err(|e| e.to_string())?;
        let (tx, rx) = mpsc::channel();
        let leader = Arc::new(AtomicU64::new(0));
        let compacted = node.first_index(META).unwrap_or(1) - 1;
        // First voters forgotten before this start: members no more. (A
        // node that joined and was forgotten left the stored table.)
        let members = node.voters(META).unwrap_or_default();
        for n in table.all() {
            if voters.contains(&n.id) && !members.contains(&n.id) {
                cluster.forget(&n.name);
            }
        }
        let voter_ids = Arc::new(parking_lot::Mutex::new(members));
        let driver = Driver {
            compacted,
            voter_ids: voter_ids.clone(),
            forgetting: HashMap::new(),
            interval,
            apply,
            node,
            cluster,
            table: table.clone(),
            leader: leader.clone(),
            applied: applied.clone(),
            waiting: HashMap::new(),
            // Started from the clock, so a sequence number of this run
            // never matches an entry an earlier run proposed (replayed
            // from the log on start).
            next_seq: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64),
            joining: HashMap::new(),
            table_seen: 0,
        };
        // Applying may start timers (a TTL, x-expires) and other tasks:
        // the driver thread runs inside the runtime's context.
        let runtime = tokio::runtime::Handle::current();
        let thread = std::thread::Builder::new()
            .name("warren-raft".into())
            .spawn(move || {
                let _entered = runtime.enter();
                driver.run(rx)
            })
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(Meta {
            tx,
            table,
            leader,
            applied,
            voter_ids,
            thread: parking_lot::Mutex::new(Some(thread)),
            quorum: std::sync::OnceLock::new(),
            started: tokio::sync::watch::Sender::new(false),
        }))
    }

    /// This node's start announcement is committed (or was given up on).
    pub fn mark_started(&self) {
        self.started.send_replace(true);
    }

    /// Wait, up to `limit`, until this node's start announcement is in
    /// the log. A change this node proposes before it would be applied
    /// before the announcement, which removes the node's transient and
    /// exclusive queues of before: a queue declared in between would go
    /// on every other node and stay on this one.
    pub async fn wait_started(&self, limit: Duration) {
        let mut rx = self.started.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|s| *s)).await;
    }

    /// The metadata leader's node name, as this node knows it.
    pub fn leader(&self) -> Option<String> {
        self.table.name(self.leader.load(Ordering::Relaxed))
    }

    /// The last metadata entry applied on this node.
    pub fn applied_index(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }

    /// Propose `data`; what applying it gave, once a majority has it on
    /// disk and this node has applied it. A follower forwards it to the
    /// leader; a change that cannot commit fails after `timeout`.
    ///
    /// While there is no leader (an election), or the node asked has just
    /// stopped leading, the entry was not appended anywhere: it is offered
    /// again every `RETRY`, until `timeout`.
    pub async fn propose(&self, data: Vec<u8>, timeout: Duration) -> Result<Vec<u8>, MetaError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let (tx, rx) = oneshot::channel();
            self.tx
                .send(Input::Propose(data.clone(), tx))
                .map_err(|_| MetaError::Stopped)?;
            let e = match tokio::time::timeout_at(deadline, rx).await {
                Ok(Ok(Err(e @ (MetaError::NoLeader | MetaError::NotLeader(_))))) => e,
                Ok(Ok(r)) => return r,
                Ok(Err(_)) => return Err(MetaError::Stopped),
                Err(_) => return Err(MetaError::Timeout),
            };
            if tokio::time::Instant::now() + RETRY >= deadline {
                return Err(e);
            }
            tokio::time::sleep(RETRY).await;
        }
    }

    /// Remove `node` from the metadata group for good (its queues go
    /// with it, see `Command::ForgetNode`); once this node has applied the
    /// change. The leader makes it; a follower forwards it.
    pub async fn forget(&self, node: &str, timeout: Duration) -> Result<(), MetaError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Input::Forget(node.to_string(), tx))
            .map_err(|_| MetaError::Stopped)?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r.map(|_| ()),
            Ok(Err(_)) => Err(MetaError::Stopped),
            Err(_) => Err(MetaError::Timeout),
        }
    }

    /// The group's voters (node names) as this node has applied them.
    pub fn voters(&self) -> Vec<String> {
        let ids = self.voter_ids.lock().clone();
        ids.iter().filter_map(|i| self.table.name(*i)).collect()
    }

    /// `node` (its secret proven on a link it opened, though not a peer
    /// yet) asks to join the cluster, its links to be made to `address`.
    pub async fn join(&self, node: &str, address: &str, timeout: Duration) -> Result<Vec<u8>, JoinRefusal> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Input::Join(node.to_string(), address.to_string(), tx))
            .map_err(|_| JoinRefusal::Refused("this node is stopping".into()))?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(JoinRefusal::Refused("this node is stopping".into())),
            Err(_) => Err(JoinRefusal::Refused(
                "the change that adds it did not commit in time (is a majority up?)".into(),
            )),
        }
    }

    /// A request from a peer on its link.
    pub fn request(&self, from: &str, id: u64, body: &[u8]) {
        match body.split_first() {
            Some((&REQ_FORGET, name)) => {
                let name = String::from_utf8_lossy(name).into_owned();
                let _ = self.tx.send(Input::ForwardedForget(from.to_string(), id, name));
            }
            Some((&super::links::request::QUORUM_PROPOSE, data)) if data.len() >= 8 => {
                let group = u64::from_be_bytes(data[..8].try_into().expect("8 bytes"));
                if let Some(q) = self.quorum.get() {
                    q.forwarded(group, data[8..].to_vec());
                }
            }
            Some((&super::links::request::QUORUM_CALL, data)) => {
                if let Some(q) = self.quorum.get() {
                    q.clone().call_from(from, id, data);
                }
            }
            Some((&REQ_PROPOSE, data)) => {
                let _ = self
                    .tx
                    .send(Input::Forwarded(from.to_string(), id, data.to_vec()));
            }
            _ => tracing::warn!(peer = %from, id, "an inter-node request of an unknown kind, ignored"),
        }
    }

    /// The answer to a request this node sent: only refusals are sent.
    pub fn reply(&self, id: u64, ok: bool, body: &[u8]) {
        if !ok {
            let _ = self.tx.send(Input::Refused(id, decode_error(body)));
        }
    }

    /// A frame of Raft messages from a peer: the metadata group's are
    /// this driver's, the others the quorum queues'.
    pub fn received(&self, batch: Vec<RaftEnvelope>) {
        let (mut meta, mut quorum) = (Vec::new(), Vec::new());
        for e in batch {
            match warren_raft::decode_message(&e.message) {
                Ok(m) if e.group == META => meta.push((e.group, m)),
                Ok(m) => quorum.push((e.group, m)),
                Err(err) => tracing::warn!("a Raft message that does not decode: {err}"),
            }
        }
        // One hand-over per frame, not per message.
        if !meta.is_empty() {
            let _ = self.tx.send(Input::Step(meta));
        }
        if !quorum.is_empty() {
            if let Some(q) = self.quorum.get() {
                q.received(quorum);
            }
        }
    }

    pub fn peer_up(&self, node: &str) {
        if let Some(id) = self.table.id(node) {
            let _ = self.tx.send(Input::PeerUp(id));
        }
    }

    pub fn peer_down(&self, node: &str) {
        if let Some(id) = self.table.id(node) {
            let _ = self.tx.send(Input::PeerDown(id));
        }
    }

    /// Stop the driver and wait for it (its log is closed after).
    pub fn stop(&self) {
        let _ = self.tx.send(Input::Stop);
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

/// Hand each peer its messages as one frame. A full or missing link
/// drops the frame: Raft resends.
pub(crate) fn send_batches(cluster: &Cluster, table: &NodeTable, messages: Vec<(u64, u64, RaftMessage)>) {
    let mut batches: BTreeMap<u64, Vec<RaftEnvelope>> = BTreeMap::new();
    for (to, group, m) in messages {
        batches.entry(to).or_default().push(RaftEnvelope {
            group,
            message: Bytes::from(warren_raft::encode_message(&m)),
        });
    }
    for (to, batch) in batches {
        if let Some(name) = table.name(to) {
            cluster.send(&name, Message::Raft { batch });
        }
    }
}

struct Driver {
    voter_ids: Arc<parking_lot::Mutex<Vec<u64>>>,
    /// Nodes this node asked to forget: name to the waiting caller's
    /// sequence number (in `waiting`).
    forgetting: HashMap<String, u64>,
    /// The last index the log has forgotten, and how often it does.
    compacted: u64,
    interval: u64,
    apply: ApplyFn,
    node: RaftNode,
    cluster: Arc<Cluster>,
    table: Arc<NodeTable>,
    leader: Arc<AtomicU64>,
    applied: Arc<AtomicU64>,
    /// This node's proposals not yet applied: sequence number to caller.
    waiting: HashMap<u64, Reply>,
    next_seq: u64,
    /// Nodes asking to join, until the change that adds them is applied.
    joining: HashMap<String, JoinAnswer>,
    /// The node table's version the links were last told of.
    table_seen: u64,
}

/// An error sent back on a link, as text.
fn encode_error(e: &MetaError) -> Bytes {
    let code = match e {
        MetaError::NotLeader(_) => 1u8,
        MetaError::NoLeader => 2,
        MetaError::Timeout => 3,
        MetaError::Stopped => 4,
    };
    let mut b = vec![code];
    if let MetaError::NotLeader(l) = e {
        b.extend_from_slice(l.as_bytes());
    }
    Bytes::from(b)
}

fn decode_error(b: &[u8]) -> MetaError {
    match b.split_first() {
        Some((1, l)) => MetaError::NotLeader(String::from_utf8_lossy(l).into_owned()),
        Some((3, _)) => MetaError::Timeout,
        Some((4, _)) => MetaError::Stopped,
        _ => MetaError::NoLeader,
    }
}

impl Driver {
    fn run(mut self, rx: mpsc::Receiver<Input>) {
        let mut next_tick = Instant::now() + TICK;
        loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(Input::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Ok(i) => {
                    if !self.input(i) {
                        return;
                    }
                    while let Ok(i) = rx.try_recv() {
                        if !self.input(i) {
                            return;
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            if Instant::now() >= next_tick {
                self.node.tick();
                next_tick = Instant::now() + TICK;
            }
            if let Err(e) = self.pass() {
                tracing::error!("metadata Raft log: {e}; the node leaves the metadata group");
                return;
            }
        }
    }

    /// False on Stop.
    fn input(&mut self, i: Input) -> bool {
        match i {
            Input::Stop => return false,
            Input::Step(steps) => {
                for (g, m) in steps {
                    if let Err(e) = self.node.step(g, m) {
                        tracing::debug!("Raft message refused: {e}");
                    }
                }
            }
            Input::Propose(data, reply) => self.propose(data, reply),
            Input::Forwarded(from, request, entry) => {
                if let Err(e) = self.propose_entry(entry) {
                    // Not the leader (any more): the follower's caller
                    // hears it and may retry.
                    let m = Message::Reply {
                        id: request,
                        ok: false,
                        body: encode_error(&e),
                    };
                    self.cluster.send(&from, m);
                }
            }
            Input::Refused(seq, e) => {
                if let Some(reply) = self.waiting.remove(&seq) {
                    let _ = reply.send(Err(e));
                }
            }
            Input::Forget(name, reply) => self.forget(name, reply),
            Input::ForwardedForget(from, request, name) => {
                if let Err(e) = self.propose_forget(&name) {
                    let m = Message::Reply {
                        id: request,
                        ok: false,
                        body: encode_error(&e),
                    };
                    self.cluster.send(&from, m);
                }
            }
            Input::Join(node, address, answer) => self.join(node, address, answer),
            Input::PeerUp(id) => self.node.peer_up(id),
            Input::PeerDown(id) => self.node.peer_down(id),
        }
        true
    }

    /// Tag `data` with this node and a sequence number (so this node knows
    /// the entry when it applies it) and propose it here if this node
    /// leads, or forward it to the leader.
    fn propose(&mut self, data: Vec<u8>, reply: Reply) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut entry = Vec::with_capacity(16 + data.len());
        entry.extend_from_slice(&self.node.id().to_be_bytes());
        entry.extend_from_slice(&seq.to_be_bytes());
        entry.extend_from_slice(&data);
        match self.node.propose(META, entry) {
            Ok(()) => {
                self.waiting.insert(seq, reply);
            }
            Err(ProposeError::NotLeader(Some(l))) if l != self.node.id() => {
                let Some(name) = self.table.name(l) else {
                    let _ = reply.send(Err(MetaError::NoLeader));
                    return;
                };
                let mut body = Vec::with_capacity(1 + 16 + data.len());
                body.push(REQ_PROPOSE);
                body.extend_from_slice(&self.node.id().to_be_bytes());
                body.extend_from_slice(&seq.to_be_bytes());
                body.extend_from_slice(&data);
                self.forward(&name, seq, body, reply);
            }
            Err(_) => {
                let _ = reply.send(Err(MetaError::NoLeader));
            }
        }
    }

    /// Send a request to the leader for this node's caller, who waits
    /// (under `seq`) for this node to apply what it leads to.
    fn forward(&mut self, leader: &str, seq: u64, body: Vec<u8>, reply: Reply) -> bool {
        let m = Message::Request {
            id: seq,
            body: Bytes::from(body),
        };
        if self.cluster.send(leader, m) {
            self.waiting.insert(seq, reply);
            true
        } else {
            let _ = reply.send(Err(MetaError::NoLeader));
            false
        }
    }

    /// What a caller hears when this node could not propose.
    fn refusal(&self, e: ProposeError) -> MetaError {
        match e {
            ProposeError::NotLeader(Some(l)) if l != self.node.id() => {
                MetaError::NotLeader(self.table.name(l).unwrap_or_default())
            }
            _ => MetaError::NoLeader,
        }
    }

    /// Remove `name` from the group: here as leader, else through it.
    fn forget(&mut self, name: String, reply: Reply) {
        let seq = self.next_seq;
        self.next_seq += 1;
        match self.propose_forget(&name) {
            Ok(()) => {
                self.waiting.insert(seq, reply);
            }
            Err(MetaError::NotLeader(leader)) if !leader.is_empty() => {
                let mut body = vec![REQ_FORGET];
                body.extend_from_slice(name.as_bytes());
                if !self.forward(&leader, seq, body, reply) {
                    return;
                }
            }
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        }
        self.forgetting.insert(name, seq);
    }

    /// As leader, propose the membership change that removes `name`,
    /// with the command that goes with it as its context.
    fn propose_forget(&mut self, name: &str) -> Result<(), MetaError> {
        let id = self.table.id(name).ok_or(MetaError::NoLeader)?;
        let context = serde_json::to_vec(&super::command::Command::ForgetNode {
            node: name.to_string(),
        })
        .expect("a command encodes");
        self.node
            .propose_membership(META, Membership::Remove(id), context)
            .map_err(|e| self.refusal(e))
    }

    /// Propose an entry a follower tagged.
    fn propose_entry(&mut self, entry: Vec<u8>) -> Result<(), MetaError> {
        if entry.len() < 16 {
            return Err(MetaError::NoLeader);
        }
        self.node.propose(META, entry).map_err(|e| self.refusal(e))
    }

    /// A membership change applied (`context` is the command that goes
    /// with it): a forgotten node is forgotten by the links, a joined one
    /// is linked to (the apply put it in the node table), and whoever
    /// here asked for it is answered.
    fn members_changed(&mut self, members: &[u64], context: &[u8], outcome: Vec<u8>) {
        *self.voter_ids.lock() = members.to_vec();
        match serde_json::from_slice::<Command>(context) {
            Ok(Command::ForgetNode { node }) => {
                self.cluster.forget(&node);
                if let Some(seq) = self.forgetting.remove(&node) {
                    if let Some(reply) = self.waiting.remove(&seq) {
                        let _ = reply.send(Ok(outcome));
                    }
                }
            }
            Ok(Command::AddNode { node, .. }) => {
                self.link_table();
                if let Some(answer) = self.joining.remove(&node) {
                    let _ = answer.send(self.joined(&node));
                }
            }
            _ => tracing::warn!("a metadata membership change without a known command"),
        }
    }

    /// Dial (or accept) every node of the node table the links do not
    /// know yet, once the table changed.
    fn link_table(&mut self) {
        let v = self.table.version();
        if v == self.table_seen {
            return;
        }
        self.table_seen = v;
        for n in self.table.all() {
            if n.name != self.cluster.node() {
                self.cluster.add_peer(&n.name, &n.address);
            }
        }
    }

    /// What a node that joined needs to start as a member.
    fn joined(&self, node: &str) -> Result<Vec<u8>, JoinRefusal> {
        let id = self
            .table
            .id(node)
            .ok_or_else(|| JoinRefusal::Refused(format!("'{node}' is not in the node table")))?;
        let j = Joined {
            id,
            nodes: self.table.all(),
            bootstrap: self.table.bootstrap(),
            reset: true,
        };
        Ok(serde_json::to_vec(&j).expect("plain data encodes"))
    }

    /// `node` (at `address`, its secret proven) asks to join: as leader,
    /// add it to the metadata group with the next free id; it is
    /// answered once that is applied here. Anyone else says who leads.
    fn join(&mut self, node: String, address: String, answer: JoinAnswer) {
        if node == self.cluster.node() {
            let _ = answer.send(Err(JoinRefusal::Refused(format!("'{node}' is this node"))));
            return;
        }
        if let Some(id) = self.table.id(&node) {
            if self.voter_ids.lock().contains(&id) {
                // Asked again (its first answer lost): the same answer.
                let _ = answer.send(self.joined(&node));
                return;
            }
        }
        let leader = self.node.leader(META).unwrap_or(0);
        if leader != self.node.id() {
            let refusal = match self.table.name(leader).and_then(|n| self.table.get(&n)) {
                Some(l) => JoinRefusal::NotLeader {
                    node: l.name,
                    address: l.address,
                },
                None => JoinRefusal::Refused("the cluster has no metadata leader now; try again".into()),
            };
            let _ = answer.send(Err(refusal));
            return;
        }
        if self.joining.contains_key(&node) {
            let _ = answer.send(Err(JoinRefusal::Refused(format!("'{node}' is joining already"))));
            return;
        }
        let id = self.table.next_id();
        let context = serde_json::to_vec(&Command::AddNode {
            node: node.clone(),
            address,
            id,
        })
        .expect("a command encodes");
        match self.node.propose_membership(META, Membership::Add(id), context) {
            Ok(()) => {
                self.joining.insert(node, answer);
            }
            Err(e) => {
                let _ = answer.send(Err(JoinRefusal::Refused(self.refusal(e).to_string())));
            }
        }
    }

    fn pass(&mut self) -> Result<(), warren_raft::NodeError> {
        // A leader's appends go before its own fsync (so it and its
        // followers write at once); the rest after.
        let (cluster, table) = (self.cluster.clone(), self.table.clone());
        let out = self
            .node
            .drive_with(|early| send_batches(&cluster, &table, std::mem::take(early)))?;
        send_batches(&self.cluster, &self.table, out.messages);
        if let Some(last) = out.applied.last() {
            // Every entry starts with its proposer's tag (node, sequence);
            // Raft's own (empty) entries have none, nor does a snapshot.
            let entries: Vec<Applying> = out
                .applied
                .iter()
                .map(|a| Applying {
                    index: a.index,
                    // A membership change's context is the command that
                    // goes with it, untagged.
                    data: if a.snapshot || a.members.is_some() {
                        &a.data
                    } else {
                        a.data.get(16..).unwrap_or_default()
                    },
                    snapshot: a.snapshot,
                })
                .collect();
            let outcomes = (self.apply)(&entries);
            self.applied.store(last.index, Ordering::Relaxed);
            if out.applied.iter().any(|a| a.snapshot) {
                // A snapshot brings its members with it.
                *self.voter_ids.lock() = self.node.voters(META).unwrap_or_default();
            }
            for (a, outcome) in out.applied.iter().zip(outcomes) {
                if let Some(members) = &a.members {
                    self.members_changed(members, &a.data, outcome);
                    continue;
                }
                if a.snapshot || a.data.len() < 16 {
                    continue;
                }
                let node = u64::from_be_bytes(a.data[..8].try_into().unwrap());
                let seq = u64::from_be_bytes(a.data[8..16].try_into().unwrap());
                if node == self.node.id() {
                    if let Some(reply) = self.waiting.remove(&seq) {
                        let _ = reply.send(Ok(outcome));
                    }
                }
            }
        }
        // Keep the last half interval as entries: a follower a little
        // behind catches up from them, not from a whole snapshot, and
        // what was applied that long ago is surely in the definitions
        // store's files.
        let applied = self.applied.load(Ordering::Relaxed);
        if applied >= self.compacted + self.interval {
            let upto = applied - self.interval / 2;
            self.node.compact(META, upto)?;
            self.compacted = upto;
        }
        self.link_table();
        self.leader
            .store(self.node.leader(META).unwrap_or(0), Ordering::Relaxed);
        // A caller that gave up (timed out) is forgotten; its entry may
        // still commit, and is then applied with no one to tell.
        self.waiting.retain(|_, r| !r.is_closed());
        Ok(())
    }
}

impl super::links::LinkEvents for Meta {
    fn up(&self, node: &str) {
        self.peer_up(node);
        if let Some(q) = self.quorum.get() {
            q.peer_up(node);
        }
    }

    fn down(&self, node: &str) {
        self.peer_down(node);
        if let Some(q) = self.quorum.get() {
            q.peer_down(node);
        }
    }

    fn raft(&self, _from: &str, batch: Vec<RaftEnvelope>) {
        self.received(batch);
    }

    fn request(&self, from: &str, id: u64, body: Bytes) {
        Meta::request(self, from, id, &body);
    }

    fn reply(&self, _from: &str, id: u64, ok: bool, body: Bytes) {
        if id & super::links::request::CALL_ID_BIT != 0 {
            if let Some(q) = self.quorum.get() {
                q.reply(id, &body);
            }
            return;
        }
        Meta::reply(self, id, ok, &body);
    }

    fn join_request<'a>(
        &'a self,
        node: &'a str,
        address: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<u8>, JoinRefusal>> + Send + 'a>> {
        Box::pin(self.join(node, address, super::join::JOIN_TIMEOUT))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_numbers_the_cluster_the_same() {
        let a = node_ids("b", &["c".into(), "a".into()]);
        let b = node_ids("a", &["b".into(), "c".into()]);
        assert_eq!(a, b);
        assert_eq!(a["a"], 1);
        assert_eq!(a["c"], 3);
    }
}
