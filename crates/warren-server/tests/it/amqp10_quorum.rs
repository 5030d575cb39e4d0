//! AMQP 1.0 on a quorum queue of three nodes (issue 17; and on a
//! replicated stream, issue 18, last test), with the real
//! fe2o3-amqp client: a sender on one node gets `accepted` once a
//! majority has each message; a receiver on another consumes in order
//! within its link credit; its outcomes act as RabbitMQ 4's do on a
//! quorum queue: accepted removes, released requeues without counting,
//! modified with delivery-failed requeues and counts (the header's
//! delivery-count), rejected dead-letters, and past the delivery limit a
//! failed delivery dead-letters too.

use fe2o3_amqp::types::messaging::{Data, Modified};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use lapin::options::BasicGetOptions;
use lapin::types::AMQPValue;

use crate::cluster::{in_step, three_linked};
use crate::cluster_quorum::{channel, declare_quorum_with};
use crate::common::*;

type AnyDelivery = fe2o3_amqp::link::delivery::Delivery<
    fe2o3_amqp::types::messaging::Body<fe2o3_amqp::types::primitives::Value>,
>;

fn url(b: &Broker) -> String {
    format!("amqp://guest:guest@127.0.0.1:{}", b.port)
}

fn body_of(d: &AnyDelivery) -> String {
    format!("{:?}", d.body())
}

/// A body's bytes as the Debug of a delivery's body shows them.
fn bytes(s: &str) -> String {
    format!("{:?}", s.as_bytes()).trim_matches(['[', ']']).to_string()
}

fn failed() -> Modified {
    Modified {
        delivery_failed: Some(true),
        undeliverable_here: None,
        message_annotations: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_1_0_sends_and_receives_on_a_quorum_queue_across_nodes() {
    let (_ports, nodes) = three_linked().await;
    let (_c1, ch1) = channel(&nodes[0]).await;
    within(ch1.queue_declare(
        "dlq".into(),
        lapin::options::QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        lapin::types::FieldTable::default(),
    ))
    .await
    .unwrap();
    declare_quorum_with(
        &ch1,
        "qq",
        &[
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("dlq")),
            ("x-delivery-limit", AMQPValue::LongInt(1)),
        ],
    )
    .await;
    in_step(&nodes).await;

    // Sent through node 2: each accepted once committed.
    let mut sconn = within(Connection::open("s", url(&nodes[1]).as_str()))
        .await
        .unwrap();
    let mut ssession = within(Session::begin(&mut sconn)).await.unwrap();
    let mut sender = within(Sender::attach(&mut ssession, "s", "/queues/qq"))
        .await
        .unwrap();
    for i in 0..4 {
        let outcome = within(sender.send(Data::from(format!("a{i}").into_bytes())))
            .await
            .unwrap();
        assert!(outcome.is_accepted(), "{outcome:?}");
    }
    within(sender.close()).await.unwrap();

    // Received through node 3, in order.
    let mut rconn = within(Connection::open("r", url(&nodes[2]).as_str()))
        .await
        .unwrap();
    let mut rsession = within(Session::begin(&mut rconn)).await.unwrap();
    let mut receiver = within(Receiver::attach(&mut rsession, "r", "/queues/qq"))
        .await
        .unwrap();
    let mut d = Vec::new();
    for i in 0..4 {
        let got: AnyDelivery = within(receiver.recv()).await.unwrap();
        assert!(
            body_of(&got).contains(&bytes(&format!("a{i}"))),
            "{}",
            body_of(&got)
        );
        d.push(got);
    }
    // a0 accepted: gone. a1 released: back, not counted. a2 failed once:
    // back with delivery-count 1. a3 rejected: dead-lettered.
    within(receiver.accept(&d[0])).await.unwrap();
    within(receiver.release(&d[1])).await.unwrap();
    within(receiver.modify(&d[2], failed())).await.unwrap();
    within(receiver.reject(&d[3], None)).await.unwrap();
    let mut back = Vec::new();
    for _ in 0..2 {
        let got: AnyDelivery = within(receiver.recv()).await.unwrap();
        back.push(got);
    }
    back.sort_by_key(body_of);
    let h1 = back[0].message().header.clone().unwrap_or_default();
    let h2 = back[1].message().header.clone().unwrap_or_default();
    assert_eq!(body_of(&back[0]), body_of(&d[1]));
    assert_eq!((h1.delivery_count, h1.first_acquirer), (0, false));
    assert_eq!(body_of(&back[1]), body_of(&d[2]));
    assert_eq!(h2.delivery_count, 1);
    // a2 fails again: past the limit of 1, dead-lettered.
    within(receiver.modify(&back[1], failed())).await.unwrap();
    within(receiver.accept(&back[0])).await.unwrap();
    within(receiver.close()).await.unwrap();
    let _ = within(rsession.end()).await;
    let _ = within(rconn.close()).await;

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while depth(&ch1, "dlq").await < 2 {
        assert!(std::time::Instant::now() < deadline, "dead letters missing");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let mut dead = Vec::new();
    for _ in 0..2 {
        let m = within(ch1.basic_get("dlq".into(), BasicGetOptions { no_ack: true }))
            .await
            .unwrap()
            .unwrap();
        dead.push(String::from_utf8(m.delivery.data).unwrap());
    }
    dead.sort();
    assert_eq!(dead, ["a2", "a3"]);
    assert_eq!(depth(&ch1, "qq").await, 0);
    let _ = within(ssession.end()).await;
    let _ = within(sconn.close()).await;
}

/// AMQP 1.0 on a replicated stream of three nodes (issue 18): a sender
/// on a replica's node gets `accepted` once the leader has a majority of
/// each message; receivers on every node read the stream from the first
/// offset (the `rabbitmq:stream-offset-spec` filter) from their own
/// node's member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_1_0_sends_to_and_reads_a_replicated_stream_on_every_node() {
    use fe2o3_amqp::types::messaging::Source;
    use fe2o3_amqp::types::primitives::{Symbol, Value};
    use serde_amqp::described::Described;
    use serde_amqp::descriptor::Descriptor;
    let (_ports, nodes) = three_linked().await;
    let (_c1, ch1) = channel(&nodes[0]).await;
    let mut args = lapin::types::FieldTable::default();
    args.insert("x-queue-type".into(), s("stream"));
    within(ch1.queue_declare(
        "rs10".into(),
        lapin::options::QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        args,
    ))
    .await
    .unwrap();
    in_step(&nodes).await;

    let mut sconn = within(Connection::open("s", url(&nodes[1]).as_str()))
        .await
        .unwrap();
    let mut ssession = within(Session::begin(&mut sconn)).await.unwrap();
    let mut sender = within(Sender::attach(&mut ssession, "s", "/queues/rs10"))
        .await
        .unwrap();
    for i in 0..10 {
        let outcome = within(sender.send(Data::from(format!("r{i}").into_bytes())))
            .await
            .unwrap();
        assert!(outcome.is_accepted(), "{outcome:?}");
    }
    within(sender.close()).await.unwrap();

    for (k, n) in nodes.iter().enumerate() {
        let mut rconn = within(Connection::open("r", url(n).as_str())).await.unwrap();
        let mut rsession = within(Session::begin(&mut rconn)).await.unwrap();
        let first = Described {
            descriptor: Descriptor::Name(Symbol::from("rabbitmq:stream-offset-spec")),
            value: Value::String("first".into()),
        };
        let source = Source::builder()
            .address("/queues/rs10")
            .add_to_filter("rabbitmq:stream-offset-spec", Some(first))
            .build();
        let mut receiver = within(Receiver::builder().name("r").source(source).attach(&mut rsession))
            .await
            .unwrap();
        for i in 0..10 {
            let got: AnyDelivery = within(receiver.recv()).await.unwrap();
            assert!(
                body_of(&got).contains(&bytes(&format!("r{i}"))),
                "node {}: {}",
                k + 1,
                body_of(&got)
            );
            within(receiver.accept(&got)).await.unwrap();
        }
        within(receiver.close()).await.unwrap();
    }
}
