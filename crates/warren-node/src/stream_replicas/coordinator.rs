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
                if meta.leader().as_deref() != Some(s.node.as_str()) {
                    s.elections.lock().clear();
                    continue;
                }
                s.coordinate(&meta);
            }
        });
    }

    fn coordinate(self: &Arc<Self>, meta: &Arc<Meta>) {
        let placements: Vec<Placement> = self
            .registry
            .lock()
            .all()
            .filter(|p| p.members.len() > 1)
            .cloned()
            .collect();
        for p in placements {
            let key = (p.vhost.clone(), p.name.clone());
            if p.leader.as_ref().is_some_and(|l| self.is_up(l)) {
                self.elections.lock().remove(&key);
                continue;
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
            let ask = {
                let mut es = self.elections.lock();
                let e = es.entry(key.clone()).or_insert_with(|| Election::new(p.epoch));
                if e.epoch != p.epoch || e.started.elapsed() > ELECTION_TIMEOUT {
                    *e = Election::new(p.epoch);
                }
                e.tails.is_empty() && e.started.elapsed() < CHECK * 2
            };
            if ask {
                let stream = stream_ref(&p);
                for m in p.members.iter().filter(|m| Some(*m) != p.leader.as_ref()) {
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
            tracing::info!(vhost = %p.vhost, stream = %p.name, epoch = p.epoch + 1, %leader, "electing a stream leader");
            let c = Command::StreamLeader {
                vhost: p.vhost.clone(),
                name: p.name.clone(),
                epoch: p.epoch + 1,
                leader,
            };
            let data = serde_json::to_vec(&c).expect("a command encodes");
            let meta = meta.clone();
            tokio::spawn(async move {
                if let Err(e) = meta.propose(data, command::COMMIT_TIMEOUT).await {
                    tracing::info!(stream = %p.name, "a stream leader not agreed: {e}; the election starts again");
                }
            });
        }
    }

    /// A member's answer to `Stop`.
    pub(super) fn stopped(&self, from: &str, stream: &StreamRef, tail: Option<(u64, u64)>) {
        let key = (
            stream.vhost.clone(),
            String::from_utf8_lossy(&stream.name).into_owned(),
        );
        let mut es = self.elections.lock();
        if let Some(e) = es.get_mut(&key) {
            if e.epoch == stream.epoch && !e.proposed {
                e.tails.insert(from.to_string(), tail);
            }
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
