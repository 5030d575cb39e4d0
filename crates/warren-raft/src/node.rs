//! One node's Raft groups: raft-rs `RawNode`s over `GroupStorage`, made
//! durable by the node's shared write-ahead log, driven in passes.
//!
//! A pass (`drive`) takes the `Ready` of every group that has one, sends
//! (returns) the messages raft-rs allows before persistence, writes every
//! group's new entries and hard state in one write and, when any of them
//! must be durable, one fdatasync; only then does it return the messages
//! that must wait for persistence (a follower's append acknowledgements,
//! votes) and what has committed, in log order per group.
//!
//! Ticks: a group ticks only while it has work: a candidate; a leader with
//! entries some member has not matched; a follower without a leader, or
//! whose leader's node the caller has reported down. So an idle group
//! sends nothing, and losing a node's link is what starts elections (the
//! link's pings are the failure detector), not per-group heartbeats.
//!
//! Snapshots: the caller compacts a group once it has applied far enough
//! (`compact`): the log forgets what the state machine holds. A follower
//! that needs what was forgotten gets the state machine itself (the
//! group's `SnapshotSource`), which it installs before what follows; the
//! installed snapshot is in the log, data and all, until the next
//! rewrite, so a crash before the caller made it durable loses nothing.
//! When most of the file is what compaction dropped, it is rewritten with
//! only what every group still needs.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use protobuf::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeType, ConfChangeV2, ConfState, Entry, EntryType, Message, MessageType,
};
use raft::{Config, RawNode, SnapshotStatus, StateRole, Storage};

use crate::storage::{GroupStorage, SnapshotSource};
use crate::wal::{Record, Wal, WalError};

/// A rewrite waits until the file is this much larger than twice what it
/// must keep, so small logs are not rewritten over and over.
const REWRITE_SLACK: u64 = 256 << 10;
/// Entries a leader keeps past its caller's compaction for a live
/// follower that lacks them; one further behind is sent a snapshot.
const KEEP_FOR_FOLLOWERS: u64 = 16384;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Wal(#[from] WalError),
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    #[error("no Raft group {0} on this node")]
    NoGroup(u64),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    #[error("not the leader (the leader is node {0:?})")]
    NotLeader(Option<u64>),
    #[error("the proposal was dropped (a leader change is under way)")]
    Dropped,
    /// raft-rs takes one membership change at a time, and none from a new
    /// leader before its first entry applies (it would replace the change
    /// with an empty entry): the caller tries again in a moment.
    #[error("a membership change is under way")]
    ChangePending,
    #[error("no Raft group {0} on this node")]
    NoGroup(u64),
}

/// An entry that has committed, for the caller to apply; or (`snapshot`)
/// the leader's state machine at `index`, which replaces the caller's; or
/// (`members`) a membership change, applied here already, with the voters
/// after it (`data` is the context it was proposed with).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub group: u64,
    pub index: u64,
    pub term: u64,
    pub data: Vec<u8>,
    pub snapshot: bool,
    pub members: Option<Vec<u64>>,
}

impl Applied {
    /// The leader's snapshot, for the caller to install.
    fn installed(group: u64, snap: &raft::eraftpb::Snapshot) -> Applied {
        Applied {
            group,
            index: snap.get_metadata().index,
            term: snap.get_metadata().term,
            data: snap.data.to_vec(),
            snapshot: true,
            members: None,
        }
    }
}

/// A change of a group's voters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    Add(u64),
    Remove(u64),
}

/// What a pass produced: messages to send, (node, group, message), and
/// what committed.
#[derive(Debug, Default)]
pub struct Output {
    pub messages: Vec<(u64, u64, Message)>,
    pub applied: Vec<Applied>,
}

/// A pass between [`RaftNode::begin_pass`] and [`RaftNode::end_pass`].
#[derive(Default)]
pub struct Pass {
    /// Messages that may go before the sync.
    pub messages: Vec<(u64, u64, Message)>,
    /// Entries committed (and persisted here) before this pass.
    pub applied: Vec<Applied>,
    /// What must wait for the sync (a snapshot, and what its group
    /// committed with it).
    after: Vec<Applied>,
    readies: Vec<(u64, raft::Ready)>,
    durable: bool,
}

struct Group {
    rn: RawNode<GroupStorage>,
    ticking: bool,
}

pub struct RaftNode {
    id: u64,
    voters: Vec<u64>,
    wal: Wal,
    groups: BTreeMap<u64, Group>,
    /// Nodes the caller reported down (their links are gone).
    down: HashSet<u64>,
    /// Snapshots found in the log that the caller's state machine had not
    /// made its own before a crash: handed back by `take_startup`.
    startup: Vec<Applied>,
    logger: slog::Logger,
}

fn config(id: u64) -> Config {
    Config {
        id,
        // In ticks of the caller's interval (100 ms: elections after 1-2 s).
        election_tick: 10,
        heartbeat_tick: 3,
        pre_vote: true,
        // No leases: an idle leader sends nothing, so followers must not
        // expect to hear from it.
        check_quorum: false,
        max_size_per_msg: 1 << 20,
        max_inflight_msgs: 256,
        batch_append: true,
        ..Config::default()
    }
}

impl RaftNode {
    /// Open the node's log in `dir` (created if new) and rebuild every
    /// group it holds. `voters` are the node ids of every group's members;
    /// `applied` says, per group, how far the caller had applied before
    /// (entries up to there are not handed back again; a group not in it
    /// starts from the first entry).
    pub fn open(
        dir: &Path,
        id: u64,
        voters: &[u64],
        applied: &BTreeMap<u64, u64>,
    ) -> Result<RaftNode, NodeError> {
        std::fs::create_dir_all(dir).map_err(|source| WalError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let (wal, records) = Wal::open(&dir.join("raft.wal"))?;
        let mut storages: BTreeMap<u64, GroupStorage> = BTreeMap::new();
        let mut installed: BTreeMap<u64, Applied> = BTreeMap::new();
        let conf = || ConfState::from((voters.to_vec(), vec![]));
        for r in records {
            let g = r.group();
            let s = storages.entry(g).or_insert_with(|| GroupStorage::new(conf()));
            match r {
                Record::Entries(_, es) => s.append(&es),
                Record::HardState(_, hs) => s.set_hard_state(hs),
                Record::Compacted(_, index, term) => s.compact(index, term),
                Record::ConfState(_, cs) => s.set_conf_state(cs),
                Record::Snapshot(_, snap) => {
                    s.install(snap.get_metadata());
                    installed.insert(g, Applied::installed(g, &snap));
                }
                Record::Removed(_) => {
                    storages.remove(&g);
                    installed.remove(&g);
                }
            }
        }
        let mut node = RaftNode {
            id,
            voters: voters.to_vec(),
            wal,
            groups: BTreeMap::new(),
            down: HashSet::new(),
            startup: Vec::new(),
            logger: slog::Logger::root(slog::Discard, slog::o!()),
        };
        for (g, mut s) in storages {
            // The commit index is in the log only as often as a hard state
            // was written (a leader learns its commit after its fsync, and
            // logs it with the next hard state), so it may be behind what
            // the caller applied. What was applied was committed, and the
            // log holds it (entries are synced before they are applied):
            // the commit is at least that. Otherwise raft-rs, which must
            // not be told of an applied index past its commit, would hand
            // those entries back to be applied twice.
            let wanted = applied.get(&g).copied().unwrap_or(0);
            if wanted > s.hard_state().commit && wanted <= Storage::last_index(&s).unwrap_or(0) {
                s.set_commit(wanted);
            }
            let committed = s.hard_state().commit;
            let mut applied = wanted.min(committed);
            let (covered, _) = s.snapshot_point();
            if applied < covered {
                // The log has dropped entries the caller has not applied:
                // only an installed snapshot does that before the caller
                // has made it its own.
                match installed.remove(&g).filter(|a| a.index == covered) {
                    Some(a) => node.startup.push(a),
                    None => tracing::error!(
                        group = g,
                        applied,
                        covered,
                        "the Raft log starts after what was applied, with no snapshot to fill the gap"
                    ),
                }
                applied = covered;
            }
            node.insert(g, s, applied)?;
        }
        Ok(node)
    }

    /// Snapshots to install before anything else (see `startup`).
    pub fn take_startup(&mut self) -> Vec<Applied> {
        std::mem::take(&mut self.startup)
    }

    fn insert(&mut self, group: u64, storage: GroupStorage, applied: u64) -> Result<(), NodeError> {
        let mut c = config(self.id);
        c.applied = applied;
        let rn = RawNode::new(&c, storage, &self.logger)?;
        self.groups.insert(group, Group { rn, ticking: true });
        Ok(())
    }

    /// Start `group` (a no-op if the log already had it). Every member
    /// starts it with the same voters.
    pub fn add_group(&mut self, group: u64) -> Result<(), NodeError> {
        if self.groups.contains_key(&group) {
            return Ok(());
        }
        let conf = ConfState::from((self.voters.clone(), vec![]));
        self.insert(group, GroupStorage::new(conf), 0)
    }

    /// Start `group` with members of its own (a quorum queue's), unless
    /// the log already had it. Every member starts it with the same
    /// voters; they are logged, so a restart finds them.
    pub fn add_group_with(&mut self, group: u64, voters: &[u64]) -> Result<(), NodeError> {
        if self.groups.contains_key(&group) {
            return Ok(());
        }
        let conf = ConfState::from((voters.to_vec(), vec![]));
        self.wal.conf_state(group, &conf);
        self.insert(group, GroupStorage::new(conf), 0)
    }

    /// Forget `group` on this node (its queue was deleted, or this node
    /// is no longer a member): its log goes at the next rewrite, and a
    /// restart does not bring it back.
    pub fn remove_group(&mut self, group: u64) -> Result<(), NodeError> {
        if self.groups.remove(&group).is_some() {
            self.wal.removed(group);
            // Rare, and must not be undone by a crash: written at once.
            self.wal.sync(true)?;
            self.maybe_rewrite()?;
        }
        Ok(())
    }

    /// The groups this node has.
    pub fn groups(&self) -> impl Iterator<Item = u64> + '_ {
        self.groups.keys().copied()
    }

    /// Is this node `group`'s leader?
    pub fn is_leader(&self, group: u64) -> bool {
        self.groups
            .get(&group)
            .is_some_and(|g| g.rn.raft.state == StateRole::Leader)
    }

    /// The (index, term) of the last entry in `group`'s log (after a
    /// propose: the proposal's).
    pub fn last_entry(&self, group: u64) -> Option<(u64, u64)> {
        let g = self.groups.get(&group)?;
        let last = g.rn.raft.raft_log.last_index();
        Some((last, g.rn.raft.raft_log.last_term()))
    }

    /// Where a lagging follower's snapshot of `group` comes from.
    pub fn set_snapshot_source(&mut self, group: u64, source: SnapshotSource) -> Result<(), NodeError> {
        self.group(group)?.rn.mut_store().set_source(source);
        Ok(())
    }

    /// The caller's state machine holds `group`'s entries up to `index`
    /// durably: the log may forget them. Then, if most of the file is
    /// forgotten entries, it is rewritten.
    pub fn compact(&mut self, group: u64, index: u64) -> Result<(), NodeError> {
        let g = self.groups.get_mut(&group).ok_or(NodeError::NoGroup(group))?;
        let applied = g.rn.raft.raft_log.applied;
        let mut index = index.min(applied);
        if g.rn.raft.state == StateRole::Leader {
            // A follower that is up and not far behind gets what it lacks
            // as entries: compacting past it would send it a snapshot, the
            // whole state machine, for want of a few entries.
            for (id, pr) in g.rn.raft.prs().iter() {
                if *id != self.id
                    && !self.down.contains(id)
                    && index.saturating_sub(pr.matched) <= KEEP_FOR_FOLLOWERS
                {
                    index = index.min(pr.matched);
                }
            }
        }
        let Ok(term) = g.rn.store().term(index) else {
            return Ok(()); // already compacted that far
        };
        if index <= g.rn.store().snapshot_point().0 {
            return Ok(());
        }
        self.wal.compacted(group, index, term);
        g.rn.mut_store().compact(index, term);
        self.maybe_rewrite()
    }

    /// Rewrite the log when it is mostly what compaction dropped.
    fn maybe_rewrite(&mut self) -> Result<(), NodeError> {
        let live: u64 = self
            .groups
            .values()
            .map(|g| {
                64 + g
                    .rn
                    .store()
                    .entries_held()
                    .iter()
                    .map(|e| 8 + e.compute_size() as u64)
                    .sum::<u64>()
            })
            .sum();
        let size = self.wal.size() + self.wal.pending() as u64;
        if size <= 2 * live + REWRITE_SLACK {
            return Ok(());
        }
        let mut records = Vec::new();
        for (&id, g) in &self.groups {
            let s = g.rn.store();
            let (index, term) = s.snapshot_point();
            if index > 0 {
                records.push(Record::Compacted(id, index, term));
            }
            records.push(Record::ConfState(id, s.conf_state().clone()));
            if !s.entries_held().is_empty() {
                records.push(Record::Entries(id, s.entries_held().to_vec()));
            }
            records.push(Record::HardState(id, s.hard_state().clone()));
        }
        self.wal.rewrite(&records)?;
        tracing::debug!(from = size, to = self.wal.size(), "Raft log rewritten");
        Ok(())
    }

    /// The first index `group`'s log holds (after what it compacted).
    pub fn first_index(&self, group: u64) -> Option<u64> {
        self.groups.get(&group)?.rn.store().first_index().ok()
    }

    /// The log file's size.
    pub fn log_size(&self) -> u64 {
        self.wal.size()
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// fdatasyncs of the shared log so far.
    pub fn syncs(&self) -> u64 {
        self.wal.syncs
    }

    fn group(&mut self, group: u64) -> Result<&mut Group, NodeError> {
        self.groups.get_mut(&group).ok_or(NodeError::NoGroup(group))
    }

    /// A message from another node for `group`.
    pub fn step(&mut self, group: u64, m: Message) -> Result<(), NodeError> {
        let g = self.group(group)?;
        match g.rn.step(m) {
            // An answer from a node that is no longer a member: stale,
            // not an error of this node's.
            Err(raft::Error::StepPeerNotFound) => Ok(()),
            r => Ok(r?),
        }
    }

    /// Propose `data` in `group`; it is this node's to make only as leader.
    pub fn propose(&mut self, group: u64, data: Vec<u8>) -> Result<(), ProposeError> {
        let g = self.groups.get_mut(&group).ok_or(ProposeError::NoGroup(group))?;
        if g.rn.raft.state != StateRole::Leader {
            let l = g.rn.raft.leader_id;
            return Err(ProposeError::NotLeader((l != raft::INVALID_ID).then_some(l)));
        }
        g.rn.propose(vec![], data).map_err(|_| ProposeError::Dropped)?;
        g.ticking = true;
        Ok(())
    }

    /// Propose a change of `group`'s voters (this node must lead it);
    /// `context` comes back with it when it is applied.
    pub fn propose_membership(
        &mut self,
        group: u64,
        change: Membership,
        context: Vec<u8>,
    ) -> Result<(), ProposeError> {
        let g = self.groups.get_mut(&group).ok_or(ProposeError::NoGroup(group))?;
        if g.rn.raft.state != StateRole::Leader {
            let l = g.rn.raft.leader_id;
            return Err(ProposeError::NotLeader((l != raft::INVALID_ID).then_some(l)));
        }
        if g.rn.raft.has_pending_conf() {
            return Err(ProposeError::ChangePending);
        }
        let mut cc = ConfChange::default();
        let (ty, node) = match change {
            Membership::Add(n) => (ConfChangeType::AddNode, n),
            Membership::Remove(n) => (ConfChangeType::RemoveNode, n),
        };
        cc.set_change_type(ty);
        cc.node_id = node;
        g.rn.propose_conf_change(context, cc)
            .map_err(|_| ProposeError::Dropped)?;
        g.ticking = true;
        Ok(())
    }

    /// Hand `group`'s leadership to `to` (this node must lead it): raft-rs
    /// brings `to` up to date, then tells it to stand at once (the Raft
    /// thesis, 3.10). The caller sees the outcome in [`RaftNode::leader`].
    pub fn transfer_leader(&mut self, group: u64, to: u64) -> Result<(), ProposeError> {
        let g = self.groups.get_mut(&group).ok_or(ProposeError::NoGroup(group))?;
        if g.rn.raft.state != StateRole::Leader {
            let l = g.rn.raft.leader_id;
            return Err(ProposeError::NotLeader((l != raft::INVALID_ID).then_some(l)));
        }
        g.rn.transfer_leader(to);
        g.ticking = true;
        Ok(())
    }

    /// `group`'s voters as this node has applied them, in order.
    pub fn voters(&self, group: u64) -> Option<Vec<u64>> {
        let mut v = self.groups.get(&group)?.rn.store().conf_state().voters.clone();
        v.sort_unstable();
        Some(v)
    }

    /// Stand for election in `group` now.
    pub fn campaign(&mut self, group: u64) -> Result<(), NodeError> {
        let g = self.group(group)?;
        g.rn.campaign()?;
        g.ticking = true;
        Ok(())
    }

    /// The leader of `group` as this node knows it.
    pub fn leader(&self, group: u64) -> Option<u64> {
        let l = self.groups.get(&group)?.rn.raft.leader_id;
        (l != raft::INVALID_ID).then_some(l)
    }

    /// Entries of `group` committed so far, as this node knows.
    pub fn committed(&self, group: u64) -> Option<u64> {
        Some(self.groups.get(&group)?.rn.raft.raft_log.committed)
    }

    /// One tick of the caller's clock, for the groups that have work.
    pub fn tick(&mut self) {
        for g in self.groups.values_mut() {
            if g.ticking {
                g.rn.tick();
            }
        }
    }

    /// `node`'s link is gone: the groups it leads here start ticking and
    /// stand for election within a few ticks, not a whole election
    /// timeout (as Ra's followers do on their leader's nodedown). The
    /// voters still up stand two ticks apart, lowest id first, so they
    /// do not split the vote; should the first fail, the others' timers
    /// still run.
    pub fn peer_down(&mut self, node: u64) {
        self.down.insert(node);
        let (me, down) = (self.id, &self.down);
        for g in self.groups.values_mut() {
            if g.rn.raft.leader_id == node {
                g.ticking = true;
                let rank =
                    g.rn.store()
                        .conf_state()
                        .voters
                        .iter()
                        .filter(|v| **v < me && !down.contains(v))
                        .count();
                let timeout = g.rn.raft.randomized_election_timeout();
                g.rn.raft.election_elapsed = timeout.saturating_sub(1 + 2 * rank);
            }
        }
    }

    /// `node`'s link is back: the groups led here tell it so at once
    /// (before its own election timer runs out) and bring it up to date.
    pub fn peer_up(&mut self, node: u64) {
        self.down.remove(&node);
        for g in self.groups.values_mut() {
            if g.rn.raft.state == StateRole::Leader {
                g.rn.raft.ping();
            }
        }
    }

    /// One pass over every group with work; see the module's notes. Every
    /// message is in the output, sent by the caller after the pass.
    pub fn drive(&mut self) -> Result<Output, NodeError> {
        let mut early = Vec::new();
        let mut out = self.drive_with(|m| early.append(m))?;
        early.append(&mut out.messages);
        out.messages = early;
        Ok(out)
    }

    /// [`RaftNode::drive`], handing `early` the messages that may go
    /// before this pass's log writes are on disk (a leader's appends and
    /// heartbeats: raft-rs's `Ready::messages`), so a leader's fsync and
    /// its followers' run at once (the Raft thesis, 10.2.1: the leader
    /// counts itself only once its own write is durable). What must wait
    /// for the fsync (a follower's answers, votes) is in the output.
    pub fn drive_with(
        &mut self,
        mut early: impl FnMut(&mut Vec<(u64, u64, Message)>),
    ) -> Result<Output, NodeError> {
        let mut pass = self.begin_pass()?;
        if !pass.messages.is_empty() {
            early(&mut pass.messages);
        }
        let mut before = std::mem::take(&mut pass.applied);
        let mut out = self.end_pass(pass)?;
        before.append(&mut out.applied);
        out.applied = before;
        Ok(out)
    }

    /// The first half of a pass: every group's new entries written to the
    /// log (not yet synced), the messages that may go before the sync,
    /// and the entries that committed already (raft-rs hands only entries
    /// this node has persisted and a majority has: the caller may apply
    /// them, and answer clients, before this pass's sync; a leader then
    /// does not make the confirms of one batch wait for the fsync of the
    /// next). Finish it with [`RaftNode::end_pass`] before anything else
    /// is asked of the node but reads.
    pub fn begin_pass(&mut self) -> Result<Pass, NodeError> {
        let mut pass = Pass::default();
        for (&id, g) in self.groups.iter_mut() {
            if !g.rn.has_ready() {
                continue;
            }
            let mut rd = g.rn.ready();
            pass.messages
                .extend(rd.take_messages().into_iter().map(|m| (m.to, id, m)));
            // A snapshot is installed only once it is on disk here: the
            // group's entries of this pass wait with it.
            let applied = if rd.snapshot().is_empty() {
                &mut pass.applied
            } else {
                let snap = rd.snapshot();
                self.wal.snapshot(id, snap);
                g.rn.mut_store().install(snap.get_metadata());
                pass.after.push(Applied::installed(id, snap));
                &mut pass.after
            };
            take_applied(id, g, &mut self.wal, rd.take_committed_entries(), applied)?;
            if !rd.entries().is_empty() {
                self.wal.entries(id, rd.entries());
                g.rn.mut_store().append(rd.entries());
            }
            if let Some(hs) = rd.hs() {
                self.wal.hard_state(id, hs);
                g.rn.mut_store().set_hard_state(hs.clone());
            }
            pass.durable |= rd.must_sync();
            pass.readies.push((id, rd));
        }
        self.snapshots_sent(&pass.messages);
        Ok(pass)
    }

    /// The second half of a pass: the log synced, each group advanced;
    /// the messages that had to wait for the sync, and what committed
    /// with it.
    pub fn end_pass(&mut self, pass: Pass) -> Result<Output, NodeError> {
        let mut out = Output {
            applied: pass.after,
            ..Output::default()
        };
        if pass.readies.is_empty() {
            return Ok(out);
        }
        self.wal.sync(pass.durable)?;
        for (id, mut rd) in pass.readies {
            let g = self.groups.get_mut(&id).expect("a group with a ready");
            out.messages
                .extend(rd.take_persisted_messages().into_iter().map(|m| (m.to, id, m)));
            let mut light = g.rn.advance(rd);
            if let Some(commit) = light.commit_index() {
                g.rn.mut_store().set_commit(commit);
            }
            out.messages
                .extend(light.take_messages().into_iter().map(|m| (m.to, id, m)));
            take_applied(
                id,
                g,
                &mut self.wal,
                light.take_committed_entries(),
                &mut out.applied,
            )?;
            g.rn.advance_apply();
        }
        self.snapshots_sent(&out.messages);
        for g in self.groups.values_mut() {
            g.ticking = has_work(&g.rn, &self.down);
        }
        Ok(out)
    }

    /// A snapshot is reported delivered as soon as it is sent: the
    /// follower's next answer shows whether it was (raft-rs would
    /// otherwise wait for a report before probing that follower again,
    /// and the link may drop the message).
    fn snapshots_sent(&mut self, messages: &[(u64, u64, Message)]) {
        for (to, group, m) in messages {
            if m.get_msg_type() == MessageType::MsgSnapshot {
                if let Some(g) = self.groups.get_mut(group) {
                    g.rn.report_snapshot(*to, SnapshotStatus::Finish);
                }
            }
        }
    }
}

/// Hand committed entries to the caller; a membership change is applied
/// to the group here first (and its new members logged).
fn take_applied(
    group: u64,
    g: &mut Group,
    wal: &mut Wal,
    entries: Vec<Entry>,
    out: &mut Vec<Applied>,
) -> Result<(), NodeError> {
    for e in entries {
        let applied = match e.get_entry_type() {
            // A new leader's empty entry is Raft's own business.
            EntryType::EntryNormal if e.data.is_empty() => continue,
            EntryType::EntryNormal => None,
            EntryType::EntryConfChange => Some(
                ConfChange::parse_from_bytes(&e.data)
                    .map_err(|x| x.to_string())
                    .and_then(|cc| g.rn.apply_conf_change(&cc).map_err(|x| x.to_string())),
            ),
            EntryType::EntryConfChangeV2 => Some(
                ConfChangeV2::parse_from_bytes(&e.data)
                    .map_err(|x| x.to_string())
                    .and_then(|cc| g.rn.apply_conf_change(&cc).map_err(|x| x.to_string())),
            ),
        };
        let members = match applied {
            None => None,
            Some(Err(err)) => {
                tracing::error!(group, index = e.index, "a membership change not applied: {err}");
                continue;
            }
            Some(Ok(cs)) => {
                wal.conf_state(group, &cs);
                let voters = cs.voters.clone();
                g.rn.mut_store().set_conf_state(cs);
                Some(voters)
            }
        };
        out.push(Applied {
            group,
            index: e.index,
            term: e.term,
            data: if members.is_some() {
                e.context.to_vec()
            } else {
                e.data.to_vec()
            },
            snapshot: false,
            members,
        });
    }
    Ok(())
}

fn has_work(rn: &RawNode<GroupStorage>, down: &HashSet<u64>) -> bool {
    let r = &rn.raft;
    match r.state {
        StateRole::Leader => {
            let last = r.raft_log.last_index();
            r.raft_log.committed < last || r.prs().iter().any(|(_, p)| p.matched < last)
        }
        StateRole::Candidate | StateRole::PreCandidate => true,
        StateRole::Follower => r.leader_id == raft::INVALID_ID || down.contains(&r.leader_id),
    }
}

/// The last index `group`'s log holds on this node (tests, metrics).
impl RaftNode {
    pub fn last_index(&self, group: u64) -> Option<u64> {
        self.groups.get(&group)?.rn.store().last_index().ok()
    }
}
