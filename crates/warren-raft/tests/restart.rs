//! A single node's restart from its caller's checkpoint: entries the
//! caller had applied (and checkpointed) are not handed back again, even
//! when the log's last hard state names an older commit index (a leader
//! learns its commit after its fsync, and that commit index is written
//! only with the next hard state).

use std::collections::BTreeMap;

use warren_raft::RaftNode;

const GROUP: u64 = 7;

/// Drive until nothing is left to do; the indexes applied.
fn settle(n: &mut RaftNode) -> Vec<u64> {
    let mut applied = Vec::new();
    for _ in 0..50 {
        let out = n.drive().unwrap();
        if out.applied.is_empty() && out.messages.is_empty() {
            break;
        }
        applied.extend(out.applied.iter().filter(|a| !a.data.is_empty()).map(|a| a.index));
    }
    applied
}

#[test]
fn entries_a_checkpoint_covers_are_not_applied_again_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("n1");
    let last = {
        let mut n = RaftNode::open(&dir, 1, &[1], &Default::default()).unwrap();
        n.add_group_with(GROUP, &[1]).unwrap();
        n.campaign(GROUP).unwrap();
        settle(&mut n);
        assert!(n.is_leader(GROUP));
        let mut applied = Vec::new();
        for round in 0..5u8 {
            for i in 0..10u8 {
                n.propose(GROUP, vec![round, i]).unwrap();
            }
            applied.extend(settle(&mut n));
        }
        assert_eq!(applied.len(), 50);
        *applied.last().unwrap()
        // Dropped here with no further pass: as a kill would leave it.
    };
    // The caller's checkpoint holds everything applied.
    let checkpoints = BTreeMap::from([(GROUP, last)]);
    let mut n = RaftNode::open(&dir, 1, &[1], &checkpoints).unwrap();
    n.add_group_with(GROUP, &[1]).unwrap();
    assert!(n.take_startup().is_empty());
    n.campaign(GROUP).unwrap();
    let again = settle(&mut n);
    assert!(
        again.is_empty(),
        "entries applied again after the restart: {again:?}"
    );
    // And the log goes on from there.
    n.propose(GROUP, b"next".to_vec()).unwrap();
    let next = settle(&mut n);
    assert_eq!(next.len(), 1);
    assert!(next[0] > last);
}
