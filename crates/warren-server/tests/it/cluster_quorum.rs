//! Quorum queues on three nodes (issue 17): the group's members are on
//! every node, publishes through a follower are confirmed once a
//! majority has them, consumers through another node get them in order,
//! and when the leader's node stops another member leads with every
//! confirmed message.

use std::collections::BTreeSet;
use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use reqwest::Method;

use crate::cluster::{in_step, three_linked};
use crate::common::*;

async fn connect(b: &Broker) -> Connection {
    let uri = format!("amqp://guest:guest@127.0.0.1:{}/%2f", b.port);
    within(Connection::connect(&uri, ConnectionProperties::default()))
        .await
        .expect("connects")
}

async fn channel(b: &Broker) -> (Connection, Channel) {
    let c = connect(b).await;
    let ch = within(c.create_channel()).await.unwrap();
    (c, ch)
}

async fn declare_quorum(ch: &Channel, name: &str) {
    within(ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        table(&[("x-queue-type", s("quorum"))]),
    ))
    .await
    .unwrap();
}

/// Publish "m{from}".."m{to-1}" with confirms; all acked.
async fn publish_confirmed(ch: &Channel, q: &str, from: usize, to: usize) {
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    let mut confirms = Vec::new();
    for i in from..to {
        confirms.push(
            within(ch.basic_publish(
                "".into(),
                q.into(),
                BasicPublishOptions::default(),
                format!("m{i}").as_bytes(),
                BasicProperties::default().with_delivery_mode(2),
            ))
            .await
            .unwrap(),
        );
    }
    for c in confirms {
        assert!(within(c).await.unwrap().is_ack());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_through_a_follower_consumed_through_another_and_kept_when_the_leader_stops() {
    let (_ports, mut nodes) = three_linked().await;
    let (_c1, ch1) = channel(&nodes[0]).await;
    declare_quorum(&ch1, "qq").await;
    in_step(&nodes).await;
    // Node 1 declared it: it leads (client-local), every node a member,
    // as the API shows on each.
    for b in &nodes {
        let v = queue_view(b).await;
        assert_eq!(v["type"], "quorum", "{v}");
        assert_eq!(v["leader"], "warren@node-1", "{v}");
        assert_eq!(v["members"].as_array().map(Vec::len), Some(3), "{v}");
        assert_eq!(v["online"].as_array().map(Vec::len), Some(3), "{v}");
    }
    // Node 2 forwards its publishes to the leader.
    let (_c2, ch2) = channel(&nodes[1]).await;
    publish_confirmed(&ch2, "qq", 0, 200).await;
    let (c3, ch3) = channel(&nodes[2]).await;
    within(ch3.basic_qos(10, BasicQosOptions::default()))
        .await
        .unwrap();
    let mut consumer = within(ch3.basic_consume(
        "qq".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    for i in 0..100 {
        let d = within(consumer.next()).await.unwrap().unwrap();
        assert_eq!(d.data, format!("m{i}").as_bytes());
        within(d.ack(BasicAckOptions::default())).await.unwrap();
    }
    drop(consumer);
    let _ = c3.close(200, "done".into()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The leader's node stops: another member leads, with the 100 left.
    nodes[0].stop().await;
    let mut got = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    'retry: while got.len() < 100 {
        assert!(tokio::time::Instant::now() < deadline, "got {} of 100", got.len());
        tokio::time::sleep(Duration::from_millis(500)).await;
        let c = connect(&nodes[2]).await;
        let ch = within(c.create_channel()).await.unwrap();
        let Ok(mut consumer) = within(ch.basic_consume(
            "qq".into(),
            "c2".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        ))
        .await
        else {
            continue;
        };
        loop {
            match tokio::time::timeout(Duration::from_secs(3), consumer.next()).await {
                Ok(Some(Ok(d))) => {
                    got.insert(String::from_utf8(d.data).unwrap());
                }
                _ => continue 'retry,
            }
            if got.len() == 100 {
                break 'retry;
            }
        }
    }
    let want: BTreeSet<String> = (100..200).map(|i| format!("m{i}")).collect();
    assert_eq!(got, want);
    // And publishing goes on through the new leader.
    let (_c2, ch2) = channel(&nodes[1]).await;
    publish_confirmed(&ch2, "qq", 200, 210).await;
    let v = queue_view(&nodes[2]).await;
    assert_ne!(v["leader"], "warren@node-1", "{v}");
    assert_eq!(v["online"].as_array().map(Vec::len), Some(2), "{v}");
}

/// `/api/queues/%2F/qq` on `b`, once it has a leader.
async fn queue_view(b: &Broker) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, v) = b.http(Method::GET, "/api/queues/%2F/qq", None).await;
        if v["leader"].is_string() || tokio::time::Instant::now() > deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_and_purge_through_a_follower_reach_the_leader() {
    let (_ports, nodes) = three_linked().await;
    let (_c1, ch1) = channel(&nodes[0]).await;
    declare_quorum(&ch1, "qq").await;
    in_step(&nodes).await;
    publish_confirmed(&ch1, "qq", 0, 4).await;
    let _ = queue_view(&nodes[2]).await;
    let (_c3, ch3) = channel(&nodes[2]).await;
    let m = within(ch3.basic_get("qq".into(), BasicGetOptions { no_ack: false }))
        .await
        .unwrap()
        .expect("a message");
    assert_eq!(m.delivery.data, b"m0");
    within(m.delivery.ack(BasicAckOptions::default())).await.unwrap();
    let n = within(ch3.queue_purge("qq".into(), QueuePurgeOptions::default()))
        .await
        .unwrap();
    assert_eq!(n, 3);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, v) = nodes[1].http(Method::GET, "/api/queues/%2F/qq", None).await;
    assert_eq!(v["messages"], 0, "{v}");
}

/// Publish "m{from}".."m{to-1}" one at a time, each again until it is
/// confirmed (while a new leader is elected a publish may be nacked).
async fn publish_until_confirmed(ch: &Channel, q: &str, from: usize, to: usize) {
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for i in from..to {
        loop {
            assert!(tokio::time::Instant::now() < deadline, "m{i} never confirmed");
            let confirm = within(ch.basic_publish(
                "".into(),
                q.into(),
                BasicPublishOptions::default(),
                format!("m{i}").as_bytes(),
                BasicProperties::default().with_delivery_mode(2),
            ))
            .await
            .unwrap();
            if let Ok(Ok(c)) = tokio::time::timeout(Duration::from_secs(15), confirm).await {
                if c.is_ack() {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The next delivery of `consumer`; the test fails if the broker
/// cancelled it (the stream ends) or nothing comes within 15 s.
async fn next_delivery(consumer: &mut lapin::Consumer) -> lapin::message::Delivery {
    match tokio::time::timeout(Duration::from_secs(15), consumer.next()).await {
        Ok(Some(Ok(d))) => d,
        Ok(Some(Err(e))) => panic!("the consumer failed: {e}"),
        Ok(None) => panic!("the consumer was cancelled"),
        Err(_) => panic!("no delivery within 15 s"),
    }
}

/// RabbitMQ's quorum queues keep a consumer when the leader changes: the
/// state names it, the new leader goes on serving it, and its acks reach
/// the new leader. What a consumer on the dead leader's node held is
/// delivered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_on_a_follower_keeps_consuming_when_the_leader_stops() {
    let (_ports, mut nodes) = three_linked().await;
    let (_c1, ch1) = channel(&nodes[0]).await;
    declare_quorum(&ch1, "qq").await;
    in_step(&nodes).await;
    assert_eq!(queue_view(&nodes[2]).await["leader"], "warren@node-1");
    let (_c2, ch2) = channel(&nodes[1]).await;

    // On the leader's node a consumer takes m0..m4 and never acks them.
    within(ch1.basic_qos(5, BasicQosOptions::default()))
        .await
        .unwrap();
    let mut on_leader = within(ch1.basic_consume(
        "qq".into(),
        "held".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    publish_confirmed(&ch2, "qq", 0, 5).await;
    for i in 0..5 {
        assert_eq!(
            next_delivery(&mut on_leader).await.data,
            format!("m{i}").as_bytes()
        );
    }

    // On a follower's node a consumer takes m5..m34, acks m5..m24 and
    // holds m25..m34 (its prefetch).
    let (_c3, ch3) = channel(&nodes[2]).await;
    within(ch3.basic_qos(10, BasicQosOptions::default()))
        .await
        .unwrap();
    let mut consumer = within(ch3.basic_consume(
        "qq".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    publish_until_confirmed(&ch2, "qq", 5, 35).await;
    let mut held = Vec::new();
    for i in 5..35 {
        let d = next_delivery(&mut consumer).await;
        assert_eq!(d.data, format!("m{i}").as_bytes());
        assert!(!d.redelivered);
        if i < 25 {
            within(d.ack(BasicAckOptions::default())).await.unwrap();
        } else {
            held.push(d);
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The leader's node stops. The consumer is not cancelled: its acks
    // of what it held reach the new leader, and it is served m0..m4 (the
    // stopped node's consumer held them) and what is published next.
    nodes[0].stop().await;
    drop(on_leader);
    for d in held {
        within(d.ack(BasicAckOptions::default())).await.unwrap();
    }
    publish_until_confirmed(&ch2, "qq", 35, 45).await;
    let mut got = BTreeSet::new();
    while got.len() < 15 {
        let d = next_delivery(&mut consumer).await;
        let m = String::from_utf8(d.data.clone()).unwrap();
        let n: usize = m[1..].parse().unwrap();
        assert!(!(5..35).contains(&n), "{m} delivered again after it was acked");
        assert_eq!(d.redelivered, n < 5, "{m}: redelivered flag");
        assert!(got.insert(m.clone()), "{m} delivered twice");
        within(d.ack(BasicAckOptions::default())).await.unwrap();
    }
    let want: BTreeSet<String> = (0..5).chain(35..45).map(|i| format!("m{i}")).collect();
    assert_eq!(got, want);

    // Nothing is left, held or waiting, as the other member sees it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, v) = nodes[1].http(Method::GET, "/api/queues/%2F/qq", None).await;
        if v["messages"] == 0 && v["messages_unacknowledged"] == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// RabbitMQ 4.3's quorum queue priorities: with x-max-priority, strictly
/// by priority (one above the maximum counts as it), first in first out
/// within one; published through one follower, consumed through another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_queue_with_max_priority_serves_the_highest_first() {
    let (_ports, nodes) = three_linked().await;
    let (_c1, ch1) = channel(&nodes[0]).await;
    within(ch1.queue_declare(
        "pq".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        table(&[
            ("x-queue-type", s("quorum")),
            ("x-max-priority", lapin::types::AMQPValue::LongInt(5)),
        ]),
    ))
    .await
    .unwrap();
    in_step(&nodes).await;
    let (_c2, ch2) = channel(&nodes[1]).await;
    within(ch2.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    let sent = [
        ("a", 0),
        ("b", 3),
        ("c", 9),
        ("d", 3),
        ("e", 0),
        ("f", 5),
        ("g", 1),
    ];
    for (body, priority) in sent {
        let confirm = within(
            ch2.basic_publish(
                "".into(),
                "pq".into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                BasicProperties::default()
                    .with_delivery_mode(2)
                    .with_priority(priority),
            ),
        )
        .await
        .unwrap();
        assert!(within(confirm).await.unwrap().is_ack());
    }
    let (_c3, ch3) = channel(&nodes[2]).await;
    within(ch3.basic_qos(1, BasicQosOptions::default()))
        .await
        .unwrap();
    let mut consumer = within(ch3.basic_consume(
        "pq".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    // With a prefetch of 1 each ack lets the next go: c, f, then b is
    // held while a 4 arrives, which goes before the other 3.
    let mut got = Vec::new();
    for _ in 0..2 {
        let d = next_delivery(&mut consumer).await;
        got.push(String::from_utf8(d.data.clone()).unwrap());
        within(d.ack(BasicAckOptions::default())).await.unwrap();
    }
    let held = next_delivery(&mut consumer).await;
    got.push(String::from_utf8(held.data.clone()).unwrap());
    let confirm = within(ch2.basic_publish(
        "".into(),
        "pq".into(),
        BasicPublishOptions::default(),
        b"h",
        BasicProperties::default().with_delivery_mode(2).with_priority(4),
    ))
    .await
    .unwrap();
    assert!(within(confirm).await.unwrap().is_ack());
    // Confirmed, its enqueue is in the log before the ack's settle.
    within(held.ack(BasicAckOptions::default())).await.unwrap();
    for _ in 0..5 {
        let d = next_delivery(&mut consumer).await;
        got.push(String::from_utf8(d.data.clone()).unwrap());
        within(d.ack(BasicAckOptions::default())).await.unwrap();
    }
    assert_eq!(got, ["c", "f", "b", "h", "d", "g", "a", "e"]);
}
