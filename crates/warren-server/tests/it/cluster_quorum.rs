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

pub(crate) async fn connect(b: &Broker) -> Connection {
    let uri = format!("amqp://guest:guest@127.0.0.1:{}/%2f", b.port);
    within(Connection::connect(&uri, ConnectionProperties::default()))
        .await
        .expect("connects")
}

pub(crate) async fn channel(b: &Broker) -> (Connection, Channel) {
    let c = connect(b).await;
    let ch = within(c.create_channel()).await.unwrap();
    (c, ch)
}

async fn declare_quorum(ch: &Channel, name: &str) {
    declare_quorum_with(ch, name, &[]).await;
}

pub(crate) async fn declare_quorum_with(ch: &Channel, name: &str, args: &[(&str, lapin::types::AMQPValue)]) {
    let mut t = table(args);
    t.insert("x-queue-type".into(), s("quorum"));
    within(ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        t,
    ))
    .await
    .unwrap();
}

/// A channel on `b` in confirm mode.
async fn confirm_channel(b: &Broker) -> (Connection, Channel) {
    let (c, ch) = channel(b).await;
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    (c, ch)
}

/// A manual-ack consumer on `queue` with a prefetch of `prefetch`.
async fn consume_with_prefetch(ch: &Channel, queue: &str, tag: &str, prefetch: u16) -> lapin::Consumer {
    within(ch.basic_qos(prefetch, BasicQosOptions::default()))
        .await
        .unwrap();
    within(ch.basic_consume(
        queue.into(),
        tag.into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap()
}

/// Publish "m{from}".."m{to-1}" with confirms; all acked.
pub(crate) async fn publish_confirmed(ch: &Channel, q: &str, from: usize, to: usize) {
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
    let mut consumer = consume_with_prefetch(&ch3, "qq", "c", 10).await;
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
    let props = BasicProperties::default().with_delivery_mode(2);
    for i in from..to {
        publish_until_acked(ch, q, &format!("m{i}"), &props, deadline).await;
    }
}

/// Publish `body` on a channel in confirm mode, again until it is acked;
/// the test fails if that is not before `deadline`.
async fn publish_until_acked(
    ch: &Channel,
    queue: &str,
    body: &str,
    props: &BasicProperties,
    deadline: tokio::time::Instant,
) {
    loop {
        assert!(tokio::time::Instant::now() < deadline, "{body} never confirmed");
        let confirm = within(ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            props.clone(),
        ))
        .await
        .unwrap();
        if let Ok(Ok(c)) = tokio::time::timeout(Duration::from_secs(15), confirm).await {
            if c.is_ack() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
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
    let mut on_leader = consume_with_prefetch(&ch1, "qq", "held", 5).await;
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
    let mut consumer = consume_with_prefetch(&ch3, "qq", "c", 10).await;
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
    // Published once another member leads (a publish nacked during the
    // election may have been stored: sent again, it would be there twice).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while queue_view(&nodes[1]).await["leader"] == "warren@node-1" {
        assert!(tokio::time::Instant::now() < deadline, "no new leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
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
    declare_quorum_with(
        &ch1,
        "pq",
        &[("x-max-priority", lapin::types::AMQPValue::LongInt(5))],
    )
    .await;
    in_step(&nodes).await;
    let (_c2, ch2) = confirm_channel(&nodes[1]).await;
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
        publish_with_priority(&ch2, "pq", body, priority).await;
    }
    let (_c3, ch3) = channel(&nodes[2]).await;
    let mut consumer = consume_with_prefetch(&ch3, "pq", "c", 1).await;
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
    publish_with_priority(&ch2, "pq", "h", 4).await;
    // Confirmed, its enqueue is in the log before the ack's settle.
    within(held.ack(BasicAckOptions::default())).await.unwrap();
    for _ in 0..5 {
        let d = next_delivery(&mut consumer).await;
        got.push(String::from_utf8(d.data.clone()).unwrap());
        within(d.ack(BasicAckOptions::default())).await.unwrap();
    }
    assert_eq!(got, ["c", "f", "b", "h", "d", "g", "a", "e"]);
}

/// Publish `body` with `priority` on a channel in confirm mode; acked.
async fn publish_with_priority(ch: &Channel, queue: &str, body: &str, priority: u8) {
    let confirm = within(
        ch.basic_publish(
            "".into(),
            queue.into(),
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

/// Publish `body` with a message id and/or an `x-deduplication-header`
/// header on a channel in confirm mode, again until acked (a new leader
/// may be being elected); the publish is confirmed whether stored or not.
async fn publish_keyed(ch: &Channel, queue: &str, id: Option<&str>, header: Option<&str>, body: &str) {
    let mut props = BasicProperties::default().with_delivery_mode(2);
    if let Some(id) = id {
        props = props.with_message_id(id.into());
    }
    if let Some(h) = header {
        props = props.with_headers(table(&[("x-deduplication-header", s(h))]));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    publish_until_acked(ch, queue, body, &props, deadline).await;
}

/// Publisher deduplication (beyond RabbitMQ, as LavinMQ and RabbitMQ's
/// community plugin offer it): with x-message-deduplication, a publish
/// whose key (the x-deduplication-header header, else the message id) is
/// in the window is confirmed and not stored. The window is in the
/// replicated state, so a retry sent after the leader's node stops is
/// not stored twice either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deduplicating_quorum_queue_stores_a_retry_once_even_across_a_failover() {
    let (_ports, mut nodes) = three_linked().await;
    let (_c1, ch1) = channel(&nodes[0]).await;
    declare_quorum_with(
        &ch1,
        "dq",
        &[
            ("x-message-deduplication", lapin::types::AMQPValue::Boolean(true)),
            ("x-cache-size", lapin::types::AMQPValue::LongInt(100)),
        ],
    )
    .await;
    in_step(&nodes).await;
    let (_c2, ch2) = confirm_channel(&nodes[1]).await;
    publish_keyed(&ch2, "dq", Some("a"), None, "a-first").await;
    publish_keyed(&ch2, "dq", Some("a"), None, "a-again").await;
    publish_keyed(&ch2, "dq", Some("b"), None, "b").await;
    // The header wins over the message id.
    publish_keyed(&ch2, "dq", Some("c"), Some("h"), "h-first").await;
    publish_keyed(&ch2, "dq", Some("d"), Some("h"), "h-again").await;
    // No key: never a duplicate.
    publish_keyed(&ch2, "dq", None, None, "plain").await;
    publish_keyed(&ch2, "dq", None, None, "plain").await;

    // The leader's node stops; the publisher retries "a" through the new
    // leader: confirmed, not stored.
    nodes[0].stop().await;
    publish_keyed(&ch2, "dq", Some("a"), None, "a-retry").await;
    publish_keyed(&ch2, "dq", Some("e"), None, "e").await;

    let (_c3, ch3) = channel(&nodes[2]).await;
    // Taken through node 3 until a second's silence after at least six
    // (gets go to the leader, which may just have been elected).
    let mut got = Vec::new();
    let mut quiet = tokio::time::Instant::now();
    let deadline = quiet + Duration::from_secs(15);
    while tokio::time::Instant::now() < deadline
        && (got.len() < 6 || quiet.elapsed() < Duration::from_secs(1))
    {
        let get = ch3.basic_get("dq".into(), BasicGetOptions { no_ack: true });
        match within(get).await.unwrap() {
            Some(m) => {
                got.push(String::from_utf8(m.delivery.data).unwrap());
                quiet = tokio::time::Instant::now();
            }
            None => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert_eq!(got, ["a-first", "b", "h-first", "plain", "plain", "e"]);
}

/// The leader the API shows for `queue` through `b`, once there is one.
async fn leader_of(b: &Broker, queue: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, v) = b
            .http(Method::GET, &format!("/api/queues/%2F/{queue}"), None)
            .await;
        if let Some(l) = v["leader"].as_str() {
            return l.to_string();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader for {queue}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balanced_quorum_queues_spread_their_leaders_and_client_local_ones_lead_where_declared() {
    use lapin::types::AMQPValue;
    let (_ports, nodes) = three_linked().await;
    let (_c1, ch1) = channel(&nodes[0]).await;
    let balanced = [("x-queue-leader-locator", AMQPValue::LongString("balanced".into()))];
    for i in 0..6 {
        declare_quorum_with(&ch1, &format!("b{i}"), &balanced).await;
    }
    let mut led = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..6 {
        *led.entry(leader_of(&nodes[0], &format!("b{i}")).await)
            .or_default() += 1;
    }
    // Every node leads some, all declared through node 1.
    assert_eq!(led.len(), 3, "leaders per node: {led:?}");
    // Client-local (the default) leads on the declaring node, whichever.
    let (_c2, ch2) = channel(&nodes[1]).await;
    let (_c3, ch3) = channel(&nodes[2]).await;
    declare_quorum(&ch2, "local2").await;
    declare_quorum(&ch3, "local3").await;
    assert_eq!(leader_of(&nodes[0], "local2").await, crate::cluster::node_name(1));
    assert_eq!(leader_of(&nodes[0], "local3").await, crate::cluster::node_name(2));
}
