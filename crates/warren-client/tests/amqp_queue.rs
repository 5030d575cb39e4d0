//! warren-client's AMQP 1.0 management of queues against an in-process
//! Warren, following RabbitMQ's AMQP 1.0 clients' queue tests: declare
//! each type with its arguments, queue info, a conflicting declare (409),
//! purge, delete, a missing queue (404).

mod support;

use std::time::Duration;

use support::amqp::{publish, wait_for_count, warren, with_queue};
use support::within;
use warren_client::amqp::{Connection, Error, Message, Outcome, QueueSpec, QueueType, Value};

#[tokio::test]
async fn declare_publish_consume_accept_purge_and_delete() {
    let (uri, _broker) = warren().await;
    let conn = within(Connection::open(&uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    for (spec, kind) in [
        (QueueSpec::classic("c1"), "classic"),
        (QueueSpec::quorum("q1").delivery_limit(5), "quorum"),
        (QueueSpec::stream("s1"), "stream"),
    ] {
        let info = within(m.declare_queue(&spec)).await.unwrap();
        assert_eq!(info.kind, kind);
        assert_eq!(within(m.queue_info(&spec.name)).await.unwrap().kind, kind);
    }
    // The same declare again is fine; other arguments are a conflict.
    within(m.declare_queue(&QueueSpec::quorum("q1").delivery_limit(5)))
        .await
        .unwrap();
    match within(m.declare_queue(&QueueSpec::quorum("q1").delivery_limit(6))).await {
        Err(Error::Management { status: 409, .. }) => {}
        other => panic!("expected 409, got {other:?}"),
    }

    let publisher = within(conn.publisher().queue("q1").build()).await.unwrap();
    let mut pending = Vec::new();
    for i in 0..50u64 {
        let msg = Message::new(format!("m{i}"))
            .message_id(i)
            .application_property("i", Value::Ulong(i));
        pending.push(within(publisher.publish(msg)).await.unwrap());
    }
    for p in pending {
        assert_eq!(within(p).await.unwrap(), Outcome::Accepted);
    }
    assert_eq!(within(m.queue_info("q1")).await.unwrap().message_count, 50);

    let mut consumer = within(conn.consumer().queue("q1").initial_credit(8).build())
        .await
        .unwrap();
    for i in 0..20u64 {
        let d = within(consumer.receive()).await.unwrap();
        assert_eq!(d.message.data(), Some(format!("m{i}").as_bytes()));
        assert_eq!(d.message.property("i"), Some(&Value::Ulong(i)));
        assert!(d.message.durable, "durable by default");
        d.accept();
    }
    consumer.close();
    // What the consumer held beyond the 20 went back; 30 are left.
    let left = wait_for_count(&m, "q1", 30).await;
    assert_eq!(left, 30);
    assert_eq!(within(m.purge_queue("q1")).await.unwrap(), 30);
    assert_eq!(within(m.delete_queue("q1")).await.unwrap(), 0);
    match within(m.queue_info("q1")).await {
        Err(Error::Management { status: 404, .. }) => {}
        other => panic!("expected 404, got {other:?}"),
    }
    conn.close().await;
    assert!(!conn.is_open());
}

#[tokio::test]
async fn declare_with_arguments_and_read_them_back() {
    let (uri, _broker) = warren().await;
    let conn = within(Connection::open(&uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    let spec = QueueSpec::quorum("args-q")
        .delivery_limit(7)
        .dead_letter_exchange("dlx")
        .max_length(100)
        .message_ttl(Duration::from_secs(60));
    let info = within(m.declare_queue(&spec)).await.unwrap();
    assert_eq!((info.name.as_str(), info.kind.as_str()), ("args-q", "quorum"));
    assert!(info.durable, "queues are durable");
    let info = within(m.queue_info("args-q")).await.unwrap();
    for (key, want) in [
        ("x-delivery-limit", 7i64),
        ("x-max-length", 100),
        ("x-message-ttl", 60_000),
    ] {
        let got = info
            .arguments
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone());
        let n = match got {
            Some(Value::Long(n)) => n,
            Some(Value::Ulong(n)) => n as i64,
            Some(Value::Uint(n)) => n as i64,
            Some(Value::Int(n)) => n as i64,
            other => panic!("{key}: {other:?}"),
        };
        assert_eq!(n, want, "{key}");
    }
    let stream = within(m.declare_queue(&QueueSpec::stream("args-s").max_age(Duration::from_secs(3600))))
        .await
        .unwrap();
    assert_eq!(stream.kind, "stream");
    let classic = within(m.declare_queue(&QueueSpec::classic("args-c").exclusive().auto_delete()))
        .await
        .unwrap();
    assert!(classic.exclusive && classic.auto_delete, "{classic:?}");
    assert_eq!(QueueSpec::classic("x").kind, QueueType::Classic);
    conn.close().await;
}

#[tokio::test]
async fn purge_counts_and_missing_queues_are_404() {
    let (uri, _broker) = warren().await;
    let (conn, m) = with_queue(&uri, "purge-q").await;
    let p = within(conn.publisher().queue("purge-q").build()).await.unwrap();
    for i in 0..7 {
        assert_eq!(
            publish(&p, Message::new(format!("p{i}"))).await,
            Outcome::Accepted
        );
    }
    assert_eq!(wait_for_count(&m, "purge-q", 7).await, 7);
    assert_eq!(within(m.purge_queue("purge-q")).await.unwrap(), 7);
    assert_eq!(within(m.purge_queue("purge-q")).await.unwrap(), 0);
    for r in [
        within(m.queue_info("no-such")).await.map(drop),
        within(m.purge_queue("no-such")).await.map(drop),
    ] {
        match r {
            Err(Error::Management { status: 404, .. }) => {}
            other => panic!("expected 404, got {other:?}"),
        }
    }
    conn.close().await;
}
