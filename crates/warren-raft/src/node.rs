//! One node's Raft groups: raft-rs `RawNode`s over `MemStorage`, made
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

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use raft::eraftpb::{ConfState, Entry, EntryType, Message};
use raft::storage::MemStorage;
use raft::{Config, RawNode, StateRole, Storage};

use crate::wal::{Record, Wal, WalError};

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
    #[error("no Raft group {0} on this node")]
    NoGroup(u64),
}

/// An entry that has committed, for the caller to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub group: u64,
    pub index: u64,
    pub term: u64,
    pub data: Vec<u8>,
}

/// What a pass produced: messages to send, (node, group, message), and
/// what committed.
#[derive(Debug, Default)]
pub struct Output {
    pub messages: Vec<(u64, u64, Message)>,
    pub applied: Vec<Applied>,
}

struct Group {
    rn: RawNode<MemStorage>,
    ticking: bool,
}

pub struct RaftNode {
    id: u64,
    voters: Vec<u64>,
    wal: Wal,
    groups: BTreeMap<u64, Group>,
    /// Nodes the caller reported down (their links are gone).
    down: HashSet<u64>,
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
        let mut storages: BTreeMap<u64, MemStorage> = BTreeMap::new();
        let conf = || ConfState::from((voters.to_vec(), vec![]));
        for r in records {
            let g = match &r {
                Record::Entries(g, _) | Record::HardState(g, _) | Record::Snapshot(g, _) => *g,
            };
            let s = storages
                .entry(g)
                .or_insert_with(|| MemStorage::new_with_conf_state(conf()));
            match r {
                Record::Entries(_, es) => s.wl().append(&es)?,
                Record::HardState(_, hs) => s.wl().set_hardstate(hs),
                Record::Snapshot(_, snap) => s.wl().apply_snapshot(snap)?,
            }
        }
        let mut node = RaftNode {
            id,
            voters: voters.to_vec(),
            wal,
            groups: BTreeMap::new(),
            down: HashSet::new(),
            logger: slog::Logger::root(slog::Discard, slog::o!()),
        };
        for (g, s) in storages {
            // The commit index is in the log only as often as a hard state
            // was written, so it may be behind what was applied: raft-rs
            // must not be told of an applied index past its commit.
            let committed = s.initial_state()?.hard_state.commit;
            let applied = applied.get(&g).copied().unwrap_or(0).min(committed);
            node.insert(g, s, applied)?;
        }
        Ok(node)
    }

    fn insert(&mut self, group: u64, storage: MemStorage, applied: u64) -> Result<(), NodeError> {
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
        self.insert(group, MemStorage::new_with_conf_state(conf), 0)
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
        g.rn.step(m)?;
        Ok(())
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

    /// `node`'s link is gone: the groups it leads here start ticking, so
    /// they elect another leader unless it comes back first.
    pub fn peer_down(&mut self, node: u64) {
        self.down.insert(node);
        for g in self.groups.values_mut() {
            if g.rn.raft.leader_id == node {
                g.ticking = true;
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

    /// One pass over every group with work; see the module's notes.
    pub fn drive(&mut self) -> Result<Output, NodeError> {
        let mut out = Output::default();
        let mut readies = Vec::new();
        let mut durable = false;
        for (&id, g) in self.groups.iter_mut() {
            if !g.rn.has_ready() {
                continue;
            }
            let mut rd = g.rn.ready();
            out.messages
                .extend(rd.take_messages().into_iter().map(|m| (m.to, id, m)));
            if !rd.snapshot().is_empty() {
                self.wal.snapshot(id, rd.snapshot());
                g.rn.mut_store().wl().apply_snapshot(rd.snapshot().clone())?;
            }
            take_applied(id, rd.take_committed_entries(), &mut out.applied);
            if !rd.entries().is_empty() {
                self.wal.entries(id, rd.entries());
                g.rn.mut_store().wl().append(rd.entries())?;
            }
            if let Some(hs) = rd.hs() {
                self.wal.hard_state(id, hs);
                g.rn.mut_store().wl().set_hardstate(hs.clone());
            }
            durable |= rd.must_sync();
            readies.push((id, rd));
        }
        if readies.is_empty() {
            return Ok(out);
        }
        self.wal.sync(durable)?;
        for (id, mut rd) in readies {
            let g = self.groups.get_mut(&id).expect("a group with a ready");
            out.messages
                .extend(rd.take_persisted_messages().into_iter().map(|m| (m.to, id, m)));
            let mut light = g.rn.advance(rd);
            if let Some(commit) = light.commit_index() {
                g.rn.mut_store().wl().mut_hard_state().set_commit(commit);
            }
            out.messages
                .extend(light.take_messages().into_iter().map(|m| (m.to, id, m)));
            take_applied(id, light.take_committed_entries(), &mut out.applied);
            g.rn.advance_apply();
        }
        for g in self.groups.values_mut() {
            g.ticking = has_work(&g.rn, &self.down);
        }
        Ok(out)
    }
}

fn take_applied(group: u64, entries: Vec<Entry>, out: &mut Vec<Applied>) {
    for e in entries {
        // A new leader's empty entry, and membership changes (none yet:
        // members are fixed), are Raft's own business.
        if e.get_entry_type() == EntryType::EntryNormal && !e.data.is_empty() {
            out.push(Applied {
                group,
                index: e.index,
                term: e.term,
                data: e.data.to_vec(),
            });
        }
    }
}

fn has_work(rn: &RawNode<MemStorage>, down: &HashSet<u64>) -> bool {
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
