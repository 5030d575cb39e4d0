//! Dead-lettering (RabbitMQ's "Dead Letter Exchanges" semantics): a message
//! rejected without requeue, expired, or dropped by a length limit is
//! republished to the queue's dead-letter exchange with an `x-death` history
//! in its headers. Each `x-death` entry is a table: count (long), reason,
//! queue, time (timestamp, seconds), exchange, routing-keys (array) and, when
//! the message had a per-message TTL, original-expiration; an entry for the
//! same queue and reason is counted up and moved to the front rather than
//! repeated. `x-first-death-*` record the first death and never change;
//! `x-last-death-*` (RabbitMQ 3.13+) the latest.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use warren_amqp091::{FieldTable, FieldValue, ShortStr};

use crate::message::Message;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Rejected,
    Expired,
    MaxLen,
    /// A quorum queue's x-delivery-limit was passed.
    DeliveryLimit,
}

impl Reason {
    pub fn as_str(&self) -> &'static str {
        match self {
            Reason::Rejected => "rejected",
            Reason::Expired => "expired",
            Reason::MaxLen => "maxlen",
            Reason::DeliveryLimit => "delivery_limit",
        }
    }
}

/// A message on its way to a dead-letter exchange.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub exchange: ShortStr,
    pub routing_keys: Vec<ShortStr>,
    pub message: Message,
    /// The queue it died in, for cycle detection.
    pub from_queue: ShortStr,
    /// At-least-once (a quorum queue's `x-dead-letter-strategy`): where
    /// its routing reports whether every target has it.
    pub confirm: Option<std::sync::Arc<Delivery>>,
}

/// An at-least-once dead letter's routing, for its source queue's leader
/// to settle it once every target queue has it (confirmed as a publish
/// would be).
#[derive(Debug, Default)]
pub struct Delivery {
    /// None until routed; then one ticket per target queue.
    tickets: parking_lot::Mutex<Option<Vec<super::ticket::Ticket>>>,
}

impl Delivery {
    pub fn new() -> std::sync::Arc<Delivery> {
        std::sync::Arc::new(Delivery::default())
    }

    /// Routed: what each target queue gave (none: it went nowhere).
    pub fn routed(&self, tickets: Vec<super::ticket::Ticket>) {
        *self.tickets.lock() = Some(tickets);
    }

    /// Some(true) once every target has it; Some(false) if it went
    /// nowhere or a target refused it (to be tried again); None while
    /// unrouted or a target has yet to confirm.
    pub fn outcome(&self) -> Option<bool> {
        let t = self.tickets.lock();
        let t = t.as_ref()?;
        if t.is_empty() || t.iter().any(|x| x.is_done() && !x.is_ok()) {
            return Some(false);
        }
        t.iter().all(|x| x.is_done()).then_some(true)
    }
}

fn longstr(b: &[u8]) -> FieldValue {
    FieldValue::LongStr(Bytes::copy_from_slice(b))
}

/// The routing keys a message was published with: its key plus any `CC`.
pub fn published_routing_keys(msg: &Message, headers: Option<&FieldTable>) -> Vec<ShortStr> {
    let mut keys = vec![msg.routing_key.clone()];
    if let Some(FieldValue::Array(cc)) = headers.and_then(|h| h.get("CC")) {
        keys.extend(
            cc.iter()
                .filter_map(|v| v.as_bytes())
                .map(|b| ShortStr::from_bytes(Bytes::copy_from_slice(b))),
        );
    }
    keys
}

/// Build the dead letter for `msg` leaving `queue` for `reason`.
pub fn dead_letter(
    msg: &Message,
    queue: &ShortStr,
    reason: Reason,
    dlx: &ShortStr,
    dl_routing_key: Option<&ShortStr>,
) -> DeadLetter {
    let mut props = msg.properties().unwrap_or_default();
    let mut headers = props.headers.take().unwrap_or_default();
    let keys = published_routing_keys(msg, Some(&headers));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);

    let mut history = match headers.remove("x-death") {
        Some(FieldValue::Array(v)) => v,
        _ => Vec::new(),
    };
    let same = history.iter().position(|e| match e {
        FieldValue::Table(t) => {
            t.get("queue").and_then(|v| v.as_bytes()) == Some(queue.as_bytes())
                && t.get("reason").and_then(|v| v.as_bytes()) == Some(reason.as_str().as_bytes())
        }
        _ => false,
    });
    let entry = match same {
        Some(i) => {
            let mut t = match history.remove(i) {
                FieldValue::Table(t) => t,
                _ => FieldTable::new(),
            };
            let count = t.get("count").and_then(|v| v.as_i64()).unwrap_or(0);
            // Other fields keep their first values (RabbitMQ: `time` is
            // when this queue/reason first happened).
            t.insert("count", FieldValue::I64(count + 1));
            t
        }
        None => {
            let mut t = FieldTable::new();
            t.insert("count", FieldValue::I64(1));
            t.insert("reason", longstr(reason.as_str().as_bytes()));
            t.insert("queue", longstr(queue));
            t.insert("time", FieldValue::Timestamp(now));
            t.insert("exchange", longstr(&msg.exchange));
            t.insert(
                "routing-keys",
                FieldValue::Array(keys.iter().map(|k| longstr(k)).collect()),
            );
            if let Some(e) = &props.expiration {
                t.insert("original-expiration", longstr(e));
            }
            t
        }
    };
    history.insert(0, FieldValue::Table(entry));
    // The per-message TTL does not follow the message (it would expire again).
    props.expiration = None;
    if headers.get("x-first-death-reason").is_none() {
        headers.insert("x-first-death-reason", longstr(reason.as_str().as_bytes()));
        headers.insert("x-first-death-queue", longstr(queue));
        headers.insert("x-first-death-exchange", longstr(&msg.exchange));
    }
    headers.insert("x-last-death-reason", longstr(reason.as_str().as_bytes()));
    headers.insert("x-last-death-queue", longstr(queue));
    headers.insert("x-last-death-exchange", longstr(&msg.exchange));
    headers.insert("x-death", FieldValue::Array(history));
    props.headers = Some(headers);

    let routing_keys = match dl_routing_key {
        Some(k) => vec![k.clone()],
        None => keys,
    };
    let mut message = msg.with_properties(&props);
    message.exchange = dlx.clone();
    message.routing_key = routing_keys[0].clone();
    DeadLetter {
        exchange: dlx.clone(),
        routing_keys,
        message,
        from_queue: queue.clone(),
        confirm: None,
    }
}

/// Would delivering this dead letter to `target` close a cycle that no
/// consumer takes part in? RabbitMQ drops the message for such a queue: the
/// target is already in its history and no death along the way was a
/// rejection.
pub fn is_cycle(msg: &Message, target: &ShortStr) -> bool {
    let Some(headers) = msg.headers() else {
        return false;
    };
    let Some(FieldValue::Array(history)) = headers.get("x-death") else {
        return false;
    };
    let mut seen_target = false;
    for e in history {
        if let FieldValue::Table(t) = e {
            if t.get("reason").and_then(|v| v.as_bytes()) == Some(b"rejected") {
                return false;
            }
            if t.get("queue").and_then(|v| v.as_bytes()) == Some(target.as_bytes()) {
                seen_target = true;
            }
        }
    }
    seen_target
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_amqp091::BasicProperties;

    fn msg(expiration: Option<&str>) -> Message {
        let p = BasicProperties {
            expiration: expiration.map(Into::into),
            ..Default::default()
        };
        Message::from_publish(
            "ex".into(),
            "rk".into(),
            p.to_bytes(),
            Bytes::from_static(b"body"),
        )
        .unwrap()
        .0
    }

    fn death(m: &Message) -> Vec<FieldTable> {
        match m.headers().unwrap().get("x-death") {
            Some(FieldValue::Array(v)) => v
                .iter()
                .map(|e| match e {
                    FieldValue::Table(t) => t.clone(),
                    _ => panic!(),
                })
                .collect(),
            _ => panic!("no x-death"),
        }
    }

    #[test]
    fn first_death_records_everything() {
        let dl = dead_letter(
            &msg(Some("500")),
            &"q1".into(),
            Reason::Expired,
            &"dlx".into(),
            None,
        );
        assert_eq!(dl.routing_keys, vec![ShortStr::from("rk")]);
        assert_eq!(dl.message.expiration_ms, None);
        let d = death(&dl.message);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].get("count"), Some(&FieldValue::I64(1)));
        assert_eq!(d[0].get("reason").unwrap().as_bytes(), Some(&b"expired"[..]));
        assert_eq!(d[0].get("queue").unwrap().as_bytes(), Some(&b"q1"[..]));
        assert_eq!(d[0].get("exchange").unwrap().as_bytes(), Some(&b"ex"[..]));
        assert_eq!(
            d[0].get("original-expiration").unwrap().as_bytes(),
            Some(&b"500"[..])
        );
        let h = dl.message.headers().unwrap();
        assert_eq!(h.get("x-first-death-queue").unwrap().as_bytes(), Some(&b"q1"[..]));
    }

    #[test]
    fn same_queue_and_reason_counts_up_and_moves_first() {
        let a = dead_letter(
            &msg(None),
            &"q1".into(),
            Reason::Rejected,
            &"dlx".into(),
            Some(&"k2".into()),
        );
        assert_eq!(a.routing_keys, vec![ShortStr::from("k2")]);
        let b = dead_letter(&a.message, &"q2".into(), Reason::Rejected, &"dlx".into(), None);
        let c = dead_letter(&b.message, &"q1".into(), Reason::Rejected, &"dlx".into(), None);
        let d = death(&c.message);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].get("queue").unwrap().as_bytes(), Some(&b"q1"[..]));
        assert_eq!(d[0].get("count"), Some(&FieldValue::I64(2)));
        let h = c.message.headers().unwrap();
        assert_eq!(h.get("x-first-death-queue").unwrap().as_bytes(), Some(&b"q1"[..]));
        assert_eq!(h.get("x-last-death-queue").unwrap().as_bytes(), Some(&b"q1"[..]));
    }

    #[test]
    fn cycles_without_rejection_are_detected() {
        let a = dead_letter(&msg(None), &"q1".into(), Reason::Expired, &"dlx".into(), None);
        assert!(is_cycle(&a.message, &"q1".into()));
        assert!(!is_cycle(&a.message, &"q2".into()));
        let r = dead_letter(&msg(None), &"q1".into(), Reason::Rejected, &"dlx".into(), None);
        assert!(!is_cycle(&r.message, &"q1".into()));
    }
}
