//! A stream's member on this node when the stream is replicated over a
//! cluster: whether it leads (its writer appends, and confirms
//! once a majority of the members has a chunk, osiris_writer's committed
//! chunk id) or follows a leader (its log takes the leader's chunks
//! verbatim, and its consumers read no further than what the leader says
//! is committed). The server's replication ([`StreamSystem`]) moves the
//! chunks and sets the role and the committed chunk; this module keeps
//! what the front ends consult: the role, and publishes waiting for a
//! majority.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use warren_amqp091::ShortStr;

use super::stream::StreamLog;

/// What this node's member of a stream is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StreamRole {
    /// Not replicated: one node, or a cluster stream of one member. Every
    /// chunk written is readable and confirmed at once, as before.
    #[default]
    Alone,
    /// The leader of `epoch`: its chunks are confirmed and readable once
    /// a majority of the `members` has them.
    Leader { epoch: u64, members: usize },
    /// A replica; `leader` is the node it follows (None: no leader is
    /// known, an election is under way).
    Replica { epoch: u64, leader: Option<ShortStr> },
}

impl StreamRole {
    pub fn epoch(&self) -> u64 {
        match self {
            StreamRole::Alone => 0,
            StreamRole::Leader { epoch, .. } | StreamRole::Replica { epoch, .. } => *epoch,
        }
    }
}

/// Told once whether a chunk committed (true) or will not be confirmed
/// here (false: this node stopped leading before a majority had it).
pub type CommitWaiter = Box<dyn FnOnce(bool) + Send>;

/// The member state a [`StreamLog`] carries.
#[derive(Default)]
pub struct Member {
    role: Mutex<StreamRole>,
    /// The last chunk a majority has (the leader's count, or what the
    /// leader last said), and who waits for which chunk.
    commits: Mutex<Commits>,
}

#[derive(Default)]
struct Commits {
    committed: Option<u64>,
    waiting: BTreeMap<u64, Vec<CommitWaiter>>,
}

impl StreamLog {
    pub fn role(&self) -> StreamRole {
        self.member.role.lock().clone()
    }

    /// Lead at `epoch` (new chunks carry it; readers wait for the first
    /// majority), follow, or stand alone (every chunk readable). Whoever
    /// waited for a chunk to commit under the old role is told no.
    pub fn set_role(&self, role: StreamRole) {
        let before = std::mem::replace(&mut *self.member.role.lock(), role.clone());
        if before == role {
            return;
        }
        // A leader whose members changed leads on: its waiting publishes
        // and readers stay as they are.
        if let (StreamRole::Leader { epoch: a, .. }, StreamRole::Leader { epoch: b, .. }) = (&before, &role) {
            if a == b {
                return;
            }
        }
        self.with_log_quiet(|log| match &role {
            StreamRole::Alone => {
                log.set_committed(None);
            }
            StreamRole::Leader { epoch, .. } => {
                log.set_epoch(*epoch);
                log.hold_readers();
            }
            StreamRole::Replica { .. } => {
                if matches!(before, StreamRole::Alone) {
                    log.hold_readers();
                }
            }
        });
        let mut c = self.member.commits.lock();
        if !matches!(role, StreamRole::Alone) && matches!(before, StreamRole::Leader { .. }) {
            c.committed = None;
        }
        let waiting = std::mem::take(&mut c.waiting);
        drop(c);
        for f in waiting.into_values().flatten() {
            f(matches!(role, StreamRole::Alone));
        }
        // Subscriptions waiting at the end notice the new epoch, and so do
        // connections with publishers (told to look for the leader).
        self.wake_readers();
        self.tell_watchers();
    }

    /// Run `f` once chunk `chunk_id` is on a majority (at once when the
    /// stream is not replicated or it already is).
    pub fn on_committed(&self, chunk_id: u64, f: CommitWaiter) {
        if matches!(*self.member.role.lock(), StreamRole::Alone) {
            return f(true);
        }
        let mut c = self.member.commits.lock();
        if c.committed.is_some_and(|x| x >= chunk_id) {
            drop(c);
            return f(true);
        }
        c.waiting.entry(chunk_id).or_default().push(f);
    }

    /// A new leader's first chunk: an empty tracking delta in its epoch.
    pub fn append_marker(&self) -> Result<warren_log::Appended, warren_log::LogError> {
        self.with_log(|log| log.append_tracking(&warren_log::Delta::default(), super::now_ms()))
    }

    /// The last chunk a majority has, as this member knows it.
    pub fn committed(&self) -> Option<u64> {
        self.member.commits.lock().committed
    }

    /// A majority has every chunk up to `chunk_id`: consumers may read
    /// them, and their publishers are confirmed. Never moves back.
    pub fn set_committed(&self, chunk_id: u64) {
        let ready = {
            let mut c = self.member.commits.lock();
            if c.committed.is_some_and(|x| x >= chunk_id) {
                return;
            }
            c.committed = Some(chunk_id);
            let later = c.waiting.split_off(&(chunk_id + 1));
            std::mem::replace(&mut c.waiting, later)
        };
        self.with_log_quiet(|log| log.set_committed(Some(chunk_id)));
        for f in ready.into_values().flatten() {
            f(true);
        }
        self.wake_readers();
    }

    /// A replica's log cut to agree with its leader's overview (see
    /// [`warren_log::Log::cut_to`]).
    pub fn cut_to(&self, leader: &warren_log::Overview) -> Result<warren_log::Cut, warren_log::LogError> {
        self.with_log_quiet(|log| log.cut_to(leader))
    }

    /// The epoch and the id of the last chunk written (any type).
    pub fn last_chunk(&self) -> Option<(u64, u64)> {
        let st = self.view().snapshot();
        st.segments
            .iter()
            .rev()
            .find_map(|s| s.last)
            .map(|r| (r.epoch, r.chunk_id))
    }
}

/// The server's stream replication, as the queues see it.
pub trait StreamSystem: Send + Sync {
    /// Is this node a member of stream `name` in `vhost` (so the stream
    /// is held here as a member, not as another node's queue)?
    fn is_member(&self, vhost: &str, name: &ShortStr) -> bool;
    /// A member's log is open (declared, or restored at start): set its
    /// role and start leading or following.
    fn attach(&self, log: &Arc<StreamLog>);
}

/// Set once when the server starts its stream replication (clusters
/// only); every vhost shares it.
#[derive(Clone, Default)]
pub struct StreamSlot(Arc<OnceLock<Arc<dyn StreamSystem>>>);

impl StreamSlot {
    pub fn set(&self, s: Arc<dyn StreamSystem>) {
        let _ = self.0.set(s);
    }

    pub fn get(&self) -> Option<&Arc<dyn StreamSystem>> {
        self.0.get()
    }
}

impl std::fmt::Debug for StreamSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "StreamSlot(set)"
        } else {
            "StreamSlot(unset)"
        })
    }
}
