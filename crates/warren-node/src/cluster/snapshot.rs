//! The metadata group's state machine as one value: what a node that has
//! fallen behind the leader's compacted log is sent instead of entries,
//! and how it makes that its own.
//!
//! The snapshot is everything the metadata commands (`command.rs`) change,
//! as definitions in RabbitMQ's format: vhosts and their limits, users
//! with their permissions, topic permissions and limits, policies, and
//! every exchange, queue (transient and exclusive ones too, each naming
//! the node it lives on) and binding. It is taken on the Raft thread right
//! after a pass's entries were applied, so it is the state at the applied
//! index. zstd-compressed: it travels as one Raft message in one frame.
//!
//! Installing makes this node's metadata equal to the snapshot: what the
//! snapshot lacks or declares differently is removed first, then the
//! snapshot is restored over what is left (an object already here as the
//! snapshot has it stays, with its messages and consumers), then users'
//! grants and vhosts' limits are set to exactly the snapshot's.

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use warren_amqp091::ShortStr;
use warren_core::decl::QueueDecl;
use warren_core::queue::Queue;
use warren_core::{Broker, Permission, TopicPermission};

use super::command::Applier;
use crate::definitions::{self, binding_def, exchange_def, queue_def, Definitions};

/// A snapshot's data is compressed at this zstd level (JSON of thousands
/// of similar objects shrinks tenfold or more).
const ZSTD_LEVEL: i32 = 3;
/// The largest snapshot accepted after decompression (memory grows with
/// what is read, never ahead of it).
const SNAPSHOT_MAX: u64 = 256 << 20;

/// Exchanges every vhost has from its start, never in a snapshot.
fn predeclared(name: &[u8]) -> bool {
    name.is_empty() || name.starts_with(b"amq.")
}

fn decl_of(q: &Queue) -> QueueDecl {
    QueueDecl {
        name: q.name.clone(),
        durable: q.durable,
        exclusive: q.exclusive_owner.is_some(),
        auto_delete: q.auto_delete,
        arguments: q.arguments.clone(),
    }
}

/// The definitions form of this node's metadata; `me` names this node as
/// the home of the queues that live here.
pub fn definitions(broker: &Broker, me: &str) -> Definitions {
    let me = ShortStr::from(me);
    definitions::snapshot_with(broker, |vh, d| {
        for (x, _) in vh.exchanges() {
            if !predeclared(x.name.as_bytes()) {
                d.exchanges.push(exchange_def(&vh.name, &x));
            }
        }
        let mut queues = vh.queues();
        queues.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        for q in queues {
            let home = q.home.as_ref().unwrap_or(&me);
            d.queues.push(queue_def(&vh.name, &decl_of(&q), Some(home)));
        }
        d.bindings
            .extend(vh.bindings().iter().map(|(src, b)| binding_def(&vh.name, src, b)));
    })
}

/// [`definitions`], encoded for a Raft snapshot.
pub fn take(
    broker: &Broker,
    me: &str,
    table: &super::nodes::NodeTable,
    streams: Option<&dyn super::replicas::StreamReplicas>,
) -> Vec<u8> {
    let mut d = definitions(broker, me);
    d.warren_stream_placements = streams.map(|s| s.placements()).unwrap_or_default();
    // The nodes that joined (the configured ones every node numbers alike).
    let first = table.bootstrap();
    d.warren_cluster_nodes = table
        .all()
        .into_iter()
        .filter(|n| !first.contains(&n.id))
        .collect();
    let json = serde_json::to_vec(&d).expect("definitions encode");
    zstd::bulk::compress(&json, ZSTD_LEVEL).expect("zstd compresses to memory")
}

/// Decode a snapshot's data.
pub fn decode(data: &[u8]) -> Result<Definitions, String> {
    use std::io::Read;
    let mut json = Vec::new();
    zstd::stream::read::Decoder::new(data)
        .map_err(|e| e.to_string())?
        .take(SNAPSHOT_MAX + 1)
        .read_to_end(&mut json)
        .map_err(|e| e.to_string())?;
    if json.len() as u64 > SNAPSHOT_MAX {
        return Err(format!("a snapshot larger than {SNAPSHOT_MAX} bytes"));
    }
    serde_json::from_slice(&json).map_err(|e| e.to_string())
}

/// One object's identity and form, to compare a local one with the
/// snapshot's (serde_json's maps are sorted, so equal means equal text).
fn key<T: Serialize>(t: &T) -> String {
    serde_json::to_string(t).expect("definitions encode")
}

/// A queue's key, without its node for a stream or a quorum queue: the
/// node a snapshot names is the taker's, and a member here holds it with
/// none. Who holds a stream is its placement's, which the snapshot
/// carries (applied by `Streams::settle_placements`); who holds a quorum
/// queue is its Raft group's membership. So a member keeps its log: a
/// quorum queue member dropped here and declared again would have
/// forgotten entries it acknowledged (and would come back as a proxy).
fn queue_key(d: &crate::definitions::QueueDef) -> String {
    let kind = d.arguments.get("x-queue-type").and_then(|v| v.as_str());
    if matches!(kind, Some("stream" | "quorum")) {
        let mut d = d.clone();
        d.node = None;
        return key(&d);
    }
    key(d)
}

/// Make this node's metadata the snapshot's (see the module's notes).
pub fn install(a: &Applier, data: &[u8]) -> Result<(), String> {
    let want = decode(data)?;
    let broker = &*a.broker;
    let me = ShortStr::from(a.node.as_str());
    let vhosts: HashSet<&str> = want.vhosts.iter().map(|v| v.name.as_str()).collect();
    for vh in broker.vhosts() {
        if !vhosts.contains(vh.name.as_str()) {
            broker.delete_vhost(&vh.name);
        }
    }
    // Placements first: the queues made below are members by them.
    if let Some(s) = &a.streams {
        s.install_placements(&want.warren_stream_placements)?;
    }
    let queues: HashSet<String> = want.queues.iter().map(queue_key).collect();
    let exchanges: HashSet<String> = want.exchanges.iter().map(key).collect();
    let bindings: HashSet<String> = want.bindings.iter().map(key).collect();
    let policies: HashSet<(&str, &str)> = want
        .policies
        .iter()
        .map(|p| (p.vhost.as_str(), p.name.as_str()))
        .collect();
    for vh in broker.vhosts() {
        for q in vh.queues() {
            let home = q.home.as_ref().unwrap_or(&me);
            if !queues.contains(&queue_key(&queue_def(&vh.name, &decl_of(&q), Some(home))))
                && vh.remove_queue_if_same(&q)
            {
                vh.destroy_queue(&q);
            }
        }
        for (x, _) in vh.exchanges() {
            if !predeclared(x.name.as_bytes()) && !exchanges.contains(&key(&exchange_def(&vh.name, &x))) {
                let _ = vh.delete_exchange(&x.name, false);
            }
        }
        for (src, b) in vh.bindings() {
            if !bindings.contains(&key(&binding_def(&vh.name, &src, &b))) {
                let _ = vh.unbind(&src, &b);
            }
        }
        for p in vh.policies() {
            if !policies.contains(&(vh.name.as_str(), p.name.as_str())) {
                vh.delete_policy(&p.name, &mut |_| {});
            }
        }
    }
    definitions::restore_at(broker, &want, None, &a.node);
    if let Some(s) = &a.streams {
        s.settle_placements(broker).map_err(|e| e.to_string())?;
    }
    exact_users_and_limits(broker, &want);
    for n in &want.warren_cluster_nodes {
        if a.table.put(n.clone()) {
            a.definitions.record_cluster_node(n.clone());
        }
    }
    for vh in broker.vhosts() {
        for q in vh.queues() {
            if q.needs_timer() {
                a.timers.arm(&vh, &q);
            }
        }
    }
    Ok(())
}

/// Users, their grants and vhosts' limits exactly as the snapshot has them
/// (restoring only adds grants).
fn exact_users_and_limits(broker: &Broker, want: &Definitions) {
    let names: HashSet<&str> = want.users.iter().map(|u| u.name.as_str()).collect();
    for u in broker.users() {
        if !names.contains(u.name.as_str()) {
            broker.delete_user(&u.name);
        }
    }
    let mut grants: HashMap<&str, HashMap<String, Permission>> = HashMap::new();
    for p in &want.permissions {
        if let Ok(perm) = Permission::new(&p.configure, &p.write, &p.read) {
            grants.entry(&p.user).or_default().insert(p.vhost.clone(), perm);
        }
    }
    type ByExchange = HashMap<String, TopicPermission>;
    let mut topics: HashMap<&str, HashMap<String, ByExchange>> = HashMap::new();
    for p in &want.topic_permissions {
        if let Ok(tp) = TopicPermission::new(&p.exchange, &p.write, &p.read) {
            topics
                .entry(&p.user)
                .or_default()
                .entry(p.vhost.clone())
                .or_default()
                .insert(p.exchange.clone(), tp);
        }
    }
    for u in &want.users {
        let perms = grants.remove(u.name.as_str()).unwrap_or_default();
        let tps = topics.remove(u.name.as_str()).unwrap_or_default();
        broker.update_user(&u.name, |user| {
            user.permissions = perms.into_iter().collect();
            user.topic_permissions = tps
                .into_iter()
                .map(|(vh, xs)| (vh, xs.into_iter().collect()))
                .collect();
            if let Some(l) = &u.limits {
                user.limits = l.clone();
            }
        });
    }
    let limited: HashSet<String> = want
        .parameters
        .iter()
        .filter_map(|p| crate::limits::from_vhost_parameter(p).map(|(vh, _)| vh))
        .collect();
    for vh in broker.vhosts() {
        if !limited.contains(&vh.name) && !vh.limits().is_empty() {
            vh.update_limits(|l| *l = Default::default());
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn garbage_and_bombs_are_refused() {
        assert!(super::decode(b"not zstd").is_err());
        let bomb = zstd::bulk::compress(&vec![b' '; (super::SNAPSHOT_MAX + 10) as usize], 19).unwrap();
        let e = super::decode(&bomb).unwrap_err();
        assert!(e.contains("larger than"), "{e}");
        let fine = zstd::bulk::compress(br#"{"vhosts":[{"name":"/"}]}"#, 3).unwrap();
        assert_eq!(super::decode(&fine).unwrap().vhosts[0].name, "/");
    }
}
