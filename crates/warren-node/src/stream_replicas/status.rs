//! `stream_status`: one row per member of a replicated stream, as
//! rabbitmq-streams prints it (rabbit_stream_queue:status): role, node,
//! epoch, offset (the last), committed_offset (the committed chunk id),
//! first_offset, readers, segments. This node's member answers from its
//! log; the others are asked over the link (`Status`, `StatusIs`), and
//! one that does not answer within [`ASK_TIMEOUT`] shows only its role
//! and node, as RabbitMQ shows an unreachable member.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use warren_core::queue::{StreamLog, StreamRole};
use warren_peer::stream::{StreamMsg, StreamRef};

use super::Streams;

pub const ASK_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Default)]
pub struct Asks {
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Value>>>,
}

/// This node's row for `log`.
pub fn row(log: &StreamLog, node: &str) -> Value {
    let role = log.role();
    let (first, last, segments, readers) = log.status();
    let committed = match &role {
        StreamRole::Alone => log.last_chunk().map(|(_, id)| id),
        _ => log.committed(),
    };
    json!({
        "role": if matches!(role, StreamRole::Replica { .. }) { "replica" } else { "writer" },
        "node": node,
        "epoch": role.epoch().max(1),
        "offset": last,
        "committed_offset": committed,
        "first_offset": first,
        "readers": readers,
        "segments": segments,
    })
}

impl Streams {
    /// Every member's row of stream `name` in `vhost` (None: not a
    /// replicated stream).
    pub async fn status(&self, vhost: &str, name: &str) -> Option<Vec<Value>> {
        let p = self.placement(vhost, name)?;
        let stream = StreamRef {
            vhost: vhost.to_string(),
            name: Bytes::from(name.to_string().into_bytes()),
            epoch: p.epoch,
        };
        let mut rows = Vec::new();
        for m in &p.members {
            let r = if *m == self.node {
                self.local_log(vhost, name).map(|l| row(&l, m))
            } else {
                self.ask_status(m, &stream).await
            };
            let role = if p.leader.as_ref() == Some(m) {
                "writer"
            } else {
                "replica"
            };
            let mut r = r.unwrap_or_else(|| json!({"role": role, "node": m}));
            // Counted from 1, as RabbitMQ shows them.
            if let Some(e) = r["epoch"].as_u64().filter(|_| p.first_epoch > 0) {
                r["epoch"] = json!(e.saturating_sub(p.first_epoch) + 1);
            }
            rows.push(r);
        }
        Some(rows)
    }

    async fn ask_status(&self, node: &str, stream: &StreamRef) -> Option<Value> {
        let req = self.asks.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.asks.waiting.lock().insert(req, tx);
        let sent = self.out.send(
            node,
            StreamMsg::Status {
                stream: stream.clone(),
                req,
            },
        );
        let answer = if sent {
            tokio::time::timeout(ASK_TIMEOUT, rx)
                .await
                .ok()
                .and_then(Result::ok)
        } else {
            None
        };
        self.asks.waiting.lock().remove(&req);
        answer
    }

    /// A peer asks for this member's row.
    pub(super) fn status_asked(&self, from: &str, stream: StreamRef, req: u64) {
        let name = String::from_utf8_lossy(&stream.name).into_owned();
        let row = match self.local_log(&stream.vhost, &name) {
            Some(l) => row(&l, &self.node),
            None => Value::Null,
        };
        let row = Bytes::from(serde_json::to_vec(&row).unwrap_or_default());
        self.out.send(from, StreamMsg::StatusIs { stream, req, row });
    }

    /// A member's row arrived.
    pub(super) fn status_answered(&self, req: u64, row: &[u8]) {
        let Some(tx) = self.asks.waiting.lock().remove(&req) else {
            return;
        };
        if let Ok(v) = serde_json::from_slice::<Value>(row) {
            if !v.is_null() {
                let _ = tx.send(v);
            }
        }
    }
}
