//! Definitions export and import (GET and POST /api/definitions), in the
//! JSON format of RabbitMQ's definitions files, so a topology moves
//! between RabbitMQ and Warren either way. Import skips what it cannot
//! take (logged), as the broker's own restore does.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::Value;

use super::auth::Authed;
use super::error::ApiError;
use super::overview::RABBITMQ_VERSION;
use warren_node::cluster::command::Command;
use warren_node::definitions::{snapshot, Definitions};
use warren_node::topology;
use warren_node::ServerCtx;

fn with_versions(d: &Definitions) -> Result<Value, ApiError> {
    let mut v = serde_json::to_value(d).map_err(|e| ApiError::Internal(e.to_string()))?;
    if let Value::Object(m) = &mut v {
        m.insert("rabbit_version".into(), RABBITMQ_VERSION.into());
        m.insert("rabbitmq_version".into(), RABBITMQ_VERSION.into());
        m.insert("product_name".into(), "Warren".into());
        m.insert("product_version".into(), env!("CARGO_PKG_VERSION").into());
    }
    Ok(v)
}

pub async fn export(State(ctx): State<Arc<ServerCtx>>, who: Authed) -> Result<Json<Value>, ApiError> {
    who.admin()?;
    let mut d = snapshot(&ctx.broker);
    d.global_parameters = super::params::global_parameters(ctx.config.cluster_name());
    Ok(Json(with_versions(&d)?))
}

/// One vhost's exchanges, queues, bindings, policies and parameters, with
/// the keys RabbitMQ's per-vhost export has and no others.
pub async fn export_vhost(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    who.admin()?;
    ctx.broker.vhost(&vhost).ok_or(ApiError::NotFound)?;
    let mut d = snapshot(&ctx.broker);
    d.vhosts.clear();
    d.users.clear();
    d.permissions.clear();
    d.exchanges.retain(|x| x.vhost == vhost);
    d.queues.retain(|q| q.vhost == vhost);
    d.bindings.retain(|b| b.vhost == vhost);
    d.policies.retain(|p| p.vhost == vhost);
    d.parameters.retain(|p| p["vhost"] == vhost.as_str());
    let mut v = with_versions(&d)?;
    if let Value::Object(m) = &mut v {
        m.retain(|k, _| VHOST_EXPORT_KEYS.contains(&k.as_str()));
    }
    Ok(Json(v))
}

/// What RabbitMQ's per-vhost definitions hold (3.10's, compared).
const VHOST_EXPORT_KEYS: [&str; 6] = [
    "rabbit_version",
    "parameters",
    "policies",
    "queues",
    "exchanges",
    "bindings",
];

/// Import into one vhost (POST /api/definitions/V): every object goes to
/// `V` whatever its file says (RabbitMQ's per-vhost exports name none);
/// users, vhosts and permissions in the file are ignored, as RabbitMQ
/// ignores them there.
pub async fn import_vhost(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path(vhost): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    who.admin()?;
    ctx.broker.vhost(&vhost).ok_or(ApiError::NotFound)?;
    let mut d = parse(&body)?;
    d.vhosts.clear();
    d.users.clear();
    d.permissions.clear();
    d.exchanges.iter_mut().for_each(|x| x.vhost = vhost.clone());
    d.queues.iter_mut().for_each(|q| q.vhost = vhost.clone());
    d.bindings.iter_mut().for_each(|b| b.vhost = vhost.clone());
    d.policies.iter_mut().for_each(|p| p.vhost = vhost.clone());
    d.parameters
        .iter_mut()
        .filter_map(Value::as_object_mut)
        .for_each(|p| {
            p.insert("vhost".into(), vhost.clone().into());
        });
    import_here(&ctx, d).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A definitions file, with a log line for each part that is not applied.
fn parse(body: &[u8]) -> Result<Definitions, ApiError> {
    let raw: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("invalid definitions: {e}")))?;
    let d: Definitions =
        serde_json::from_value(raw).map_err(|e| ApiError::BadRequest(format!("invalid definitions: {e}")))?;
    // The cluster's identity parameters are Warren's own. Said in the log
    // (runtime parameters are, by restore, when not vhost limits).
    for p in &d.global_parameters {
        let name = p["name"].as_str().unwrap_or("?");
        if !matches!(name, "cluster_name" | "internal_cluster_id") {
            tracing::warn!(%name, "definitions import: global parameter not applied");
        }
    }
    Ok(d)
}

/// Import `d` with its queues on this node: at once on a single node, on
/// every node through the metadata group on a cluster.
async fn import_here(ctx: &Arc<ServerCtx>, mut d: Definitions) -> Result<(), ApiError> {
    // Where a queue lives is not the file's to say.
    for q in &mut d.queues {
        q.node = None;
        q.exclusive = false;
    }
    d.warren_log_generation = None;
    d.warren_meta_applied = None;
    d.warren_cluster_nodes.clear();
    let me = ctx.config.node_name.clone();
    if ctx.meta.is_none() {
        warren_node::definitions::apply_at(&ctx.broker, &ctx.timers, &ctx.definitions, &d, None, &me);
        return Ok(());
    }
    // New quorum queues get their groups here, as a declare through this
    // node would (x-quorum-initial-group-size members, this node first).
    let home = warren_amqp091::ShortStr::from(me.as_str());
    let quorum = d
        .queues
        .iter()
        .filter(|q| q.arguments.get("x-queue-type").and_then(|v| v.as_str()) == Some("quorum"))
        .filter(|q| {
            ctx.broker
                .vhost(&q.vhost)
                .is_none_or(|vh| vh.find_queue(q.name.as_bytes()).is_none())
        })
        .map(|q| {
            let size = q
                .arguments
                .get("x-quorum-initial-group-size")
                .and_then(|v| v.as_i64());
            let p = warren_node::topology::quorum_placement(ctx, size, &home);
            (q.vhost.clone(), q.name.clone(), p)
        })
        .collect();
    topology::run(
        ctx,
        Command::Import {
            definitions: Box::new(d),
            home: me,
            quorum,
        },
    )
    .await?;
    Ok(())
}

pub async fn import(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    who.admin()?;
    import_here(&ctx, parse(&body)?).await?;
    Ok(StatusCode::NO_CONTENT)
}
