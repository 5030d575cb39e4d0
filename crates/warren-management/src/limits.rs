//! `/api/vhost-limits` and `/api/user-limits`: list, set one limit
//! (`PUT .../NAME {"value": N}`, merged into the others), clear one
//! (`DELETE .../NAME`). Shapes and errors as RabbitMQ 3.10 answers them
//! (compared): listings hold only what has limits, as
//! `[{"vhost": V, "value": {...}}]` or `[{"user": U, "value": {...}}]`.

use std::sync::Arc;
use warren_node::cluster::command::Command;
use warren_node::topology;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};
use warren_core::limits::{Limits, LimitsOf};

use super::auth::Authed;
use super::error::ApiError;
use super::objects::body;
use warren_node::limits::{parse_one, to_json};
use warren_node::ServerCtx;

type ApiResult<T> = Result<T, ApiError>;
type Ctx = State<Arc<ServerCtx>>;

fn vhost_entry(vhost: &str, l: &Limits) -> Value {
    json!({"vhost": vhost, "value": to_json(l)})
}

fn user_entry(user: &str, l: &Limits) -> Value {
    json!({"user": user, "value": to_json(l)})
}

/// The `value` of a PUT's body, checked as a limit of `of` named `name`.
fn value(of: LimitsOf, name: &str, b: Option<Json<Value>>) -> ApiResult<i64> {
    let m = body(b);
    let v = m
        .get("value")
        .ok_or_else(|| ApiError::BadRequest("[{key_missing,value}]".into()))?;
    parse_one(of, name, v).map_err(ApiError::BadRequest)
}

pub async fn vhosts(State(ctx): Ctx, who: Authed) -> Json<Value> {
    let mut vs = ctx.broker.vhosts();
    vs.sort_by(|a, b| a.name.cmp(&b.name));
    let list = vs
        .iter()
        .filter(|v| who.may_see(&v.name))
        .map(|v| (v, v.limits()))
        .filter(|(_, l)| !l.is_empty())
        .map(|(v, l)| vhost_entry(&v.name, &l))
        .collect();
    Json(Value::Array(list))
}

pub async fn vhost(State(ctx): Ctx, who: Authed, Path(vhost): Path<String>) -> ApiResult<Json<Value>> {
    let vh = ctx
        .broker
        .vhost(&vhost)
        .filter(|_| who.may_see(&vhost))
        .ok_or(ApiError::NotFound)?;
    let l = vh.limits();
    let list = if l.is_empty() {
        vec![]
    } else {
        vec![vhost_entry(&vhost, &l)]
    };
    Ok(Json(Value::Array(list)))
}

pub async fn put_vhost(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
    b: Option<Json<Value>>,
) -> ApiResult<StatusCode> {
    who.admin()?;
    ctx.broker.vhost(&vhost).ok_or(ApiError::NotFound)?;
    let value = value(LimitsOf::VHost, &name, b)?;
    topology::run(&ctx, Command::SetVhostLimit { vhost, name, value }).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn delete_vhost(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    who.admin()?;
    ctx.broker.vhost(&vhost).ok_or(ApiError::NotFound)?;
    topology::run(&ctx, Command::ClearVhostLimit { vhost, name }).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn users(State(ctx): Ctx, who: Authed) -> ApiResult<Json<Value>> {
    who.admin()?;
    let mut us = ctx.broker.users();
    us.sort_by(|a, b| a.name.cmp(&b.name));
    let list = us
        .iter()
        .filter(|u| !u.limits.is_empty())
        .map(|u| user_entry(&u.name, &u.limits))
        .collect();
    Ok(Json(Value::Array(list)))
}

pub async fn user(State(ctx): Ctx, who: Authed, Path(user): Path<String>) -> ApiResult<Json<Value>> {
    who.admin()?;
    let u = ctx.broker.user(&user).ok_or(ApiError::NotFound)?;
    let list = if u.limits.is_empty() {
        vec![]
    } else {
        vec![user_entry(&u.name, &u.limits)]
    };
    Ok(Json(Value::Array(list)))
}

pub async fn put_user(
    State(ctx): Ctx,
    who: Authed,
    Path((user, name)): Path<(String, String)>,
    b: Option<Json<Value>>,
) -> ApiResult<StatusCode> {
    who.admin()?;
    let value = value(LimitsOf::User, &name, b)?;
    ctx.broker.user(&user).ok_or(ApiError::NotFound)?;
    topology::run(&ctx, Command::SetUserLimit { user, name, value }).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn delete_user(
    State(ctx): Ctx,
    who: Authed,
    Path((user, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    who.admin()?;
    ctx.broker.user(&user).ok_or(ApiError::NotFound)?;
    topology::run(&ctx, Command::ClearUserLimit { user, name }).await?;
    Ok(StatusCode::NO_CONTENT)
}
