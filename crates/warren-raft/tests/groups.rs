//! Three nodes in one process with the messages carried by hand (and
//! dropped for a node that is cut off): elections, commits applied in the
//! same order everywhere, one fdatasync for many proposals, idle groups
//! silent, a restarted node (its log's tail torn) catching up, and a lost
//! leader replaced once its node is reported down.

use std::collections::HashSet;
use std::path::PathBuf;

use warren_raft::{Applied, RaftNode};

const IDS: [u64; 3] = [1, 2, 3];

struct Net {
    dirs: Vec<PathBuf>,
    nodes: Vec<Option<RaftNode>>,
    applied: Vec<Vec<Applied>>,
    cut: HashSet<u64>,
    _tmp: tempfile::TempDir,
}

impl Net {
    fn new(groups: &[u64]) -> Net {
        let tmp = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = IDS.iter().map(|i| tmp.path().join(format!("n{i}"))).collect();
        let mut nodes = Vec::new();
        for (i, d) in dirs.iter().enumerate() {
            let mut n = RaftNode::open(d, IDS[i], &IDS, &Default::default()).unwrap();
            for g in groups {
                n.add_group(*g).unwrap();
            }
            nodes.push(Some(n));
        }
        Net {
            dirs,
            nodes,
            applied: vec![Vec::new(); 3],
            cut: HashSet::new(),
            _tmp: tmp,
        }
    }

    /// Node `len + 1`, not a voter yet: it starts from the members the
    /// others started with (the log's first membership, which no entry
    /// holds), so it reads the changes since in the log as they did.
    fn add_node(&mut self, groups: &[u64]) -> u64 {
        let id = self.nodes.len() as u64 + 1;
        let dir = self._tmp.path().join(format!("n{id}"));
        let mut n = RaftNode::open(&dir, id, &IDS, &Default::default()).unwrap();
        for g in groups {
            n.add_group(*g).unwrap();
        }
        self.dirs.push(dir);
        self.nodes.push(Some(n));
        self.applied.push(Vec::new());
        id
    }

    fn node(&mut self, id: u64) -> &mut RaftNode {
        self.nodes[id as usize - 1].as_mut().expect("node running")
    }

    /// Drive every node and carry messages until nothing moves; returns
    /// how many messages were sent.
    fn pump(&mut self) -> usize {
        let mut sent = 0;
        for _ in 0..1000 {
            let mut moved = false;
            for i in 0..self.nodes.len() {
                let from = &(i as u64 + 1);
                let Some(n) = self.nodes[i].as_mut() else { continue };
                let out = n.drive().unwrap();
                self.applied[i].extend(out.applied);
                for (to, g, m) in out.messages {
                    moved = true;
                    sent += 1;
                    if self.cut.contains(from) || self.cut.contains(&to) {
                        continue;
                    }
                    if let Some(dst) = self.nodes[to as usize - 1].as_mut() {
                        // Through the wire encoding, as the links carry it.
                        let m = warren_raft::decode_message(&warren_raft::encode_message(&m)).unwrap();
                        dst.step(g, m).unwrap();
                    }
                }
            }
            if !moved {
                return sent;
            }
        }
        panic!("messages never stopped")
    }

    /// `n` ticks, each followed by a pump; messages sent.
    fn ticks(&mut self, n: usize) -> usize {
        let mut sent = 0;
        for _ in 0..n {
            for node in self.nodes.iter_mut().flatten() {
                node.tick();
            }
            sent += self.pump();
        }
        sent
    }

    fn data(&self, node: u64, group: u64) -> Vec<Vec<u8>> {
        self.applied[node as usize - 1]
            .iter()
            .filter(|a| a.group == group)
            .map(|a| a.data.clone())
            .collect()
    }
}

fn payloads(from: usize, to: usize) -> Vec<Vec<u8>> {
    (from..to).map(|i| format!("change {i}").into_bytes()).collect()
}

#[test]
fn three_nodes_elect_commit_and_apply_in_the_same_order() {
    let mut net = Net::new(&[0]);
    net.node(1).campaign(0).unwrap();
    net.pump();
    for id in IDS {
        assert_eq!(net.node(id).leader(0), Some(1));
    }
    let before = net.node(1).syncs();
    for p in payloads(0, 100) {
        net.node(1).propose(0, p).unwrap();
    }
    net.pump();
    for id in IDS {
        assert_eq!(net.data(id, 0), payloads(0, 100), "node {id}");
    }
    // The 100 proposals went to disk together, not one fdatasync each.
    let syncs = net.node(1).syncs() - before;
    assert!(syncs <= 3, "{syncs} fdatasyncs for 100 proposals");
    assert_eq!(
        net.node(2).propose(0, b"x".to_vec()),
        Err(warren_raft::ProposeError::NotLeader(Some(1)))
    );
}

#[test]
fn idle_groups_send_nothing() {
    let groups: Vec<u64> = (0..50).collect();
    let mut net = Net::new(&groups);
    for g in &groups {
        let leader = IDS[*g as usize % 3];
        net.node(leader).campaign(*g).unwrap();
    }
    net.pump();
    for g in &groups {
        let leader = IDS[*g as usize % 3];
        net.node(leader).propose(*g, b"one".to_vec()).unwrap();
    }
    net.pump();
    // Settled: 200 ticks (20 s at 100 ms) of silence.
    assert_eq!(net.ticks(200), 0);
    for g in &groups {
        for id in IDS {
            assert_eq!(net.data(id, *g), vec![b"one".to_vec()]);
        }
    }
}

#[test]
fn a_restarted_node_with_a_torn_tail_catches_up() {
    let mut net = Net::new(&[0]);
    net.node(1).campaign(0).unwrap();
    net.pump();
    for p in payloads(0, 100) {
        net.node(1).propose(0, p).unwrap();
        net.pump();
    }
    // Node 3 stops; the others go on without it.
    net.nodes[2] = None;
    for p in payloads(100, 150) {
        net.node(1).propose(0, p).unwrap();
    }
    net.pump();
    assert_eq!(net.data(2, 0), payloads(0, 150));
    // Its log loses a torn last write, then it starts again.
    let wal = net.dirs[2].join("raft.wal");
    let len = std::fs::metadata(&wal).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&wal).unwrap();
    f.set_len(len - 5).unwrap();
    drop(f);
    net.applied[2].clear();
    net.nodes[2] = Some(RaftNode::open(&net.dirs[2], 3, &IDS, &Default::default()).unwrap());
    let kept = net.node(3).last_index(0).unwrap();
    assert!((90..=101).contains(&kept), "{kept} entries kept");
    net.node(1).peer_up(3);
    net.pump();
    // Everything committed, replayed from its own log, then caught up.
    assert_eq!(net.data(3, 0), payloads(0, 150));
}

#[test]
fn a_lost_leader_is_replaced_once_its_node_is_reported_down() {
    let mut net = Net::new(&[0]);
    net.node(1).campaign(0).unwrap();
    net.pump();
    net.node(1).propose(0, b"before".to_vec()).unwrap();
    net.pump();
    net.cut.insert(1);
    // Nothing happens while nobody reports node 1 down: followers of a
    // known leader do not tick.
    assert_eq!(net.ticks(50), 0);
    assert_eq!(net.node(2).leader(0), Some(1));
    net.node(2).peer_down(1);
    net.node(3).peer_down(1);
    // Node 2 (the lowest id still up) stands at the next tick, node 3 two
    // ticks later: a leader within 3 ticks, not an election timeout (10
    // to 20), and no split vote.
    net.ticks(3);
    let leader = net.node(2).leader(0).expect("a new leader");
    assert_eq!(leader, 2);
    assert_eq!(net.node(3).leader(0), Some(leader));
    net.node(leader).propose(0, b"after".to_vec()).unwrap();
    net.pump();
    for id in [2, 3] {
        assert_eq!(net.data(id, 0), vec![b"before".to_vec(), b"after".to_vec()]);
    }
    // The old leader never learned of "after" while cut off.
    assert_eq!(net.data(1, 0), vec![b"before".to_vec()]);
}

/// A node's state machine as its applied list builds it: a snapshot
/// replaces everything before it.
fn state(applied: &[Applied], group: u64) -> Vec<Vec<u8>> {
    let mut s = Vec::new();
    for a in applied.iter().filter(|a| a.group == group) {
        if a.snapshot {
            s = decode_state(&a.data);
        } else {
            s.push(a.data.clone());
        }
    }
    s
}

fn encode_state(s: &[Vec<u8>]) -> Vec<u8> {
    s.join(&b'\n')
}

fn decode_state(b: &[u8]) -> Vec<Vec<u8>> {
    if b.is_empty() {
        return Vec::new();
    }
    b.split(|&c| c == b'\n').map(<[u8]>::to_vec).collect()
}

/// A node's (applied index, encoded state), as its snapshot source reads it.
type Shared = std::sync::Arc<std::sync::Mutex<(u64, Vec<u8>)>>;

/// Node `id`'s snapshots come from its state as of its last pump.
fn share_state(net: &mut Net, id: u64) -> Shared {
    let shared = std::sync::Arc::new(std::sync::Mutex::new((0, Vec::new())));
    let s = shared.clone();
    net.node(id)
        .set_snapshot_source(0, std::sync::Arc::new(move || s.lock().unwrap().clone()))
        .unwrap();
    shared
}

/// Node 1 leads group 0 and commits payloads 0..10 on all three nodes,
/// then 10..upto with node 3 cut off.
fn commit_without_node_3(net: &mut Net, upto: usize) {
    net.node(1).campaign(0).unwrap();
    net.pump();
    for p in payloads(0, 10) {
        net.node(1).propose(0, p).unwrap();
    }
    net.pump();
    net.cut.insert(3);
    for p in payloads(10, upto) {
        net.node(1).propose(0, p).unwrap();
    }
    net.pump();
}

#[test]
fn a_node_behind_a_compacted_log_catches_up_by_snapshot_even_across_a_crash() {
    let mut net = Net::new(&[0]);
    let shared: Vec<_> = IDS.iter().map(|&id| share_state(&mut net, id)).collect();
    let refresh = |net: &Net, shared: &[Shared]| {
        for (i, sh) in shared.iter().enumerate() {
            let last = net.applied[i]
                .iter()
                .filter(|a| a.group == 0)
                .map(|a| a.index)
                .max();
            *sh.lock().unwrap() = (last.unwrap_or(0), encode_state(&state(&net.applied[i], 0)));
        }
    };
    // Node 3 is cut off while 200 more commit and the others compact.
    commit_without_node_3(&mut net, 210);
    refresh(&net, &shared);
    // Reported down (a live follower this close would keep the entries
    // it lacks in the leader's log).
    net.node(1).peer_down(3);
    for id in [1, 2] {
        let applied = shared[id as usize - 1].lock().unwrap().0;
        net.node(id).compact(0, applied).unwrap();
        assert_eq!(net.node(id).first_index(0), Some(applied + 1));
    }
    net.cut.clear();
    net.node(1).peer_up(3);
    net.pump();
    net.ticks(5);
    assert!(
        net.applied[2].iter().any(|a| a.snapshot),
        "node 3 should have been sent a snapshot"
    );
    assert_eq!(state(&net.applied[2], 0), payloads(0, 210));

    // Node 3 crashes before its state machine made the snapshot its own:
    // its log still has it, data and all.
    net.nodes[2] = None;
    net.applied[2].clear();
    let mut again = RaftNode::open(&net.dirs[2], 3, &IDS, &[(0, 3)].into()).unwrap();
    let startup = again.take_startup();
    assert_eq!(startup.len(), 1);
    assert_eq!(decode_state(&startup[0].data), payloads(0, 210));
    net.applied[2] = startup;
    net.nodes[2] = Some(again);
    share_state(&mut net, 3);
    for p in payloads(210, 220) {
        net.node(1).propose(0, p).unwrap();
    }
    net.pump();
    for i in 0..3 {
        assert_eq!(state(&net.applied[i], 0), payloads(0, 220), "node {}", i + 1);
    }
}

#[test]
fn voters_are_added_and_removed_and_the_change_survives_a_restart() {
    use warren_raft::Membership;
    let mut net = Net::new(&[0]);
    net.node(1).campaign(0).unwrap();
    net.pump();
    for p in payloads(0, 20) {
        net.node(1).propose(0, p).unwrap();
    }
    net.pump();
    // Node 4 joins: it hears from the leader and catches up.
    let four = net.add_node(&[0]);
    net.node(1)
        .propose_membership(0, Membership::Add(four), b"add 4".to_vec())
        .unwrap();
    net.pump();
    net.ticks(3);
    for id in [1, 2, 3, 4] {
        assert_eq!(net.node(id).voters(0), Some(vec![1, 2, 3, 4]), "node {id}");
    }
    let change = net.applied[0].iter().find(|a| a.members.is_some()).unwrap();
    assert_eq!(change.data, b"add 4");
    assert_eq!(
        net.data(4, 0).iter().filter(|d| d.starts_with(b"change")).count(),
        20
    );
    // Node 3 leaves; with it cut off, 1, 2 and 4 still commit (3 of 4).
    net.node(1)
        .propose_membership(0, Membership::Remove(3), Vec::new())
        .unwrap();
    net.pump();
    assert_eq!(net.node(1).voters(0), Some(vec![1, 2, 4]));
    net.cut.insert(3);
    net.node(1).propose(0, b"without 3".to_vec()).unwrap();
    net.pump();
    assert!(net.data(4, 0).contains(&b"without 3".to_vec()));
    // Restarted, node 1 has the members from its log, not its start-up
    // list.
    net.nodes[0] = None;
    let again = RaftNode::open(&net.dirs[0], 1, &IDS, &Default::default()).unwrap();
    assert_eq!(again.voters(0), Some(vec![1, 2, 4]));
}

/// Groups with members of their own (quorum queues of two of the three
/// nodes): the third node never hears of them; the members survive a
/// restart; a removed group is gone after one, and a new group of the
/// same id starts with nothing of the old one's.
#[test]
fn groups_of_their_own_members_and_removed_groups_stay_removed() {
    let mut net = Net::new(&[]);
    for id in [1, 2] {
        net.node(id).add_group_with(7, &[1, 2]).unwrap();
    }
    net.node(1).campaign(7).unwrap();
    net.pump();
    for p in payloads(0, 10) {
        net.node(1).propose(7, p).unwrap();
    }
    net.pump();
    assert_eq!(net.data(2, 7), payloads(0, 10));
    assert!(net.data(3, 7).is_empty());
    assert_eq!(net.node(3).groups().count(), 0);
    assert_eq!(net.node(2).voters(7), Some(vec![1, 2]));
    // A restart finds the group and its members (not every node's).
    net.nodes[1] = None;
    let mut n = RaftNode::open(&net.dirs[1], 2, &IDS, &Default::default()).unwrap();
    assert_eq!(n.voters(7), Some(vec![1, 2]));
    n.remove_group(7).unwrap();
    n.drive().unwrap();
    drop(n);
    let mut n = RaftNode::open(&net.dirs[1], 2, &IDS, &Default::default()).unwrap();
    assert_eq!(n.groups().count(), 0);
    n.add_group_with(7, &[2]).unwrap();
    n.campaign(7).unwrap();
    let out = n.drive().unwrap();
    assert!(
        out.applied.is_empty(),
        "the old group's entries came back: {:?}",
        out.applied
    );
    n.propose(7, b"new".to_vec()).unwrap();
    let applied: Vec<Vec<u8>> = (0..3)
        .flat_map(|_| n.drive().unwrap().applied)
        .map(|a| a.data)
        .collect();
    assert_eq!(applied, vec![b"new".to_vec()]);
    assert!(n.is_leader(7));
}

#[test]
fn a_leader_keeps_the_entries_a_live_follower_lacks() {
    let mut net = Net::new(&[0]);
    // Node 3 misses 100 entries (its link lost them) but is not reported
    // down: the leader's compaction stops where node 3 is.
    commit_without_node_3(&mut net, 110);
    let last = net.applied[0].iter().map(|a| a.index).max().unwrap();
    net.node(1).compact(0, last).unwrap();
    let first = net.node(1).first_index(0).unwrap();
    assert!(first <= last - 99, "compacted to {first} of {last}");
    net.cut.clear();
    net.ticks(5);
    net.pump();
    assert!(
        !net.applied[2].iter().any(|a| a.snapshot),
        "no snapshot was needed"
    );
    assert_eq!(state(&net.applied[2], 0), payloads(0, 110));
}
