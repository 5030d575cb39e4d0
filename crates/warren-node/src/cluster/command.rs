//! Changes agreed through the metadata Raft group, and how each node
//! applies one: vhosts, users, their permissions and topic permissions,
//! policies, vhost and user limits, exchanges, queues (with the node each
//! lives on) and bindings, definitions imports, and a node's restart. On a
//! single node a change is applied at once, as before; on a cluster it is
//! proposed, and every node applies it once a majority has it on disk, in
//! the same order everywhere.
//!
//! Applying is deterministic and idempotent (a put replaces, a delete of
//! something absent does nothing), because a node may apply an entry
//! again after a crash (between its definitions' fsync and the record of
//! how far it had applied). Each node's apply gives an [`Outcome`] (made,
//! refused with an AMQP error, ...), the same on every node since their
//! topologies are the same; the proposer's caller gets its own node's.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use warren_amqp091::ShortStr;
use warren_core::queue::{Queue, REMOTE_OWNER};
use warren_core::{Broker, BrokerError, Limits, Permission, TopicPermission, User};

use crate::definitions::{BindingDef, Definitions, ExchangeDef, PolicyDef, QueueDef};
use crate::timers::Timers;

/// How long a change may take to commit before the caller hears it did
/// not (a minority cannot commit).
pub const COMMIT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    /// A vhost, and full permissions on it for the user who made it (as
    /// RabbitMQ grants the creator).
    PutVhost {
        name: String,
        creator: String,
    },
    /// The vhost, everything in it, and every grant on it.
    DeleteVhost {
        name: String,
    },
    /// A user added or replaced; its permissions stay, its limits too
    /// unless given.
    PutUser {
        name: String,
        password_hash: String,
        tags: Vec<String>,
        limits: Option<Limits>,
    },
    DeleteUser {
        name: String,
    },
    PutPermission {
        user: String,
        vhost: String,
        configure: String,
        write: String,
        read: String,
    },
    DeletePermission {
        user: String,
        vhost: String,
    },
    PutTopicPermission {
        user: String,
        vhost: String,
        exchange: String,
        write: String,
        read: String,
    },
    /// One exchange's, or (None) all of the user's in the vhost.
    DeleteTopicPermission {
        user: String,
        vhost: String,
        exchange: Option<String>,
    },
    PutPolicy(PolicyDef),
    DeletePolicy {
        vhost: String,
        name: String,
    },
    SetVhostLimit {
        vhost: String,
        name: String,
        value: i64,
    },
    ClearVhostLimit {
        vhost: String,
        name: String,
    },
    SetUserLimit {
        user: String,
        name: String,
        value: i64,
    },
    ClearUserLimit {
        user: String,
        name: String,
    },
    DeclareExchange(ExchangeDef),
    DeleteExchange {
        vhost: String,
        name: String,
        if_unused: bool,
    },
    Bind(BindingDef),
    Unbind(BindingDef),
    /// A queue that lives on `queue.node`; `owner` is the connection there
    /// that declared it exclusive. A quorum queue's group and members
    /// (node names, the first leader first) are in `quorum`; its
    /// `queue.node` is that first member.
    DeclareQueue {
        queue: QueueDef,
        owner: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        quorum: Option<QuorumPlacement>,
        /// A stream's members, the first leader first (its `queue.node`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<Vec<String>>,
    },
    DeleteQueue {
        vhost: String,
        name: String,
    },
    /// A quorum queue's members after a change of them (its Raft group's
    /// voters, in order; the first is the home other nodes reach it
    /// through): a node that is one now holds a member, a node that no
    /// longer is lets its own go.
    QuorumMembers {
        vhost: String,
        name: String,
        group: u64,
        members: Vec<String>,
    },
    /// A replicated stream's leader from `epoch` on: the member the stream
    /// coordinator (the metadata leader) chose when the last one was
    /// lost, the one with the longest log of a majority stopped in the
    /// epoch before. Applied only on the epoch it follows.
    StreamLeader {
        vhost: String,
        name: String,
        epoch: u64,
        leader: String,
    },
    /// A replicated stream's members after `add_replica` or
    /// `delete_replica` (same epoch; a removed leader leaves the stream
    /// without one until the coordinator elects the next).
    StreamMembers {
        vhost: String,
        name: String,
        members: Vec<String>,
    },
    /// Definitions imported through `home`, where their queues live; the
    /// groups of the quorum queues among them that are new, by (vhost,
    /// name), as the importing node placed them.
    Import {
        definitions: Box<Definitions>,
        home: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        quorum: Vec<(String, String, QuorumPlacement)>,
    },
    /// `node` started again: the queues that did not survive there
    /// (transient and exclusive ones) go everywhere.
    NodeStarted {
        node: String,
    },
    /// `node` is down (its link to the metadata leader is gone): its
    /// transient and exclusive queues go everywhere, that node included
    /// once it hears of it, as RabbitMQ deletes a down node's transient
    /// queues. Clients that reconnect elsewhere can declare them again.
    NodeDown {
        node: String,
    },
    /// `node` leaves the cluster for good (`forget_cluster_node`): the
    /// context of the membership change that removes it from the metadata
    /// group, so applied with it. Its queues go everywhere, as their
    /// messages went with it.
    ForgetNode {
        node: String,
    },
    /// `node` joins the cluster (`join_cluster`) with Raft id `id`, its
    /// links made to `address`: the context of the membership change that
    /// adds it to the metadata group. Every node keeps it in its node
    /// table and definitions store.
    AddNode {
        node: String,
        address: String,
        id: u64,
    },
}

/// What applying a command gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Done,
    /// A declare: whether it made the object (false: it was there).
    Created(bool),
    /// A queue removal: how many ready messages went with it.
    Removed(u64),
    /// Refused, with the AMQP reply code and detail.
    Refused {
        code: u16,
        text: String,
    },
}

impl From<Result<Outcome, BrokerError>> for Outcome {
    fn from(r: Result<Outcome, BrokerError>) -> Outcome {
        r.unwrap_or_else(|e| Outcome::Refused {
            code: e.reply_code(),
            text: e.detail().to_string(),
        })
    }
}

/// What a node applies commands with.
/// Where a new quorum queue's Raft group lives: its id (chosen at random
/// by the declaring node) and its members, the first leader first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumPlacement {
    pub group: u64,
    pub members: Vec<String>,
}

impl QuorumPlacement {
    /// On a member: note the group, so the queue made next is a member's.
    fn register(&self, a: &Applier, vhost: &str, queue: &str) -> Result<(), BrokerError> {
        if !self.members.contains(&a.node) {
            return Ok(());
        }
        let ids: Vec<u64> = self.members.iter().filter_map(|m| a.table.id(m)).collect();
        a.quorum
            .register(vhost, queue, self.group, ids)
            .map_err(BrokerError::Internal)
    }
}

pub struct Applier {
    pub broker: Arc<Broker>,
    pub timers: Arc<Timers>,
    /// Batches an import's definitions writes into one commit.
    pub definitions: Arc<crate::definitions::Store>,
    /// This node's name: a queue whose home it is, is made here.
    pub node: String,
    /// The cluster's nodes and their Raft ids.
    pub table: Arc<super::nodes::NodeTable>,
    /// The node's quorum queue groups (a declared one is registered here
    /// on its members before the queue is made).
    pub quorum: Arc<dyn super::replicas::QuorumGroups>,
    /// Replicated streams' placements (every node keeps every stream's).
    pub streams: Option<Arc<dyn super::replicas::StreamReplicas>>,
}

impl Command {
    /// Apply to this node (`timers` arms what TTLs and expiries need);
    /// `index` is the entry's in the metadata log.
    pub fn apply(&self, a: &Applier, index: u64) -> Outcome {
        let (broker, timers) = (&*a.broker, &a.timers);
        match self {
            Command::PutVhost { name, creator } => {
                broker.add_vhost(name);
                broker.update_user(creator, |u| {
                    u.permissions.entry(name.clone()).or_insert_with(Permission::full);
                });
            }
            Command::DeleteVhost { name } => {
                broker.delete_vhost(name);
                for u in broker.users() {
                    if u.permissions.contains_key(name) {
                        broker.update_user(&u.name, |u| {
                            u.permissions.remove(name);
                        });
                    }
                }
            }
            Command::PutUser {
                name,
                password_hash,
                tags,
                limits,
            } => {
                let (permissions, topic_permissions, old_limits) = broker
                    .user(name)
                    .map(|u| (u.permissions, u.topic_permissions, u.limits))
                    .unwrap_or_default();
                broker.put_user(User {
                    name: name.clone(),
                    password_hash: password_hash.clone(),
                    tags: tags.clone(),
                    permissions,
                    topic_permissions,
                    limits: limits.clone().unwrap_or(old_limits),
                    token: None,
                });
            }
            Command::DeleteUser { name } => {
                broker.delete_user(name);
            }
            Command::PutPermission {
                user,
                vhost,
                configure,
                write,
                read,
            } => match Permission::new(configure, write, read) {
                Ok(p) => {
                    broker.update_user(user, |u| {
                        u.permissions.insert(vhost.clone(), p);
                    });
                }
                // Checked before it was proposed; a build that disagrees
                // skips it rather than stop applying.
                Err(e) => tracing::error!(%user, %vhost, "permission not applied: {e}"),
            },
            Command::DeletePermission { user, vhost } => {
                broker.update_user(user, |u| {
                    u.permissions.remove(vhost);
                });
            }
            Command::PutTopicPermission {
                user,
                vhost,
                exchange,
                write,
                read,
            } => match TopicPermission::new(exchange, write, read) {
                Ok(p) => {
                    broker.update_user(user, |u| {
                        u.topic_permissions
                            .entry(vhost.clone())
                            .or_default()
                            .insert(exchange.clone(), p);
                    });
                }
                Err(e) => tracing::error!(%user, %vhost, "topic permission not applied: {e}"),
            },
            Command::DeleteTopicPermission {
                user,
                vhost,
                exchange,
            } => {
                broker.update_user(user, |u| match exchange {
                    None => {
                        u.topic_permissions.remove(vhost);
                    }
                    Some(x) => {
                        if let Some(in_vhost) = u.topic_permissions.get_mut(vhost) {
                            in_vhost.remove(x);
                            if in_vhost.is_empty() {
                                u.topic_permissions.remove(vhost);
                            }
                        }
                    }
                });
            }
            Command::PutPolicy(def) => {
                let Some(vh) = broker.vhost(&def.vhost) else {
                    return Outcome::Done;
                };
                match def.to_policy() {
                    Ok(p) => {
                        vh.put_policy(p, &mut |q| timers.arm(&vh, q));
                    }
                    Err(e) => tracing::error!(policy = %def.name, "policy not applied: {e}"),
                }
            }
            Command::DeletePolicy { vhost, name } => {
                if let Some(vh) = broker.vhost(vhost) {
                    vh.delete_policy(name, &mut |q| timers.arm(&vh, q));
                }
            }
            Command::SetVhostLimit { vhost, name, value } => {
                if let Some(vh) = broker.vhost(vhost) {
                    vh.update_limits(|l| l.set(name, *value));
                }
            }
            Command::ClearVhostLimit { vhost, name } => {
                if let Some(vh) = broker.vhost(vhost) {
                    vh.update_limits(|l| {
                        l.remove(name);
                    });
                }
            }
            Command::SetUserLimit { user, name, value } => {
                broker.update_user(user, |u| u.limits.set(name, *value));
            }
            Command::ClearUserLimit { user, name } => {
                broker.update_user(user, |u| {
                    u.limits.remove(name);
                });
            }
            _ => return self.apply_topology(a, index).into(),
        }
        Outcome::Done
    }

    fn apply_topology(&self, a: &Applier, index: u64) -> Result<Outcome, BrokerError> {
        let vhost = |name: &str| {
            a.broker
                .vhost(name)
                .ok_or_else(|| BrokerError::NotFound(format!("no vhost '{name}'")))
        };
        match self {
            Command::DeclareExchange(x) => Ok(Outcome::Created(vhost(&x.vhost)?.declare_exchange(x.decl())?)),
            Command::DeleteExchange {
                vhost: v,
                name,
                if_unused,
            } => {
                vhost(v)?.delete_exchange(&ShortStr::from(name.as_str()), *if_unused)?;
                Ok(Outcome::Done)
            }
            Command::Bind(b) => {
                let (source, binding) = b.binding();
                vhost(&b.vhost)?.bind(&source, binding)?;
                Ok(Outcome::Done)
            }
            Command::Unbind(b) => {
                let (source, binding) = b.binding();
                vhost(&b.vhost)?.unbind(&source, &binding)?;
                Ok(Outcome::Done)
            }
            Command::DeclareQueue {
                queue,
                owner,
                quorum,
                stream,
            } => {
                let vh = vhost(&queue.vhost)?;
                if let Some(p) = quorum {
                    // A second declare of the same name (raced from
                    // another node) is a redeclare: the first's group stays.
                    if vh.find_queue(queue.name.as_bytes()).is_none() {
                        p.register(a, &queue.vhost, &queue.name)?;
                    }
                }
                if let (Some(members), Some(streams)) = (stream, &a.streams) {
                    if vh.find_queue(queue.name.as_bytes()).is_none() {
                        // See `Placement::first_epoch`.
                        let first_epoch = index.max(1);
                        streams
                            .placed(crate::definitions::records::Placement {
                                vhost: queue.vhost.clone(),
                                name: queue.name.clone(),
                                members: members.clone(),
                                leader: members.first().cloned(),
                                epoch: first_epoch,
                                first_epoch,
                            })
                            .map_err(BrokerError::Internal)?;
                    }
                }
                let home = queue.node.as_deref().filter(|n| *n != a.node);
                let owner = if home.is_some() { REMOTE_OWNER } else { *owner };
                let (q, created) = vh.declare_queue_at(queue.decl(), owner, home.map(ShortStr::from))?;
                if created && q.needs_timer() {
                    a.timers.arm(&vh, &q);
                }
                Ok(Outcome::Created(created))
            }
            Command::DeleteQueue { vhost: v, name } => {
                let vh = vhost(v)?;
                let n = match vh.remove_queue(&ShortStr::from(name.as_str())) {
                    Some(q) => vh.destroy_queue(&q),
                    None => 0,
                };
                if let Some(s) = &a.streams {
                    s.removed(v, name);
                }
                Ok(Outcome::Removed(n))
            }
            Command::QuorumMembers {
                vhost: v,
                name,
                group,
                members,
            } => {
                quorum_members(a, &vhost(v)?, name, *group, members)?;
                Ok(Outcome::Done)
            }
            Command::StreamLeader {
                vhost: v,
                name,
                epoch,
                leader,
            } => {
                if let Some(s) = &a.streams {
                    s.new_leader(&*vhost(v)?, name, *epoch, leader)?;
                }
                Ok(Outcome::Done)
            }
            Command::StreamMembers {
                vhost: v,
                name,
                members,
            } => {
                if let Some(s) = &a.streams {
                    s.set_members(&*vhost(v)?, name, members)?;
                }
                Ok(Outcome::Done)
            }
            Command::Import {
                definitions,
                home,
                quorum,
            } => {
                // Registered on their members first, so the queues made
                // next are members there (a queue there already keeps its
                // group: the import does not redeclare it).
                for (v, name, p) in quorum {
                    if a.broker
                        .vhost(v)
                        .is_none_or(|vh| vh.find_queue(name.as_bytes()).is_none())
                    {
                        p.register(a, v, name)?;
                    }
                }
                crate::definitions::apply_at(
                    &a.broker,
                    &a.timers,
                    &a.definitions,
                    definitions,
                    Some(home),
                    &a.node,
                );
                Ok(Outcome::Done)
            }
            Command::NodeStarted { node } => {
                remove_queues_of(a, node, false, dies_with_its_node);
                Ok(Outcome::Done)
            }
            Command::NodeDown { node } => {
                remove_queues_of(a, node, *node == a.node, dies_with_its_node);
                Ok(Outcome::Done)
            }
            Command::ForgetNode { node } => {
                remove_queues_of(a, node, false, |_| true);
                a.definitions.record_cluster_node_forgotten(node);
                Ok(Outcome::Done)
            }
            Command::AddNode { node, address, id } => {
                let n = crate::definitions::records::ClusterNode {
                    name: node.clone(),
                    address: address.clone(),
                    id: *id,
                };
                a.table.put(n.clone());
                a.definitions.record_cluster_node(n);
                Ok(Outcome::Done)
            }
            _ => Ok(Outcome::Done),
        }
    }

    /// Apply an entry of the metadata log; one this build cannot read is
    /// logged and skipped.
    fn apply_entry(a: &Applier, index: u64, data: &[u8]) -> Vec<u8> {
        if data.is_empty() {
            return Vec::new();
        }
        let outcome = match serde_json::from_slice::<Command>(data) {
            Ok(c) => c.apply(a, index),
            Err(e) => {
                tracing::error!("a metadata entry this node cannot read, skipped: {e}");
                Outcome::Refused {
                    code: 541,
                    text: format!("the metadata entry cannot be read: {e}"),
                }
            }
        };
        serde_json::to_vec(&outcome).expect("an outcome encodes")
    }

    /// Apply a pass's committed entries in order (a snapshot replaces
    /// this node's state), with one commit of the definitions store for
    /// all of them that also records the last index as applied: a restart
    /// applies only what is newer, and never again what its state already
    /// has.
    pub fn apply_entries(a: &Applier, entries: &[super::meta::Applying]) -> Vec<Vec<u8>> {
        let batch = a.definitions.batch();
        let outcomes = entries
            .iter()
            .map(|e| {
                if !e.snapshot {
                    return Self::apply_entry(a, e.index, e.data);
                }
                if let Err(err) = super::snapshot::install(a, e.data) {
                    // Raft's own checks passed, so this is a build that
                    // cannot read its peers' snapshots: say so loudly.
                    tracing::error!(
                        index = e.index,
                        "a metadata snapshot this node cannot read: {err}"
                    );
                }
                Vec::new()
            })
            .collect();
        if let Some(last) = entries.last() {
            a.definitions.record_meta_applied(last.index);
        }
        drop(batch);
        outcomes
    }
}

/// A queue that does not outlive its node's restart: transient, or
/// exclusive.
pub fn dies_with_its_node(q: &Queue) -> bool {
    !q.durable || q.exclusive_owner.is_some()
}

/// Remove the queues `which` picks of those that live on `node` (and,
/// when `here`, of those that live on this node, which is `node`).
fn remove_queues_of(a: &Applier, node: &str, here: bool, which: impl Fn(&Queue) -> bool) {
    for vh in a.broker.vhosts() {
        for q in vh.queues() {
            let on_node = match q.home.as_deref() {
                Some(h) => h == node.as_bytes(),
                None => here,
            };
            if on_node && which(&q) && vh.remove_queue_if_same(&q) {
                vh.destroy_queue(&q);
            }
        }
    }
}

/// Apply a quorum queue's new members here (see `Command::QuorumMembers`).
fn quorum_members(
    a: &Applier,
    vh: &Arc<warren_core::VHost>,
    name: &str,
    group: u64,
    members: &[String],
) -> Result<(), BrokerError> {
    let Some(q) = vh.find_queue(name.as_bytes()) else {
        return Ok(());
    };
    if q.kind() != warren_core::queue::QueueKind::Quorum || members.is_empty() {
        return Ok(());
    }
    let member_here = members.contains(&a.node);
    let home = if member_here {
        let ids: Vec<u64> = members.iter().filter_map(|m| a.table.id(m)).collect();
        a.quorum
            .register(&vh.name, name, group, ids)
            .map_err(BrokerError::Internal)?;
        None
    } else {
        Some(ShortStr::from(members[0].as_str()))
    };
    if q.home == home {
        return Ok(());
    }
    if let Some(new) = vh.rehome_queue(&q, home)? {
        // A member no longer: its group, files and consumers go with it
        // (its clients' consumers are cancelled, and consume again through
        // a member). A queue of another node holds nothing.
        vh.destroy_queue(&q);
        if new.needs_timer() {
            a.timers.arm(vh, &new);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_read_back_as_written() {
        let c = Command::PutUser {
            name: "carol".into(),
            password_hash: "h".into(),
            tags: vec!["administrator".into()],
            limits: None,
        };
        let b = serde_json::to_vec(&c).unwrap();
        let again = serde_json::to_vec(&serde_json::from_slice::<Command>(&b).unwrap()).unwrap();
        assert_eq!(again, b);
    }
}
