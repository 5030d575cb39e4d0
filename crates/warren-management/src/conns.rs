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
use super::listing::{listing, ListQuery};
use super::objects::visible as visible_vhost;
use warren_node::connections::Entry;
use warren_node::ServerCtx;

/// A connection object with RabbitMQ's fields: on a TLS connection `ssl`
/// is true with the session's protocol, cipher and the client
/// certificate's subject, issuer and validity (null without one); Erlang's
/// own counters (reductions, garbage collection) have no counterpart and
/// are left out.
pub(super) fn connection_json(e: &Entry, node: &str) -> Value {
    let login = e.login();
    let l = login.as_deref();
    let (recv_rate, send_rate) = e.rates();
    let mut v = json!({
        "name": e.name(),
        "node": node,
        "type": "network",
        "state": "running",
        "protocol": l.map(|l| l.protocol),
        "user": l.map(|l| l.user.clone()),
        "user_who_performed_action": l.map(|l| l.user.clone()),
        "vhost": l.map(|l| l.vhost.clone()),
        "auth_mechanism": l.map(|l| l.auth_mechanism.clone()),
        "client_properties": l.map_or_else(Default::default, |l| l.client_properties.clone()),
        "timeout": l.map(|l| l.timeout),
        "frame_max": l.map(|l| l.frame_max),
        "channel_max": l.map(|l| l.channel_max),
        "host": e.local.ip().to_string(),
        "port": e.local.port(),
        "peer_host": e.peer.ip().to_string(),
        "peer_port": e.peer.port(),
        "ssl": false,
        "ssl_protocol": null,
        "ssl_key_exchange": null,
        "ssl_cipher": null,
        "ssl_hash": null,
        "peer_cert_subject": null,
        "peer_cert_issuer": null,
        "peer_cert_validity": null,
        "connected_at": e.connected_at,
        "channels": e.channel_count(),
        "recv_oct": e.recv_oct.load(Relaxed),
        "recv_oct_details": {"rate": round(recv_rate)},
        "recv_cnt": e.recv_cnt.load(Relaxed),
        "send_oct": e.send_oct.load(Relaxed),
        "send_oct_details": {"rate": round(send_rate)},
        "send_cnt": e.send_cnt.load(Relaxed),
        "send_pend": 0,
    });
    if let Some(t) = e.tls() {
        v["ssl"] = true.into();
        v["ssl_protocol"] = t.protocol.clone().into();
        v["ssl_key_exchange"] = t.key_exchange.clone().into();
        v["ssl_cipher"] = t.cipher.clone().into();
        v["ssl_hash"] = t.hash.clone().into();
        if let Some(p) = &t.peer {
            v["peer_cert_subject"] = p.subject.clone().into();
            v["peer_cert_issuer"] = p.issuer.clone().into();
            v["peer_cert_validity"] = p.validity.clone().into();
        }
    }
    if let Some(id) = l.and_then(|l| l.container_id.as_deref()) {
        v["container_id"] = id.into();
    }
    // Only present when the client named its connection, as in RabbitMQ.
    if let Some(n) = l.and_then(|l| l.user_provided_name()) {
        v["user_provided_name"] = n.into();
    }
    v
}

/// Rates as RabbitMQ shows them (one decimal place).
fn round(rate: f64) -> f64 {
    (rate * 10.0).round() / 10.0
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
            .map(|e| connection_json(e, &ctx.config.node_name))
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
            .map(|e| connection_json(e, &ctx.config.node_name))
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

/// GET /api/connections/username/{user}: the user's connections (their
/// own, or anyone's for administrators and monitoring users).
pub async fn user_connections(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path(user): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if user != who.user.name {
        who.monitor()?;
    }
    Ok(Json(Value::Array(
        of_user(&ctx, &who, &user)
            .iter()
            .map(|e| connection_json(e, &ctx.config.node_name))
            .collect(),
    )))
}

/// DELETE /api/connections/username/{user}: close them all (an
/// administrator's, or the user's own).
pub async fn close_user_connections(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path(user): Path<String>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    if user != who.user.name {
        who.admin()?;
    }
    let reason = close_reason(&headers);
    for e in of_user(&ctx, &who, &user) {
        ctx.connections.close_named(&e.name(), Some(reason.clone()));
    }
    Ok(StatusCode::NO_CONTENT)
}

fn of_user(ctx: &ServerCtx, who: &Authed, user: &str) -> Vec<Arc<Entry>> {
    let mut v = visible(ctx, who, None);
    v.retain(|e| e.login().is_some_and(|l| l.user == user));
    v
}

fn close_reason(headers: &HeaderMap) -> String {
    headers
        .get("x-reason")
        .and_then(|v| v.to_str().ok())
        .map(String::from)
        .unwrap_or_else(|| "Closed via management plugin".into())
}

pub async fn connection(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let e = find(&ctx, &who, &name)?;
    Ok(Json(connection_json(&e, &ctx.config.node_name)))
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
    ctx.connections.close_named(&name, Some(close_reason(&headers)));
    Ok(StatusCode::NO_CONTENT)
}
