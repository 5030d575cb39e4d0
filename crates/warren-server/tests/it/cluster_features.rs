//! RabbitMQ features that involve more than one queue or connection, with
//! the pieces on different nodes: direct reply-to (the requester on one
//! node, the server on another, the reply published on a third), a TTL
//! dead-lettering into a queue of another node, an alternate exchange
//! catching into a queue of another node, a single active consumer
//! chosen among consumers of two other nodes, and consumer priorities
//! between consumers of two other nodes.

use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection};

use crate::cluster::{in_step, three_linked};
use crate::common::*;

async fn open(b: &Broker) -> (Connection, Channel) {
    b.channel().await
}

async fn get_body(ch: &Channel, q: &str) -> Option<Vec<u8>> {
    within(ch.basic_get(q.into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
        .map(|m| m.delivery.data)
}

/// Poll `q` through `ch` for up to 10 s.
async fn eventually_get(ch: &Channel, q: &str) -> Vec<u8> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(b) = get_body(ch, q).await {
            return b;
        }
        assert!(std::time::Instant::now() < deadline, "nothing ever reached {q}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_to_dead_letters_alternate_exchanges_sac_and_priorities_across_nodes() {
    let (_, nodes) = three_linked().await;
    let (c1, ch1) = open(&nodes[0]).await;
    let (c2, ch2) = open(&nodes[1]).await;
    let (c3, ch3) = open(&nodes[2]).await;

    // Direct reply-to: the server's queue lives on node 2, the requester
    // is on node 1, the server answers through node 3.
    ch2.queue_declare(
        "rpc".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    in_step(&nodes).await;
    let mut replies = ch1
        .basic_consume(
            "amq.rabbitmq.reply-to".into(),
            "replies".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    ch1.basic_publish(
        "".into(),
        "rpc".into(),
        BasicPublishOptions::default(),
        b"what is six times seven",
        BasicProperties::default().with_reply_to("amq.rabbitmq.reply-to".into()),
    )
    .await
    .unwrap();
    // The server reads it on node 2, with the reply_to name the
    // requester's node gave it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let request = loop {
        if let Some(m) = within(ch2.basic_get("rpc".into(), BasicGetOptions { no_ack: true }))
            .await
            .unwrap()
        {
            break m.delivery;
        }
        assert!(std::time::Instant::now() < deadline, "the request never came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(request.data, b"what is six times seven");
    let reply_to = request.properties.reply_to().clone().unwrap().to_string();
    assert!(reply_to.starts_with("amq.rabbitmq.reply-to."), "{reply_to}");
    // Node 3 knows the name is alive (passive declare).
    ch3.queue_declare(
        reply_to.as_str().into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("the reply-to name is alive seen from node 3");
    ch3.basic_publish(
        "".into(),
        reply_to.as_str().into(),
        BasicPublishOptions::default(),
        b"42",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    let reply = within(replies.next()).await.unwrap().unwrap();
    assert_eq!(reply.data, b"42");

    // A TTL on node 1's queue dead-letters into node 2's queue; the
    // message was published through node 3.
    ch2.queue_declare(
        "dead".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let work_args = table(&[
        ("x-message-ttl", i(100)),
        ("x-dead-letter-exchange", s("")),
        ("x-dead-letter-routing-key", s("dead")),
    ]);
    ch1.queue_declare("work".into(), QueueDeclareOptions::default(), work_args)
        .await
        .unwrap();
    in_step(&nodes).await;
    ch3.basic_publish(
        "".into(),
        "work".into(),
        BasicPublishOptions::default(),
        b"expired",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    assert_eq!(eventually_get(&ch3, "dead").await, b"expired");

    // An alternate exchange declared through node 1 catches into node 2's
    // queue what node 3 publishes unroutably.
    ch1.exchange_declare(
        "ae".into(),
        lapin::ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch1.exchange_declare(
        "with-ae".into(),
        lapin::ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        table(&[("alternate-exchange", s("ae"))]),
    )
    .await
    .unwrap();
    ch2.queue_declare(
        "caught".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch2.queue_bind(
        "caught".into(),
        "ae".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    in_step(&nodes).await;
    ch3.basic_publish(
        "with-ae".into(),
        "nobody".into(),
        BasicPublishOptions::default(),
        b"stray",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    assert_eq!(eventually_get(&ch1, "caught").await, b"stray");

    // Single active consumer on node 1's queue: of consumers on nodes 2
    // and 3, the first gets everything until it cancels.
    ch1.queue_declare(
        "sac".into(),
        QueueDeclareOptions::default(),
        table(&[("x-single-active-consumer", lapin::types::AMQPValue::Boolean(true))]),
    )
    .await
    .unwrap();
    in_step(&nodes).await;
    let mut first = ch2
        .basic_consume(
            "sac".into(),
            "first".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut second = ch3
        .basic_consume(
            "sac".into(),
            "second".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for n in 0..3 {
        ch1.basic_publish(
            "".into(),
            "sac".into(),
            BasicPublishOptions::default(),
            format!("m{n}").as_bytes(),
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    for n in 0..3 {
        let d = within(first.next()).await.unwrap().unwrap();
        assert_eq!(d.data, format!("m{n}").as_bytes());
        d.ack(BasicAckOptions::default()).await.unwrap();
    }
    nothing_within(300, second.next()).await;
    ch2.basic_cancel("first".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    ch1.basic_publish(
        "".into(),
        "sac".into(),
        BasicPublishOptions::default(),
        b"after",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    let d = within(second.next()).await.unwrap().unwrap();
    assert_eq!(d.data, b"after");
    d.ack(BasicAckOptions::default()).await.unwrap();

    // Consumer priorities on node 1's queue: the consumer of priority 10
    // on node 3 gets every message while it has room; priority 1 on node
    // 2 none.
    ch1.queue_declare(
        "prio".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    in_step(&nodes).await;
    let mut low = ch2
        .basic_consume(
            "prio".into(),
            "low".into(),
            BasicConsumeOptions::default(),
            table(&[("x-priority", i(1))]),
        )
        .await
        .unwrap();
    let mut high = ch3
        .basic_consume(
            "prio".into(),
            "high".into(),
            BasicConsumeOptions::default(),
            table(&[("x-priority", i(10))]),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for n in 0..5 {
        ch1.basic_publish(
            "".into(),
            "prio".into(),
            BasicPublishOptions::default(),
            format!("p{n}").as_bytes(),
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    for n in 0..5 {
        let d = within(high.next()).await.unwrap().unwrap();
        assert_eq!(d.data, format!("p{n}").as_bytes());
        d.ack(BasicAckOptions::default()).await.unwrap();
    }
    nothing_within(300, low.next()).await;

    for c in [c1, c2, c3] {
        let _ = c.close(200, "bye".into()).await;
    }
}
