//! A replicated stream's three members wired by hand: a message between
//! them arrives only when the test delivers it, so an election, or a link
//! replaced, can be cut exactly where a fault would cut it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use warren_core::queue::StreamLog;
use warren_peer::Message;

use super::coordinator::Chosen;
use super::Streams;
use crate::definitions::records::Placement;

const NODES: [&str; 3] = ["a", "b", "c"];

struct Cluster {
    _dir: tempfile::TempDir,
    nodes: HashMap<&'static str, Arc<Streams>>,
    /// Kept open: a member holds its log weakly.
    logs: HashMap<&'static str, Arc<StreamLog>>,
    /// The links up: (from, to) and what `from` queued for `to`.
    links: HashMap<(&'static str, &'static str), mpsc::UnboundedReceiver<Message>>,
}

/// Stream "s" on members a, b, c, led by a, declared with `epoch`.
fn placement(epoch: u64) -> Placement {
    Placement {
        vhost: "/".into(),
        name: "s".into(),
        members: NODES.iter().map(|n| n.to_string()).collect(),
        leader: Some("a".into()),
        epoch,
        first_epoch: epoch,
    }
}

impl Cluster {
    /// Stream "s" on members a, b, c, led by a in epoch 1; a's log holds
    /// one chunk the others do not (the longest log), and no links yet.
    fn new() -> Cluster {
        Cluster::taken_up_by(&NODES)
    }

    /// The same, the stream taken up so far by `members` only (the others
    /// have not applied its placement yet: see [`Cluster::take_up`]).
    fn taken_up_by(members: &[&str]) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let placement = placement(1);
        let mut nodes = HashMap::new();
        let mut logs = HashMap::new();
        for n in NODES {
            let home = dir.path().join(n);
            std::fs::create_dir_all(&home).unwrap();
            let s = Streams::open(&home, n).unwrap();
            s.placed(placement.clone()).unwrap();
            let log = StreamLog::open(&home.join("streams"), "/", "s", Default::default(), 0).unwrap();
            if n == "a" {
                log.append_marker().unwrap();
            }
            if members.contains(&n) {
                warren_core::queue::StreamSystem::attach(&*s, &log);
            }
            nodes.insert(n, s);
            logs.insert(n, log);
        }
        Cluster {
            _dir: dir,
            nodes,
            logs,
            links: HashMap::new(),
        }
    }

    /// Member `n` takes the stream up (as its node applies the placement).
    fn take_up(&self, n: &str) {
        warren_core::queue::StreamSystem::attach(&*self.nodes[n], &self.logs[n]);
    }

    fn node(&self, n: &str) -> &Arc<Streams> {
        &self.nodes[n]
    }

    fn connect(&mut self, x: &'static str, y: &'static str) {
        for (from, to) in [(x, y), (y, x)] {
            let (tx, rx) = mpsc::unbounded_channel();
            self.links.insert((from, to), rx);
            self.nodes[from].up(to, tx);
        }
    }

    /// Every pair of nodes linked.
    fn connect_all(&mut self) {
        self.connect("a", "b");
        self.connect("a", "c");
        self.connect("b", "c");
    }

    fn cut(&mut self, x: &'static str, y: &'static str) {
        for (from, to) in [(x, y), (y, x)] {
            self.links.remove(&(from, to));
            self.nodes[from].down(to);
        }
    }

    /// Deliver what the links hold, and what that sends, until quiet.
    fn deliver(&mut self) {
        let Cluster { nodes, links, .. } = self;
        loop {
            let mut any = false;
            for ((from, to), rx) in links.iter_mut() {
                while let Ok(m) = rx.try_recv() {
                    any = true;
                    if let Message::Stream(m) = m {
                        nodes[to].received(from, m);
                    }
                }
            }
            if !any {
                return;
            }
        }
    }

    /// `coordinator` checks and the answers come in, a few times: the
    /// leaders it chose.
    fn elect(&mut self, coordinator: &str) -> Vec<Chosen> {
        let mut chosen = Vec::new();
        for _ in 0..4 {
            chosen.extend(self.node(coordinator).coordinate());
            self.deliver();
        }
        chosen
    }
}

fn chosen(epoch: u64, leader: &str) -> Vec<Chosen> {
    vec![Chosen {
        vhost: "/".into(),
        name: "s".into(),
        epoch,
        leader: leader.into(),
    }]
}

#[tokio::test]
async fn an_election_begun_ends_the_epoch_though_the_old_leader_comes_back() {
    let mut c = Cluster::new();
    c.connect_all();
    c.deliver();
    assert!(c.elect("b").is_empty(), "no election while the leader is up");

    // b leads the metadata group and loses sight of a: it stops its own
    // member and asks c to stop, and a is back before c's answer is in.
    c.cut("a", "b");
    c.cut("a", "c");
    assert!(c.node("b").coordinate().is_empty());
    c.connect("a", "b");
    c.connect("a", "c");
    // The members stopped take nothing more from a in epoch 1, so the
    // epoch must end; a, asked too, has the longest log and leads again.
    assert_eq!(c.elect("b"), chosen(2, "a"));
    assert!(c.elect("b").is_empty(), "one leader per epoch");
    assert_eq!(c.logs["a"].last_chunk(), Some((1, 0)));
}

#[tokio::test]
async fn members_stopped_for_a_forgotten_election_remind_the_next_coordinator() {
    let mut c = Cluster::new();
    c.connect_all();
    c.deliver();

    // b begins an election without a and both b and c stop, but b
    // loses the metadata leadership before it chooses: it forgets.
    c.cut("a", "b");
    c.cut("a", "c");
    assert!(c.node("b").coordinate().is_empty());
    c.deliver();
    c.node("b").resign();
    c.connect("a", "b");
    c.connect("a", "c");
    c.deliver();

    // c leads the metadata group now and sees the stream's leader up.
    assert!(c.elect("c").is_empty());
    // The stopped members say so, and c ends the epoch. They are a
    // majority, so a committed nothing since, and they choose between
    // them (a's last chunk, on no majority, is not committed).
    c.node("b").remind("c", Duration::ZERO);
    c.node("c").remind("c", Duration::ZERO);
    c.deliver();
    assert_eq!(c.elect("c"), chosen(2, "b"));
    // Once the epoch is over, nobody reminds any more.
    let mut p = c.node("c").placement("/", "s").unwrap();
    p.epoch = 2;
    p.leader = Some("b".into());
    for n in NODES {
        c.node(n).placed(p.clone()).unwrap();
        c.node(n).remind("c", Duration::ZERO);
    }
    assert!(c.links.values_mut().all(|rx| rx.try_recv().is_err()));
    assert!(c.elect("c").is_empty());
}

/// Deliver until quiet, letting the leader's pump (a task) run between.
async fn settle(c: &mut Cluster) {
    for _ in 0..20 {
        tokio::task::yield_now().await;
        c.deliver();
    }
}

#[tokio::test]
async fn a_replica_whose_link_is_replaced_unseen_asks_again_and_catches_up() {
    let mut c = Cluster::new();
    c.connect_all();
    settle(&mut c).await;
    assert_eq!(c.logs["c"].last_chunk(), Some((1, 0)), "c streams from a");

    // a finds c silent (c paused past the link's timeout) and drops its
    // link; a's new link is up at c before c reads the old one's end, so
    // c sees that link come up and never sees one go down.
    c.node("a").down("c");
    c.connect("a", "c");
    settle(&mut c).await;

    c.logs["a"].append_marker().unwrap();
    settle(&mut c).await;
    assert_eq!(c.logs["b"].last_chunk(), Some((1, 1)));
    assert_eq!(
        c.logs["c"].last_chunk(),
        Some((1, 1)),
        "c is sent what a wrote since"
    );
}

#[tokio::test(start_paused = true)]
async fn replicas_refused_before_their_leader_leads_ask_again_soon() {
    // b and c take the new stream up before a does, and a refuses them.
    let mut c = Cluster::taken_up_by(&["b", "c"]);
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    for n in NODES {
        c.node(n).start_ticking(shutdown.clone());
    }
    c.connect_all();
    settle(&mut c).await;
    assert_eq!(c.logs["b"].last_chunk(), None);

    // They ask again after their first, short back-off, not the node's
    // next tick (a second away) or the longest back-off.
    c.take_up("a");
    tokio::time::sleep(super::replica::RETRY_FIRST * 2).await;
    settle(&mut c).await;
    assert_eq!(c.logs["b"].last_chunk(), Some((1, 0)), "b streams from a");
    assert_eq!(c.logs["c"].last_chunk(), Some((1, 0)), "c streams from a");
}

/// Replication messages name a stream by (vhost, name, epoch). A stream
/// declared again under a deleted one's name starts at the declare's
/// index in the metadata log (`Placement::first_epoch`), above every
/// epoch of the deleted one; when both began at 1, a member that applied
/// the delete and the declare before its leader applied the delete was
/// answered, and filled, by the old leader, and never followed the new.
#[tokio::test(start_paused = true)]
async fn a_stream_deleted_and_declared_again_is_not_filled_from_its_old_leader() {
    let mut c = Cluster::new();
    c.connect_all();
    settle(&mut c).await;
    c.logs["a"].append_marker().unwrap();
    c.logs["a"].append_marker().unwrap();
    settle(&mut c).await;
    assert_eq!(c.logs["b"].last_chunk(), Some((1, 2)));

    // "s" is deleted and declared again; b applies both before a has
    // applied the delete, so b's new member asks a's old leader.
    let again = |c: &mut Cluster, n: &'static str| {
        c.node(n).removed("/", "s");
        c.logs[n].discard();
        let home = c._dir.path().join(n).join("again");
        // The declare's index: past the entries of the first one.
        c.node(n).placed(placement(7)).unwrap();
        let log = StreamLog::open(&home, "/", "s", Default::default(), 0).unwrap();
        warren_core::queue::StreamSystem::attach(&**c.node(n), &log);
        c.logs.insert(n, log);
    };
    again(&mut c, "b");
    settle(&mut c).await;
    again(&mut c, "a");
    again(&mut c, "c");
    settle(&mut c).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    settle(&mut c).await;

    c.logs["a"].append_marker().unwrap();
    settle(&mut c).await;
    assert_eq!(c.logs["a"].last_chunk(), Some((7, 0)));
    assert_eq!(c.logs["c"].last_chunk(), Some((7, 0)), "c follows the new stream");
    assert_eq!(
        c.logs["b"].last_chunk(),
        Some((7, 0)),
        "b holds the new stream's chunks, none of the old one's"
    );
}
