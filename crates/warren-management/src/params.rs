//! RabbitMQ's runtime parameters, global parameters and operator
//! policies, as far as Warren has them: no component takes runtime
//! parameters through this API (no federation, no shovel; vhost limits
//! have their own, in `limits`), no operator policies can be set, and the
//! one global parameter is the cluster's name. The listings answer as
//! RabbitMQ's do with nothing set (empty lists, compared with 3.10), so
//! tools that read them work.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use super::auth::Authed;
use super::error::ApiError;
use warren_node::ServerCtx;

type ApiResult<T> = Result<T, ApiError>;

/// The global parameters: the cluster's name.
pub fn global_parameters(cluster_name: &str) -> Vec<Value> {
    vec![json!({"name": "cluster_name", "value": cluster_name})]
}

/// An empty listing, for any user who may log in.
pub async fn none(_who: Authed) -> Json<Value> {
    Json(json!([]))
}

/// An empty listing of a vhost's, 404 when there is no such vhost.
pub async fn none_in_vhost(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path(vhost): Path<String>,
) -> ApiResult<Json<Value>> {
    if !who.may_see(&vhost) || ctx.broker.vhost(&vhost).is_none() {
        return Err(ApiError::NotFound);
    }
    Ok(Json(json!([])))
}

/// A component's runtime parameters in a vhost: none.
pub async fn component_in_vhost(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path((_component, vhost)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    none_in_vhost(State(ctx), who, Path(vhost)).await
}

pub async fn globals(State(ctx): State<Arc<ServerCtx>>, _who: Authed) -> Json<Value> {
    Json(Value::Array(global_parameters(ctx.config.cluster_name())))
}

pub async fn global(
    State(ctx): State<Arc<ServerCtx>>,
    _who: Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    global_parameters(ctx.config.cluster_name())
        .into_iter()
        .find(|p| p["name"] == name.as_str())
        .map(Json)
        .ok_or(ApiError::NotFound)
}
