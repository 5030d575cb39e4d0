//! Quorum queue features on three nodes (issue 17), each with the
//! publisher, the consumer and the dead letters on different nodes: the
//! delivery limit and TTL dead-lettering to a queue of another node,
//! max-length's drop-head and reject-publish (the nack reaching a
//! publisher on a node without the leader), a single active consumer and
//! consumer priorities across nodes, at-least-once dead letters across a
//! leader stop, a policy set through another node, declares through the
//! AMQP 1.0 management node and definitions, queue expiry and a queue's
//! consumer timeout.

use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::Channel;

use crate::cluster::{in_step, three_linked};
use crate::cluster_quorum::{channel, declare_quorum_with, publish_confirmed};
use crate::common::*;

/// A classic queue `name` declared through `ch` (it lives on that node).
async fn declare_classic(ch: &Channel, name: &str) {
    within(ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
}

fn reason(r: &str) -> Option<AMQPValue> {
    Some(AMQPValue::LongString(r.into()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_past_the_delivery_limit_and_expired_messages_are_dead_lettered_to_another_node() {
    let (_ports, nodes) = three_linked().await;
    let (_c3, ch3) = channel(&nodes[2]).await;
    declare_classic(&ch3, "dead").await;
    let (_c1, ch1) = channel(&nodes[0]).await;
    let dlx = |extra: (&'static str, AMQPValue)| {
        [
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("dead")),
            extra,
        ]
    };
    declare_quorum_with(&ch1, "limited", &dlx(("x-delivery-limit", i(1)))).await;
    declare_quorum_with(&ch1, "short", &dlx(("x-message-ttl", i(200)))).await;
    in_step(&nodes).await;

    // Published through node 2, rejected twice by a consumer on node 3.
    let (_c2, ch2) = channel(&nodes[1]).await;
    publish_confirmed(&ch2, "limited", 0, 1).await;
    let (_cc, cch) = channel(&nodes[2]).await;
    within(cch.basic_qos(1, BasicQosOptions::default()))
        .await
        .unwrap();
    let mut consumer = within(cch.basic_consume(
        "limited".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    for _ in 0..2 {
        let d = within(consumer.next()).await.unwrap().unwrap();
        assert_eq!(d.data, b"m0");
        within(d.reject(BasicRejectOptions { requeue: true }))
            .await
            .unwrap();
    }
    nothing_within(300, consumer.next()).await;
    until_depth(&ch3, "dead", 1).await;
    assert_eq!(
        take_with_reason(&ch3, "dead").await,
        (b"m0".to_vec(), reason("delivery_limit"))
    );

    // Expired at the head: three published through node 2.
    publish_confirmed(&ch2, "short", 0, 3).await;
    until_depth(&ch3, "dead", 3).await;
    until_depth(&ch2, "short", 0).await;
    let (body, why) = take_with_reason(&ch3, "dead").await;
    assert_eq!((body, why), (b"m0".to_vec(), reason("expired")));
    // Each dead-lettered once, whatever node leads or follows.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(depth(&ch3, "dead").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_length_drops_the_head_or_nacks_a_publisher_on_another_node() {
    let (_ports, nodes) = three_linked().await;
    let (_c3, ch3) = channel(&nodes[2]).await;
    declare_classic(&ch3, "dropped").await;
    let (_c1, ch1) = channel(&nodes[0]).await;
    declare_quorum_with(
        &ch1,
        "capped",
        &[
            ("x-max-length", i(2)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("dropped")),
        ],
    )
    .await;
    declare_quorum_with(
        &ch1,
        "full",
        &[("x-max-length", i(2)), ("x-overflow", s("reject-publish"))],
    )
    .await;
    in_step(&nodes).await;
    let (_c2, ch2) = channel(&nodes[1]).await;
    publish_confirmed(&ch2, "capped", 0, 3).await;
    until_depth(&ch3, "dropped", 1).await;
    // Node 3 counts from its own replica, which applies a moment after
    // the leader dead-letters.
    until_depth(&ch3, "capped", 2).await;
    assert_eq!(
        take_with_reason(&ch3, "dropped").await,
        (b"m0".to_vec(), reason("maxlen"))
    );

    within(ch2.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap_or(());
    let mut acks = Vec::new();
    for n in 0..3 {
        acks.push(publish_acked(&ch2, "full", format!("f{n}").as_bytes()).await);
    }
    assert_eq!(acks, [true, true, false]);
    until_depth(&ch3, "full", 2).await;
}

/// A consumer of `queue` on `b` (no-ack, or with a prefetch of 10 when
/// `priority` is given, at that x-priority).
async fn consumer_on(
    b: &Broker,
    queue: &str,
    tag: &str,
    priority: Option<i64>,
) -> (lapin::Connection, lapin::Consumer) {
    let (c, ch) = channel(b).await;
    let args = match priority {
        Some(p) => {
            within(ch.basic_qos(10, BasicQosOptions::default()))
                .await
                .unwrap();
            table(&[("x-priority", i(p))])
        }
        None => FieldTable::default(),
    };
    let consumer = within(ch.basic_consume(
        queue.into(),
        tag.into(),
        BasicConsumeOptions {
            no_ack: priority.is_none(),
            ..Default::default()
        },
        args,
    ))
    .await
    .unwrap();
    (c, consumer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_active_consumer_and_consumer_priorities_hold_across_nodes() {
    let (_ports, nodes) = three_linked().await;
    let (_c1, ch1) = channel(&nodes[0]).await;
    declare_quorum_with(
        &ch1,
        "sac",
        &[("x-single-active-consumer", AMQPValue::Boolean(true))],
    )
    .await;
    declare_quorum_with(&ch1, "prio", &[]).await;
    in_step(&nodes).await;

    // The first to attach, on node 2, gets everything; node 3's waits.
    let (c_first, mut first) = consumer_on(&nodes[1], "sac", "first", None).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_c_second, mut second) = consumer_on(&nodes[2], "sac", "second", None).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    publish_confirmed(&ch1, "sac", 0, 3).await;
    for i in 0..3 {
        let d = within(first.next()).await.unwrap().unwrap();
        assert_eq!(d.data, format!("m{i}").as_bytes());
    }
    nothing_within(300, second.next()).await;
    // The first goes (its connection closes): the second takes over.
    let _ = c_first.close(200, "done".into()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    publish_confirmed(&ch1, "sac", 3, 4).await;
    let d = within(second.next()).await.unwrap().unwrap();
    assert_eq!(d.data, b"m3");

    // The higher priority, on node 3, is served while it has credit.
    let (_cl, mut low) = consumer_on(&nodes[1], "prio", "low", Some(0)).await;
    let (_ch, mut high) = consumer_on(&nodes[2], "prio", "high", Some(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    publish_confirmed(&ch1, "prio", 0, 5).await;
    for n in 0..5 {
        let d = within(high.next()).await.unwrap().unwrap();
        assert_eq!(d.data, format!("m{n}").as_bytes());
    }
    nothing_within(300, low.next()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_at_least_once_outlive_the_leader_that_took_them() {
    let (_ports, mut nodes) = three_linked().await;
    let (_c1, ch1) = channel(&nodes[0]).await;
    within(ch1.exchange_declare(
        "dlx".into(),
        lapin::ExchangeKind::Fanout,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    declare_quorum_with(
        &ch1,
        "src",
        &[
            ("x-dead-letter-exchange", s("dlx")),
            ("x-dead-letter-strategy", s("at-least-once")),
            ("x-overflow", s("reject-publish")),
        ],
    )
    .await;
    in_step(&nodes).await;
    // Rejected through node 2 while the exchange routes nowhere.
    let (_c2, ch2) = channel(&nodes[1]).await;
    publish_confirmed(&ch2, "src", 0, 3).await;
    for _ in 0..3 {
        let m = within(ch2.basic_get("src".into(), BasicGetOptions { no_ack: false }))
            .await
            .unwrap()
            .expect("a message");
        within(m.delivery.reject(BasicRejectOptions { requeue: false }))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The leader that took them stops; the exchange then routes to a
    // queue on node 3: the new leader sends them there.
    nodes[0].stop().await;
    let (_c3, ch3) = channel(&nodes[2]).await;
    declare_classic(&ch3, "dlq").await;
    within(ch3.queue_bind(
        "dlq".into(),
        "dlx".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while depth(&ch3, "dlq").await < 3 {
        assert!(Instant::now() < deadline, "the dead letters never came");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut got = Vec::new();
    while let Some(m) = within(ch3.basic_get("dlq".into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
    {
        got.push(String::from_utf8(m.delivery.data).unwrap());
    }
    got.sort();
    got.dedup();
    assert_eq!(got, ["m0", "m1", "m2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_set_through_another_node_reaches_the_quorum_queue_on_every_member() {
    use reqwest::Method;
    use serde_json::json;
    let (_ports, mut nodes) = three_linked().await;
    let (_c1, ch1) = channel(&nodes[0]).await;
    declare_quorum_with(&ch1, "capped", &[]).await;
    in_step(&nodes).await;
    let (_c3, ch3) = channel(&nodes[2]).await;
    publish_confirmed(&ch3, "capped", 0, 3).await;
    let (status, body) = nodes[1]
        .http(
            Method::PUT,
            "/api/policies/%2F/cap",
            Some(json!({"pattern": "^capped$", "apply-to": "queues",
                        "definition": {"max-length": 2, "overflow": "reject-publish"}})),
        )
        .await;
    assert!(status.is_success(), "{body}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Through node 3 (a follower): refused past the limit.
    assert!(!publish_acked(&ch3, "capped", b"over").await);
    assert_eq!(depth(&ch3, "capped").await, 3);
    // The leader stops: the next one keeps the limit (it is in the log).
    nodes[0].stop().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let (_c2, ch2) = channel(&nodes[1]).await;
    within(ch2.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    loop {
        assert!(Instant::now() < deadline, "no leader took over");
        // Nacked either way (no leader yet, or over the limit); only
        // the depth says which.
        assert!(!publish_acked(&ch2, "capped", b"over").await);
        if let Ok(d) = tokio::time::timeout(Duration::from_secs(2), depth(&ch2, "capped")).await {
            if d == 3 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_queues_declared_through_the_amqp_1_0_management_node_and_definitions() {
    use crate::amqp10_management::{field, map, Node};
    use fe2o3_amqp::types::primitives::{OrderedMap, Value};
    use reqwest::Method;
    use serde_json::json;
    let (_ports, nodes) = three_linked().await;
    // RabbitMQ 4's AMQP 1.0 management node, on node 2.
    let (_conn, _session, mut node) = Node::open_as(&nodes[1], "guest", "guest").await;
    let mut args = OrderedMap::new();
    args.insert(
        Value::String("x-queue-type".into()),
        Value::String("quorum".into()),
    );
    let decl = map(&[
        ("durable", Value::Bool(true)),
        ("exclusive", Value::Bool(false)),
        ("auto_delete", Value::Bool(false)),
        ("arguments", Value::Map(args)),
    ]);
    let (status, info) = node.request("PUT", "/queues/via-amqp10", decl).await;
    assert_eq!(status, "201", "{info:?}");
    assert_eq!(field(&info, "type"), Some(&Value::String("quorum".into())));
    // A definitions import through node 3.
    let defs = json!({"queues": [{"name": "via-defs", "vhost": "/", "durable": true,
        "auto_delete": false, "arguments": {"x-queue-type": "quorum"}}]});
    let (status, body) = nodes[2].http(Method::POST, "/api/definitions", Some(defs)).await;
    assert!(status.is_success(), "{body}");
    in_step(&nodes).await;
    for q in ["via-amqp10", "via-defs"] {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (_, v) = nodes[0]
                .http(Method::GET, &format!("/api/queues/%2F/{q}"), None)
                .await;
            if v["type"] == "quorum"
                && v["members"].as_array().map(Vec::len) == Some(3)
                && v["leader"].is_string()
            {
                break;
            }
            assert!(Instant::now() < deadline, "{q}: {v}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // And it serves: published through node 1, got through node 3.
        let (_c1, ch1) = channel(&nodes[0]).await;
        publish_confirmed(&ch1, q, 0, 2).await;
        let (_c3, ch3) = channel(&nodes[2]).await;
        let (body, _) = take_with_reason(&ch3, q).await;
        assert_eq!(body, b"m0");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unused_queue_expires_everywhere_and_a_held_delivery_times_out_on_another_node() {
    use reqwest::{Method, StatusCode};
    let (_ports, nodes) = three_linked().await;
    let (_c1, ch1) = channel(&nodes[0]).await;
    declare_quorum_with(&ch1, "brief", &[("x-expires", i(500))]).await;
    declare_quorum_with(&ch1, "quick", &[("x-consumer-timeout", i(500))]).await;
    in_step(&nodes).await;
    // The held delivery, through node 3: its channel is closed.
    publish_confirmed(&ch1, "quick", 0, 1).await;
    let (_c3, ch3) = channel(&nodes[2]).await;
    let text = held_until_closed(&ch3, "quick").await;
    assert!(text.contains("Timeout value used: 500 ms"), "{text}");
    // The unused one is gone from every node.
    for b in &nodes {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (status, _) = b.http(Method::GET, "/api/queues/%2F/brief", None).await;
            if status == StatusCode::NOT_FOUND {
                break;
            }
            assert!(Instant::now() < deadline, "never expired");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
