//! A stream's member on this node when the stream is replicated over a
//! cluster: whether it leads (its writer appends, and confirms
//! once a majority of the members has a chunk, osiris_writer's committed
//! chunk id) or follows a leader (its log takes the leader's chunks
//! verbatim, and its consumers read no further than what the leader says
//! is committed). The server's replication (`StreamSystem`, in
//! `stream_log.rs`) moves the chunks and sets the role and the committed
//! chunk; this module holds what a stream's log keeps of it: the role, and publishes
//! waiting for a majority (the log's methods on them are in
//! `stream_log.rs`).

use std::collections::BTreeMap;

use parking_lot::Mutex;
use warren_amqp091::ShortStr;

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

/// The member state a stream's log carries.
#[derive(Default)]
pub struct Member {
    pub(super) role: Mutex<StreamRole>,
    /// The last chunk a majority has (the leader's count, or what the
    /// leader last said), and who waits for which chunk.
    pub(super) commits: Mutex<Commits>,
}

#[derive(Default)]
pub(super) struct Commits {
    pub(super) committed: Option<u64>,
    pub(super) waiting: BTreeMap<u64, Vec<CommitWaiter>>,
}
