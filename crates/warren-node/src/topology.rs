//! Topology changes (exchanges, queues, bindings) as every front end makes
//! them: on a single node straight into the vhost, as before; on a cluster
//! checked against this node's copy of the topology first (a redeclare,
//! or an error this node can already see, costs no round trip), then
//! proposed to the metadata group and answered with what this node's
//! apply gave, once a majority has it on disk. A new queue lives on the
//! node whose client declared it (RabbitMQ's default, `client-local`),
//! or with `balanced` on the running node with the fewest queues
//! ([`place`]).
//!
//! Also [`run`]: any metadata command (users, vhosts, policies, limits
//! as well), applied here on a single node, through the metadata group on
//! a cluster. The changes a node makes by itself are
//! [`crate::cluster::removals`]'.

use std::sync::Arc;

use warren_amqp091::ShortStr;
use warren_core::decl::{ExchangeDecl, QueueDecl};
use warren_core::exchange::Binding;
use warren_core::queue::Queue;
use warren_core::{BrokerError, VHost};

use crate::cluster::command::{self, Command, Outcome, QuorumPlacement};
use crate::cluster::meta::MetaError;
use crate::ctx::ServerCtx;
use crate::definitions::{binding_def, exchange_def, queue_def};

fn clustered(ctx: &ServerCtx) -> bool {
    ctx.meta.is_some()
}

/// One of the changes below for a front end whose request handling is not
/// async (the AMQP 1.0 management node, the stream protocol's admin
/// commands). On a single node the change is made at once (the future
/// finishes on its first poll). On a cluster this worker thread waits for
/// the metadata group, after handing its other tasks to another worker
/// (tokio's `block_in_place`): these are an operator's occasional
/// requests, bounded by the commit timeout, never the message path.
pub fn now<T>(ctx: &ServerCtx, change: impl std::future::Future<Output = T>) -> T {
    if clustered(ctx) {
        tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(change))
    } else {
        let mut change = std::pin::pin!(change);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match change.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            // Without a cluster nothing in these waits.
            std::task::Poll::Pending => unreachable!("a single node's topology change does not wait"),
        }
    }
}

/// exchange.declare (not passive): whether it made the exchange.
pub async fn declare_exchange(
    ctx: &Arc<ServerCtx>,
    vh: &Arc<VHost>,
    d: ExchangeDecl,
) -> Result<bool, BrokerError> {
    if !clustered(ctx) {
        return vh.declare_exchange(d);
    }
    if vh.exchange_declared(&d)? {
        return Ok(false);
    }
    match change(ctx, Command::DeclareExchange(exchange_def(&vh.name, &d))).await? {
        Outcome::Created(made) => Ok(made),
        _ => Ok(false),
    }
}

pub async fn delete_exchange(
    ctx: &Arc<ServerCtx>,
    vh: &Arc<VHost>,
    name: &ShortStr,
    if_unused: bool,
) -> Result<(), BrokerError> {
    if !clustered(ctx) {
        return vh.delete_exchange(name, if_unused);
    }
    // Deleting what is not there succeeds (RabbitMQ 3.x); the checks on
    // names and use are the apply's, on the same topology everywhere.
    if !name.is_empty() && !name.starts_with("amq.") && vh.check_exchange(name).is_err() {
        return Ok(());
    }
    let c = Command::DeleteExchange {
        vhost: vh.name.clone(),
        name: name.to_string(),
        if_unused,
    };
    change(ctx, c).await.map(|_| ())
}

pub async fn bind(
    ctx: &Arc<ServerCtx>,
    vh: &Arc<VHost>,
    source: &ShortStr,
    b: Binding,
) -> Result<(), BrokerError> {
    if !clustered(ctx) {
        return vh.bind(source, b);
    }
    if vh.bindings_from(source, Some(&b.destination)).contains(&b) {
        return Ok(());
    }
    change(ctx, Command::Bind(binding_def(&vh.name, source, &b)))
        .await
        .map(|_| ())
}

pub async fn unbind(
    ctx: &Arc<ServerCtx>,
    vh: &Arc<VHost>,
    source: &ShortStr,
    b: Binding,
) -> Result<(), BrokerError> {
    if !clustered(ctx) {
        return vh.unbind(source, &b);
    }
    change(ctx, Command::Unbind(binding_def(&vh.name, source, &b)))
        .await
        .map(|_| ())
}

/// queue.declare (not passive) by `connection`: the queue and whether it
/// is new. `reserved` checks the `amq.` prefix (server-named queues skip
/// it).
pub async fn declare_queue(
    ctx: &Arc<ServerCtx>,
    vh: &Arc<VHost>,
    d: QueueDecl,
    connection: u64,
    reserved: bool,
) -> Result<(Arc<Queue>, bool), BrokerError> {
    if !clustered(ctx) {
        return if reserved {
            vh.declare_queue(d, connection)
        } else {
            vh.declare_queue_unchecked(d, connection)
        };
    }
    if reserved && d.name.starts_with("amq.") {
        return Err(BrokerError::AccessRefused(format!(
            "queue name '{}' contains reserved prefix 'amq.*'",
            d.name
        )));
    }
    if let Some(r) = vh.declared_queue(&d, connection) {
        return r.map(|q| (q, false));
    }
    vh.check_new_queue(&d.name)?;
    // A bad locator is not balanced here; the apply refuses it.
    let home = place(ctx, vh, &d);
    let kind = d.arguments.get("x-queue-type").and_then(|v| v.as_bytes());
    let quorum = (kind == Some(b"quorum")).then(|| quorum_members(ctx, &d, &home));
    let stream = (kind == Some(b"stream")).then(|| stream_members(ctx, &d, &home));
    let c = Command::DeclareQueue {
        queue: queue_def(&vh.name, &d, Some(&home)),
        owner: connection,
        quorum,
        stream,
    };
    let made = matches!(change(ctx, c).await?, Outcome::Created(true));
    let q = vh.queue(&d.name, connection)?;
    // Its connection ended while the cluster agreed: nobody will delete
    // the queue with it (the teardown may have looked before it existed).
    if made && q.exclusive_owner == Some(connection) && !ctx.connections.is_open(connection) {
        vh.discard_queue(&q);
        return Err(BrokerError::NotFound(format!(
            "the connection that declared exclusive queue '{}' is closed",
            d.name
        )));
    }
    Ok((q, made))
}

/// A new quorum queue's group: `x-quorum-initial-group-size` members
/// (RabbitMQ 4's default, 3; never more than the nodes there are), the
/// first leader (`home`, as the leader locator chose it) first, then the
/// running nodes that are members of the fewest quorum queues here (by
/// name among equals), and down nodes only when running ones run out.
fn quorum_members(ctx: &ServerCtx, d: &QueueDecl, home: &ShortStr) -> QuorumPlacement {
    let size = d
        .arguments
        .get("x-quorum-initial-group-size")
        .and_then(|v| v.as_i64());
    quorum_placement(ctx, size, home)
}

/// [`quorum_members`] for a queue of `size` members (None: 3).
pub fn quorum_placement(ctx: &ServerCtx, size: Option<i64>, home: &ShortStr) -> QuorumPlacement {
    let size = size.map_or(3, |n| n.clamp(1, 1 << 16) as usize);
    QuorumPlacement {
        group: loop {
            let g: u64 = rand::random();
            if g != 0 {
                break g;
            }
        },
        members: members_from(ctx, home, size, &ctx.quorum.memberships()),
    }
}

/// A new stream's members: `x-initial-cluster-size` of them (RabbitMQ's
/// default: every node of the cluster; at least 1, never more than the
/// nodes there are), chosen as a quorum queue's by [`members_from`],
/// counting streams.
fn stream_members(ctx: &ServerCtx, d: &QueueDecl, home: &ShortStr) -> Vec<String> {
    let nodes = ctx.cluster.as_ref().map_or(1, |c| c.peers().len() + 1);
    let size = d
        .arguments
        .get("x-initial-cluster-size")
        .and_then(|v| v.as_i64())
        .map_or(nodes, |n| n.clamp(1, 1 << 16) as usize);
    let load = ctx
        .stream_replicas
        .as_ref()
        .map(|s| s.memberships())
        .unwrap_or_default();
    members_from(ctx, home, size, &load)
}

/// `size` members (never more than the nodes there are): the first
/// leader (`home`) first, then the running nodes with the fewest
/// memberships in `load` (by name among equals), down nodes only when
/// running ones run out (rabbit_queue_location).
fn members_from(
    ctx: &ServerCtx,
    home: &ShortStr,
    size: usize,
    load: &std::collections::HashMap<String, usize>,
) -> Vec<String> {
    let mut members = vec![home.to_string()];
    let Some(cluster) = &ctx.cluster else {
        return members;
    };
    let mut others: Vec<(bool, usize, String)> = cluster
        .peers()
        .into_iter()
        .filter(|p| p.node != *home.to_str_lossy())
        .map(|p| (!p.running, load.get(&p.node).copied().unwrap_or(0), p.node))
        .collect();
    if home.as_bytes() != ctx.config.node_name.as_bytes() {
        let mine = load.get(&ctx.config.node_name).copied().unwrap_or(0);
        others.push((false, mine, ctx.config.node_name.clone()));
    }
    others.sort();
    members.extend(others.into_iter().map(|(_, _, n)| n).take(size.saturating_sub(1)));
    members
}

/// Past this many queues in the cluster, `balanced` picks a running node
/// at random instead of counting (RabbitMQ 4's rule: counting every
/// queue on each declare would cost more than an even spread is worth).
const BALANCED_COUNT_MAX: usize = 1000;

/// The node a new queue lives on (a quorum queue's first leader): this
/// one, unless its arguments or policy ask for `balanced` (exclusive
/// queues always live with their connection); then the running node that
/// holds (or leads) the fewest queues, this one first among equals.
fn place(ctx: &ServerCtx, vh: &VHost, d: &QueueDecl) -> ShortStr {
    use warren_core::queue::QueueKind;
    let me = ShortStr::from(ctx.config.node_name.as_str());
    let policy = vh.policy_for_new_queue(d.name.as_bytes(), QueueKind::Classic);
    if d.exclusive
        || !warren_core::queue::leader_locator_balanced(&d.arguments, policy.as_ref().map(|p| &p.definition))
    {
        return me;
    }
    let Some(cluster) = &ctx.cluster else {
        return me;
    };
    let mut nodes: Vec<(ShortStr, usize)> = vec![(me.clone(), 0)];
    nodes.extend(
        cluster
            .peers()
            .into_iter()
            .filter(|p| p.running)
            .map(|p| (ShortStr::from(p.node.as_str()), 0)),
    );
    let queues: Vec<Arc<Queue>> = ctx.broker.vhosts().iter().flat_map(|v| v.queues()).collect();
    if queues.len() >= BALANCED_COUNT_MAX {
        let i = rand::random::<u64>() as usize % nodes.len();
        return nodes.swap_remove(i).0;
    }
    for q in queues {
        // A quorum queue counts for its leader's node (every member
        // holds it as its own): the one it was placed on until the
        // first election is seen.
        let leader = q
            .quorum_view()
            .and_then(|v| v.leader.or_else(|| v.members.into_iter().next()))
            .or_else(|| {
                // A replicated stream counts for its leader's node.
                let p = ctx
                    .stream_replicas
                    .as_ref()?
                    .placement(&q.vhost, &q.name.to_str_lossy())?;
                p.leader.map(|l| ShortStr::from(l.as_str()))
            });
        let home = leader.as_ref().or(q.home.as_ref()).unwrap_or(&me);
        if let Some(n) = nodes.iter_mut().find(|(name, _)| name == home) {
            n.1 += 1;
        }
    }
    // min_by_key keeps the first of equals: this node.
    nodes
        .into_iter()
        .min_by_key(|(_, n)| *n)
        .map_or(me, |(name, _)| name)
}

/// queue.delete by `connection`: how many ready messages went with it.
/// `if_unused` and `if_empty` are judged by what this node knows of the
/// queue (of a queue on another node: nothing yet, so they pass).
pub async fn delete_queue(
    ctx: &Arc<ServerCtx>,
    vh: &Arc<VHost>,
    name: &ShortStr,
    if_unused: bool,
    if_empty: bool,
    connection: u64,
) -> Result<u64, BrokerError> {
    if !clustered(ctx) {
        return vh.delete_queue(name, if_unused, if_empty, connection);
    }
    let q = match vh.queue(name, connection) {
        Ok(q) => q,
        Err(BrokerError::NotFound(_)) => return Ok(0),
        Err(e) => return Err(e),
    };
    vh.check_delete(&q, if_unused, if_empty)?;
    let c = Command::DeleteQueue {
        vhost: vh.name.clone(),
        name: name.to_string(),
    };
    match change(ctx, c).await? {
        Outcome::Removed(n) => Ok(n),
        _ => Ok(0),
    }
}

/// Make the change: at once on a single node; through the metadata group
/// on a cluster, returning once this node has applied it.
pub async fn run(ctx: &Arc<ServerCtx>, c: Command) -> Result<Outcome, MetaError> {
    match &ctx.meta {
        // No metadata log: no index (nothing is replicated either).
        None => Ok(c.apply(&ctx.applier(), 0)),
        Some(meta) => {
            // After this node's start announcement, which would otherwise
            // remove a queue declared here before it is applied. The wait
            // and the commit share one timeout, so a node cut off answers
            // as soon as before.
            let t0 = std::time::Instant::now();
            meta.wait_started(command::COMMIT_TIMEOUT).await;
            let left = command::COMMIT_TIMEOUT.saturating_sub(t0.elapsed());
            let data = serde_json::to_vec(&c).expect("a command encodes");
            let outcome = meta.propose(data, left).await?;
            serde_json::from_slice(&outcome).map_err(|_| MetaError::Stopped)
        }
    }
}

/// [`run`] for a topology change, with the answer as the AMQP front ends
/// give it: a refusal is its AMQP error, and a change the metadata store
/// could not commit is an internal error (as RabbitMQ 4 answers when its
/// metadata store has no majority).
pub async fn change(ctx: &Arc<ServerCtx>, c: Command) -> Result<Outcome, BrokerError> {
    match run(ctx, c).await {
        Ok(Outcome::Refused { code, text }) => Err(BrokerError::from_code(code, text)),
        Ok(o) => Ok(o),
        Err(e) => Err(BrokerError::Internal(format!(
            "the cluster's metadata store is unavailable: {e}"
        ))),
    }
}
