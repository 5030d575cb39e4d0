//! Replicated streams' members over HTTP, what `rabbitmq-streams`
//! add_replica, delete_replica and stream_status do (RabbitMQ's
//! management API has no form of them; the paths follow the quorum
//! queues' `replicas/add` and `replicas/delete`). Administrators only.
//! The change goes through the metadata log (`Command::StreamMembers`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::Value;
use warren_core::queue::QueueKind;

use super::auth::Authed;
use super::error::ApiError;
use warren_node::cluster::command::Command;
use warren_node::definitions::records::Placement;
use warren_node::topology;
use warren_node::ServerCtx;

type Ctx = State<Arc<ServerCtx>>;

/// An administrator, a cluster, a stream and its placement.
fn placement(ctx: &ServerCtx, who: &Authed, vhost: &str, name: &str) -> Result<Placement, ApiError> {
    who.admin()?;
    let streams = ctx.stream_replicas.as_ref().ok_or_else(|| {
        ApiError::BadRequest("this node is not clustered: a stream's only member is here".into())
    })?;
    let q = ctx
        .broker
        .vhost(vhost)
        .and_then(|vh| vh.find_queue(name.as_bytes()))
        .ok_or(ApiError::NotFound)?;
    if q.kind() != QueueKind::Stream {
        return Err(ApiError::BadRequest(format!(
            "queue '{name}' in vhost '{vhost}' is not a stream"
        )));
    }
    streams
        .placement(vhost, name)
        .ok_or_else(|| ApiError::BadRequest(format!("stream '{name}' in vhost '{vhost}' is not replicated")))
}

fn node_of(body: &Value) -> Result<String, ApiError> {
    body["node"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| ApiError::BadRequest("give \"node\"".into()))
}

async fn change(ctx: &Arc<ServerCtx>, p: &Placement, members: Vec<String>) -> Result<(), ApiError> {
    let c = Command::StreamMembers {
        vhost: p.vhost.clone(),
        name: p.name.clone(),
        members,
    };
    match topology::change(ctx, c).await {
        Ok(warren_node::cluster::command::Outcome::Refused { text, .. }) => Err(ApiError::Unavailable(text)),
        Ok(_) => Ok(()),
        Err(e) => Err(ApiError::Unavailable(e.to_string())),
    }
}

/// `POST /api/queues/stream/{vhost}/{name}/replicas/add` `{"node": ...}`:
/// a replica on a running node of the cluster (rabbitmq-streams
/// add_replica).
pub async fn add_replica(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<StatusCode, ApiError> {
    let p = placement(&ctx, &who, &vhost, &name)?;
    let node = node_of(&body)?;
    if p.members.contains(&node) {
        return Ok(StatusCode::NO_CONTENT);
    }
    let running = node == ctx.config.node_name
        || ctx
            .cluster
            .as_ref()
            .is_some_and(|c| c.peers().iter().any(|x| x.node == node && x.running));
    if !running {
        return Err(ApiError::BadRequest(format!("node_not_running: {node}")));
    }
    let mut members = p.members.clone();
    members.push(node);
    change(&ctx, &p, members).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/queues/stream/{vhost}/{name}/replicas/delete`
/// `{"node": ...}` (rabbitmq-streams delete_replica); the last member
/// stays. A leader removed leaves the stream to the coordinator's next
/// election.
pub async fn delete_replica(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<StatusCode, ApiError> {
    let p = placement(&ctx, &who, &vhost, &name)?;
    let node = node_of(&body)?;
    if !p.members.contains(&node) {
        return Ok(StatusCode::NO_CONTENT);
    }
    if p.members.len() == 1 {
        return Err(ApiError::BadRequest(
            "Cannot delete the last member of a stream".into(),
        ));
    }
    let members = p.members.iter().filter(|m| **m != node).cloned().collect();
    change(&ctx, &p, members).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/queues/stream/{vhost}/{name}/status`: one row per member
/// (rabbitmq-streams stream_status).
pub async fn status(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    placement(&ctx, &who, &vhost, &name)?;
    let streams = ctx.stream_replicas.as_ref().ok_or(ApiError::NotFound)?;
    let rows = streams.status(&vhost, &name).await.ok_or(ApiError::NotFound)?;
    Ok(Json(Value::Array(rows)))
}
