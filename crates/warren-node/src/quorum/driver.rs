//! The thread that drives every quorum queue group of this node: it
//! takes inputs from a channel (proposals from the queues, queues that
//! attach or go), runs a pass of the node's groups after each batch,
//! applies what committed to the queues (in log order, under each
//! queue's lock), tells a queue when its leader changes, and writes
//! checkpoints. One OS thread: a pass fdatasyncs, which must not stall
//! the async workers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use warren_core::queue::{Queue, Role};
use warren_core::Broker;
use warren_raft::{Applied, RaftNode};

use super::call::{Answer, CallError, GroupInfo, Op};
use super::checkpoint;
use crate::timers::Timers;

/// Raft's clock (elections after 10 to 20 ticks without a leader).
const TICK: Duration = Duration::from_millis(100);
/// A group is checkpointed after this many entries applied since its
/// last checkpoint, or twice its live messages if more (so a deep queue
/// is not written whole over and over).
const CHECKPOINT_ENTRIES: u64 = 8192;
/// ... or this many bytes of entries (or twice its bodies' bytes, if more).
const CHECKPOINT_BYTES: u64 = 8 << 20;
/// Every group's log is held in memory until its checkpoint: past this
/// many bytes of entries for all groups together, the groups with the
/// most are checkpointed (down to half), so a thousand queues do not hold
/// a thousand logs.
const NODE_LOG_BYTES: u64 = 64 << 20;
/// Bytes an entry costs the in-memory log beyond its data.
const ENTRY_OVERHEAD: u64 = 96;
/// Checkpoints one pass may write to get back under it.
const NODE_LOG_CHECKPOINTS: usize = 16;
/// A leader proposes at most this many of a group's entries (other than
/// its consumers' commands) in one pass, or this many bytes of them; the
/// rest wait for the next pass. A pass of thousands of publishes took
/// 25 ms, and a consumer's acks, behind them, waited for it: at 10,000
/// publishes in flight the consumer fell to 9,000 messages a second.
const PASS_ENTRIES: usize = 256;
const PASS_BYTES: usize = 512 << 10;

pub enum Input {
    Attach(u64, Vec<u64>, Weak<Queue>),
    Propose(u64, Vec<u8>),
    /// An entry another member proposed before it knew this leader.
    Forwarded(u64, Vec<u8>),
    Remove(u64),
    /// A frame's Raft messages: (group, message).
    Step(Vec<(u64, warren_raft::RaftMessage)>),
    PeerUp(u64),
    PeerDown(u64),
    /// A membership call on a group of this node (`call.rs`).
    Call(u64, Op, CallReply),
    /// The checkpoint writer is done with a group's checkpoint at this
    /// index: on disk (with the segments it doomed), or not.
    Checkpointed {
        group: u64,
        index: u64,
        doomed: Vec<u32>,
        written: bool,
    },
    Stop,
}

/// A checkpoint for the writer thread: its paged bodies' segments to sync,
/// then the file to write.
struct Job {
    group: u64,
    index: u64,
    data: Vec<u8>,
    to_sync: warren_core::queue::quorum::ToSync,
}

/// Where a call's answer goes.
pub type CallReply = tokio::sync::oneshot::Sender<Answer>;

/// How long a membership change or a leadership transfer may take to
/// apply before its caller hears it did not.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Checkpoints waiting for the writer; past this, one is not made now.
const JOBS: usize = 16;

/// Passes at most made at a stop to write out what was proposed before it.
const FINAL_PASSES: usize = 64;

/// The writer thread: syncs and writes checkpoints off the Raft thread (a
/// deep queue's is megabytes, and its fsync would stall every group), and
/// tells the driver when each is on disk, so only then is the log
/// compacted.
fn writer(dir: PathBuf, jobs: mpsc::Receiver<Job>, done: mpsc::Sender<Input>) {
    for job in jobs {
        let written = job
            .to_sync
            .sync()
            .map_err(|e| format!("syncing its paged bodies: {e}"))
            .and_then(|()| {
                checkpoint::write(&dir, job.group, job.index, &job.data).map_err(|e| e.to_string())
            });
        if let Err(e) = &written {
            tracing::error!(group = job.group, "a quorum queue checkpoint not written: {e}");
        }
        let _ = done.send(Input::Checkpointed {
            group: job.group,
            index: job.index,
            doomed: job.to_sync.doomed,
            written: written.is_ok(),
        });
    }
}

struct Group {
    queue: Weak<Queue>,
    role: Role,
    /// Proposals made while no leader was known.
    held: Vec<Vec<u8>>,
    /// On the leader: proposals past this pass's share (`PASS_ENTRIES`),
    /// in order, for the next passes.
    deferred: std::collections::VecDeque<Vec<u8>>,
    /// Entries and bytes proposed in this pass (consumers' commands
    /// aside).
    this_pass: (usize, usize),
    /// Applied since the last checkpoint: entries and bytes.
    since: (u64, u64),
    /// A checkpoint is with the writer.
    writing: bool,
    /// The last index applied (shared with the group's snapshot source).
    applied: Arc<AtomicU64>,
}

pub struct Driver {
    node: RaftNode,
    dir: PathBuf,
    broker: Arc<Broker>,
    timers: Arc<Timers>,
    links: Arc<super::Links>,
    groups: HashMap<u64, Group>,
    /// Raft messages for groups this node does not have yet: a new
    /// queue's first member asks for votes as soon as it has the group,
    /// maybe before the others have applied its declaration. Kept (a few
    /// per group, for a few groups) and stepped when the group is made,
    /// so the declaring node's leadership is not lost to a race.
    early: HashMap<u64, Vec<warren_raft::RaftMessage>>,
    /// Bytes of entries applied since their group's last checkpoint, all
    /// groups (what the logs hold in memory).
    log_bytes: u64,
    jobs: mpsc::SyncSender<Job>,
    /// Checkpoints handed to the writer and not yet reported done.
    in_writer: usize,
    /// Membership changes proposed here, by the id in their context:
    /// answered when they apply.
    changes: HashMap<u64, (u64, CallReply, Instant)>,
    next_change: u64,
    /// Leadership transfers under way, by group: (to, answer, deadline).
    transfers: HashMap<u64, (u64, CallReply, Instant)>,
    /// Groups that proposed in this pass (their `this_pass` to reset).
    proposing: Vec<u64>,
    /// Entries deferred, all groups.
    deferred: usize,
}

/// A publish of this node not applied after this long is nacked (its
/// entry or its forward was lost, with no leader change to say so).
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// Bounds on `early`.
const EARLY_GROUPS: usize = 256;
const EARLY_PER_GROUP: usize = 16;

impl Driver {
    pub fn new(
        node: RaftNode,
        dir: PathBuf,
        broker: Arc<Broker>,
        timers: Arc<Timers>,
        links: Arc<super::Links>,
        tx: mpsc::Sender<Input>,
    ) -> Driver {
        let (jobs, rx) = mpsc::sync_channel(JOBS);
        let wdir = dir.clone();
        if let Err(e) = std::thread::Builder::new()
            .name("warren-quorum-checkpoints".into())
            .spawn(move || writer(wdir, rx, tx))
        {
            tracing::error!("the quorum queues' checkpoint writer not started: {e}");
        }
        Driver {
            node,
            dir,
            broker,
            timers,
            links,
            groups: HashMap::new(),
            early: HashMap::new(),
            log_bytes: 0,
            jobs,
            in_writer: 0,
            changes: HashMap::new(),
            next_change: 1,
            transfers: HashMap::new(),
            proposing: Vec::new(),
            deferred: 0,
        }
    }

    pub fn run(mut self, rx: mpsc::Receiver<Input>) {
        // The queues restored before the thread started have attached:
        // groups in the log with no queue are of queues deleted before a
        // crash let the removal through.
        while let Ok(i) = rx.try_recv() {
            if !self.input(i) {
                return self.finish(&rx);
            }
        }
        let orphans: Vec<u64> = self
            .node
            .groups()
            .filter(|g| !self.groups.contains_key(g))
            .collect();
        for g in orphans {
            tracing::info!(group = g, "a quorum queue group with no queue, removed");
            self.remove(g);
        }
        let mut next_tick = Instant::now() + TICK;
        let mut ticks = 0u64;
        loop {
            if let Err(e) = self.pass() {
                tracing::error!("quorum queues' Raft log: {e}; quorum queues stop on this node");
                return;
            }
            // Deferred proposals go in the next pass, at once.
            let wait = if self.deferred > 0 {
                Duration::ZERO
            } else {
                next_tick.saturating_duration_since(Instant::now())
            };
            match rx.recv_timeout(wait) {
                Ok(i) => {
                    if !self.input(i) {
                        return self.finish(&rx);
                    }
                    while let Ok(i) = rx.try_recv() {
                        if !self.input(i) {
                            return self.finish(&rx);
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if Instant::now() >= next_tick {
                self.node.tick();
                self.flush_held();
                next_tick = Instant::now() + TICK;
                ticks += 1;
                if ticks.is_multiple_of(10) {
                    self.expire_confirms();
                    self.expire_calls();
                }
            }
        }
    }

    /// Stop: what was proposed before it (a channel's acks, say, whose
    /// cancel-ok has gone out) is written to the log first, so a restart
    /// does not hand acked messages out again. Inputs still queued behind
    /// Stop are taken too; the passes are bounded, since a cluster's
    /// deferred entries may wait on peers that do not answer.
    fn finish(&mut self, rx: &mpsc::Receiver<Input>) {
        while let Ok(i) = rx.try_recv() {
            let _ = self.input(i);
        }
        for _ in 0..FINAL_PASSES {
            if let Err(e) = self.pass() {
                tracing::error!("quorum queues' Raft log at stop: {e}");
                return;
            }
            if self.deferred == 0 {
                break;
            }
        }
    }

    /// False on Stop.
    fn input(&mut self, i: Input) -> bool {
        match i {
            Input::Stop => return false,
            Input::Attach(group, members, queue) => self.attach(group, &members, queue),
            Input::Propose(group, entry) => self.propose(group, entry),
            Input::Forwarded(group, entry) => {
                if self.node.is_leader(group) {
                    let _ = self.node.propose(group, entry);
                }
            }
            Input::Remove(group) => self.remove(group),
            Input::Step(steps) => {
                for (g, m) in steps {
                    if !self.groups.contains_key(&g) && self.node.groups().all(|x| x != g) {
                        // Not made here yet (or deleted, or not a member:
                        // then it is dropped when the bounds are reached).
                        if self.early.len() >= EARLY_GROUPS && !self.early.contains_key(&g) {
                            self.early.clear();
                        }
                        let e = self.early.entry(g).or_default();
                        if e.len() < EARLY_PER_GROUP {
                            e.push(m);
                        }
                        continue;
                    }
                    if let Err(e) = self.node.step(g, m) {
                        tracing::trace!(group = g, "a quorum Raft message dropped: {e}");
                    }
                }
            }
            Input::PeerUp(id) => self.node.peer_up(id),
            Input::Call(group, op, reply) => self.call(group, op, reply),
            Input::PeerDown(id) => {
                self.node.peer_down(id);
                self.node_down(id);
            }
            Input::Checkpointed {
                group,
                index,
                doomed,
                written,
            } => self.checkpointed(group, index, &doomed, written),
        }
        true
    }

    fn attach(&mut self, group: u64, members: &[u64], queue: Weak<Queue>) {
        if let Err(e) = self.node.add_group_with(group, members) {
            tracing::error!(group, "a quorum queue group not started: {e}");
            return;
        }
        // Entries up to the first the log holds are in the checkpoint the
        // queue installed when it was made.
        let applied = Arc::new(AtomicU64::new(
            self.node.first_index(group).map_or(0, |f| f.saturating_sub(1)),
        ));
        // A follower too far behind is sent the queue's state.
        let (at, q) = (applied.clone(), queue.clone());
        let source: warren_raft::SnapshotSource = Arc::new(move || {
            let data = q
                .upgrade()
                .and_then(|q| q.with_quorum(|qq, _| qq.snapshot()).0)
                .unwrap_or_default();
            (at.load(Ordering::Relaxed), data)
        });
        let _ = self.node.set_snapshot_source(group, source);
        self.groups.insert(
            group,
            Group {
                queue,
                role: Role::Unknown,
                held: Vec::new(),
                deferred: Default::default(),
                this_pass: (0, 0),
                since: (0, 0),
                writing: false,
                applied,
            },
        );
        for m in self.early.remove(&group).unwrap_or_default() {
            let _ = self.node.step(group, m);
        }
        // The first member (the declaring node's choice of leader) stands
        // at once; the others wait for it, or for their election timers.
        if members.first() == Some(&self.node.id()) && self.node.leader(group).is_none() {
            let _ = self.node.campaign(group);
        }
    }

    fn propose(&mut self, group: u64, entry: Vec<u8>) {
        if self.node.is_leader(group) {
            // This node may have become leader on a message of this very
            // batch, before the pass that would propose what it held:
            // those go first, so the queue's order is the proposals'.
            let held = self.groups.get_mut(&group).map(|g| std::mem::take(&mut g.held));
            for e in held.unwrap_or_default().into_iter().chain([entry]) {
                self.lead(group, e);
            }
        } else if let Some(g) = self.groups.get_mut(&group) {
            // Held behind any held before it (the queue's order is the
            // proposals'), and forwarded at once if another member leads;
            // with no leader known, held for the next (`roles`), bounded
            // by the queue's flow control on its waiting publishes and by
            // its consumers' credit.
            g.held.push(entry);
            if let Role::Follower(leader) = g.role {
                self.forward_held(group, leader);
            }
        }
    }

    /// Propose `entry` as `group`'s leader: now, if it is a consumer's
    /// command or within the pass's share and nothing waits before it;
    /// otherwise after what waits (`deferred`). Consumers' commands pass
    /// other entries (acks and credit must not wait behind a flood of
    /// publishes; they keep their own order, and no enqueue waits for
    /// them), never each other.
    fn lead(&mut self, group: u64, entry: Vec<u8>) {
        let Some(g) = self.groups.get_mut(&group) else {
            return;
        };
        // After the entry's tag (the proposer's node id and sequence).
        let consumers = warren_fifo::codec::is_consumer_command(entry.get(16..).unwrap_or_default());
        if !consumers {
            let full = g.this_pass.0 >= PASS_ENTRIES || g.this_pass.1 >= PASS_BYTES;
            if full || !g.deferred.is_empty() {
                g.deferred.push_back(entry);
                self.deferred += 1;
                return;
            }
            if g.this_pass == (0, 0) {
                self.proposing.push(group);
            }
            g.this_pass.0 += 1;
            g.this_pass.1 += entry.len();
        }
        if let Err(e) = self.node.propose(group, entry) {
            tracing::debug!(group, "a quorum queue proposal dropped: {e}");
        }
    }

    /// A new pass: each group's share again, and what was deferred
    /// proposed within it.
    fn next_pass(&mut self) {
        for group in std::mem::take(&mut self.proposing) {
            let Some(g) = self.groups.get_mut(&group) else {
                continue;
            };
            g.this_pass = (0, 0);
            if g.deferred.is_empty() {
                continue;
            }
            let waiting = std::mem::take(&mut g.deferred);
            self.deferred -= waiting.len();
            for e in waiting {
                self.lead(group, e);
            }
        }
    }

    /// Held proposals of groups whose leader is known now go to it.
    fn flush_held(&mut self) {
        let me = self.node.id();
        let ready: Vec<(u64, u64)> = self
            .groups
            .iter()
            .filter(|(_, g)| !g.held.is_empty())
            .filter_map(|(&id, _)| self.node.leader(id).map(|l| (id, l)))
            .collect();
        for (group, leader) in ready {
            if leader == me && self.node.is_leader(group) {
                let held = self.groups.get_mut(&group).map(|g| std::mem::take(&mut g.held));
                for e in held.unwrap_or_default() {
                    self.lead(group, e);
                }
            } else if leader != me {
                self.forward_held(group, leader);
            }
        }
    }

    /// Send `group`'s held proposals to `leader`'s node, in order; from
    /// the first its link does not take (down, or full), they stay held
    /// for the next try (`flush_held`, every tick).
    fn forward_held(&mut self, group: u64, leader: u64) {
        let Some(held) = self.groups.get_mut(&group).map(|g| std::mem::take(&mut g.held)) else {
            return;
        };
        let mut rest = held.into_iter();
        let mut kept = Vec::new();
        for e in rest.by_ref() {
            if !self.forward(leader, group, &e) {
                kept.push(e);
                break;
            }
        }
        kept.extend(rest);
        if let Some(g) = self.groups.get_mut(&group) {
            g.held = kept;
        }
    }

    /// Nack this node's publishes that have waited too long to apply.
    fn expire_confirms(&self) {
        for g in self.groups.values() {
            if let Some(q) = g.queue.upgrade() {
                q.with_quorum(|qq, _| {
                    if qq.has_pending() {
                        qq.expire_confirms(CONFIRM_TIMEOUT);
                    }
                });
            }
        }
    }

    /// Send `entry` to `leader`'s node to propose; false if its link did
    /// not take it (down, or its queue full). Taken, it may still be lost
    /// with a leader that fails: the queue proposes what matters again
    /// when it hears of a new leader.
    fn forward(&self, leader: u64, group: u64, entry: &[u8]) -> bool {
        let (Some(cluster), Some(table)) = (self.links.cluster.get(), self.links.table.get()) else {
            return false;
        };
        let Some(name) = table.name(leader) else {
            return false;
        };
        let mut body = Vec::with_capacity(9 + entry.len());
        body.push(crate::cluster::links::request::QUORUM_PROPOSE);
        body.extend_from_slice(&group.to_be_bytes());
        body.extend_from_slice(entry);
        cluster.send(
            &name,
            warren_peer::Message::Request {
                id: 1,
                body: bytes::Bytes::from(body),
            },
        )
    }

    fn remove(&mut self, group: u64) {
        if let Some(g) = self.groups.remove(&group) {
            self.log_bytes -= g.since.1;
            self.deferred -= g.deferred.len();
        }
        if let Err(e) = self.node.remove_group(group) {
            tracing::error!(group, "a quorum queue group not removed: {e}");
        }
        checkpoint::remove(&self.dir, group);
    }

    /// One pass of the node: deferred proposals first, within each
    /// group's share; then, for the groups it leads, what committed
    /// before the pass is applied (and its publishers confirmed) before
    /// this pass's new entries are synced, not after (see
    /// `RaftNode::begin_pass`).
    fn pass(&mut self) -> Result<(), warren_raft::NodeError> {
        self.next_pass();
        let mut pass = self.node.begin_pass()?;
        send(&self.links, std::mem::take(&mut pass.messages));
        // A leader's entries committed before the pass confirm its
        // publishers now; a follower's wait until its answers are sent,
        // since the leader waits for those (they follow the fsync).
        let (before, mut later): (Vec<Applied>, Vec<Applied>) = std::mem::take(&mut pass.applied)
            .into_iter()
            .partition(|a| self.groups.get(&a.group).is_some_and(|g| g.role == Role::Leader));
        self.apply_all(before);
        let mut out = self.node.end_pass(pass)?;
        send(&self.links, std::mem::take(&mut out.messages));
        later.append(&mut out.applied);
        self.apply_all(later);
        self.roles();
        Ok(())
    }

    fn apply_all(&mut self, applied: Vec<Applied>) {
        if applied.is_empty() {
            return;
        }
        let mut by_group: HashMap<u64, Vec<Applied>> = HashMap::new();
        for a in applied {
            by_group.entry(a.group).or_default().push(a);
        }
        for (group, applied) in by_group {
            self.apply(group, applied);
        }
    }

    fn apply(&mut self, group: u64, applied: Vec<Applied>) {
        let Some(g) = self.groups.get_mut(&group) else {
            return;
        };
        let Some(q) = g.queue.upgrade() else { return };
        let mut bytes = 0u64;
        let mut count = 0u64;
        let mut last = g.applied.load(Ordering::Relaxed);
        let mut changed = Vec::new();
        let (_, effects) = q.with_quorum(|qq, ctx| {
            for a in applied {
                last = a.index;
                if a.snapshot {
                    match qq.install(&a.data) {
                        Ok(()) => tracing::debug!(group, index = a.index, "installed the leader's state"),
                        Err(e) => tracing::error!(group, "a quorum queue snapshot not installed: {e}"),
                    }
                    continue;
                }
                // What the log holds for it: the data, and raft-rs's entry.
                bytes += a.data.len() as u64 + ENTRY_OVERHEAD;
                count += 1;
                if a.members.is_some() {
                    // A membership change: its context is the id of the
                    // call that asked for it, on the node that proposed it.
                    if let Ok(id) = <[u8; 8]>::try_from(a.data.as_slice()) {
                        changed.push(u64::from_le_bytes(id));
                    }
                    continue;
                }
                if a.data.is_empty() {
                    continue;
                }
                qq.apply(ctx, a.index, Bytes::from(a.data));
            }
            qq.batch_applied();
        });
        g.applied.store(last, Ordering::Relaxed);
        g.since.0 += count;
        g.since.1 += bytes;
        self.log_bytes += bytes;
        self.carry_out(&q, effects);
        for id in changed {
            if let Some((_, reply, _)) = self.changes.remove(&id) {
                let _ = reply.send(Ok(self.info(group)));
            }
        }
        self.maybe_checkpoint(group, &q);
        self.within_node_log();
    }

    fn info(&self, group: u64) -> GroupInfo {
        GroupInfo {
            group,
            voters: self.node.voters(group).unwrap_or_default(),
            leader: self.node.leader(group),
        }
    }

    /// A membership call (see `call.rs`): answered now, or once the change
    /// applies or the leadership has moved.
    fn call(&mut self, group: u64, op: Op, reply: CallReply) {
        use warren_raft::{Membership, ProposeError};
        if !self.groups.contains_key(&group) {
            let _ = reply.send(Err(CallError::NoGroup));
            return;
        }
        let refused = |e: ProposeError| match e {
            ProposeError::NotLeader(l) => CallError::NotLeader(l),
            ProposeError::ChangePending => CallError::Busy,
            e => CallError::Failed(e.to_string()),
        };
        let change = match op {
            Op::Info => {
                let _ = reply.send(Ok(self.info(group)));
                return;
            }
            Op::Transfer(to) => {
                if self.node.leader(group) == Some(to) && self.node.voters(group).is_some() {
                    let _ = reply.send(Ok(self.info(group)));
                    return;
                }
                if !self.node.voters(group).is_some_and(|v| v.contains(&to)) {
                    let _ = reply.send(Err(CallError::Failed(format!("node {to} is not a member"))));
                    return;
                }
                match self.node.transfer_leader(group, to) {
                    Ok(()) => {
                        let deadline = Instant::now() + CALL_TIMEOUT;
                        if let Some((_, old, _)) = self.transfers.insert(group, (to, reply, deadline)) {
                            let _ = old.send(Err(CallError::Busy));
                        }
                    }
                    Err(e) => {
                        let _ = reply.send(Err(refused(e)));
                    }
                }
                return;
            }
            Op::Add(n) => Membership::Add(n),
            Op::Remove(n) => Membership::Remove(n),
        };
        let id = self.next_change;
        self.next_change += 1;
        match self
            .node
            .propose_membership(group, change, id.to_le_bytes().to_vec())
        {
            Ok(()) => {
                self.changes
                    .insert(id, (group, reply, Instant::now() + CALL_TIMEOUT));
            }
            Err(e) => {
                let _ = reply.send(Err(refused(e)));
            }
        }
    }

    /// Calls whose change has not applied in time hear so (a leader lost
    /// with its proposal, or a transfer raft-rs gave up on).
    fn expire_calls(&mut self) {
        let now = Instant::now();
        let late: Vec<u64> = self
            .changes
            .iter()
            .filter(|(_, (_, _, d))| *d <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            if let Some((_, reply, _)) = self.changes.remove(&id) {
                let _ = reply.send(Err(CallError::Failed(
                    "the membership change did not apply in time".into(),
                )));
            }
        }
        let late: Vec<u64> = self
            .transfers
            .iter()
            .filter(|(_, (_, _, d))| *d <= now)
            .map(|(g, _)| *g)
            .collect();
        for g in late {
            if let Some((_, reply, _)) = self.transfers.remove(&g) {
                let _ = reply.send(Err(CallError::Failed(
                    "the leadership did not move in time".into(),
                )));
            }
        }
    }

    /// After a pass: tell each queue whose leader changed.
    fn roles(&mut self) {
        let me = self.node.id();
        let mut changed = Vec::new();
        for (&group, g) in self.groups.iter_mut() {
            let role = match self.node.leader(group) {
                Some(l) if l == me && self.node.is_leader(group) => Role::Leader,
                Some(l) if l != me => Role::Follower(l),
                _ => Role::Unknown,
            };
            if role != g.role {
                g.role = role;
                changed.push((group, role));
            }
        }
        for (group, role) in changed.iter().copied() {
            if let Role::Follower(l) = role {
                if let Some((to, reply, _)) = self.transfers.remove(&group) {
                    let _ = reply.send(if l == to {
                        Ok(self.info(group))
                    } else {
                        Err(CallError::Failed(format!("the leadership went to node {l}")))
                    });
                }
            }
        }
        for (group, role) in changed {
            // What this node deferred as leader was never proposed: held,
            // first, like what came in while no leader was known.
            if role != Role::Leader {
                if let Some(g) = self.groups.get_mut(&group) {
                    if !g.deferred.is_empty() {
                        self.deferred -= g.deferred.len();
                        let mut held: Vec<Vec<u8>> = std::mem::take(&mut g.deferred).into();
                        held.append(&mut g.held);
                        g.held = held;
                    }
                }
            }
            // This node's publishes held here (never sent to the leader
            // that was): the queue must not nack them.
            let held: std::collections::HashSet<u64> = self
                .groups
                .get(&group)
                .map(|g| {
                    g.held
                        .iter()
                        .filter(|e| e.len() >= 16 && e[..8] == me.to_le_bytes())
                        .map(|e| u64::from_le_bytes(e[8..16].try_into().expect("8 bytes")))
                        .filter(|s| *s != 0)
                        .collect()
                })
                .unwrap_or_default();
            // What was proposed while no leader was known goes to the one
            // there is now: proposed here, or forwarded to its node. (With
            // none known, it stays held for the next.)
            match role {
                Role::Leader => {
                    let held = self.groups.get_mut(&group).map(|g| std::mem::take(&mut g.held));
                    for e in held.unwrap_or_default() {
                        self.lead(group, e);
                    }
                }
                Role::Follower(l) => self.forward_held(group, l),
                Role::Unknown => {}
            }
            let Some(q) = self.groups.get(&group).and_then(|g| g.queue.upgrade()) else {
                continue;
            };
            let (_, effects) = q.with_quorum(|qq, ctx| qq.set_role(ctx, role, &held));
            self.carry_out(&q, effects);
        }
    }

    /// `node` is down: the groups this node leads let its consumers go,
    /// so what they held is delivered again (as RabbitMQ's quorum queues
    /// return what a down node's consumers hold). Should it come back, its
    /// consumers attach again (they see themselves cancelled).
    fn node_down(&mut self, node: u64) {
        let led: Vec<Arc<Queue>> = self
            .groups
            .values()
            .filter(|g| g.role == Role::Leader)
            .filter_map(|g| g.queue.upgrade())
            .collect();
        for q in led {
            let (_, effects) = q.with_quorum(|qq, _| qq.node_down(node));
            self.carry_out(&q, effects);
        }
    }

    fn carry_out(&self, q: &Arc<Queue>, effects: warren_core::queue::Effects) {
        let Some(vh) = self.broker.vhost(&q.vhost) else {
            return;
        };
        let timers = &self.timers;
        vh.apply(q, effects, &mut |other| timers.arm(&vh, other));
    }

    fn maybe_checkpoint(&mut self, group: u64, q: &Arc<Queue>) {
        let Some(g) = self.groups.get_mut(&group) else {
            return;
        };
        // Each checkpoint writes the whole state, and the bodies in memory
        // (paged ones by reference): one is due only after twice what it
        // would write has gone through the log, so a deep queue costs O(1)
        // per entry, not O(depth).
        let live = q.stats();
        let held = q.with_quorum(|qq, _| qq.checkpoint_bytes()).0.unwrap_or(0);
        let due = (live.ready + live.unacked)
            .saturating_mul(2)
            .max(CHECKPOINT_ENTRIES);
        let due_bytes = held.saturating_mul(2).max(CHECKPOINT_BYTES);
        if g.writing || (g.since.0 < due && g.since.1 < due_bytes) {
            return;
        }
        self.checkpoint(group, q);
    }

    /// The logs hold more than the node's budget: checkpoint the groups
    /// that hold the most.
    fn within_node_log(&mut self) {
        if self.log_bytes <= NODE_LOG_BYTES {
            return;
        }
        for _ in 0..NODE_LOG_CHECKPOINTS {
            if self.log_bytes <= NODE_LOG_BYTES / 2 {
                return;
            }
            let Some((&group, g)) = self
                .groups
                .iter()
                .filter(|(_, g)| !g.writing)
                .max_by_key(|(_, g)| g.since.1)
            else {
                return;
            };
            let Some(q) = g.queue.upgrade() else { return };
            if !self.checkpoint(group, &q) {
                return;
            }
        }
    }

    /// Make `group`'s checkpoint and hand it to the writer; false if it
    /// could not be.
    fn checkpoint(&mut self, group: u64, q: &Arc<Queue>) -> bool {
        // Checked before the checkpoint is made: making it hands over the
        // segments to sync, which must then reach the writer.
        if self.in_writer >= JOBS {
            return false;
        }
        let (made, _) = q.with_quorum(|qq, _| qq.checkpoint());
        let (data, to_sync) = match made {
            Some(Ok(d)) => d,
            Some(Err(e)) => {
                tracing::error!(group, "a quorum queue checkpoint not made: {e}");
                return false;
            }
            None => return false,
        };
        let Some(g) = self.groups.get_mut(&group) else {
            return false;
        };
        let index = g.applied.load(Ordering::Relaxed);
        let job = Job {
            group,
            index,
            data,
            to_sync,
        };
        if let Err(e) = self.jobs.try_send(job) {
            tracing::error!(group, "a quorum queue checkpoint not handed to its writer: {e}");
            return false;
        }
        self.in_writer += 1;
        g.writing = true;
        self.log_bytes -= g.since.1;
        g.since = (0, 0);
        true
    }

    /// The writer is done with `group`'s checkpoint at `index`: once on
    /// disk, the log forgets what it covers and the segments it no longer
    /// names go.
    fn checkpointed(&mut self, group: u64, index: u64, doomed: &[u32], written: bool) {
        self.in_writer = self.in_writer.saturating_sub(1);
        let Some(g) = self.groups.get_mut(&group) else {
            // Removed while it was written: it must not outlive the group.
            checkpoint::remove(&self.dir, group);
            return;
        };
        g.writing = false;
        if !written {
            return;
        }
        if let Some(q) = g.queue.upgrade() {
            q.with_quorum(|qq, _| qq.checkpointed(doomed));
        }
        if let Err(e) = self.node.compact(group, index) {
            tracing::error!(group, "a quorum queue log not compacted: {e}");
        }
    }
}

/// Hand each peer its messages as one frame (a full or missing link drops
/// it: Raft sends again).
fn send(links: &super::Links, messages: Vec<(u64, u64, warren_raft::RaftMessage)>) {
    if messages.is_empty() {
        return;
    }
    let (Some(cluster), Some(table)) = (links.cluster.get(), links.table.get()) else {
        return;
    };
    crate::cluster::meta::send_batches(cluster, table, messages);
}
