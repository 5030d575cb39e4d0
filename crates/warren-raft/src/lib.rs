//! Warren's Raft: consensus from raft-rs (`RawNode`), driven for many
//! groups at once on one node. A node's groups share one write-ahead log
//! (`wal.rs`): every group's new entries and hard state from one pass go
//! out in one write and one fdatasync. A group ticks only while it has
//! work (electing, or leading with entries not yet committed everywhere),
//! so an idle group costs nothing and sends nothing; a follower whose
//! leader's node is reported down starts ticking and elects. No sockets:
//! the caller carries messages between nodes and applies what commits.

pub mod node;
pub mod storage;
pub mod wal;

pub use node::{Applied, Membership, NodeError, Output, Pass, ProposeError, RaftNode};
pub use raft::eraftpb::Message as RaftMessage;
pub use storage::{GroupStorage, SnapshotSource};
pub use wal::{Record, Wal, WalError};

/// Encode a Raft message for the wire (raft-rs's protobuf encoding).
pub fn encode_message(m: &RaftMessage) -> Vec<u8> {
    use protobuf::Message as _;
    m.write_to_bytes().expect("a raft message encodes")
}

/// Decode one; an error for bytes that are not a Raft message.
pub fn decode_message(b: &[u8]) -> Result<RaftMessage, String> {
    use protobuf::Message as _;
    RaftMessage::parse_from_bytes(b).map_err(|e| e.to_string())
}
