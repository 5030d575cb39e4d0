//! /api/channels and /api/consumers. Channels are the 0-9-1 channels each
//! connection reports into its registry entry (numbers refreshed once per
//! wakeup of the connection); consumers are read from the queues, so
//! every protocol's consumers (0-9-1 and AMQP 1.0 receiving links) are
//! listed, named by the connection and channel (or session) they use.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::Json;
use serde_json::{json, Value};

use super::auth::Authed;
use super::conns::{find, visible};
use super::error::ApiError;
use super::listing::{listing, ListQuery};
use super::objects::visible as visible_vhost;
use warren_node::connections::{ChannelInfo, Entry};
use warren_node::definitions::table_to_json;
use warren_node::ServerCtx;

type ApiResult<T> = Result<T, ApiError>;

/// RabbitMQ's channel name: "CONNECTION (NUMBER)".
fn channel_name(e: &Entry, number: u16) -> String {
    format!("{} ({number})", e.name())
}

fn channel_json(e: &Entry, c: &ChannelInfo, node: &str) -> Value {
    let login = e.login();
    json!({
        "name": channel_name(e, c.number),
        "number": c.number,
        "node": node,
        "state": "running",
        "user": login.as_ref().map(|l| l.user.clone()),
        "vhost": login.as_ref().map(|l| l.vhost.clone()),
        "consumer_count": c.consumers.load(Relaxed),
        "messages_unacknowledged": c.unacked.load(Relaxed),
        "messages_unconfirmed": 0,
        "messages_uncommitted": 0,
        "acks_uncommitted": 0,
        "prefetch_count": c.prefetch.load(Relaxed),
        "global_prefetch_count": c.global_prefetch.load(Relaxed),
        "confirm": c.confirm.load(Relaxed),
        "transactional": c.transactional.load(Relaxed),
        "connection_details": {
            "name": e.name(),
            "peer_host": e.peer.ip().to_string(),
            "peer_port": e.peer.port(),
        },
    })
}

fn channels_of(entries: &[Arc<Entry>], node: &str) -> Vec<Value> {
    entries
        .iter()
        .flat_map(|e| {
            e.channels()
                .iter()
                .map(|c| channel_json(e, c, node))
                .collect::<Vec<_>>()
        })
        .collect()
}

pub async fn channels(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    listing(channels_of(&visible(&ctx, &who, None), &ctx.config.node_name), &q)
}

pub async fn vhost_channels(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path(vhost): Path<String>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    visible_vhost(&ctx, &who, &vhost)?;
    listing(
        channels_of(&visible(&ctx, &who, Some(&vhost)), &ctx.config.node_name),
        &q,
    )
}

pub async fn connection_channels(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path(name): Path<String>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    let e = find(&ctx, &who, &name)?;
    listing(channels_of(&[e], &ctx.config.node_name), &q)
}

/// GET /api/channels/{name}: "PEER -> LOCAL (N)".
pub async fn channel(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let (conn, number) = name
        .rsplit_once(" (")
        .and_then(|(c, n)| Some((c, n.strip_suffix(')')?.parse::<u16>().ok()?)))
        .ok_or(ApiError::NotFound)?;
    let e = find(&ctx, &who, conn)?;
    let c = e
        .channels()
        .into_iter()
        .find(|c| c.number == number)
        .ok_or(ApiError::NotFound)?;
    Ok(Json(channel_json(&e, &c, &ctx.config.node_name)))
}

fn consumers_in(ctx: &ServerCtx, who: &Authed, vhost: Option<&str>) -> Vec<Value> {
    let mut out = Vec::new();
    for vh in ctx.broker.vhosts() {
        if !who.may_see(&vh.name) || vhost.is_some_and(|v| v != vh.name) {
            continue;
        }
        for q in vh.queues() {
            for c in q.consumers() {
                let e = ctx.connections.get(c.connection_id);
                let login = e.as_ref().and_then(|e| e.login());
                out.push(json!({
                    "consumer_tag": c.tag.to_str_lossy(),
                    "queue": {"name": q.name.to_str_lossy(), "vhost": vh.name},
                    "channel_details": {
                        "name": e.as_ref().map(|e| channel_name(e, c.channel)),
                        "number": c.channel,
                        "connection_name": e.as_ref().map(|e| e.name()),
                        "peer_host": e.as_ref().map(|e| e.peer.ip().to_string()),
                        "peer_port": e.as_ref().map(|e| e.peer.port()),
                        "user": login.as_ref().map(|l| l.user.clone()),
                        "node": ctx.config.node_name,
                    },
                    "ack_required": c.ack_required,
                    "exclusive": c.exclusive,
                    "prefetch_count": c.prefetch,
                    "priority": c.priority,
                    "active": c.active,
                    "activity_status": if c.active { "up" } else { "waiting" },
                    "arguments": table_to_json(&c.arguments),
                }));
            }
        }
    }
    out
}

pub async fn consumers(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    listing(consumers_in(&ctx, &who, None), &q)
}

pub async fn vhost_consumers(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path(vhost): Path<String>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    visible_vhost(&ctx, &who, &vhost)?;
    listing(consumers_in(&ctx, &who, Some(&vhost)), &q)
}
