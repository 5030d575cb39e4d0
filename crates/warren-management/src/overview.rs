//! Node-wide endpoints: /api/overview, /api/nodes (and one by name),
//! /api/cluster-name, /api/extensions, /api/auth, /api/whoami, the alarm
//! health checks and /api/aliveness-test.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use warren_amqp091::{FieldTable, ShortStr};
use warren_core::decl::QueueDecl;
use warren_core::vhost::VHost;

use super::auth::Authed;
use super::error::ApiError;
use warren_node::ServerCtx;

pub use warren_node::version::RABBITMQ_VERSION;

/// Queue counts summed over some vhosts.
#[derive(Debug, Default)]
pub struct Totals {
    pub queues: u64,
    pub consumers: u64,
    pub ready: u64,
    pub unacked: u64,
}

impl Totals {
    pub fn of<'a>(vhosts: impl IntoIterator<Item = &'a Arc<VHost>>) -> Totals {
        let mut t = Totals::default();
        for vh in vhosts {
            for q in vh.queues() {
                let s = q.stats();
                t.queues += 1;
                t.consumers += s.consumers as u64;
                t.ready += s.ready;
                t.unacked += s.unacked;
            }
        }
        t
    }
}

pub async fn overview(State(ctx): State<Arc<ServerCtx>>, who: Authed) -> Json<Value> {
    let seen: Vec<_> = ctx
        .broker
        .vhosts()
        .into_iter()
        .filter(|v| who.may_see(&v.name))
        .collect();
    let exchanges: usize = seen.iter().map(|v| v.exchange_count()).sum();
    let Totals {
        queues,
        consumers,
        ready,
        unacked,
    } = Totals::of(&seen);
    let conns: Vec<_> = ctx
        .connections
        .list()
        .into_iter()
        .filter(|e| e.login().is_some_and(|l| who.may_see(&l.vhost)))
        .collect();
    let listeners: Vec<Value> = ctx
        .listeners
        .named()
        .into_iter()
        .map(|(protocol, a)| json!({"node": ctx.config.node_name, "protocol": protocol, "ip_address": a.ip().to_string(), "port": a.port()}))
        .collect();
    Json(json!({
        "management_version": RABBITMQ_VERSION,
        "rabbitmq_version": RABBITMQ_VERSION,
        "product_name": "Warren",
        "product_version": env!("CARGO_PKG_VERSION"),
        "cluster_name": ctx.config.cluster_name(),
        "node": ctx.config.node_name,
        "object_totals": {
            "connections": conns.len(),
            "channels": conns.iter().map(|e| e.channel_count()).sum::<usize>(),
            "exchanges": exchanges,
            "queues": queues,
            "consumers": consumers,
        },
        "queue_totals": {
            "messages": ready + unacked,
            "messages_ready": ready,
            "messages_unacknowledged": unacked,
        },
        "message_stats": super::message_stats::overview(&ctx.broker.messages),
        "statistics_db_event_queue": 0,
        "listeners": listeners,
    }))
}

/// `/api/nodes`: this node, then every other node of its cluster,
/// running or not.
pub async fn nodes(State(ctx): State<Arc<ServerCtx>>, _who: Authed) -> Json<Value> {
    let mut all = vec![node_json(&ctx)];
    if let Some(c) = &ctx.cluster {
        all.extend(c.peers().iter().map(peer_json));
    }
    Json(Value::Array(all))
}

/// Another node as `/api/nodes` shows it: whether its link is up, and
/// the figures and alarms it last reported over it.
fn peer_json(p: &warren_node::cluster::PeerStatus) -> Value {
    let mut v = json!({
        "name": p.node,
        "type": "disc",
        "running": p.running,
        "cluster_links": [],
        "partitions": [],
    });
    // Its last report's figures (its partitions among them), while it is
    // running (RabbitMQ shows a stopped node with none).
    if let (true, Some(Value::Object(s)), Value::Object(out)) = (p.running, &p.status, &mut v) {
        for (k, val) in s {
            out.insert(k.clone(), val.clone());
        }
    }
    v
}

/// `/api/nodes/{name}`: this node by its name.
pub async fn node(
    State(ctx): State<Arc<ServerCtx>>,
    _who: Authed,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if name == ctx.config.node_name {
        return Ok(Json(node_json(&ctx)));
    }
    let peers = ctx.cluster.as_ref().map(|c| c.peers()).unwrap_or_default();
    let p = peers.iter().find(|p| p.node == name).ok_or(ApiError::NotFound)?;
    Ok(Json(peer_json(p)))
}

/// `DELETE /api/nodes/{name}` (Warren's; what `warrenctl
/// forget_cluster_node` calls, as rabbitmqctl's): remove a stopped node
/// from the cluster for good, and its queues with it. A running node, this
/// node and unknown names are refused.
pub async fn forget_node(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path(name): Path<String>,
) -> Result<axum::http::StatusCode, ApiError> {
    who.admin()?;
    let (Some(cluster), Some(meta)) = (&ctx.cluster, &ctx.meta) else {
        return Err(ApiError::BadRequest("this node is not clustered".into()));
    };
    if name == ctx.config.node_name {
        return Err(ApiError::BadRequest(format!(
            "'{name}' is this node: forget it from another"
        )));
    }
    let peer = cluster
        .peers()
        .into_iter()
        .find(|p| p.node == name)
        .ok_or(ApiError::NotFound)?;
    if peer.running {
        return Err(ApiError::BadRequest(format!(
            "node '{name}' is running: stop it before forgetting it"
        )));
    }
    meta.forget(&name, warren_node::cluster::command::COMMIT_TIMEOUT)
        .await?;
    Ok(axum::http::StatusCode::NO_CONTENT)
}

/// `POST /api/cluster/join` with `{"node": NAME, "address": HOST:PORT}`
/// (Warren's; what `warrenctl join_cluster` calls, as rabbitmqctl's): this
/// node, alone, joins the cluster of `node`, whose inter-node listener is
/// at `address`. Once the cluster has agreed, the node restarts as a
/// member: its own definitions and messages go (as `rabbitmqctl reset`),
/// and it takes the cluster's.
pub async fn join_cluster(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Json(body): Json<Value>,
) -> Result<Json<Value>, ApiError> {
    who.admin()?;
    let Some(cluster) = &ctx.cluster else {
        return Err(ApiError::BadRequest(
            "this node has no [cluster] settings (its cluster's name, secret and inter-node listener)".into(),
        ));
    };
    let (Some(node), Some(address)) = (body["node"].as_str(), body["address"].as_str()) else {
        return Err(ApiError::BadRequest("give \"node\" and \"address\"".into()));
    };
    let others: Vec<String> = cluster.peers().into_iter().map(|p| p.node).collect();
    if !others.is_empty() {
        return Err(ApiError::BadRequest(format!(
            "this node is clustered already (with {}): only a node on its own joins",
            others.join(", ")
        )));
    }
    let joined = warren_node::cluster::join::ask(cluster, node, address)
        .await
        .map_err(|e| ApiError::BadRequest(format!("could not join: {e}")))?;
    let id = joined.id;
    joined
        .save(&ctx.config.data_dir)
        .map_err(|e| ApiError::Internal(format!("could not save the cluster membership: {e}")))?;
    tracing::info!(seed = %node, id, "joined the cluster: restarting as a member");
    // After the answer has gone out.
    let restart = ctx.restart.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        restart.notify_one();
    });
    Ok(Json(json!({"joined": node, "id": id, "restarting": true})))
}

/// `/api/cluster-name`.
pub async fn cluster_name(State(ctx): State<Arc<ServerCtx>>, _who: Authed) -> Json<Value> {
    Json(json!({"name": ctx.config.cluster_name()}))
}

/// `/api/extensions`: the web UI's plugins (none).
pub async fn extensions(_who: Authed) -> Json<Value> {
    Json(json!([]))
}

/// `/api/auth`, read by login pages before anyone logs in: no OAuth 2.
pub async fn auth() -> Json<Value> {
    Json(json!({"enable_uaa": false, "uaa_client_id": "", "uaa_location": ""}))
}

fn node_json(ctx: &ServerCtx) -> Value {
    let b = &ctx.broker;
    json!({
        "name": ctx.config.node_name,
        "type": "disc",
        "running": true,
        // Milliseconds, as RabbitMQ's.
        "uptime": ctx.started.elapsed().as_millis() as u64,
        "partitions": ctx.cluster.as_ref().map_or_else(Vec::new, |c| c.partitions()),
        "cluster_links": ctx.cluster.as_ref().map_or_else(Vec::new, |c| {
            c.peers()
                .into_iter()
                .filter(|p| p.running)
                .map(|p| json!({"name": p.node, "peer_addr": p.address}))
                .collect()
        }),
        "mem_used": b.memory.bytes(),
        "mem_limit": b.alarms.memory_limit(),
        "mem_alarm": b.alarms.memory_alarm(),
        "disk_free_limit": b.alarms.disk_free_limit(),
        "disk_free_alarm": b.alarms.disk_alarm(),
        "fd_total": fd_limit(),
        "processors": std::thread::available_parallelism().map_or(1, |n| n.get()),
    })
}

fn fd_limit() -> u64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } == 0 {
        l.rlim_cur
    } else {
        0
    }
}

pub async fn whoami(who: Authed) -> Json<Value> {
    Json(json!({"name": who.user.name, "tags": who.user.tags}))
}

/// 200 {"status":"ok"} without alarms; 503 with the alarms listed, as
/// RabbitMQ's /api/health/checks/alarms answers.
pub async fn alarms(State(ctx): State<Arc<ServerCtx>>, _who: Authed) -> Response {
    let a = &ctx.broker.alarms;
    let mut on = Vec::new();
    if a.memory_alarm() {
        on.push(json!({"node": ctx.config.node_name, "resource": "memory"}));
    }
    if a.disk_alarm() {
        on.push(json!({"node": ctx.config.node_name, "resource": "disk"}));
    }
    if on.is_empty() {
        Json(json!({"status": "ok"})).into_response()
    } else {
        let reason = "There are alarms in effect in the cluster";
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "failed", "reason": reason, "alarms": on})),
        )
            .into_response()
    }
}

/// Declare, look up and delete a queue named `aliveness-test` in the
/// vhost: the vhost takes declarations and its queue machinery answers.
pub async fn aliveness(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if !who.may_see(&vhost) {
        return Err(ApiError::NotFound);
    }
    who.may_change(&vhost)?;
    let vh = ctx.broker.vhost(&vhost).ok_or(ApiError::NotFound)?;
    let name = ShortStr::from("aliveness-test");
    let decl = QueueDecl {
        name: name.clone(),
        durable: false,
        exclusive: false,
        auto_delete: false,
        arguments: FieldTable::new(),
    };
    warren_node::topology::declare_queue(&ctx, &vh, decl, 0, true).await?;
    vh.queue(name.as_bytes(), 0)?;
    warren_node::topology::delete_queue(&ctx, &vh, &name, false, false, 0).await?;
    Ok(Json(json!({"status": "ok"})))
}
