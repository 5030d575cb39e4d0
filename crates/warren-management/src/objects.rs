//! Per-vhost objects: vhosts, users, permissions, exchanges, queues and
//! bindings, listed, shown, declared and deleted with RabbitMQ's paths and
//! JSON fields (the fields tools read: messages, messages_ready,
//! messages_unacknowledged, consumers, state, type, arguments ...). A user
//! sees only the vhosts it may see; another vhost's objects are 404 to it.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use warren_amqp091::ShortStr;
use warren_core::decl::{ExchangeDecl, QueueDecl};
use warren_core::exchange::{Binding, Destination};
use warren_core::limits::LimitsOf;
use warren_core::policy::Policy;
use warren_core::vhost::VHost;
use warren_core::{Access, Permission, Resource, User};

use super::auth::Authed;
use super::error::ApiError;
use super::listing::{listing, ListQuery};
use super::queue_info::{queue_json, queue_listing, Here};
use warren_node::cluster::command::Command;
use warren_node::definitions::{json_to_table, table_to_json};
use warren_node::topology;
use warren_node::uri::percent_encode;
use warren_node::ServerCtx;

type Ctx = State<Arc<ServerCtx>>;
type ApiResult<T> = Result<T, ApiError>;

/// The vhost, if it exists and this user may see it (else 404).
pub(super) fn visible(ctx: &ServerCtx, who: &Authed, vhost: &str) -> ApiResult<Arc<VHost>> {
    if !who.may_see(vhost) {
        return Err(ApiError::NotFound);
    }
    ctx.broker.vhost(vhost).ok_or(ApiError::NotFound)
}

fn visible_vhosts(ctx: &ServerCtx, who: &Authed) -> Vec<Arc<VHost>> {
    let mut v: Vec<_> = ctx
        .broker
        .vhosts()
        .into_iter()
        .filter(|v| who.may_see(&v.name))
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

/// A JSON body, or `{}` when there is none.
pub(super) fn body(b: Option<Json<Value>>) -> Map<String, Value> {
    match b {
        Some(Json(Value::Object(m))) => m,
        _ => Map::new(),
    }
}

/// A string field the request must have (RabbitMQ's 400 `key_missing`).
pub(super) fn required(m: &Map<String, Value>, k: &str) -> ApiResult<String> {
    match m.get(k) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(ApiError::BadRequest(format!("[{{key_missing,{k}}}]"))),
    }
}

fn flag(m: &Map<String, Value>, k: &str, default: bool) -> ApiResult<bool> {
    match m.get(k) {
        None => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) if s == "true" || s == "false" => Ok(s == "true"),
        Some(_) => Err(ApiError::BadRequest(format!("{k} must be true or false"))),
    }
}

fn arguments(m: &Map<String, Value>) -> ApiResult<warren_amqp091::FieldTable> {
    match m.get("arguments") {
        None | Some(Value::Null) => Ok(Default::default()),
        Some(Value::Object(a)) => Ok(json_to_table(a)),
        Some(_) => Err(ApiError::BadRequest("arguments must be an object".into())),
    }
}

// ---- vhosts ----

fn vhost_json(vh: &VHost, node: &str) -> Value {
    let (mut ready, mut unacked) = (0, 0);
    for q in vh.queues() {
        let s = q.stats();
        ready += s.ready;
        unacked += s.unacked;
    }
    json!({
        "name": vh.name,
        "description": "",
        "tags": [],
        "tracing": false,
        "cluster_state": {node: "running"},
        "messages": ready + unacked,
        "messages_ready": ready,
        "messages_unacknowledged": unacked,
    })
}

pub async fn vhosts(State(ctx): Ctx, who: Authed, Query(q): Query<ListQuery>) -> ApiResult<Json<Value>> {
    listing(
        visible_vhosts(&ctx, &who)
            .iter()
            .map(|v| vhost_json(v, &ctx.config.node_name))
            .collect(),
        &q,
    )
}

pub async fn vhost(State(ctx): Ctx, who: Authed, Path(vhost): Path<String>) -> ApiResult<Json<Value>> {
    let vh = visible(&ctx, &who, &vhost)?;
    Ok(Json(vhost_json(&vh, &ctx.config.node_name)))
}

pub async fn put_vhost(State(ctx): Ctx, who: Authed, Path(vhost): Path<String>) -> ApiResult<StatusCode> {
    who.admin()?;
    let existed = ctx.broker.vhost(&vhost).is_some();
    // The creator may use it (RabbitMQ grants the creating user full
    // permissions on a new vhost).
    let c = Command::PutVhost {
        name: vhost,
        creator: who.user.name.clone(),
    };
    topology::run(&ctx, c).await?;
    Ok(if existed {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    })
}

pub async fn delete_vhost(State(ctx): Ctx, who: Authed, Path(vhost): Path<String>) -> ApiResult<StatusCode> {
    who.admin()?;
    if ctx.broker.vhost(&vhost).is_none() {
        return Err(ApiError::NotFound);
    }
    topology::run(&ctx, Command::DeleteVhost { name: vhost }).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- users and permissions ----

fn user_json(u: &User) -> Value {
    json!({
        "name": u.name,
        "password_hash": u.password_hash,
        "hashing_algorithm": "rabbit_password_hashing_sha256",
        "tags": u.tags,
        "limits": warren_node::limits::to_json(&u.limits),
    })
}

pub async fn users(State(ctx): Ctx, who: Authed, Query(q): Query<ListQuery>) -> ApiResult<Json<Value>> {
    who.admin()?;
    let mut us = ctx.broker.users();
    us.sort_by(|a, b| a.name.cmp(&b.name));
    listing(us.iter().map(user_json).collect(), &q)
}

/// GET /api/users/without-permissions: users with no vhost to use.
pub async fn users_without_permissions(State(ctx): Ctx, who: Authed) -> ApiResult<Json<Value>> {
    who.admin()?;
    let mut us = ctx.broker.users();
    us.retain(|u| u.permissions.is_empty());
    us.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(Value::Array(us.iter().map(user_json).collect())))
}

pub async fn user(State(ctx): Ctx, who: Authed, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    who.admin()?;
    ctx.broker
        .user(&name)
        .map(|u| Json(user_json(&u)))
        .ok_or(ApiError::NotFound)
}

/// PUT /api/users/{name}: `password` (hashed here) or `password_hash`
/// (RabbitMQ's SHA-256 format), and `tags` (a list or a comma-separated
/// string).
pub async fn put_user(
    State(ctx): Ctx,
    who: Authed,
    Path(name): Path<String>,
    b: Option<Json<Value>>,
) -> ApiResult<StatusCode> {
    who.admin()?;
    let m = body(b);
    let existing = ctx.broker.user(&name);
    let password_hash = match (m.get("password"), m.get("password_hash")) {
        (Some(Value::String(p)), _) => User::hash_password(p),
        (_, Some(Value::String(h))) => h.clone(),
        _ => match &existing {
            Some(u) => u.password_hash.clone(),
            None => {
                return Err(ApiError::BadRequest(
                    "password or password_hash must be set".into(),
                ))
            }
        },
    };
    let tags = match m.get("tags") {
        Some(Value::String(s)) => s
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(String::from)
            .collect(),
        Some(Value::Array(a)) => a.iter().filter_map(|t| t.as_str().map(String::from)).collect(),
        _ => Vec::new(),
    };
    // RabbitMQ's put_user takes a user's limits too, when the body has them.
    let limits = match m.get("limits") {
        Some(v) => Some(warren_node::limits::parse(LimitsOf::User, v).map_err(ApiError::BadRequest)?),
        None => None,
    };
    let c = Command::PutUser {
        name,
        password_hash,
        tags,
        limits,
    };
    topology::run(&ctx, c).await?;
    Ok(if existing.is_some() {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    })
}

pub async fn delete_user(State(ctx): Ctx, who: Authed, Path(name): Path<String>) -> ApiResult<StatusCode> {
    who.admin()?;
    if ctx.broker.user(&name).is_none() {
        return Err(ApiError::NotFound);
    }
    topology::run(&ctx, Command::DeleteUser { name }).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn permission_json(user: &str, vhost: &str, p: &Permission) -> Value {
    json!({
        "user": user,
        "vhost": vhost,
        "configure": p.configure(),
        "write": p.write(),
        "read": p.read(),
    })
}

pub async fn permissions(State(ctx): Ctx, who: Authed) -> ApiResult<Json<Value>> {
    who.admin()?;
    let mut out = Vec::new();
    for u in ctx.broker.users() {
        for (v, p) in &u.permissions {
            out.push(permission_json(&u.name, v, p));
        }
    }
    out.sort_by_key(|p| p.to_string());
    Ok(Json(Value::Array(out)))
}

/// GET /api/users/{user}/permissions: the user's grants in every vhost.
pub async fn user_permissions(
    State(ctx): Ctx,
    who: Authed,
    Path(user): Path<String>,
) -> ApiResult<Json<Value>> {
    who.admin()?;
    let u = ctx.broker.user(&user).ok_or(ApiError::NotFound)?;
    let out = u
        .permissions
        .iter()
        .map(|(v, p)| permission_json(&u.name, v, p))
        .collect();
    Ok(Json(Value::Array(out)))
}

/// GET /api/vhosts/{vhost}/permissions: every user's grant in the vhost.
pub async fn vhost_permissions(
    State(ctx): Ctx,
    who: Authed,
    Path(vhost): Path<String>,
) -> ApiResult<Json<Value>> {
    who.admin()?;
    ctx.broker.vhost(&vhost).ok_or(ApiError::NotFound)?;
    let mut users = ctx.broker.users();
    users.sort_by(|a, b| a.name.cmp(&b.name));
    let out = users
        .iter()
        .filter_map(|u| {
            u.permissions
                .get(&vhost)
                .map(|p| permission_json(&u.name, &vhost, p))
        })
        .collect();
    Ok(Json(Value::Array(out)))
}

pub async fn permission(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, user)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    who.admin()?;
    ctx.broker
        .user(&user)
        .and_then(|u| {
            u.permissions
                .get(&vhost)
                .map(|p| permission_json(&user, &vhost, p))
        })
        .map(Json)
        .ok_or(ApiError::NotFound)
}

/// Set `user`'s configure/write/read patterns in `vhost` (all three are
/// required, as in RabbitMQ; an invalid regex is a 400).
pub async fn put_permission(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, user)): Path<(String, String)>,
    b: Option<Json<Value>>,
) -> ApiResult<StatusCode> {
    who.admin()?;
    ctx.broker.vhost(&vhost).ok_or(ApiError::NotFound)?;
    let m = body(b);
    let field = |k: &str| required(&m, k);
    let (configure, write, read) = (field("configure")?, field("write")?, field("read")?);
    Permission::new(&configure, &write, &read).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let existing = ctx.broker.user(&user).ok_or(ApiError::NotFound)?;
    let created = !existing.permissions.contains_key(&vhost);
    let c = Command::PutPermission {
        user,
        vhost,
        configure,
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

pub async fn delete_permission(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, user)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    who.admin()?;
    let has = ctx
        .broker
        .user(&user)
        .is_some_and(|u| u.permissions.contains_key(&vhost));
    if !has {
        return Err(ApiError::NotFound);
    }
    topology::run(&ctx, Command::DeletePermission { user, vhost }).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- exchanges ----

fn exchange_json(vhost: &str, x: &ExchangeDecl, policy: Option<&Policy>) -> Value {
    let mut v = json!({
        "name": x.name.to_str_lossy(),
        "vhost": vhost,
        "type": x.kind.to_str_lossy(),
        "durable": x.durable,
        "auto_delete": x.auto_delete,
        "internal": x.internal,
        "arguments": table_to_json(&x.arguments),
        "user_who_performed_action": "",
    });
    // RabbitMQ shows the field only when a policy applies.
    if let Some(p) = policy {
        v["policy"] = p.name.clone().into();
    }
    v
}

fn exchanges_of(vhs: &[Arc<VHost>]) -> Vec<Value> {
    vhs.iter()
        .flat_map(|vh| {
            vh.exchanges()
                .into_iter()
                .map(|(x, p)| exchange_json(&vh.name, &x, p.as_deref()))
                .collect::<Vec<_>>()
        })
        .collect()
}

pub async fn exchanges(State(ctx): Ctx, who: Authed, Query(q): Query<ListQuery>) -> ApiResult<Json<Value>> {
    listing(exchanges_of(&visible_vhosts(&ctx, &who)), &q)
}

pub async fn exchanges_in(
    State(ctx): Ctx,
    who: Authed,
    Path(vhost): Path<String>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    listing(exchanges_of(&[visible(&ctx, &who, &vhost)?]), &q)
}

pub async fn exchange(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let vh = visible(&ctx, &who, &vhost)?;
    vh.exchanges()
        .into_iter()
        .find(|(x, _)| x.name.as_bytes() == name.as_bytes())
        .map(|(x, p)| Json(exchange_json(&vh.name, &x, p.as_deref())))
        .ok_or(ApiError::NotFound)
}

pub async fn put_exchange(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
    b: Option<Json<Value>>,
) -> ApiResult<StatusCode> {
    let vh = visible(&ctx, &who, &vhost)?;
    let m = body(b);
    let args = arguments(&m)?;
    who.check_declare(&vhost, Resource::Exchange, &name, &args)?;
    let kind = match m.get("type") {
        Some(Value::String(t)) => t.clone(),
        _ => return Err(ApiError::BadRequest("type must be set".into())),
    };
    let existed = vh.check_exchange(name.as_bytes()).is_ok();
    let decl = ExchangeDecl {
        name: ShortStr::from(name.as_str()),
        kind: ShortStr::from(kind.as_str()),
        durable: flag(&m, "durable", true)?,
        auto_delete: flag(&m, "auto_delete", false)?,
        internal: flag(&m, "internal", false)?,
        arguments: args,
    };
    topology::declare_exchange(&ctx, &vh, decl).await?;
    Ok(if existed {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    })
}

#[derive(Debug, Default, Deserialize)]
pub struct IfUnused {
    #[serde(rename = "if-unused")]
    if_unused: Option<bool>,
    #[serde(rename = "if-empty")]
    if_empty: Option<bool>,
}

pub async fn delete_exchange(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
    Query(q): Query<IfUnused>,
) -> ApiResult<StatusCode> {
    let vh = visible(&ctx, &who, &vhost)?;
    who.check(&vhost, Access::Configure, Resource::Exchange, &name)?;
    // The API answers 404 for a missing exchange (AMQP's delete does not).
    vh.check_exchange(name.as_bytes())
        .map_err(|_| ApiError::NotFound)?;
    topology::delete_exchange(
        &ctx,
        &vh,
        &ShortStr::from(name.as_str()),
        q.if_unused.unwrap_or(false),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- queues ----

pub async fn queues(State(ctx): Ctx, who: Authed, Query(q): Query<ListQuery>) -> ApiResult<Response> {
    queue_listing(&visible_vhosts(&ctx, &who), &q, &Here::of(&ctx))
}

pub async fn queues_in(
    State(ctx): Ctx,
    who: Authed,
    Path(vhost): Path<String>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Response> {
    queue_listing(&[visible(&ctx, &who, &vhost)?], &q, &Here::of(&ctx))
}

pub async fn queue(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let vh = visible(&ctx, &who, &vhost)?;
    // Exclusive queues are listed too, as RabbitMQ lists them.
    let q = vh.find_queue(name.as_bytes()).ok_or(ApiError::NotFound)?;
    Ok(Json(queue_json(&q, &Here::of(&ctx))))
}

pub async fn put_queue(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
    b: Option<Json<Value>>,
) -> ApiResult<StatusCode> {
    let vh = visible(&ctx, &who, &vhost)?;
    let m = body(b);
    let args = arguments(&m)?;
    who.check_declare(&vhost, Resource::Queue, &name, &args)?;
    let decl = QueueDecl {
        name: ShortStr::from(name.as_str()),
        durable: flag(&m, "durable", true)?,
        exclusive: false,
        auto_delete: flag(&m, "auto_delete", false)?,
        arguments: args,
    };
    let (_, created) = topology::declare_queue(&ctx, &vh, decl, 0, true).await?;
    Ok(if created {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    })
}

pub async fn delete_queue(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
    Query(q): Query<IfUnused>,
) -> ApiResult<StatusCode> {
    let vh = visible(&ctx, &who, &vhost)?;
    who.check(&vhost, Access::Configure, Resource::Queue, &name)?;
    let n = ShortStr::from(name.as_str());
    vh.queue(&n, 0).map_err(|_| ApiError::NotFound)?;
    let (if_unused, if_empty) = (q.if_unused.unwrap_or(false), q.if_empty.unwrap_or(false));
    topology::delete_queue(&ctx, &vh, &n, if_unused, if_empty, 0).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn purge_queue(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let vh = visible(&ctx, &who, &vhost)?;
    who.check(&vhost, Access::Read, Resource::Queue, &name)?;
    let q = vh.queue(name.as_bytes(), 0).map_err(|_| ApiError::NotFound)?;
    let (n, effects) = q.purge();
    vh.apply(&q, effects, &mut |_| {});
    // A quorum queue's purge is done once applied.
    n.wait().await;
    Ok(StatusCode::NO_CONTENT)
}

// ---- bindings ----

/// The binding's name in RabbitMQ's binding paths: its routing key, or
/// `~` for none, with `~N` when it has arguments.
fn properties_key(b: &Binding) -> String {
    let key = b.routing_key.to_str_lossy();
    if !b.arguments.is_empty() {
        format!("{key}~{}", b.arguments.len())
    } else if key.is_empty() {
        "~".to_string()
    } else {
        path_escape(&key)
    }
}

/// A routing key as it stands in a binding's path segment.
fn path_escape(key: &str) -> String {
    key.replace('%', "%25").replace('/', "%2F")
}

fn binding_json(vhost: &str, source: &ShortStr, b: &Binding) -> Value {
    let (dest_type, dest) = match &b.destination {
        Destination::Queue(q) => ("queue", q),
        Destination::Exchange(x) => ("exchange", x),
    };
    json!({
        "source": source.to_str_lossy(),
        "vhost": vhost,
        "destination": dest.to_str_lossy(),
        "destination_type": dest_type,
        "routing_key": b.routing_key.to_str_lossy(),
        "arguments": table_to_json(&b.arguments),
        "properties_key": properties_key(b),
    })
}

/// Every binding of these vhosts, the default exchange's implicit one to
/// each queue first (RabbitMQ lists them, with source "").
fn bindings_of(vhs: &[Arc<VHost>]) -> Vec<Value> {
    let default = ShortStr::from("");
    let mut out = Vec::new();
    for vh in vhs {
        let mut queues = vh.queues();
        queues.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        for q in queues {
            let implicit = Binding {
                destination: Destination::Queue(q.name.clone()),
                routing_key: q.name.clone(),
                arguments: Default::default(),
            };
            out.push(binding_json(&vh.name, &default, &implicit));
        }
        out.extend(vh.bindings().iter().map(|(s, b)| binding_json(&vh.name, s, b)));
    }
    out
}

pub async fn bindings(State(ctx): Ctx, who: Authed, Query(q): Query<ListQuery>) -> ApiResult<Json<Value>> {
    listing(bindings_of(&visible_vhosts(&ctx, &who)), &q)
}

pub async fn bindings_in(
    State(ctx): Ctx,
    who: Authed,
    Path(vhost): Path<String>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    listing(bindings_of(&[visible(&ctx, &who, &vhost)?]), &q)
}

/// GET /api/exchanges/{vhost}/{name}/bindings/{source|destination}: the
/// bindings from the exchange, or to it.
pub async fn exchange_bindings(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, name, side)): Path<(String, String, String)>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    let vh = visible(&ctx, &who, &vhost)?;
    vh.check_exchange(name.as_bytes())
        .map_err(|_| ApiError::NotFound)?;
    let to_it = match side.as_str() {
        "source" => false,
        "destination" => true,
        _ => return Err(ApiError::NotFound),
    };
    let out = vh
        .bindings()
        .iter()
        .filter(|(source, b)| match (&b.destination, to_it) {
            (Destination::Exchange(x), true) => x.as_bytes() == name.as_bytes(),
            (_, true) => false,
            (_, false) => source.as_bytes() == name.as_bytes(),
        })
        .map(|(source, b)| binding_json(&vhost, source, b))
        .collect();
    listing(out, &q)
}

/// The destination of a binding path: `q` for a queue, `e` for an
/// exchange.
fn destination(kind: &str, name: &str) -> ApiResult<Destination> {
    match kind {
        "q" => Ok(Destination::Queue(ShortStr::from(name))),
        "e" => Ok(Destination::Exchange(ShortStr::from(name))),
        _ => Err(ApiError::NotFound),
    }
}

pub async fn bindings_between(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, source, kind, destination_name)): Path<(String, String, String, String)>,
) -> ApiResult<Json<Value>> {
    let vh = visible(&ctx, &who, &vhost)?;
    let dest = destination(&kind, &destination_name)?;
    let src = ShortStr::from(source.as_str());
    Ok(Json(Value::Array(
        vh.bindings_from(source.as_bytes(), Some(&dest))
            .iter()
            .map(|b| binding_json(&vhost, &src, b))
            .collect(),
    )))
}

/// POST /api/bindings/{vhost}/e/{source}/{q|e}/{destination}:
/// `routing_key` and `arguments`; 201 with the new binding's location.
pub async fn bind(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, source, kind, destination_name)): Path<(String, String, String, String)>,
    b: Option<Json<Value>>,
) -> ApiResult<(StatusCode, [(axum::http::HeaderName, String); 1])> {
    let vh = visible(&ctx, &who, &vhost)?;
    let dest = destination(&kind, &destination_name)?;
    let m = body(b);
    let key = m
        .get("routing_key")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    who.check_bind(&vh, &source, &dest, key.as_bytes())?;
    let binding = Binding {
        destination: dest,
        routing_key: ShortStr::from(key.as_str()),
        arguments: arguments(&m)?,
    };
    let props = properties_key(&binding);
    topology::bind(&ctx, &vh, &ShortStr::from(source.as_str()), binding).await?;
    let location = format!(
        "/api/bindings/{}/e/{}/{kind}/{}/{}",
        percent_encode(&vhost),
        percent_encode(&source),
        percent_encode(&destination_name),
        props
    );
    Ok((StatusCode::CREATED, [(axum::http::header::LOCATION, location)]))
}

/// DELETE /api/bindings/{vhost}/e/{source}/{q|e}/{destination}/{props}:
/// the binding whose `properties_key` is `props`.
pub async fn unbind(
    State(ctx): Ctx,
    who: Authed,
    Path((vhost, source, kind, destination_name, props)): Path<(String, String, String, String, String)>,
) -> ApiResult<StatusCode> {
    let vh = visible(&ctx, &who, &vhost)?;
    let dest = destination(&kind, &destination_name)?;
    let found = vh
        .bindings_from(source.as_bytes(), Some(&dest))
        .into_iter()
        // The path segment arrives decoded; the key is kept encoded.
        .find(|b| {
            let k = properties_key(b);
            k == props || k == path_escape(&props)
        })
        .ok_or(ApiError::NotFound)?;
    who.check_bind(&vh, &source, &dest, &found.routing_key)?;
    topology::unbind(&ctx, &vh, &ShortStr::from(source.as_str()), found).await?;
    Ok(StatusCode::NO_CONTENT)
}
