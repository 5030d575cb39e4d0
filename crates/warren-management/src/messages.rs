//! Messages through the API, as the management UI and rabbitmqadmin use
//! them: `POST /api/exchanges/V/X/publish` (routed as a 0-9-1 publish
//! would be; `{"routed": bool}`) and `POST /api/queues/V/Q/get` (basic.get
//! in a loop, then ack or reject each with or without requeue, as the
//! `ackmode` says). Both check the same permissions a client's would:
//! write on the exchange, read on the queue.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;
use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use warren_amqp091::properties::BasicProperties;
use warren_amqp091::ShortStr;
use warren_core::queue::{Entry, Settle};
use warren_core::stats::Stat;
use warren_core::{Access, Message, Resource};

use super::auth::Authed;
use super::error::ApiError;
use super::objects::visible;
use warren_node::definitions::{json_to_table, table_to_json};
use warren_node::ServerCtx;

type ApiResult<T> = Result<T, ApiError>;

/// The most messages one get request returns (RabbitMQ's UI offers a
/// count box; an unbounded one would hold the queue's whole backlog in
/// one response).
const MAX_GET: u64 = 1000;

/// "amq.default" in a path names the default exchange.
fn exchange_name(name: &str) -> &str {
    if name == "amq.default" {
        ""
    } else {
        name
    }
}

fn short(v: Option<&Value>) -> Option<ShortStr> {
    v.and_then(Value::as_str).map(ShortStr::from)
}

/// The `properties` object of a publish request as 0-9-1 properties.
fn properties_from_json(p: &Map<String, Value>) -> ApiResult<BasicProperties> {
    let int = |k: &str| p.get(k).and_then(Value::as_u64);
    Ok(BasicProperties {
        content_type: short(p.get("content_type")),
        content_encoding: short(p.get("content_encoding")),
        headers: p.get("headers").and_then(Value::as_object).map(json_to_table),
        delivery_mode: int("delivery_mode").map(|d| d.min(2) as u8),
        priority: int("priority").map(|d| d.min(255) as u8),
        correlation_id: short(p.get("correlation_id")),
        reply_to: short(p.get("reply_to")),
        expiration: match p.get("expiration") {
            Some(Value::String(s)) => Some(ShortStr::from(s.as_str())),
            Some(Value::Number(n)) => Some(ShortStr::from(n.to_string().as_str())),
            _ => None,
        },
        message_id: short(p.get("message_id")),
        timestamp: int("timestamp"),
        kind: short(p.get("type")),
        user_id: short(p.get("user_id")),
        app_id: short(p.get("app_id")),
        cluster_id: short(p.get("cluster_id")),
    })
}

fn properties_to_json(p: &BasicProperties) -> Value {
    let mut m = Map::new();
    let mut s = |k: &str, v: &Option<ShortStr>| {
        if let Some(v) = v {
            m.insert(k.to_string(), json!(v.to_str_lossy()));
        }
    };
    s("content_type", &p.content_type);
    s("content_encoding", &p.content_encoding);
    s("correlation_id", &p.correlation_id);
    s("reply_to", &p.reply_to);
    s("expiration", &p.expiration);
    s("message_id", &p.message_id);
    s("type", &p.kind);
    s("user_id", &p.user_id);
    s("app_id", &p.app_id);
    s("cluster_id", &p.cluster_id);
    if let Some(d) = p.delivery_mode {
        m.insert("delivery_mode".into(), json!(d));
    }
    if let Some(d) = p.priority {
        m.insert("priority".into(), json!(d));
    }
    if let Some(t) = p.timestamp {
        m.insert("timestamp".into(), json!(t));
    }
    if let Some(h) = &p.headers {
        m.insert("headers".into(), Value::Object(table_to_json(h)));
    }
    Value::Object(m)
}

pub async fn publish(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> ApiResult<Json<Value>> {
    let vh = visible(&ctx, &who, &vhost)?;
    let exchange = exchange_name(&name);
    who.check(&vhost, Access::Write, Resource::Exchange, exchange)?;
    if !exchange.is_empty() {
        vh.check_exchange(exchange.as_bytes())
            .map_err(|_| ApiError::NotFound)?;
    }
    // A resource alarm blocks this publisher as it blocks a client's.
    if let Some(why) = ctx.broker.publishing_blocked() {
        return Err(ApiError::Unavailable(format!("publishing is blocked: {why}")));
    }
    let key = body.get("routing_key").and_then(Value::as_str).unwrap_or("");
    if key.len() > 255 {
        return Err(ApiError::BadRequest(
            "routing_key is longer than 255 bytes".into(),
        ));
    }
    // RabbitMQ answers this refusal as the publish's own failure: 400
    // with the channel error's text (3.10, compared).
    who.check_topic_write(&vh, exchange, key).map_err(|e| match e {
        ApiError::Forbidden(text) => ApiError::BadRequest(format!("403 {text}")),
        e => e,
    })?;
    let payload = body.get("payload").and_then(Value::as_str).unwrap_or("");
    let payload = match body.get("payload_encoding").and_then(Value::as_str) {
        Some("base64") => base64::engine::general_purpose::STANDARD
            .decode(payload)
            .map_err(|e| ApiError::BadRequest(format!("payload is not base64: {e}")))?,
        Some("string") | None => payload.as_bytes().to_vec(),
        Some(other) => return Err(ApiError::BadRequest(format!("unknown payload_encoding {other}"))),
    };
    let empty = Map::new();
    let props = properties_from_json(
        body.get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty),
    )?;
    // As a channel would refuse it (0-9-1 publish: 406 PRECONDITION_FAILED).
    if let Some(u) = &props.user_id {
        if u.as_bytes() != who.user.name.as_bytes() {
            return Err(ApiError::BadRequest(format!(
                "user_id property set to '{}' but authenticated user was '{}'",
                u.to_str_lossy(),
                who.user.name
            )));
        }
    }
    let (msg, _) = Message::from_publish(
        ShortStr::from(exchange),
        ShortStr::from(key),
        props.to_bytes(),
        Bytes::from(payload),
    )
    .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let msg = Arc::new(msg);
    let headers = props.headers.as_ref();
    let mut queues = Vec::new();
    vh.route(exchange.as_bytes(), &[key.as_bytes()], headers, &mut queues)?;
    ctx.broker.messages.add(Stat::Publish, 1);
    if queues.is_empty() {
        ctx.broker.messages.add(Stat::Unroutable, 1);
    }
    for q in &queues {
        let (_, effects) = q.publish(msg.clone());
        let timers = &ctx.timers;
        vh.apply(q, effects, &mut |q| timers.arm(&vh, q));
    }
    Ok(Json(json!({ "routed": !queues.is_empty() })))
}

/// One got message as RabbitMQ's API shows it.
fn got_json(e: &Entry, remaining: u64, base64: bool, truncate: Option<usize>) -> Value {
    let m = &e.message;
    let mut body = &m.body[..];
    if let Some(t) = truncate {
        body = &body[..body.len().min(t)];
    }
    // `auto` shows text as text and anything else as base64.
    let (payload, encoding) = match (base64, std::str::from_utf8(body)) {
        (false, Ok(s)) => (s.to_string(), "string"),
        _ => (base64::engine::general_purpose::STANDARD.encode(body), "base64"),
    };
    json!({
        "payload_bytes": m.body.len(),
        "redelivered": e.redelivered,
        "exchange": m.exchange.to_str_lossy(),
        "routing_key": m.routing_key.to_str_lossy(),
        "message_count": remaining,
        "properties": m.properties().map(|p| properties_to_json(&p)).unwrap_or(json!({})),
        "payload": payload,
        "payload_encoding": encoding,
    })
}

pub async fn get(
    State(ctx): State<Arc<ServerCtx>>,
    who: Authed,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> ApiResult<Json<Value>> {
    let vh = visible(&ctx, &who, &vhost)?;
    who.check(&vhost, Access::Read, Resource::Queue, &name)?;
    let q = vh.queue(name.as_bytes(), 0).map_err(|_| ApiError::NotFound)?;
    let count = body
        .get("count")
        .and_then(Value::as_u64)
        .unwrap_or(1)
        .min(MAX_GET);
    let settle = match body.get("ackmode").and_then(Value::as_str) {
        Some("ack_requeue_true") | Some("reject_requeue_true") => Settle::Requeue,
        Some("ack_requeue_false") => Settle::Ack,
        Some("reject_requeue_false") => Settle::Discard,
        other => {
            return Err(ApiError::BadRequest(format!(
                "ackmode must be ack_requeue_true, ack_requeue_false, reject_requeue_true or reject_requeue_false, not {other:?}"
            )))
        }
    };
    let base64 = match body.get("encoding").and_then(Value::as_str) {
        Some("auto") | None => false,
        Some("base64") => true,
        Some(other) => return Err(ApiError::BadRequest(format!("unknown encoding {other}"))),
    };
    let truncate = body.get("truncate").and_then(Value::as_u64).map(|t| t as usize);
    // Take them all first, then settle: requeued messages go back to the
    // head, so settling one at a time would get the same message again.
    let mut taken = Vec::new();
    let mut out = Vec::new();
    let timers = &ctx.timers;
    for _ in 0..count {
        let (got, effects) = q.get(false);
        vh.apply(&q, effects, &mut |q| timers.arm(&vh, q));
        let Some((entry, remaining)) = got.wait().await.flatten() else {
            break;
        };
        out.push(got_json(&entry, remaining, base64, truncate));
        taken.push(entry);
    }
    if !taken.is_empty() {
        let effects = q.settle(None, taken, settle);
        vh.apply(&q, effects, &mut |q| timers.arm(&vh, q));
    }
    Ok(Json(Value::Array(out)))
}
