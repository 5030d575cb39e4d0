//! The stream coordinator's elections (rabbit_stream_coordinator's role,
//! run by whichever node leads the metadata group): when a replicated
//! stream's leader is unreachable, every reachable member is asked to
//! stop in the leader's epoch and say where its log ends (`Stop`,
//! `Stopped`); once a majority of the members has stopped, the one with
//! the highest (epoch, chunk id) leads the next epoch (`StreamLeader`
//! through the metadata log). A committed chunk is on a majority, so
//! some member of any stopped majority holds it, and the longest log
//! among them holds every one; a stopped member takes nothing more from
//! the old leader, so it cannot commit past what was counted.
//!
//! Hence an election once begun always ends its epoch, even when the old
//! leader comes back meanwhile (it is asked to stop too, and may well be
//! chosen again): a stopped member waits for a new epoch. The elections
//! live in the coordinator's memory only, so a member stopped for long
//! reminds whichever node leads the metadata group now, which begins the
//! election again if it knows of none.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use warren_peer::stream::{StreamMsg, StreamRef};

use super::Streams;
use crate::cluster::command::{self, Command};
use crate::cluster::meta::Meta;
use crate::definitions::records::Placement;

/// How often the coordinator looks for streams without a leader.
const CHECK: Duration = Duration::from_millis(250);

/// An election that has not finished by then starts again (members that
/// answered may have gone meanwhile).
const ELECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// A member stopped this long with no new epoch reminds the coordinator.
const REMIND: Duration = Duration::from_secs(10);

/// This node's member of a stream was stopped in `epoch` (not yet
/// reminded since `since`).
pub struct Halt {
    pub epoch: u64,
    pub since: Instant,
}

pub struct Election {
    epoch: u64,
    started: Instant,
    /// The members that stopped, and their last chunk.
    tails: HashMap<String, Option<(u64, u64)>>,
    proposed: bool,
}

impl Election {
    fn new(epoch: u64) -> Election {
        Election {
            epoch,
            started: Instant::now(),
            tails: HashMap::new(),
            proposed: false,
        }
    }
}

/// A stream's leader for the next epoch, as an election chose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    pub vhost: String,
    pub name: String,
    pub epoch: u64,
    pub leader: String,
}

/// The member to lead next: the highest tail (epoch, then chunk id; an
/// empty log last), the first in the placement's order among equals.
pub fn select_leader(p: &Placement, tails: &HashMap<String, Option<(u64, u64)>>) -> Option<String> {
    let mut best: Option<(&String, Option<(u64, u64)>)> = None;
    for m in &p.members {
        let Some(t) = tails.get(m) else { continue };
        if best.is_none_or(|(_, b)| *t > b) {
            best = Some((m, *t));
        }
    }
    best.map(|(m, _)| m.clone())
}

/// How many of a stream's members make a majority.
fn majority(p: &Placement) -> usize {
    p.members.len() / 2 + 1
}

pub fn stream_ref(p: &Placement) -> StreamRef {
    StreamRef {
        vhost: p.vhost.clone(),
        name: Bytes::from(p.name.clone().into_bytes()),
        epoch: p.epoch,
    }
}

impl Streams {
    /// Run the coordinator's check every [`CHECK`] while this node leads
    /// the metadata group.
    pub fn start_coordinating(
        self: &Arc<Self>,
        meta: Arc<Meta>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(CHECK) => {}
                    _ = shutdown.changed() => return,
                }
                let Some(s) = me.upgrade() else { return };
                let leader = meta.leader();
                if let Some(l) = &leader {
                    s.remind(l, REMIND);
                }
                if leader.as_deref() != Some(s.node.as_str()) {
                    s.resign();
                    continue;
                }
                for c in s.coordinate() {
                    s.propose(&meta, c);
                }
            }
        });
    }

    /// Agree on a chosen leader through the metadata log.
    fn propose(&self, meta: &Arc<Meta>, c: Chosen) {
        tracing::info!(vhost = %c.vhost, stream = %c.name, epoch = c.epoch, leader = %c.leader, "electing a stream leader");
        let name = c.name.clone();
        let cmd = Command::StreamLeader {
            vhost: c.vhost,
            name: c.name,
            epoch: c.epoch,
            leader: c.leader,
        };
        let data = serde_json::to_vec(&cmd).expect("a command encodes");
        let meta = meta.clone();
        tokio::spawn(async move {
            if let Err(e) = meta.propose(data, command::COMMIT_TIMEOUT).await {
                tracing::info!(stream = %name, "a stream leader not agreed: {e}; the election starts again");
            }
        });
    }

    /// One check of every replicated stream: elections begun, members
    /// asked to stop, and the leaders chosen (to be agreed).
    pub(super) fn coordinate(&self) -> Vec<Chosen> {
        let mut chosen = Vec::new();
        let placements: Vec<Placement> = self
            .registry
            .lock()
            .all()
            .filter(|p| p.members.len() > 1)
            .cloned()
            .collect();
        for p in placements {
            let key = (p.vhost.clone(), p.name.clone());
            let leader_up = p.leader.as_ref().is_some_and(|l| self.is_up(l));
            {
                // An election of an earlier epoch is over. One of this
                // epoch goes on even when the leader is back: the members
                // it stopped take nothing more from it, so only a new
                // epoch sets them going again.
                let mut es = self.elections.lock();
                if es.get(&key).is_some_and(|e| e.epoch != p.epoch) {
                    es.remove(&key);
                }
                if leader_up && !es.contains_key(&key) {
                    continue;
                }
            }
            // An election needs a majority of the members stopped. A node
            // that reaches fewer (a metadata leader cut off from the rest,
            // which still believes it leads) could only stop its own
            // member, which would then wait for a new leader that never
            // comes and take nothing from the leader once the cut heals.
            let reachable = p
                .members
                .iter()
                .filter(|m| **m == self.node || self.is_up(m))
                .count();
            if reachable < majority(&p) {
                continue;
            }
            // In its first checks, the election asks every member that
            // has not answered, the old leader too if it is reachable.
            let ask: Vec<String> = {
                let mut es = self.elections.lock();
                let e = es.entry(key.clone()).or_insert_with(|| Election::new(p.epoch));
                if e.started.elapsed() > ELECTION_TIMEOUT {
                    *e = Election::new(p.epoch);
                }
                if e.proposed || e.started.elapsed() >= CHECK * 2 {
                    Vec::new()
                } else {
                    p.members
                        .iter()
                        .filter(|m| !e.tails.contains_key(*m))
                        .cloned()
                        .collect()
                }
            };
            let stream = stream_ref(&p);
            for m in &ask {
                if *m == self.node {
                    if let Some(tail) = self.stop_here(&stream) {
                        self.stopped(m, &stream, tail);
                    }
                } else if self.is_up(m) {
                    self.out.send(
                        m,
                        StreamMsg::Stop {
                            stream: stream.clone(),
                        },
                    );
                }
            }
            let winner = {
                let mut es = self.elections.lock();
                let Some(e) = es.get_mut(&key) else { continue };
                if e.proposed || e.tails.len() < majority(&p) {
                    continue;
                }
                e.proposed = true;
                select_leader(&p, &e.tails)
            };
            let Some(leader) = winner else { continue };
            chosen.push(Chosen {
                vhost: p.vhost,
                name: p.name,
                epoch: p.epoch + 1,
                leader,
            });
        }
        chosen
    }

    /// This node no longer leads the metadata group: its elections go.
    pub(super) fn resign(&self) {
        self.elections.lock().clear();
    }

    /// Every [`CHECK`], on every node: a member stopped for `after`
    /// with no new epoch says so to `coordinator` (the metadata leader),
    /// every `after`. The coordinator that stopped it may have lost its
    /// leadership, and its election with it; the next one ends the epoch.
    pub(super) fn remind(&self, coordinator: &str, after: Duration) {
        let due: Vec<StreamRef> = {
            let reg = self.registry.lock();
            let mut halts = self.halts.lock();
            halts.retain(|(vhost, name), s| reg.get(vhost, name).is_some_and(|p| p.epoch == s.epoch));
            halts
                .iter_mut()
                .filter(|(_, s)| s.since.elapsed() >= after)
                .map(|((vhost, name), s)| {
                    s.since = Instant::now();
                    StreamRef {
                        vhost: vhost.clone(),
                        name: Bytes::from(name.clone().into_bytes()),
                        epoch: s.epoch,
                    }
                })
                .collect()
        };
        for stream in due {
            let name = String::from_utf8_lossy(&stream.name).into_owned();
            let Some(log) = self.local_log(&stream.vhost, &name) else {
                continue;
            };
            let tail = log.last_chunk();
            tracing::info!(vhost = %stream.vhost, stream = %name, epoch = stream.epoch, coordinator, "a member stopped with no new epoch reminds the coordinator");
            if coordinator == self.node {
                let node = self.node.clone();
                self.stopped(&node, &stream, tail);
            } else {
                self.out.send(coordinator, StreamMsg::Stopped { stream, tail });
            }
        }
    }

    /// A member's answer to `Stop`, or its reminder. One for an epoch
    /// with no election here (the coordinator that began it forgot)
    /// begins one: stopped members wait for a new epoch.
    pub(super) fn stopped(&self, from: &str, stream: &StreamRef, tail: Option<(u64, u64)>) {
        let key = (
            stream.vhost.clone(),
            String::from_utf8_lossy(&stream.name).into_owned(),
        );
        let current = self
            .placement(&key.0, &key.1)
            .is_some_and(|p| p.epoch == stream.epoch);
        let mut es = self.elections.lock();
        match es.get_mut(&key) {
            Some(e) if e.epoch == stream.epoch && !e.proposed => {
                e.tails.insert(from.to_string(), tail);
            }
            Some(e) if e.epoch == stream.epoch => {}
            _ if current => {
                let mut e = Election::new(stream.epoch);
                e.tails.insert(from.to_string(), tail);
                es.insert(key, e);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_log_of_the_newest_epoch_leads_and_the_first_member_among_equals() {
        let p = Placement {
            vhost: "/".into(),
            name: "s".into(),
            members: vec!["a".into(), "b".into(), "c".into()],
            leader: Some("a".into()),
            epoch: 2,
            first_epoch: 1,
        };
        let t = |v: &[(&str, Option<(u64, u64)>)]| v.iter().map(|(n, x)| (n.to_string(), *x)).collect();
        // A higher epoch wins over a longer log of an older one.
        assert_eq!(
            select_leader(&p, &t(&[("b", Some((1, 90))), ("c", Some((2, 50)))])),
            Some("c".into())
        );
        assert_eq!(
            select_leader(&p, &t(&[("b", Some((2, 60))), ("c", Some((2, 50)))])),
            Some("b".into())
        );
        assert_eq!(
            select_leader(&p, &t(&[("b", Some((2, 50))), ("c", Some((2, 50)))])),
            Some("b".into())
        );
        assert_eq!(
            select_leader(&p, &t(&[("b", None), ("c", Some((1, 0)))])),
            Some("c".into())
        );
        assert_eq!(select_leader(&p, &t(&[("c", None)])), Some("c".into()));
        assert_eq!(select_leader(&p, &t(&[])), None);
    }
}
