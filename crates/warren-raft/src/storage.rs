//! One group's Raft log as raft-rs reads it: its hard state, the entries
//! after its last snapshot, and where that snapshot ends.
//!
//! raft-rs's own `MemStorage` is a test aid: its `snapshot()` carries no
//! data and its `compact` forgets the term of the last entry it drops, so
//! a leader could not send the entries that follow. Here compaction keeps
//! that (index, term), and a snapshot's data comes from the group's
//! [`SnapshotSource`]: the state machine itself, as it stands when raft-rs
//! asks (the caller applies every committed entry before it next drives
//! the node, so that is the applied index). The log never holds a copy of
//! the state machine.

use std::sync::Arc;

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

/// The state machine's snapshot on demand: the index it has applied up to
/// and its encoding at that index.
pub type SnapshotSource = Arc<dyn Fn() -> (u64, Vec<u8>) + Send + Sync>;

pub struct GroupStorage {
    hard_state: HardState,
    conf_state: ConfState,
    /// The last entry covered by a snapshot (compacted or installed).
    snapshot: SnapshotMetadata,
    /// Entries `snapshot.index + 1 ..`, in order, no gaps.
    entries: Vec<Entry>,
    source: Option<SnapshotSource>,
}

impl GroupStorage {
    pub fn new(conf_state: ConfState) -> GroupStorage {
        GroupStorage {
            hard_state: HardState::default(),
            conf_state,
            snapshot: SnapshotMetadata::default(),
            entries: Vec::new(),
            source: None,
        }
    }

    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    /// The members after a membership change was applied.
    pub fn set_conf_state(&mut self, cs: ConfState) {
        self.conf_state = cs;
    }

    pub fn set_source(&mut self, source: SnapshotSource) {
        self.source = Some(source);
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn set_hard_state(&mut self, hs: HardState) {
        self.hard_state = hs;
    }

    pub fn set_commit(&mut self, commit: u64) {
        self.hard_state.commit = commit;
    }

    fn first(&self) -> u64 {
        self.snapshot.index + 1
    }

    fn last(&self) -> u64 {
        self.entries.last().map_or(self.snapshot.index, |e| e.index)
    }

    /// The last index a snapshot covers, and its term.
    pub fn snapshot_point(&self) -> (u64, u64) {
        (self.snapshot.index, self.snapshot.term)
    }

    /// The entries held (after the snapshot).
    pub fn entries_held(&self) -> &[Entry] {
        &self.entries
    }

    /// Append entries from raft-rs (a leader's, or a follower's from its
    /// leader): those at or after the first new index are replaced. Entries
    /// a snapshot covers are skipped (they are committed, so equal).
    pub fn append(&mut self, ents: &[Entry]) {
        let ents: Vec<&Entry> = ents.iter().filter(|e| e.index > self.snapshot.index).collect();
        let Some(first) = ents.first() else {
            return;
        };
        // raft-rs hands entries that follow on from what it has; a gap
        // would be its bug, and is kept out of the log rather than written.
        if first.index > self.last() + 1 {
            tracing::error!(
                first = first.index,
                last = self.last(),
                "Raft entries with a gap refused"
            );
            return;
        }
        let keep = (first.index - self.first()) as usize;
        self.entries.truncate(keep);
        self.entries.extend(ents.into_iter().cloned());
    }

    /// Forget the entries up to `index` (applied, and so in the state
    /// machine), keeping its term. An index beyond what is held, or already
    /// covered, changes nothing but what can be covered.
    pub fn compact(&mut self, index: u64, term: u64) {
        if index <= self.snapshot.index {
            return;
        }
        let drop = (index.min(self.last()) + 1 - self.first()) as usize;
        self.entries.drain(..drop.min(self.entries.len()));
        self.snapshot.index = index;
        self.snapshot.term = term;
        if self.hard_state.commit < index {
            self.hard_state.commit = index;
        }
    }

    /// A snapshot from the leader replaces the whole log (raft-rs gives one
    /// only when this node's log cannot be brought up to date by entries).
    pub fn install(&mut self, meta: &SnapshotMetadata) {
        self.entries.clear();
        self.snapshot.index = meta.index;
        self.snapshot.term = meta.term;
        self.hard_state.commit = self.hard_state.commit.max(meta.index);
        self.hard_state.term = self.hard_state.term.max(meta.term);
        if let Some(cs) = meta.conf_state.as_ref() {
            self.conf_state = cs.clone();
        }
    }
}

impl Storage for GroupStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(self.hard_state.clone(), self.conf_state.clone()))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let from = (low - self.first()) as usize;
        let to = (high - self.first()) as usize;
        let mut out = self.entries[from..to].to_vec();
        raft::util::limit_size(&mut out, max_size.into());
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx == self.snapshot.index {
            return Ok(self.snapshot.term);
        }
        if idx < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > self.last() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.entries[(idx - self.first()) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    /// The state machine as it stands: its applied index is at or after
    /// the compaction point (only applied entries are compacted), and its
    /// term is known while that entry is held.
    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let unavailable = || raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable);
        let source = self.source.as_ref().ok_or_else(unavailable)?;
        let (index, data) = source();
        if index < request_index || index < self.snapshot.index {
            return Err(unavailable());
        }
        let term = self.term(index).map_err(|_| unavailable())?;
        let mut s = Snapshot {
            data: data.into(),
            ..Default::default()
        };
        let m = s.mut_metadata();
        m.index = index;
        m.term = term;
        m.set_conf_state(self.conf_state.clone());
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            ..Default::default()
        }
    }

    #[test]
    fn compaction_keeps_the_last_term_and_what_follows() {
        let mut s = GroupStorage::new(ConfState::from((vec![1, 2, 3], vec![])));
        s.append(&(1..=10).map(|i| entry(i, 1 + i / 5)).collect::<Vec<_>>());
        s.compact(6, 2);
        assert_eq!(s.first_index().unwrap(), 7);
        assert_eq!(s.last_index().unwrap(), 10);
        assert_eq!(s.term(6).unwrap(), 2);
        assert!(matches!(
            s.term(5),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        let got = s.entries(7, 11, None, GetEntriesContext::empty(false)).unwrap();
        assert_eq!(got.iter().map(|e| e.index).collect::<Vec<_>>(), vec![7, 8, 9, 10]);
        // A conflicting suffix replaces what it overlaps.
        s.append(&[entry(9, 5), entry(10, 5), entry(11, 5)]);
        assert_eq!(s.term(8).unwrap(), 2);
        assert_eq!(s.term(11).unwrap(), 5);
        // Entries a snapshot covers are skipped, not re-added.
        s.append(&[entry(5, 1), entry(6, 2)]);
        assert_eq!(s.first_index().unwrap(), 7);
        assert_eq!(s.last_index().unwrap(), 11);
    }

    #[test]
    fn snapshots_come_from_the_source_at_its_applied_index() {
        let mut s = GroupStorage::new(ConfState::from((vec![1, 2, 3], vec![])));
        assert!(s.snapshot(0, 2).is_err(), "no source yet");
        s.append(&(1..=4).map(|i| entry(i, 3)).collect::<Vec<_>>());
        s.set_source(Arc::new(|| (3, b"state at 3".to_vec())));
        s.compact(2, 3);
        let snap = s.snapshot(0, 2).unwrap();
        assert_eq!(snap.get_metadata().index, 3);
        assert_eq!(snap.get_metadata().term, 3);
        assert_eq!(&snap.data[..], b"state at 3");
        let mut other = GroupStorage::new(ConfState::default());
        other.append(&[entry(1, 1)]);
        other.install(snap.get_metadata());
        assert_eq!(other.first_index().unwrap(), 4);
        assert_eq!(other.last_index().unwrap(), 3);
        assert_eq!(other.hard_state().commit, 3);
    }
}
