//! /api/connections: list, show and close client connections (every
//! protocol), with RabbitMQ's fields. A user sees the connections of the
//! vhosts it may see; closing one (DELETE, with an optional `X-Reason`
//! header) gets it closed as `rabbitmqctl close_connection` does:
//! connection.close 320 CONNECTION_FORCED, the reason in its text.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde_json::{json, Value};

use super::auth::Authed;
use super::error::ApiError;
use super::objects::{listing, visible as visible_vhost, ListQuery};
use crate::amqp10::management::NODE;
use crate::connections::Entry;
use crate::ServerCtx;

pub(super) fn connection_json(e: &Entry) -> Value {
    let login = e.login();
    json!({
        "name": e.name(),
        "node": NODE,
        "type": "network",
        "state": "running",
        "protocol": login.as_ref().map(|l| l.protocol),
        "user": login.as_ref().map(|l| l.user.clone()),
        "vhost": login.as_ref().map(|l| l.vhost.clone()),
        "host": e.local.ip().to_string(),
        "port": e.local.port(),
        "peer_host": e.peer.ip().to_string(),
        "peer_port": e.peer.port(),
        "connected_at": e.connected_at,
        "channels": e.channel_count(),
        "recv_oct": e.recv_oct.load(Relaxed),
        "send_oct": e.send_oct.load(Relaxed),
    })
}

/// Logged-in connections this user may see.
pub(super) fn visible(ctx: &ServerCtx, who: &Authed, vhost: Option<&str>) -> Vec<Arc<Entry>> {
    ctx.connections
        .list()
        .into_iter()
        .filter(|e| {
            e.login()
                .is_some_and(|l| who.may_see(&l.vhost) && vhost.is_none_or(|v| v == l.vhost))
        })
        .collect()
}

pub async fn connections(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    listing(
        visible(&ctx, &who, None)
            .iter()
            .map(|e| connection_json(e))
            .collect(),
        &q,
    )
}

pub async fn vhost_connections(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path(vhost): Path<String>,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    visible_vhost(&ctx, &who, &vhost)?;
    listing(
        visible(&ctx, &who, Some(&vhost))
            .iter()
            .map(|e| connection_json(e))
            .collect(),
        &q,
    )
}

pub(super) fn find(ctx: &ServerCtx, who: &Authed, name: &str) -> Result<Arc<Entry>, ApiError> {
    visible(ctx, who, None)
        .into_iter()
        .find(|e| e.name() == name)
        .ok_or(ApiError::NotFound)
}

pub async fn connection(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let e = find(&ctx, &who, &name)?;
    Ok(Json(connection_json(&e)))
}

pub async fn close_connection(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let e = find(&ctx, &who, &name)?;
    if let Some(l) = e.login() {
        // Others' connections take administrator (RabbitMQ: a user may
        // close its own).
        if l.user != who.user.name {
            who.admin()?;
        }
    }
    let reason = headers
        .get("x-reason")
        .and_then(|v| v.to_str().ok())
        .map(String::from)
        .unwrap_or_else(|| "Closed via management plugin".into());
    ctx.connections.close_named(&name, Some(reason));
    Ok(StatusCode::NO_CONTENT)
}
