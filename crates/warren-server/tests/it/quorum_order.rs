//! One client's commands to a quorum queue take effect in the order it
//! sent them (issue 32, items 1 and 2), as in RabbitMQ, where a channel's
//! enqueues, settlements, dequeues and purges reach the Raft leader in
//! order: a publish without confirms then a basic.get at once finds the
//! message, a requeue then a get finds it back, a publish then a purge
//! counts it; and a message fetched with basic.get and rejected with
//! requeue is a failed delivery, counted towards x-delivery-limit.

use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Connection, Receiver, Session};
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

use crate::amqp10_management::{field, Node};
use crate::common::*;

async fn declare_quorum(ch: &Channel, name: &str, mut args: FieldTable) {
    args.insert("x-queue-type".into(), s("quorum"));
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    within(ch.queue_declare(name.into(), durable, args))
        .await
        .unwrap();
}

/// basic.publish without confirms (the future resolves once written).
async fn publish(ch: &Channel, queue: &str, body: &[u8]) {
    within(ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body,
        BasicProperties::default(),
    ))
    .await
    .unwrap();
}

async fn get(ch: &Channel, queue: &str) -> Option<lapin::message::BasicGetMessage> {
    within(ch.basic_get(queue.into(), BasicGetOptions { no_ack: false }))
        .await
        .unwrap()
}

/// Publish, get, reject and get again, then publish and purge, each at
/// once after the last on one channel: every step sees the one before.
pub async fn commands_apply_in_the_order_sent(ch: &Channel, queue: &str) {
    for round in 0..20 {
        let body = format!("m{round}");
        publish(ch, queue, body.as_bytes()).await;
        let m = get(ch, queue)
            .await
            .unwrap_or_else(|| panic!("round {round}: the get right after the publish was empty"));
        assert_eq!(m.delivery.data, body.as_bytes());
        within(m.delivery.reject(BasicRejectOptions { requeue: true }))
            .await
            .unwrap();
        let m = get(ch, queue)
            .await
            .unwrap_or_else(|| panic!("round {round}: the get right after the requeue was empty"));
        assert_eq!(m.delivery.data, body.as_bytes());
        assert!(m.delivery.redelivered);
        within(m.delivery.ack(BasicAckOptions::default())).await.unwrap();
    }
    for n in 1..=5u32 {
        for i in 0..n {
            publish(ch, queue, format!("p{i}").as_bytes()).await;
        }
        let purged = within(ch.queue_purge(queue.into(), QueuePurgeOptions::default()))
            .await
            .unwrap();
        assert_eq!(purged, n, "a purge right after {n} publishes");
    }
}

#[tokio::test]
async fn a_channels_publish_get_requeue_and_purge_apply_in_order() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare_quorum(&ch, "qq", FieldTable::default()).await;
    commands_apply_in_the_order_sent(&ch, "qq").await;
}

/// basic.get then basic.reject with requeue, `rejects` times, pausing in
/// between: what the last get finds (None once dead-lettered).
async fn get_and_reject(ch: &Channel, queue: &str, rejects: usize) -> Vec<Option<i64>> {
    let mut counts = Vec::new();
    for _ in 0..rejects {
        let Some(m) = get(ch, queue).await else {
            break;
        };
        counts.push(delivery_count(&m.delivery));
        within(m.delivery.reject(BasicRejectOptions { requeue: true }))
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    counts
}

#[tokio::test]
async fn a_message_got_and_rejected_with_requeue_counts_towards_the_delivery_limit() {
    let b = Broker::start().await;
    let (_c, ch) = b.confirm_channel().await;
    declare(&ch, "dead", FieldTable::default()).await;
    declare_quorum(
        &ch,
        "qq",
        table(&[
            ("x-delivery-limit", i(2)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("dead")),
        ]),
    )
    .await;
    assert!(publish_acked(&ch, "qq", b"poison").await);
    // Delivered with no count, then 1, then 2; the third reject passes
    // the limit of 2 and the message is dead-lettered.
    let counts = get_and_reject(&ch, "qq", 5).await;
    assert_eq!(counts, vec![None, Some(1), Some(2)]);
    assert!(get(&ch, "qq").await.is_none());
    let (body, reason) = take_with_reason(&ch, "dead").await;
    assert_eq!(body, b"poison");
    assert_eq!(reason, Some(AMQPValue::LongString("delivery_limit".into())));
}

/// Over AMQP 1.0 on one connection: a consumer releases a delivery and
/// detaches, then a purge through `/management` counts it.
#[tokio::test]
async fn a_release_then_a_purge_through_the_management_node_apply_in_order() {
    let b = Broker::start().await;
    let (_c, ch) = b.confirm_channel().await;
    declare_quorum(&ch, "qq", FieldTable::default()).await;
    for round in 0..10 {
        assert!(publish_acked(&ch, "qq", format!("r{round}").as_bytes()).await);
        let url = format!("amqp://guest:guest@127.0.0.1:{}", b.port);
        let mut conn = within(Connection::open("order", url.as_str())).await.unwrap();
        let mut session = within(Session::begin(&mut conn)).await.unwrap();
        let mut node = Node::on_session(&mut session).await;
        let mut receiver = within(Receiver::attach(&mut session, "c", "/queues/qq"))
            .await
            .unwrap();
        let d: fe2o3_amqp::link::delivery::Delivery<fe2o3_amqp::types::messaging::Body<Value>> =
            within(receiver.recv()).await.unwrap();
        within(receiver.release(&d)).await.unwrap();
        within(receiver.close()).await.unwrap();
        let (status, body) = node.request("DELETE", "/queues/qq/messages", Value::Null).await;
        assert_eq!(status, "200");
        assert_eq!(
            field(&body, "message_count"),
            Some(&Value::Ulong(1)),
            "round {round}: the purge right after the release"
        );
        within(session.end()).await.unwrap();
        within(conn.close()).await.unwrap();
    }
}

/// The same on three nodes, through the leader's node and through each
/// follower's (whose commands go to the leader's node in order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_any_node_of_a_cluster_commands_apply_in_order() {
    let (_ports, nodes) = crate::cluster::three_linked().await;
    let (_c1, ch1) = crate::cluster_quorum::channel(&nodes[0]).await;
    crate::cluster_quorum::declare_quorum_with(&ch1, "qq", &[]).await;
    crate::cluster::in_step(&nodes).await;
    for node in &nodes {
        let (_c, ch) = crate::cluster_quorum::channel(node).await;
        commands_apply_in_the_order_sent(&ch, "qq").await;
    }
}
