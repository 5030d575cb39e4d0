//! Calls on a quorum queue's Raft group from anywhere in the cluster:
//! what its members and leader are, a change of its members, a transfer
//! of its leadership. Membership commands (`membership.rs`) make them; a
//! call for a group this node does not hold goes over the link to a
//! member (`request::QUORUM_CALL`, answered with a `Reply`), and the
//! member's Raft thread answers it (`driver.rs`).
//!
//! A change is made by the group's leader only; any other member answers
//! `NotLeader` with the leader it knows, and the caller asks that one.

use serde::{Deserialize, Serialize};

/// What a call asks of a group. Node ids are the cluster's Raft ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", content = "node", rename_all = "snake_case")]
pub enum Op {
    Info,
    Add(u64),
    Remove(u64),
    Transfer(u64),
}

/// A group as the member that answered knows it, after the call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupInfo {
    pub group: u64,
    /// Its voters as applied there, in order.
    pub voters: Vec<u64>,
    pub leader: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum CallError {
    /// Only the leader changes a group (it names the one it knows).
    #[error("not the group's leader (the leader is node {0:?})")]
    NotLeader(Option<u64>),
    /// One change at a time, and none from a leader just elected.
    #[error("a membership change is under way")]
    Busy,
    #[error("this node has no member of the queue")]
    NoGroup,
    #[error("{0}")]
    Failed(String),
}

/// A call carried over the link: the queue, not the group (the caller
/// need not know it), and the operation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub vhost: String,
    pub queue: String,
    #[serde(flatten)]
    pub op: Op,
}

/// The answer's body.
pub type Answer = Result<GroupInfo, CallError>;

pub use crate::cluster::links::request::CALL_ID_BIT;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_answers_read_back() {
        for op in [Op::Info, Op::Add(3), Op::Remove(2), Op::Transfer(1)] {
            let r = Request {
                vhost: "/".into(),
                queue: "q".into(),
                op,
            };
            let back: Request = serde_json::from_slice(&serde_json::to_vec(&r).unwrap()).unwrap();
            assert_eq!(back.op, op);
        }
        let answers: Vec<Answer> = vec![
            Ok(GroupInfo {
                group: 7,
                voters: vec![1, 2],
                leader: Some(2),
            }),
            Err(CallError::NotLeader(Some(3))),
            Err(CallError::Busy),
            Err(CallError::Failed("x".into())),
        ];
        for a in answers {
            let back: Answer = serde_json::from_slice(&serde_json::to_vec(&a).unwrap()).unwrap();
            assert_eq!(back, a);
        }
    }
}
