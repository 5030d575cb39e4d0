//! RabbitMQ's `message_stats` object: each counter with its rate over the
//! last sampling interval (`publish`, `publish_details: {rate}`, ...),
//! plus `deliver_get`, the sum of deliveries and gets.

use serde_json::{json, Map, Value};
use warren_core::stats::{MessageCounters, Stat, QUEUE_STATS};

fn put(m: &mut Map<String, Value>, name: &str, count: u64, rate: f64) {
    m.insert(name.to_string(), json!(count));
    // Rates rounded as RabbitMQ shows them (one decimal place).
    let rate = (rate * 10.0).round() / 10.0;
    m.insert(format!("{name}_details"), json!({ "rate": rate }));
}

fn build(c: &MessageCounters, stats: &[Stat]) -> Value {
    let mut m = Map::new();
    for &s in stats {
        put(&mut m, s.name(), c.count(s), c.rate(s));
    }
    let (n, rate) = c.deliver_get();
    put(&mut m, "deliver_get", n, rate);
    Value::Object(m)
}

/// A queue's `message_stats`; None (the field left out, as RabbitMQ does)
/// until it has seen a message.
pub fn queue(c: &MessageCounters) -> Option<Value> {
    c.any().then(|| build(c, QUEUE_STATS))
}

/// /api/overview's `message_stats`: every broker-wide counter.
pub fn overview(c: &MessageCounters) -> Value {
    build(c, &Stat::ALL)
}
