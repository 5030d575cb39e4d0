//! Replicated streams on this node: which streams it is a
//! member of and in what role, as the metadata log placed them
//! (`registry.rs`, every node holding every stream's placement, the role
//! of RabbitMQ's stream coordinator), and the replication between a
//! stream's leader (`leader.rs`) and its replicas (`replica.rs`) over the
//! node pairs' links (`warren_peer::stream`, through `outbox.rs`).
//!
//! A stream declared on a cluster gets `x-initial-cluster-size` members
//! (all nodes by default, RabbitMQ's rule); each member holds the
//! stream's log locally; only the leader writes, and a chunk is confirmed
//! (and readable anywhere) once a majority of the members has it.

pub mod coordinator;
pub mod forward;
pub mod leader;
pub mod outbox;
pub mod registry;
pub mod replica;
pub mod status;
#[cfg(test)]
mod wired_tests;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use warren_amqp091::ShortStr;
use warren_core::queue::{QuorumView, StreamLog, StreamRole, StreamSystem};
use warren_core::vhost::VHost;
use warren_core::BrokerError;
use warren_peer::stream::{StreamMsg, StreamRef};

use crate::cluster::links::DataSender;
use crate::cluster::replicas::StreamReplicas;
use crate::definitions::records::Placement;
use leader::Leading;
use outbox::Outbox;
use registry::Registry;
use replica::Following;

enum Run {
    Leader(Arc<Leading>),
    Replica(Arc<Following>),
}

impl Run {
    fn stop(&self) {
        if let Run::Leader(l) = self {
            l.stop();
        }
    }
}

pub struct Streams {
    node: String,
    registry: Mutex<Registry>,
    out: Arc<Outbox>,
    /// This node's members at work, by (vhost, name).
    runs: Mutex<HashMap<(String, String), Run>>,
    /// Logs attached, to take up a new role without reopening.
    logs: Mutex<HashMap<(String, String), Weak<StreamLog>>>,
    /// The coordinator's elections under way (on the metadata leader).
    elections: Mutex<HashMap<(String, String), coordinator::Election>>,
    /// This node's members stopped by an election, until a new epoch.
    halts: Mutex<HashMap<(String, String), coordinator::Halt>>,
    /// `stream_status` requests to other members.
    asks: status::Asks,
    /// Publishes handed to leaders on other nodes.
    writes: forward::Writes,
}

impl Streams {
    pub fn open(data_dir: &Path, node: &str) -> std::io::Result<Arc<Streams>> {
        Ok(Arc::new(Streams {
            node: node.to_string(),
            registry: Mutex::new(Registry::load(data_dir)?),
            out: Arc::new(Outbox::default()),
            runs: Mutex::new(HashMap::new()),
            logs: Mutex::new(HashMap::new()),
            elections: Mutex::new(HashMap::new()),
            halts: Mutex::new(HashMap::new()),
            asks: Default::default(),
            writes: Default::default(),
        }))
    }

    /// Every second, replicas that are not following ask again.
    pub fn start_ticking(self: &Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut t = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = t.tick() => {}
                    _ = shutdown.changed() => return,
                }
                let Some(s) = me.upgrade() else { return };
                let replicas: Vec<Arc<Following>> = s
                    .runs
                    .lock()
                    .values()
                    .filter_map(|r| match r {
                        Run::Replica(f) => Some(f.clone()),
                        Run::Leader(_) => None,
                    })
                    .collect();
                for f in replicas {
                    f.tick();
                }
            }
        });
    }

    pub fn placement(&self, vhost: &str, name: &str) -> Option<Placement> {
        self.registry.lock().get(vhost, name).cloned()
    }

    /// A replicated stream's leader, members and the members reachable
    /// from here (the API's `leader`, `members`, `online`); None for a
    /// stream that is not replicated.
    pub fn view(&self, vhost: &str, name: &str) -> Option<QuorumView> {
        let p = self.placement(vhost, name)?;
        if p.members.len() < 2 {
            return None;
        }
        let names = |v: Vec<&String>| v.into_iter().map(|n| ShortStr::from(n.as_str())).collect();
        Some(QuorumView {
            leader: p.leader.as_deref().map(ShortStr::from),
            online: names(p.members.iter().filter(|m| self.is_up(m)).collect()),
            members: names(p.members.iter().collect()),
        })
    }

    /// How many streams each node is a member of (placement's balance).
    pub fn memberships(&self) -> HashMap<String, usize> {
        let mut n = HashMap::new();
        for p in self.registry.lock().all() {
            for m in &p.members {
                *n.entry(m.clone()).or_default() += 1;
            }
        }
        n
    }

    /// How many streams each node leads.
    pub fn leaderships(&self) -> HashMap<String, usize> {
        let mut n = HashMap::new();
        for p in self.registry.lock().all() {
            if let Some(l) = &p.leader {
                *n.entry(l.clone()).or_default() += 1;
            }
        }
        n
    }

    /// Every placement (a metadata snapshot carries them).
    pub fn placements(&self) -> Vec<Placement> {
        self.registry.lock().all().cloned().collect()
    }

    /// A metadata snapshot is installed: the placements are exactly its,
    /// before its queues are made (see [`Streams::settle_placements`]).
    pub fn install_placements(&self, want: &[Placement]) -> Result<(), String> {
        let have = self.placements();
        let mut reg = self.registry.lock();
        for p in &have {
            if !want.iter().any(|w| w.vhost == p.vhost && w.name == p.name) {
                reg.remove(&p.vhost, &p.name).map_err(|e| e.to_string())?;
            }
        }
        for p in want {
            if reg.get(&p.vhost, &p.name) != Some(p) {
                reg.put(p.clone()).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    /// After a snapshot's queues are made: each stream held here takes up
    /// the role its placement gives (a member that was not becomes one,
    /// one that no longer is lets its log go), as `set_members` does for
    /// a change applied in order.
    pub fn settle_placements(&self, broker: &warren_core::Broker) -> Result<(), BrokerError> {
        for p in self.placements() {
            let Some(vh) = broker.vhost(&p.vhost) else {
                continue;
            };
            let Some(q) = vh.find_queue(p.name.as_bytes()) else {
                continue;
            };
            let member = p.members.contains(&self.node);
            let leader = p.leader.clone().unwrap_or_else(|| p.members[0].clone());
            match (q.home.is_none(), member) {
                (false, true) => {
                    vh.rehome_queue(&q, None)?;
                }
                (true, false) => {
                    let key = (p.vhost.clone(), p.name.clone());
                    if let Some(r) = self.runs.lock().remove(&key) {
                        r.stop();
                    }
                    self.logs.lock().remove(&key);
                    vh.rehome_queue(&q, Some(ShortStr::from(leader.as_str())))?;
                    if let Some(log) = q.stream() {
                        log.discard();
                    }
                }
                (true, true) => {
                    if let Some(log) = self.local_log(&p.vhost, &p.name) {
                        self.take_role(&log);
                    }
                }
                (false, false) => {
                    if q.home.as_deref() != Some(leader.as_bytes()) {
                        vh.rehome_queue(&q, Some(ShortStr::from(leader.as_str())))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// A stream is placed (a declare applied): noted before its queue is
    /// made, so a member makes a member's log.
    pub fn placed(&self, p: Placement) -> Result<(), String> {
        self.registry
            .lock()
            .put(p)
            .map_err(|e| format!("cannot record a stream's placement: {e}"))
    }

    /// A stream is deleted: its placement and its member here go.
    pub fn removed(&self, vhost: &str, name: &str) {
        let key = (vhost.to_string(), name.to_string());
        if let Some(r) = self.runs.lock().remove(&key) {
            r.stop();
        }
        self.logs.lock().remove(&key);
        self.halts.lock().remove(&key);
        if let Err(e) = self.registry.lock().remove(vhost, name) {
            tracing::error!(vhost, stream = name, "cannot remove a stream's placement: {e}");
        }
    }

    /// The stream coordinator chose `leader` for `epoch` (one past the
    /// placement's): record it, take up the new role here, and on a node
    /// without a member reach the stream through its new leader.
    pub fn new_leader(&self, vh: &VHost, name: &str, epoch: u64, leader: &str) -> Result<(), BrokerError> {
        let Some(mut p) = self.placement(&vh.name, name) else {
            return Ok(());
        };
        if p.epoch + 1 != epoch || !p.members.iter().any(|m| m == leader) {
            return Ok(());
        }
        p.epoch = epoch;
        p.leader = Some(leader.to_string());
        let member = p.members.contains(&self.node);
        tracing::info!(vhost = %vh.name, stream = name, epoch, leader, "stream leader chosen");
        self.placed(p).map_err(BrokerError::Internal)?;
        let key = (vh.name.clone(), name.to_string());
        let log = self.logs.lock().get(&key).and_then(|w| w.upgrade());
        match log {
            Some(log) if member => self.take_role(&log),
            _ => {
                if let Some(q) = vh.find_queue(name.as_bytes()) {
                    if q.home.is_some() && q.home.as_deref() != Some(leader.as_bytes()) {
                        vh.rehome_queue(&q, Some(ShortStr::from(leader)))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// `add_replica` or `delete_replica` applied: the stream's members
    /// are `members` from now. A node that became a member makes the
    /// stream's log (its replica fills it from the leader); one that no
    /// longer is lets its log go and reaches the stream through its
    /// leader; the members take up their roles again (a leader counts
    /// its majority over the new members).
    pub fn set_members(&self, vh: &VHost, name: &str, members: &[String]) -> Result<(), BrokerError> {
        let Some(mut p) = self.placement(&vh.name, name) else {
            return Ok(());
        };
        if members.is_empty() || p.members == members {
            return Ok(());
        }
        let was = p.members.contains(&self.node);
        let is = members.contains(&self.node);
        p.members = members.to_vec();
        if p.leader.as_ref().is_some_and(|l| !members.contains(l)) {
            p.leader = None;
        }
        tracing::info!(vhost = %vh.name, stream = name, ?members, "stream members changed");
        let home = p.leader.clone().unwrap_or_else(|| members[0].clone());
        self.placed(p).map_err(BrokerError::Internal)?;
        let key = (vh.name.clone(), name.to_string());
        let Some(q) = vh.find_queue(name.as_bytes()) else {
            return Ok(());
        };
        match (was, is) {
            (false, true) => {
                // A member's queue in place of the remote one; making it
                // attaches its log, which takes up its role.
                vh.rehome_queue(&q, None)?;
            }
            (true, false) => {
                if let Some(r) = self.runs.lock().remove(&key) {
                    r.stop();
                }
                self.logs.lock().remove(&key);
                vh.rehome_queue(&q, Some(ShortStr::from(home.as_str())))?;
                if let Some(log) = q.stream() {
                    log.discard();
                }
            }
            (true, true) => {
                let log = self.logs.lock().get(&key).and_then(|w| w.upgrade());
                if let Some(log) = log {
                    self.take_role(&log);
                }
            }
            (false, false) => {
                if q.home.as_deref() != Some(home.as_bytes()) {
                    vh.rehome_queue(&q, Some(ShortStr::from(home.as_str())))?;
                }
            }
        }
        Ok(())
    }

    /// Take up the role the placement gives this node for `log`.
    fn take_role(&self, log: &Arc<StreamLog>) {
        let key = (log.vhost.clone(), log.name.clone());
        let Some(p) = self.placement(&log.vhost, &log.name) else {
            log.set_role(StreamRole::Alone);
            return;
        };
        // The same epoch and role: only the members changed.
        let kept = match self.runs.lock().get(&key) {
            Some(Run::Leader(l)) if l.stream.epoch == p.epoch && p.leader.as_ref() == Some(&self.node) => {
                l.set_members(&p.members, &self.node);
                true
            }
            Some(Run::Replica(f)) if f.stream.epoch == p.epoch && p.leader.as_ref() == Some(&f.leader) => {
                true
            }
            _ => false,
        };
        if kept && p.members.len() > 1 {
            if p.leader.as_ref() == Some(&self.node) {
                log.set_role(StreamRole::Leader {
                    epoch: p.epoch,
                    members: p.members.len(),
                });
            }
            return;
        }
        if let Some(r) = self.runs.lock().remove(&key) {
            r.stop();
        }
        if p.members.len() <= 1 || !p.members.contains(&self.node) {
            log.set_role(StreamRole::Alone);
            return;
        }
        let stream = StreamRef {
            vhost: p.vhost.clone(),
            name: Bytes::from(p.name.clone().into_bytes()),
            epoch: p.epoch,
        };
        let run = match &p.leader {
            Some(l) if *l == self.node => {
                log.set_role(StreamRole::Leader {
                    epoch: p.epoch,
                    members: p.members.len(),
                });
                Run::Leader(Leading::start(
                    log.clone(),
                    stream,
                    &p.members,
                    &self.node,
                    self.out.clone(),
                ))
            }
            leader => {
                log.set_role(StreamRole::Replica {
                    epoch: p.epoch,
                    leader: leader.as_deref().map(ShortStr::from),
                });
                match leader {
                    Some(l) => Run::Replica(Following::new(log.clone(), stream, l.clone(), self.out.clone())),
                    None => return,
                }
            }
        };
        let asking = match &run {
            Run::Replica(f) => Some(f.clone()),
            Run::Leader(_) => None,
        };
        self.runs.lock().insert(key, run);
        // Only now: the answer is routed by `runs`, and on a quick link
        // it could come back before the insert and be dropped, leaving the
        // replica waiting for it (5 x RETRY) with its consumers idle.
        if let Some(f) = asking {
            f.ask();
        }
    }

    fn run_of(&self, m: &StreamRef) -> Option<RunRef> {
        let key = (m.vhost.clone(), String::from_utf8_lossy(&m.name).into_owned());
        match self.runs.lock().get(&key) {
            Some(Run::Leader(l)) if l.stream.epoch == m.epoch => Some(RunRef::Leader(l.clone())),
            Some(Run::Replica(f)) if f.stream.epoch == m.epoch => Some(RunRef::Replica(f.clone())),
            _ => None,
        }
    }

    /// A link is up: replicas following that node ask at once.
    pub fn up(&self, node: &str, data: DataSender) {
        self.out.up(node, data);
        for f in self.replicas_of(node) {
            f.up();
        }
    }

    pub fn down(&self, node: &str) {
        self.out.down(node);
        self.fail_writes_to(node);
        let runs: Vec<RunRef> = self
            .runs
            .lock()
            .values()
            .map(|r| match r {
                Run::Leader(l) => RunRef::Leader(l.clone()),
                Run::Replica(f) => RunRef::Replica(f.clone()),
            })
            .collect();
        for r in runs {
            match r {
                RunRef::Leader(l) => l.down(node),
                RunRef::Replica(f) if f.leader == node => f.down(),
                RunRef::Replica(_) => {}
            }
        }
    }

    fn replicas_of(&self, node: &str) -> Vec<Arc<Following>> {
        self.runs
            .lock()
            .values()
            .filter_map(|r| match r {
                Run::Replica(f) if f.leader == node => Some(f.clone()),
                _ => None,
            })
            .collect()
    }

    /// A replication message from `from`.
    pub fn received(&self, from: &str, m: StreamMsg) {
        let run = self.run_of(m.stream());
        match (m, run) {
            (StreamMsg::Follow { .. }, Some(RunRef::Leader(l))) => l.follow(from),
            (StreamMsg::Follow { stream }, _) => {
                self.out.send(
                    from,
                    StreamMsg::Refuse {
                        stream,
                        why: format!("node '{}' does not lead that stream in that epoch", self.node),
                    },
                );
            }
            (StreamMsg::From { next, last, .. }, Some(RunRef::Leader(l))) => l.from(from, next, last),
            (StreamMsg::Ack { last, next, .. }, Some(RunRef::Leader(l))) => l.ack(from, last, next),
            (
                StreamMsg::Track {
                    reference, offset, ..
                },
                Some(RunRef::Leader(l)),
            ) => {
                if let Err(e) = l.log.store_offset(&reference, offset) {
                    tracing::warn!(stream = %l.log.name, "cannot store a replica's consumer offset: {e}");
                }
            }
            (StreamMsg::Overview { range, epochs, .. }, Some(RunRef::Replica(f))) if f.leader == from => {
                f.overview(range, epochs)
            }
            (StreamMsg::Chunks { committed, bytes, .. }, Some(RunRef::Replica(f))) if f.leader == from => {
                f.chunks(committed, bytes)
            }
            (StreamMsg::Refuse { why, .. }, Some(RunRef::Replica(f))) if f.leader == from => f.refused(&why),
            (StreamMsg::Stop { stream }, _) => {
                if let Some(tail) = self.stop_here(&stream) {
                    self.out.send(from, StreamMsg::Stopped { stream, tail });
                }
            }
            (StreamMsg::Stopped { stream, tail }, _) => self.stopped(from, &stream, tail),
            (StreamMsg::Status { stream, req }, _) => self.status_asked(from, stream, req),
            (
                StreamMsg::Write {
                    req,
                    reference,
                    publish,
                    ..
                },
                Some(RunRef::Leader(l)),
            ) => self.write_here(from, &l, req, reference, publish),
            (StreamMsg::Write { stream, req, .. }, _) => {
                self.out.send(
                    from,
                    StreamMsg::Written {
                        stream,
                        req,
                        code: warren_stream::command::code::STREAM_NOT_AVAILABLE,
                    },
                );
            }
            (StreamMsg::Written { req, code, .. }, _) => self.written(req, code),
            (StreamMsg::StatusIs { req, row, .. }, _) => self.status_answered(req, &row),
            (m, _) => {
                tracing::debug!(peer = %from, kind = m.kind(), "a stale stream replication message")
            }
        }
    }

    /// This node's member's log of a stream, if it holds one.
    pub fn local_log(&self, vhost: &str, name: &str) -> Option<Arc<StreamLog>> {
        self.logs
            .lock()
            .get(&(vhost.to_string(), name.to_string()))
            .and_then(|w| w.upgrade())
    }

    /// The coordinator ends `stream`'s epoch here: the member stops
    /// following (or leading) in it. Its last chunk, or None when this
    /// node is not a member in that epoch (nothing to answer).
    pub(super) fn stop_here(&self, stream: &StreamRef) -> Option<Option<(u64, u64)>> {
        let key = (
            stream.vhost.clone(),
            String::from_utf8_lossy(&stream.name).into_owned(),
        );
        let p = self.placement(&key.0, &key.1)?;
        if p.epoch != stream.epoch || !p.members.contains(&self.node) {
            return None;
        }
        self.halts.lock().insert(
            key.clone(),
            coordinator::Halt {
                epoch: stream.epoch,
                since: std::time::Instant::now(),
            },
        );
        let run = self.runs.lock().remove(&key);
        match run {
            Some(Run::Replica(f)) => {
                let tail = f.stop();
                self.runs.lock().insert(key, Run::Replica(f));
                Some(tail)
            }
            Some(Run::Leader(l)) => Some(l.step_down()),
            None => {
                let log = self.logs.lock().get(&key).and_then(|w| w.upgrade())?;
                Some(log.last_chunk())
            }
        }
    }

    /// A consumer on this node stores its offset in a stream this node
    /// follows: the leader writes it. False when no leader is reachable.
    pub fn track(&self, log: &StreamLog, reference: &str, offset: u64) -> bool {
        let StreamRole::Replica {
            epoch,
            leader: Some(l),
        } = log.role()
        else {
            return false;
        };
        self.out.send(
            &l.to_str_lossy(),
            StreamMsg::Track {
                stream: StreamRef {
                    vhost: log.vhost.clone(),
                    name: Bytes::from(log.name.clone().into_bytes()),
                    epoch,
                },
                reference: reference.to_string(),
                offset,
            },
        )
    }

    pub fn is_up(&self, node: &str) -> bool {
        node == self.node || self.out.is_up(node)
    }
}

impl StreamReplicas for Streams {
    fn placed(&self, placement: Placement) -> Result<(), String> {
        Streams::placed(self, placement)
    }

    fn removed(&self, vhost: &str, name: &str) {
        Streams::removed(self, vhost, name)
    }

    fn new_leader(&self, vh: &VHost, name: &str, epoch: u64, leader: &str) -> Result<(), BrokerError> {
        Streams::new_leader(self, vh, name, epoch, leader)
    }

    fn set_members(&self, vh: &VHost, name: &str, members: &[String]) -> Result<(), BrokerError> {
        Streams::set_members(self, vh, name, members)
    }

    fn placements(&self) -> Vec<Placement> {
        Streams::placements(self)
    }

    fn install_placements(&self, want: &[Placement]) -> Result<(), String> {
        Streams::install_placements(self, want)
    }

    fn settle_placements(&self, broker: &warren_core::Broker) -> Result<(), BrokerError> {
        Streams::settle_placements(self, broker)
    }

    fn up(&self, node: &str, data: DataSender) {
        Streams::up(self, node, data)
    }

    fn down(&self, node: &str) {
        Streams::down(self, node)
    }

    fn received(&self, from: &str, m: StreamMsg) {
        Streams::received(self, from, m)
    }
}

enum RunRef {
    Leader(Arc<Leading>),
    Replica(Arc<Following>),
}

impl StreamSystem for Streams {
    fn is_member(&self, vhost: &str, name: &ShortStr) -> bool {
        self.registry
            .lock()
            .get(vhost, &name.to_str_lossy())
            .is_some_and(|p| p.members.contains(&self.node))
    }

    fn attach(&self, log: &Arc<StreamLog>) {
        self.logs
            .lock()
            .insert((log.vhost.clone(), log.name.clone()), Arc::downgrade(log));
        self.take_role(log);
    }
}
