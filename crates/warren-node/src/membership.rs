//! Membership commands on quorum queues, as rabbitmq-queues has them:
//! `add_member`, `delete_member`, `grow`, `shrink`, `rebalance`, and a
//! transfer of leadership. They run on any node of the cluster.
//!
//! A change touches two things, in an order that never leaves a member
//! the Raft group counts on without its queue:
//! - adding: the metadata first (`Command::QuorumMembers`: the new node
//!   makes a member, with an empty log), then the group's leader adds it
//!   to the voters, and the leader's log or state catches it up; should
//!   the second step fail, the metadata goes back.
//! - removing: the leader removes it from the voters first (handing its
//!   leadership on first if it leads: raft-rs leaves a removed leader
//!   leading), then the metadata, and the node lets its member go.
//!
//! The group is reached through its members (`quorum/call.rs`): this node's own
//! if it has one, else the queue's home, else any node that answers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use warren_core::queue::{Queue, QueueKind};

use crate::cluster::command::{Command, Outcome};
use crate::ctx::ServerCtx;
use crate::quorum::call::{CallError, GroupInfo, Op};
use crate::topology;

/// How long one command keeps trying a group whose leader is changing.
const PATIENCE: Duration = Duration::from_secs(15);
/// Between two tries.
const RETRY: Duration = Duration::from_millis(250);

#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    NotQuorum(String),
    #[error("node {0} is not a member of this cluster")]
    UnknownNode(String),
    #[error("{0} is not a member of the queue")]
    NotMember(String),
    /// RabbitMQ's `last_node`.
    #[error("last_node: {0} is the queue's last member (delete the queue instead)")]
    LastMember(String),
    #[error("{0}")]
    Unavailable(String),
}

/// A quorum queue of this node's topology by name.
pub fn quorum_queue(ctx: &ServerCtx, vhost: &str, name: &str) -> Result<Arc<Queue>, MembershipError> {
    let vh = ctx
        .broker
        .vhost(vhost)
        .ok_or_else(|| MembershipError::NotFound(format!("vhost '{vhost}' not found")))?;
    let q = vh
        .find_queue(name.as_bytes())
        .ok_or_else(|| MembershipError::NotFound(format!("queue '{name}' in vhost '{vhost}' not found")))?;
    if q.kind() != QueueKind::Quorum {
        return Err(MembershipError::NotQuorum(format!(
            "not_quorum_queue: queue '{name}' in vhost '{vhost}' is not a quorum queue"
        )));
    }
    Ok(q)
}

fn node_id(ctx: &ServerCtx, node: &str) -> Result<u64, MembershipError> {
    ctx.node_table
        .as_ref()
        .and_then(|t| t.id(node))
        .ok_or_else(|| MembershipError::UnknownNode(node.to_string()))
}

fn node_name(ctx: &ServerCtx, id: u64) -> Option<String> {
    ctx.node_table.as_ref().and_then(|t| t.name(id))
}

/// The nodes to ask about `q`'s group, the likeliest first.
fn candidates(ctx: &ServerCtx, q: &Queue) -> Vec<String> {
    let me = ctx.config.node_name.clone();
    let mut out = Vec::new();
    match &q.home {
        None => out.push(me.clone()),
        Some(h) => out.push(h.to_str_lossy().into_owned()),
    }
    if let Some(t) = &ctx.node_table {
        for n in t.all() {
            if !out.contains(&n.name) {
                out.push(n.name);
            }
        }
    }
    out
}

/// `q`'s group as a member that answers knows it.
async fn info(ctx: &ServerCtx, q: &Queue) -> Result<GroupInfo, MembershipError> {
    let name = q.name.to_str_lossy();
    let mut last = String::from("no node of the cluster holds a member of the queue");
    for node in candidates(ctx, q) {
        match ctx.quorum.call(&node, &q.vhost, &name, Op::Info).await {
            Ok(i) => return Ok(i),
            Err(CallError::NoGroup) => {}
            Err(e) => last = format!("{node}: {e}"),
        }
    }
    Err(MembershipError::Unavailable(last))
}

/// Carry out `op` on `q`'s group at its leader, following the leader as
/// it moves and waiting out a change under way.
async fn at_leader(ctx: &ServerCtx, q: &Queue, op: Op) -> Result<GroupInfo, MembershipError> {
    let name = q.name.to_str_lossy();
    let deadline = Instant::now() + PATIENCE;
    let mut leader = info(ctx, q).await?.leader;
    loop {
        let err = match leader.and_then(|l| node_name(ctx, l)) {
            None => "the queue has no leader now".to_string(),
            Some(node) => match ctx.quorum.call(&node, &q.vhost, &name, op).await {
                Ok(i) => return Ok(i),
                Err(CallError::NotLeader(Some(l))) => {
                    leader = Some(l);
                    continue;
                }
                Err(e) => format!("{node}: {e}"),
            },
        };
        if Instant::now() >= deadline {
            return Err(MembershipError::Unavailable(err));
        }
        tokio::time::sleep(RETRY).await;
        leader = info(ctx, q).await.ok().and_then(|i| i.leader);
    }
}

/// The members in the order the metadata keeps them: the ones it had, in
/// their order (the first is the home other nodes reach the queue by),
/// then the new.
fn ordered(ctx: &ServerCtx, q: &Queue, voters: &[u64]) -> Vec<String> {
    let mut before: Vec<String> = match &q.home {
        Some(h) => vec![h.to_str_lossy().into_owned()],
        None => ctx
            .quorum
            .members_of(&q.vhost, &q.name.to_str_lossy())
            .iter()
            .filter_map(|id| node_name(ctx, *id))
            .collect(),
    };
    let names: Vec<String> = voters.iter().filter_map(|v| node_name(ctx, *v)).collect();
    before.retain(|n| names.contains(n));
    for n in names {
        if !before.contains(&n) {
            before.push(n);
        }
    }
    before
}

async fn set_members(
    ctx: &Arc<ServerCtx>,
    q: &Queue,
    group: u64,
    members: Vec<String>,
) -> Result<(), MembershipError> {
    let c = Command::QuorumMembers {
        vhost: q.vhost.clone(),
        name: q.name.to_str_lossy().into_owned(),
        group,
        members,
    };
    match topology::run(ctx, c).await {
        Ok(Outcome::Refused { text, .. }) => Err(MembershipError::Unavailable(text)),
        Ok(_) => Ok(()),
        Err(e) => Err(MembershipError::Unavailable(format!(
            "the cluster's metadata store is unavailable: {e}"
        ))),
    }
}

/// `rabbitmq-queues add_member`: a member of `q` on `node`; the queue's
/// members after. A node that is one already is left as it is (as
/// RabbitMQ's add_member, idempotent).
pub async fn add_member(ctx: &Arc<ServerCtx>, q: &Queue, node: &str) -> Result<Vec<String>, MembershipError> {
    let id = node_id(ctx, node)?;
    let before = info(ctx, q).await?;
    if before.voters.contains(&id) {
        return Ok(ordered(ctx, q, &before.voters));
    }
    let old = ordered(ctx, q, &before.voters);
    let mut new = old.clone();
    new.push(node.to_string());
    set_members(ctx, q, before.group, new.clone()).await?;
    match at_leader(ctx, q, Op::Add(id)).await {
        Ok(_) => Ok(new),
        Err(e) => {
            // The node's member goes again (the group never counted it).
            if let Err(back) = set_members(ctx, q, before.group, old).await {
                tracing::error!(queue = %q.name, %node, "a member not added is still in the metadata: {back}");
            }
            Err(e)
        }
    }
}

/// `rabbitmq-queues delete_member`: `q`'s member on `node` goes; the
/// queue's members after. A node that is no member is refused with
/// `NotMember` (RabbitMQ answers ok: the HTTP handler does the same).
pub async fn delete_member(
    ctx: &Arc<ServerCtx>,
    q: &Queue,
    node: &str,
) -> Result<Vec<String>, MembershipError> {
    let id = node_id(ctx, node)?;
    let mut now = info(ctx, q).await?;
    if !now.voters.contains(&id) {
        // The group may have let it go with the metadata not told (a
        // command cut short): make them agree.
        let members = ordered(ctx, q, &now.voters);
        if members.len() != now.voters.len() || !members.iter().any(|m| m == node) {
            set_members(ctx, q, now.group, members).await?;
        }
        return Err(MembershipError::NotMember(node.to_string()));
    }
    if now.voters.len() == 1 {
        return Err(MembershipError::LastMember(node.to_string()));
    }
    if now.leader == Some(id) {
        let to = successor(ctx, &now.voters, id);
        now = at_leader(ctx, q, Op::Transfer(to)).await?;
    }
    let after = at_leader(ctx, q, Op::Remove(id)).await?;
    let members = ordered(ctx, q, &after.voters);
    set_members(ctx, q, now.group, members.clone()).await?;
    Ok(members)
}

/// The member to lead after `id`: one whose node is up, the lowest id.
fn successor(ctx: &ServerCtx, voters: &[u64], id: u64) -> u64 {
    let up = |v: &u64| {
        node_name(ctx, *v)
            .is_some_and(|n| n == ctx.config.node_name || ctx.cluster.as_ref().is_some_and(|c| c.is_up(&n)))
    };
    voters
        .iter()
        .copied()
        .filter(|v| *v != id)
        .find(up)
        .or_else(|| voters.iter().copied().find(|v| *v != id))
        .unwrap_or(id)
}

/// Hand `q`'s leadership to its member on `node`.
pub async fn transfer_leader(ctx: &Arc<ServerCtx>, q: &Queue, node: &str) -> Result<(), MembershipError> {
    let id = node_id(ctx, node)?;
    let now = info(ctx, q).await?;
    if !now.voters.contains(&id) {
        return Err(MembershipError::NotMember(node.to_string()));
    }
    at_leader(ctx, q, Op::Transfer(id)).await.map(|_| ())
}

/// Which queues a command over many applies to: vhost and queue name
/// patterns (regular expressions, as rabbitmq-queues takes them).
pub struct Selection {
    pub vhost: regex::Regex,
    pub queue: regex::Regex,
}

impl Selection {
    pub fn new(vhost: &str, queue: &str) -> Result<Selection, String> {
        let re = |p: &str| regex::Regex::new(p).map_err(|e| format!("pattern '{p}': {e}"));
        Ok(Selection {
            vhost: re(vhost)?,
            queue: re(queue)?,
        })
    }

    fn queues(&self, ctx: &ServerCtx) -> Vec<Arc<Queue>> {
        let mut out = Vec::new();
        for vh in ctx.broker.vhosts() {
            if !self.vhost.is_match(&vh.name) {
                continue;
            }
            for q in vh.queues() {
                if q.kind() == QueueKind::Quorum && self.queue.is_match(&q.name.to_str_lossy()) {
                    out.push(q);
                }
            }
        }
        out.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
        out
    }
}

/// One queue's outcome in `grow` and `shrink`: its members after (or
/// before, if it failed) and the error.
#[derive(Debug, serde::Serialize)]
pub struct QueueResult {
    pub vhost: String,
    pub name: String,
    pub size: usize,
    pub result: String,
}

fn result(q: &Queue, r: Result<Vec<String>, MembershipError>, size_before: usize) -> QueueResult {
    let (size, result) = match r {
        Ok(m) => (m.len(), "ok".to_string()),
        Err(e) => (size_before, format!("error: {e}")),
    };
    QueueResult {
        vhost: q.vhost.clone(),
        name: q.name.to_str_lossy().into_owned(),
        size,
        result,
    }
}

/// `rabbitmq-queues grow <node> all|even`: a member on `node` for every
/// selected quorum queue that lacks one (with `even`, only those with an
/// even number of members, so none is left with an even count).
pub async fn grow(ctx: &Arc<ServerCtx>, node: &str, sel: &Selection, even_only: bool) -> Vec<QueueResult> {
    let id = ctx.node_table.as_ref().and_then(|t| t.id(node));
    each_queue(
        ctx,
        sel,
        |now| !(id.is_some_and(|i| now.voters.contains(&i)) || (even_only && now.voters.len() % 2 == 1)),
        |q| async move { add_member(ctx, &q, node).await },
    )
    .await
}

/// Run `change` on each selected queue whose group `wanted` picks; its
/// outcome per queue (and the queues no member answered for).
async fn each_queue<F, Fut>(
    ctx: &Arc<ServerCtx>,
    sel: &Selection,
    wanted: impl Fn(&GroupInfo) -> bool,
    change: F,
) -> Vec<QueueResult>
where
    F: Fn(Arc<Queue>) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<String>, MembershipError>>,
{
    let mut out = Vec::new();
    for q in sel.queues(ctx) {
        let Ok(now) = info(ctx, &q).await else {
            let e = MembershipError::Unavailable("no member answered".into());
            out.push(result(&q, Err(e), 0));
            continue;
        };
        if !wanted(&now) {
            continue;
        }
        let r = change(q.clone()).await;
        out.push(result(&q, r, now.voters.len()));
    }
    out
}

/// `rabbitmq-queues shrink <node>`: the member on `node` goes from every
/// selected quorum queue that has one and another.
pub async fn shrink(ctx: &Arc<ServerCtx>, node: &str, sel: &Selection) -> Vec<QueueResult> {
    let Some(id) = ctx.node_table.as_ref().and_then(|t| t.id(node)) else {
        return Vec::new();
    };
    each_queue(
        ctx,
        sel,
        |now| now.voters.contains(&id),
        |q| async move { delete_member(ctx, &q, node).await },
    )
    .await
}

/// `rabbitmq-queues rebalance quorum`: leaderships moved between members
/// until no node leads more than its share (rounded up) where another
/// member leads fewer. The leaders per node after.
pub async fn rebalance(ctx: &Arc<ServerCtx>, sel: &Selection) -> std::collections::BTreeMap<String, usize> {
    use std::collections::BTreeMap;
    let mut groups = Vec::new();
    for q in sel.queues(ctx) {
        if let Ok(i) = info(ctx, &q).await {
            groups.push((q, i));
        }
    }
    let up = |id: u64| {
        node_name(ctx, id)
            .is_some_and(|n| n == ctx.config.node_name || ctx.cluster.as_ref().is_some_and(|c| c.is_up(&n)))
    };
    let mut leads: BTreeMap<u64, usize> = BTreeMap::new();
    for (_, i) in &groups {
        for v in &i.voters {
            leads.entry(*v).or_insert(0);
        }
        if let Some(l) = i.leader {
            *leads.entry(l).or_insert(0) += 1;
        }
    }
    let nodes = leads.keys().filter(|n| up(**n)).count().max(1);
    let share = groups.len().div_ceil(nodes);
    for (q, i) in &groups {
        let Some(l) = i.leader else { continue };
        if leads[&l] <= share {
            continue;
        }
        let Some(to) = i
            .voters
            .iter()
            .copied()
            .filter(|v| *v != l && up(*v))
            .min_by_key(|v| leads[v])
            .filter(|v| leads[v] + 1 < leads[&l])
        else {
            continue;
        };
        if at_leader(ctx, q, Op::Transfer(to)).await.is_ok() {
            *leads.get_mut(&l).expect("counted") -= 1;
            *leads.get_mut(&to).expect("counted") += 1;
        }
    }
    leads
        .into_iter()
        .filter_map(|(id, n)| node_name(ctx, id).map(|name| (name, n)))
        .collect()
}
