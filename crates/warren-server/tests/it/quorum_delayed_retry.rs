//! RabbitMQ 4.3's delayed retry of quorum queues' returns (issue 32,
//! item 3): `x-delayed-retry-type` (all, failed, returned) with
//! `x-delayed-retry-min` / `-max` (or the policy keys without `x-`)
//! holds a returned message back for min × its delivery count (at most
//! max) before it is served again, with lapin (basic.reject is a failed
//! delivery, basic.nack a plain return) and fe2o3-amqp (modified with
//! and without delivery-failed, released); the API shows the waiting
//! messages (`messages_delayed`) and the retry in force.

use std::time::{Duration, Instant};

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::{Body, Modified};
use fe2o3_amqp::types::primitives::{Symbol, Value};
use fe2o3_amqp::{Connection, Receiver, Session};
use lapin::options::*;
use lapin::types::AMQPValue;
use lapin::Channel;
use reqwest::Method;

use crate::common::*;

async fn declare_with(ch: &Channel, name: &str, args: &[(&str, AMQPValue)]) {
    let mut t = table(args);
    t.insert("x-queue-type".into(), s("quorum"));
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    within(ch.queue_declare(name.into(), durable, t)).await.unwrap();
}

fn retry(kind: &str, min: i64, max: i64) -> Vec<(&'static str, AMQPValue)> {
    vec![
        ("x-delayed-retry-type", s(kind)),
        ("x-delayed-retry-min", AMQPValue::LongLongInt(min)),
        ("x-delayed-retry-max", AMQPValue::LongLongInt(max)),
    ]
}

/// A 1.0 receiver on `queue`, with its connection and session.
async fn receiver_on(b: &Broker, queue: &str) -> (ConnectionHandle<()>, SessionHandle<()>, Receiver) {
    let url = format!("amqp://guest:guest@127.0.0.1:{}", b.port);
    let mut conn = within(Connection::open("retry", url.as_str())).await.unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    let receiver = within(Receiver::attach(&mut session, "r", format!("/queues/{queue}")))
        .await
        .unwrap();
    (conn, session, receiver)
}

/// The modified outcome without delivery-failed, with `annotations`.
fn modified(annotations: Option<fe2o3_amqp::types::primitives::OrderedMap<Symbol, Value>>) -> Modified {
    Modified {
        delivery_failed: Some(false),
        undeliverable_here: None,
        message_annotations: annotations,
    }
}

/// basic.get until a message comes (every 10 ms, 5 s at most): how long
/// that took.
async fn got_after(ch: &Channel, queue: &str) -> (Duration, lapin::message::BasicGetMessage) {
    let start = Instant::now();
    loop {
        if let Some(m) = within(ch.basic_get(queue.into(), BasicGetOptions { no_ack: false }))
            .await
            .unwrap()
        {
            return (start.elapsed(), m);
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{queue}: nothing came back"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_failed_delivery_waits_and_a_plain_return_does_not_under_failed() {
    let b = Broker::start().await;
    let (_c, ch) = b.confirm_channel().await;
    declare_with(&ch, "dq", &retry("failed", 400, 1_000)).await;
    assert!(publish_acked(&ch, "dq", b"m").await);
    let (_, m) = got_after(&ch, "dq").await;
    // basic.reject: a failed delivery, held back 400 ms (count 1).
    within(m.delivery.reject(BasicRejectOptions { requeue: true }))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (_, q) = b.http(Method::GET, "/api/queues/%2F/dq", None).await;
    assert_eq!(q["messages_delayed"], 1, "{q:#}");
    assert_eq!(q["messages_ready"], 0);
    assert_eq!(q["messages"], 1);
    assert_eq!(q["delayed_retry"], "failed (min: 400ms, max: 1000ms)");
    let (waited, m) = got_after(&ch, "dq").await;
    assert!(waited >= Duration::from_millis(250), "back after {waited:?}");
    // basic.nack: not a failure, back at once.
    within(m.delivery.nack(BasicNackOptions {
        requeue: true,
        ..Default::default()
    }))
    .await
    .unwrap();
    let (waited, _) = got_after(&ch, "dq").await;
    assert!(waited < Duration::from_millis(200), "back after {waited:?}");
}

#[tokio::test]
async fn a_policy_turns_delayed_retry_on_for_plain_returns() {
    let b = Broker::start().await;
    let (s, _) = b
        .http(
            Method::PUT,
            "/api/policies/%2F/retry",
            Some(serde_json::json!({
                "pattern": "^pq$",
                "apply-to": "quorum_queues",
                "definition": {"delayed-retry-type": "returned", "delayed-retry-min": 400}
            })),
        )
        .await;
    assert!(s.is_success(), "{s}");
    let (_c, ch) = b.confirm_channel().await;
    declare_with(&ch, "pq", &[]).await;
    let (_, q) = b.http(Method::GET, "/api/queues/%2F/pq", None).await;
    assert_eq!(q["delayed_retry"], "returned (min: 400ms, max: 400ms)", "{q:#}");
    assert!(publish_acked(&ch, "pq", b"m").await);
    let (_, m) = got_after(&ch, "pq").await;
    let start = Instant::now();
    within(m.delivery.nack(BasicNackOptions {
        requeue: true,
        ..Default::default()
    }))
    .await
    .unwrap();
    let (waited, _) = got_after(&ch, "pq").await;
    assert!(
        start.elapsed() >= Duration::from_millis(380),
        "back after {waited:?}"
    );
}

#[tokio::test]
async fn amqp_1_0_modified_and_released_wait_under_all() {
    let b = Broker::start().await;
    let (_c, ch) = b.confirm_channel().await;
    declare_with(&ch, "aq", &retry("all", 500, 5_000)).await;
    assert!(publish_acked(&ch, "aq", b"m").await);
    let (mut conn, mut session, mut receiver) = receiver_on(&b, "aq").await;
    let d = within(receiver.recv::<Body<Value>>()).await.unwrap();
    // Modified without delivery-failed: held 500 ms.
    let start = Instant::now();
    within(receiver.modify(&d, modified(None))).await.unwrap();
    let d = within(receiver.recv::<Body<Value>>()).await.unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(480),
        "{:?}",
        start.elapsed()
    );
    // Released: held 500 ms too (delivery count 0 counts as 1).
    let start = Instant::now();
    within(receiver.release(&d)).await.unwrap();
    let d = within(receiver.recv::<Body<Value>>()).await.unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(480),
        "{:?}",
        start.elapsed()
    );
    within(receiver.accept(&d)).await.unwrap();
    let _ = within(receiver.close()).await;
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
}

/// A modified outcome's `x-opt-delivery-time` (RabbitMQ 4.3) holds the
/// message back until then, on a queue with no delayed retry.
#[tokio::test]
async fn a_modified_outcome_can_name_when_the_message_comes_back() {
    use fe2o3_amqp::types::primitives::OrderedMap;
    let b = Broker::start().await;
    let (_c, ch) = b.confirm_channel().await;
    declare_with(&ch, "tq", &[]).await;
    assert!(publish_acked(&ch, "tq", b"m").await);
    let (mut conn, mut session, mut receiver) = receiver_on(&b, "tq").await;
    let d = within(receiver.recv::<Body<Value>>()).await.unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut ann = OrderedMap::new();
    ann.insert(Symbol::from("x-opt-delivery-time"), Value::Long(now_ms + 500));
    let start = Instant::now();
    within(receiver.modify(&d, modified(Some(ann)))).await.unwrap();
    let d = within(receiver.recv::<Body<Value>>()).await.unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(450),
        "{:?}",
        start.elapsed()
    );
    within(receiver.accept(&d)).await.unwrap();
    let _ = within(receiver.close()).await;
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
}
