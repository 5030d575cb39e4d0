//! Queue objects as the API shows them (RabbitMQ's fields) and queue
//! listings. Objects are typed structs serialized straight to JSON: a
//! `serde_json::Value` per queue (a map with two dozen string keys) made
//! listing 10,000 queues several times slower. Listings in name order
//! (the default and the UI's) sort the queues themselves and build only
//! what is shown; other sort keys go through the generic `listing`.

use std::borrow::Cow;
use std::sync::Arc;

use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};
use warren_core::queue::{Queue, QueueStats};
use warren_core::VHost;

use super::error::ApiError;
use super::listing::{listing, paginate, ListQuery};
use super::message_stats;
use warren_node::definitions::table_to_json;

#[derive(Serialize)]
struct QueueInfo<'a> {
    name: Cow<'a, str>,
    vhost: &'a str,
    durable: bool,
    auto_delete: bool,
    exclusive: bool,
    arguments: Map<String, Value>,
    node: &'a str,
    state: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
    messages: u64,
    messages_ready: u64,
    messages_unacknowledged: u64,
    messages_ram: u64,
    messages_ready_ram: u64,
    message_bytes_ready: u64,
    message_bytes_ram: u64,
    /// A quorum queue's dead letters waiting for their targets (RabbitMQ
    /// 4's fields; `messages` counts them too).
    #[serde(skip_serializing_if = "Option::is_none")]
    messages_dlx: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_bytes_dlx: Option<u64>,
    /// A quorum queue's returns waiting for their delayed retry, and the
    /// retry in force (RabbitMQ 4.3's fields; `messages` counts them).
    #[serde(skip_serializing_if = "Option::is_none")]
    messages_delayed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delayed_retry: Option<String>,
    consumers: u32,
    memory: u64,
    policy: Option<String>,
    effective_policy_definition: Map<String, Value>,
    operator_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_stats: Option<Value>,
    /// A quorum queue's leader, members and the members online.
    #[serde(skip_serializing_if = "Option::is_none")]
    leader: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    members: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    online: Option<Vec<String>>,
}

/// A rough figure for a queue's memory: the bodies of its ready messages
/// held in memory, an allowance per message for the entry and headers
/// around it, and the queue's own structures.
fn memory_estimate(s: &QueueStats) -> u64 {
    const QUEUE_BASE: u64 = 2048;
    const PER_MESSAGE: u64 = 160;
    QUEUE_BASE + s.ram_bytes + (s.ram_messages + s.unacked) * PER_MESSAGE
}

/// Where the API answers from: the node's name, and its replicated
/// streams' placements (a stream's leader and members are there).
#[derive(Clone, Copy)]
pub struct Here<'a> {
    pub node: &'a str,
    pub streams: Option<&'a warren_node::stream_replicas::Streams>,
}

impl<'a> Here<'a> {
    /// This node, as `ctx` knows it.
    pub fn of(ctx: &'a warren_node::ServerCtx) -> Here<'a> {
        Here {
            node: &ctx.config.node_name,
            streams: ctx.stream_replicas.as_deref(),
        }
    }
}

fn info<'a>(q: &'a Queue, here: &Here<'a>) -> QueueInfo<'a> {
    use warren_core::queue::QueueKind;
    let node = here.node;
    let s = q.stats();
    let policy = q.policy();
    let view = match (q.kind(), here.streams) {
        (QueueKind::Stream, Some(st)) => st.view(&q.vhost, &q.name.to_str_lossy()),
        _ => q.quorum_view(),
    };
    let names = |v: &[warren_amqp091::ShortStr]| v.iter().map(|n| n.to_str_lossy().into_owned()).collect();
    QueueInfo {
        name: q.name.to_str_lossy(),
        vhost: &q.vhost,
        durable: q.declared_durable(),
        auto_delete: q.auto_delete,
        exclusive: q.exclusive_owner.is_some(),
        arguments: table_to_json(&q.arguments),
        // A queue of another node is listed with its home.
        node: match &q.home {
            Some(h) => std::str::from_utf8(h.as_bytes()).unwrap_or(node),
            None => node,
        },
        state: "running",
        kind: match q.kind() {
            QueueKind::Stream => "stream",
            QueueKind::Quorum => "quorum",
            QueueKind::Classic => "classic",
        },
        messages: s.ready + s.unacked + s.dlx + s.delayed,
        messages_ready: s.ready,
        messages_unacknowledged: s.unacked,
        messages_ram: s.ram_messages,
        messages_ready_ram: s.ram_messages,
        message_bytes_ready: s.ready_bytes,
        message_bytes_ram: s.ram_bytes,
        messages_dlx: (q.kind() == QueueKind::Quorum).then_some(s.dlx),
        message_bytes_dlx: (q.kind() == QueueKind::Quorum).then_some(s.dlx_bytes),
        messages_delayed: (q.kind() == QueueKind::Quorum).then_some(s.delayed),
        delayed_retry: (q.kind() == QueueKind::Quorum).then(|| delayed_retry(q)),
        consumers: s.consumers,
        memory: memory_estimate(&s),
        policy: policy.as_ref().map(|p| p.name.clone()),
        effective_policy_definition: policy
            .as_ref()
            .map_or_else(Map::new, |p| table_to_json(&p.definition)),
        operator_policy: None,
        message_stats: message_stats::queue(&q.counters),
        leader: view
            .as_ref()
            .and_then(|v| v.leader.as_ref().map(|l| l.to_str_lossy().into_owned())),
        members: view.as_ref().map(|v| names(&v.members)),
        online: view.as_ref().map(|v| names(&v.online)),
    }
}

pub fn queue_json(q: &Queue, here: &Here) -> Value {
    serde_json::to_value(info(q, here)).unwrap_or(Value::Null)
}

/// The queues of `vhs` as `q` asks: filtered, sorted, paged.
pub fn queue_listing(vhs: &[Arc<VHost>], q: &ListQuery, here: &Here) -> Result<Response, ApiError> {
    if !matches!(q.sort.as_deref(), None | Some("name")) {
        let all = vhs
            .iter()
            .flat_map(|vh| vh.queues())
            .map(|x| queue_json(&x, here))
            .collect();
        return listing(all, q).map(IntoResponse::into_response);
    }
    let mut qs: Vec<Arc<Queue>> = vhs.iter().flat_map(|vh| vh.queues()).collect();
    if let Some(f) = &q.name {
        qs.retain(|x| x.name.to_str_lossy().contains(f.as_str()));
    }
    // By vhost and name; then, stably, by name alone when asked (what the
    // generic listing's sort gives).
    qs.sort_by(|a, b| (a.vhost.as_str(), a.name.as_bytes()).cmp(&(b.vhost.as_str(), b.name.as_bytes())));
    if q.sort.is_some() {
        qs.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    }
    if q.sort_reverse == Some(true) {
        qs.reverse();
    }
    if q.page.is_some() {
        return paginate(qs, q, |x| queue_json(&x, here)).map(IntoResponse::into_response);
    }
    let body = serde_json::to_vec(&qs.iter().map(|x| info(x, here)).collect::<Vec<_>>())
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(([(CONTENT_TYPE, "application/json")], body).into_response())
}

/// A quorum queue's delayed retry as RabbitMQ 4.3's API shows it:
/// "disabled", or "all (min: 1000ms, max: 30000ms)".
fn delayed_retry(q: &Queue) -> String {
    match q.config().quorum.delayed_retry() {
        None => "disabled".to_string(),
        Some(d) => {
            let kind = match d.kind {
                warren_fifo::RetryKind::All => "all",
                warren_fifo::RetryKind::Failed => "failed",
                warren_fifo::RetryKind::Returned => "returned",
            };
            format!("{kind} (min: {}ms, max: {}ms)", d.min_ms, d.max_ms)
        }
    }
}
