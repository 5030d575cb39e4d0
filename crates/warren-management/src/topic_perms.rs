//! Topic permissions in the management API, with RabbitMQ's paths, JSON
//! and status codes (compared with 3.10): `/api/topic-permissions`, one
//! user in one vhost at `/api/topic-permissions/{vhost}/{user}` (GET, PUT
//! of one exchange's patterns, DELETE of all of them), one exchange's at
//! `.../{exchange}` (DELETE, as RabbitMQ 4 has it), and the lists by user
//! and by vhost. Administrators only, as for ordinary permissions.

use std::sync::Arc;
use warren_node::cluster::command::Command;
use warren_node::topology;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};
use warren_core::{TopicPermission, User};

use super::auth::Authed;
use super::error::ApiError;
use super::objects::{body, required};
use warren_node::ServerCtx;

type Ctx = State<Arc<ServerCtx>>;
type ApiResult<T> = Result<T, ApiError>;

fn item(user: &str, vhost: &str, p: &TopicPermission) -> Value {
    json!({
        "user": user,
        "vhost": vhost,
        "exchange": p.exchange,
        "write": p.write,
        "read": p.read,
    })
}

/// Every topic permission of `u`, in `vhost` only when given.
fn of_user(u: &User, vhost: Option<&str>) -> Vec<Value> {
    u.topic_permissions
        .iter()
        .filter(|(v, _)| vhost.is_none_or(|want| want == v.as_str()))
        .flat_map(|(v, by_exchange)| by_exchange.values().map(move |p| item(&u.name, v, p)))
        .collect()
}

fn sorted(mut users: Vec<User>) -> Vec<User> {
    users.sort_by(|a, b| a.name.cmp(&b.name));
    users
}

pub async fn all(State(ctx): Ctx, who: Authed) -> ApiResult<Json<Value>> {
    who.admin()?;
    let out: Vec<Value> = sorted(ctx.broker.users())
        .iter()
        .flat_map(|u| of_user(u, None))
        .collect();
    Ok(Json(Value::Array(out)))
}

pub async fn of_one_user(State(ctx): Ctx, who: Authed, Path(user): Path<String>) -> ApiResult<Json<Value>> {
    who.admin()?;
    let u = ctx.broker.user(&user).ok_or(ApiError::NotFound)?;
    Ok(Json(Value::Array(of_user(&u, None))))
}

pub async fn in_vhost(State(ctx): Ctx, who: Authed, Path(vhost): Path<String>) -> ApiResult<Json<Value>> {
    who.admin()?;
    ctx.broker.vhost(&vhost).ok_or(ApiError::NotFound)?;
    let out: Vec<Value> = sorted(ctx.broker.users())
        .iter()
        .flat_map(|u| of_user(u, Some(&vhost)))
        .collect();
    Ok(Json(Value::Array(out)))
}

/// A user's topic permissions in a vhost: 404 when there are none.
pub async fn get_pair(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, user)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    who.admin()?;
    let u = ctx.broker.user(&user).ok_or(ApiError::NotFound)?;
    let out = of_user(&u, Some(&vhost));
    if out.is_empty() {
        return Err(ApiError::NotFound);
    }
    Ok(Json(Value::Array(out)))
}

/// Set one exchange's patterns (`exchange`, `write` and `read` are all
/// required). 201 when the user had none in the vhost, else 204, as
/// RabbitMQ answers.
pub async fn put_pair(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, user)): Path<(String, String)>,
    b: Option<Json<Value>>,
) -> ApiResult<StatusCode> {
    who.admin()?;
    let m = body(b);
    let field = |k: &str| required(&m, k);
    let (exchange, write, read) = (field("exchange")?, field("write")?, field("read")?);
    let missing = || ApiError::BadRequest("vhost_or_user_not_found".into());
    ctx.broker.vhost(&vhost).ok_or_else(missing)?;
    TopicPermission::new(&exchange, &write, &read).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let u = ctx.broker.user(&user).ok_or_else(missing)?;
    let created = u.topic_permissions.get(&vhost).is_none_or(|m| m.is_empty());
    let c = Command::PutTopicPermission {
        user,
        vhost,
        exchange,
        write,
        read,
    };
    topology::run(&ctx, c).await?;
    Ok(if created {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    })
}

/// Remove one exchange's topic permission of a user in a vhost
/// (`/api/topic-permissions/{vhost}/{user}/{exchange}`, RabbitMQ 4's
/// path; 404 if there is none).
pub async fn delete_one(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, user, exchange)): Path<(String, String, String)>,
) -> ApiResult<StatusCode> {
    who.admin()?;
    let has = ctx.broker.user(&user).is_some_and(|u| {
        u.topic_permissions
            .get(&vhost)
            .is_some_and(|m| m.contains_key(&exchange))
    });
    if !has {
        return Err(ApiError::NotFound);
    }
    let c = Command::DeleteTopicPermission {
        user,
        vhost,
        exchange: Some(exchange),
    };
    topology::run(&ctx, c).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Remove all of a user's topic permissions in a vhost (404 if none).
pub async fn delete_pair(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, user)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    who.admin()?;
    let has = ctx
        .broker
        .user(&user)
        .is_some_and(|u| u.topic_permissions.get(&vhost).is_some_and(|m| !m.is_empty()));
    if !has {
        return Err(ApiError::NotFound);
    }
    let c = Command::DeleteTopicPermission {
        user,
        vhost,
        exchange: None,
    };
    topology::run(&ctx, c).await?;
    Ok(StatusCode::NO_CONTENT)
}
