//! Quorum queue membership over HTTP, at RabbitMQ 4's management paths
//! (`rabbit_mgmt_wm_quorum_queue_replicas_*`, `rabbit_mgmt_wm_rebalance_queues`):
//! add and delete a member, grow and shrink every queue's members on a
//! node, rebalance leaders; and (Warren's, as `rabbitmq-queues` has no
//! HTTP form of it) hand a queue's leadership to one of its members.
//! The work is `quorum::membership`'s; administrators only.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::auth::Authed;
use super::error::ApiError;
use warren_node::membership::{self, MembershipError, Selection};
use warren_node::ServerCtx;

type Ctx = State<Arc<ServerCtx>>;

/// As RabbitMQ's replica handlers answer: an unknown queue 404, a node
/// outside the cluster 400, and every refusal of the change itself 503.
impl From<MembershipError> for ApiError {
    fn from(e: MembershipError) -> ApiError {
        match e {
            MembershipError::NotFound(_) => ApiError::NotFound,
            MembershipError::UnknownNode(_) => ApiError::BadRequest("Node is not a cluster member".into()),
            other => ApiError::Unavailable(other.to_string()),
        }
    }
}

fn clustered(ctx: &ServerCtx) -> Result<(), ApiError> {
    if ctx.meta.is_none() {
        return Err(ApiError::BadRequest(
            "this node is not clustered: a quorum queue's only member is here".into(),
        ));
    }
    Ok(())
}

fn node_of(body: &Value) -> Result<String, ApiError> {
    body["node"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| ApiError::BadRequest("give \"node\"".into()))
}

fn selection(body: &Value) -> Result<Selection, ApiError> {
    let vhost = body["vhost_pattern"].as_str().unwrap_or(".*");
    let queue = body["queue_pattern"].as_str().unwrap_or(".*");
    Selection::new(vhost, queue).map_err(ApiError::BadRequest)
}

/// What a call on one queue's members starts from: an administrator, a
/// cluster, the quorum queue, and the body's node.
fn one_queue(
    ctx: &ServerCtx,
    who: &Authed,
    vhost: &str,
    name: &str,
    body: &Value,
) -> Result<(Arc<warren_core::queue::Queue>, String), ApiError> {
    who.admin()?;
    clustered(ctx)?;
    let q = membership::quorum_queue(ctx, vhost, name)?;
    Ok((q, node_of(body)?))
}

/// `POST /api/queues/quorum/{vhost}/{name}/replicas/add` `{"node": ...}`.
pub async fn add_member(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<StatusCode, ApiError> {
    let (q, node) = one_queue(&ctx, &who, &vhost, &name, &body)?;
    membership::add_member(&ctx, &q, &node).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/queues/quorum/{vhost}/{name}/replicas/delete` `{"node": ...}`:
/// 202, as RabbitMQ answers (also when the node is no member).
pub async fn delete_member(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<StatusCode, ApiError> {
    let (q, node) = one_queue(&ctx, &who, &vhost, &name, &body)?;
    match membership::delete_member(&ctx, &q, &node).await {
        Ok(_) | Err(MembershipError::NotMember(_)) => Ok(StatusCode::ACCEPTED),
        Err(e) => Err(e.into()),
    }
}

/// `POST /api/queues/quorum/{vhost}/{name}/leader` `{"node": ...}`
/// (Warren's): the member on `node` leads from now.
pub async fn transfer_leader(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<StatusCode, ApiError> {
    let (q, node) = one_queue(&ctx, &who, &vhost, &name, &body)?;
    membership::transfer_leader(&ctx, &q, &node).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/queues/quorum/replicas/on/{node}/grow`
/// `{"strategy": "all"|"even", "vhost_pattern", "queue_pattern"}`: each
/// queue's outcome, as `rabbitmq-queues grow` prints it (RabbitMQ's
/// handler answers 204 and drops them; any 2xx is success to clients).
pub async fn grow(
    State(ctx): Ctx,
    who: Authed,
    Path(node): Path<String>,
    Json(body): Json<Value>,
) -> Result<Json<Value>, ApiError> {
    who.admin()?;
    clustered(&ctx)?;
    let even = match body["strategy"].as_str() {
        Some("all") => false,
        Some("even") => true,
        _ => return Err(ApiError::BadRequest("Invalid strategy value".into())),
    };
    if ctx.node_table.as_ref().and_then(|t| t.id(&node)).is_none() {
        return Err(ApiError::NotFound);
    }
    let out = membership::grow(&ctx, &node, &selection(&body)?, even).await;
    Ok(Json(json!(out)))
}

/// `DELETE /api/queues/quorum/replicas/on/{node}/shrink`.
pub async fn shrink(
    State(ctx): Ctx,
    who: Authed,
    Path(node): Path<String>,
    body: Option<Json<Value>>,
) -> Result<Json<Value>, ApiError> {
    who.admin()?;
    clustered(&ctx)?;
    if ctx.node_table.as_ref().and_then(|t| t.id(&node)).is_none() {
        return Err(ApiError::NotFound);
    }
    let body = body.map(|Json(b)| b).unwrap_or(Value::Null);
    let out = membership::shrink(&ctx, &node, &selection(&body)?).await;
    Ok(Json(json!(out)))
}

/// `POST /api/rebalance/queues`: quorum queues' leaders spread over
/// their members' nodes; the leaders per node after.
pub async fn rebalance(
    State(ctx): Ctx,
    who: Authed,
    body: Option<Json<Value>>,
) -> Result<Json<Value>, ApiError> {
    who.admin()?;
    clustered(&ctx)?;
    let body = body.map(|Json(b)| b).unwrap_or(Value::Null);
    let out = membership::rebalance(&ctx, &selection(&body)?).await;
    Ok(Json(json!(out)))
}
