//! Policies over HTTP, with RabbitMQ's paths and JSON: `/api/policies`,
//! `/api/policies/V` and `GET/PUT/DELETE /api/policies/V/NAME`. Only users
//! tagged `policymaker` or `administrator` may read or change them, and a
//! policymaker only in the vhosts it has permissions on.

use std::sync::Arc;
use warren_node::cluster::command::Command;
use warren_node::topology;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{Map, Value};
use warren_core::VHost;

use super::auth::Authed;
use super::error::ApiError;
use super::listing::{listing, ListQuery};
use super::objects::visible;
use warren_node::definitions::PolicyDef;
use warren_node::ServerCtx;

type Ctx = State<Arc<ServerCtx>>;
type ApiResult<T> = Result<T, ApiError>;

fn of(vh: &VHost) -> Vec<Value> {
    vh.policies()
        .iter()
        .filter_map(|p| serde_json::to_value(PolicyDef::of(p)).ok())
        .collect()
}

/// The vhost, if this user may manage its policies.
fn managed(ctx: &ServerCtx, who: &Authed, vhost: &str) -> ApiResult<Arc<VHost>> {
    who.policymaker()?;
    visible(ctx, who, vhost)
}

pub async fn policies(State(ctx): Ctx, who: Authed, Query(q): Query<ListQuery>) -> ApiResult<Json<Value>> {
    who.policymaker()?;
    let mut vhs: Vec<_> = ctx
        .broker
        .vhosts()
        .into_iter()
        .filter(|v| who.may_see(&v.name))
        .collect();
    vhs.sort_by(|a, b| a.name.cmp(&b.name));
    listing(vhs.iter().flat_map(|v| of(v)).collect(), &q)
}

pub async fn policies_in(
    State(ctx): Ctx,
    who: Authed,
    Path(vhost): Path<String>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    let vh = managed(&ctx, &who, &vhost)?;
    listing(of(&vh), &q)
}

pub async fn policy(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let vh = managed(&ctx, &who, &vhost)?;
    let p = vh
        .policies()
        .into_iter()
        .find(|p| p.name == name)
        .ok_or(ApiError::NotFound)?;
    serde_json::to_value(PolicyDef::of(&p))
        .map(Json)
        .map_err(|e| ApiError::Internal(e.to_string()))
}

pub async fn put_policy(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
    body: Option<Json<Value>>,
) -> ApiResult<StatusCode> {
    let vh = managed(&ctx, &who, &vhost)?;
    let m = match body {
        Some(Json(Value::Object(m))) => m,
        _ => return Err(ApiError::BadRequest("a JSON object is required".into())),
    };
    let pattern = match m.get("pattern") {
        Some(Value::String(s)) => s.clone(),
        _ => {
            return Err(ApiError::BadRequest(
                "Validation failed\n\nkey \"pattern\" not found\n".into(),
            ))
        }
    };
    let definition = match m.get("definition") {
        Some(Value::Object(d)) => d.clone(),
        Some(_) => return Err(ApiError::BadRequest("definition must be an object".into())),
        None => Map::new(),
    };
    // rabbitmqadmin and the UI send the priority as a string or a number.
    let priority = match m.get("priority") {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| ApiError::BadRequest("priority must be an integer".into()))?,
        Some(Value::String(s)) => s
            .parse()
            .map_err(|_| ApiError::BadRequest("priority must be an integer".into()))?,
        Some(_) => return Err(ApiError::BadRequest("priority must be an integer".into())),
    };
    let apply_to = match m.get("apply-to") {
        None | Some(Value::Null) => "all".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ApiError::BadRequest("apply-to must be a string".into())),
    };
    let def = PolicyDef {
        vhost: vhost.clone(),
        name: name.clone(),
        pattern,
        apply_to,
        definition,
        priority,
    };
    def.to_policy().map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let replaced = vh.policies().iter().any(|p| p.name == name);
    topology::run(&ctx, Command::PutPolicy(def)).await?;
    Ok(if replaced {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    })
}

pub async fn delete_policy(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let vh = managed(&ctx, &who, &vhost)?;
    if !vh.policies().iter().any(|p| p.name == name) {
        return Err(ApiError::NotFound);
    }
    topology::run(&ctx, Command::DeletePolicy { vhost, name }).await?;
    Ok(StatusCode::NO_CONTENT)
}
