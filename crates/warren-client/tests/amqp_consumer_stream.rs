//! warren-client's AMQP 1.0 stream consumers against an in-process
//! Warren, following RabbitMQ's AMQP 1.0 clients' stream consumer tests:
//! offsets, Bloom filter values, the properties, application-properties
//! and SQL filter expressions. (Going on from the last offset after a
//! lost connection is in amqp_connection_recovery.rs.)

mod support;

use std::time::Duration;

use support::amqp::{publish, warren};
use support::within;
use warren_client::amqp::{Connection, Error, Message, Outcome, QueueSpec, StreamOffset, Value};

#[tokio::test]
async fn stream_consumers_start_where_asked_and_filter() {
    let (uri, _broker) = warren().await;
    let conn = within(Connection::open(&uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    within(m.declare_queue(&QueueSpec::stream("log"))).await.unwrap();
    let p = within(conn.publisher().queue("log").build()).await.unwrap();
    for i in 0..10 {
        let colour = if i % 2 == 0 { "red" } else { "blue" };
        let msg = Message::new(format!("{i}")).annotation("x-stream-filter-value", Value::string(colour));
        assert_eq!(
            within(within(p.publish(msg)).await.unwrap()).await.unwrap(),
            Outcome::Accepted
        );
    }
    let mut from_first = within(
        conn.consumer()
            .queue("log")
            .stream_offset(StreamOffset::First)
            .build(),
    )
    .await
    .unwrap();
    for i in 0..10 {
        let d = within(from_first.receive()).await.unwrap();
        assert_eq!(d.message.data(), Some(format!("{i}").as_bytes()));
        d.accept();
    }
    let mut from_five = within(
        conn.consumer()
            .queue("log")
            .stream_offset(StreamOffset::Offset(5))
            .build(),
    )
    .await
    .unwrap();
    let d = within(from_five.receive()).await.unwrap();
    assert_eq!(d.message.data(), Some(&b"5"[..]));
    d.accept();
    let mut reds = within(
        conn.consumer()
            .queue("log")
            .stream_offset(StreamOffset::First)
            .stream_filter(&["red"], false)
            .build(),
    )
    .await
    .unwrap();
    // The broker filters by chunk; the rest is the application's to skip.
    let mut seen_red = 0;
    while seen_red < 5 {
        let d = within(reds.receive()).await.unwrap();
        if d.message.annotation_value("x-stream-filter-value") == Some(&Value::string("red")) {
            seen_red += 1;
        }
        d.accept();
    }
}

/// Stream consumers with filter expressions (RabbitMQ 4.1's properties
/// and application-properties filters, 4.2's SQL): each gets exactly the
/// messages its filter picks; a filter the broker does not take fails
/// the consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_filter_expressions_pick_their_messages() {
    let (uri, _broker) = warren().await;
    let conn = within(Connection::open(&uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    within(m.declare_queue(&QueueSpec::stream("filtex")))
        .await
        .unwrap();
    let publisher = within(conn.publisher().queue("filtex").build()).await.unwrap();
    let colors = ["red", "green", "blue"];
    for i in 0..30u64 {
        let msg = Message::new(format!("m{i}"))
            .subject(["a", "b", "c"][i as usize % 3])
            .application_property("color", Value::string(colors[(i / 10) as usize]))
            .application_property("i", Value::Ulong(i));
        let p = within(publisher.publish(msg)).await.unwrap();
        assert_eq!(within(p).await.unwrap(), Outcome::Accepted);
    }
    async fn picked(mut c: warren_client::amqp::Consumer, want: usize) -> Vec<u64> {
        let mut got = Vec::new();
        for _ in 0..want {
            let d = within(c.receive()).await.unwrap();
            match d.message.property("i") {
                Some(Value::Ulong(i)) => got.push(*i),
                other => panic!("no i: {other:?}"),
            }
            d.accept();
        }
        assert!(
            tokio::time::timeout(Duration::from_millis(300), c.receive())
                .await
                .is_err(),
            "nothing more passes the filter"
        );
        got
    }
    let from_first = || conn.consumer().queue("filtex").stream_offset(StreamOffset::First);
    let by_subject = within(
        from_first()
            .property_filter("subject", Value::string("b"))
            .build(),
    )
    .await
    .unwrap();
    assert_eq!(
        picked(by_subject, 10).await,
        (0..30).filter(|i| i % 3 == 1).collect::<Vec<_>>()
    );
    let by_color = within(
        from_first()
            .application_property_filter("color", Value::string("green"))
            .build(),
    )
    .await
    .unwrap();
    assert_eq!(picked(by_color, 10).await, (10..20).collect::<Vec<_>>());
    let by_sql = within(from_first().sql_filter("color = 'blue' AND i > 24").build())
        .await
        .unwrap();
    assert_eq!(picked(by_sql, 5).await, (25..30).collect::<Vec<_>>());
    match within(from_first().sql_filter("color = ").build()).await {
        Err(Error::FilterRefused(label)) => assert_eq!(label, "sql-filter"),
        other => panic!("expected the filter refused, got {:?}", other.map(|_| ())),
    }
    conn.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_properties_filter_on_each_field() {
    let (uri, _broker) = warren().await;
    let conn = within(Connection::open(&uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    within(m.declare_queue(&QueueSpec::stream("props-s")))
        .await
        .unwrap();
    let p = within(conn.publisher().queue("props-s").build()).await.unwrap();
    // Three messages, the middle one with every field set.
    let full = |mut msg: Message| {
        msg.properties.message_id = Some("id-1".into());
        msg.properties.correlation_id = Some("corr-1".into());
        msg.properties.subject = Some("subj".into());
        msg.properties.reply_to = Some("/queues/replies".into());
        msg.properties.content_type = Some("text/plain".into());
        msg.properties.content_encoding = Some("gzip".into());
        msg.properties.group_id = Some("g".into());
        msg.properties.group_sequence = Some(9);
        msg.properties.reply_to_group_id = Some("rg".into());
        msg.properties.creation_time = Some(1_700_000_000_000);
        msg.properties.absolute_expiry_time = Some(4_000_000_000_000);
        msg
    };
    for (i, m) in [Message::new("0"), full(Message::new("1")), Message::new("2")]
        .into_iter()
        .enumerate()
    {
        assert_eq!(publish(&p, m).await, Outcome::Accepted, "message {i}");
    }
    for (field, value) in [
        ("message-id", Value::string("id-1")),
        ("correlation-id", Value::string("corr-1")),
        ("subject", Value::string("subj")),
        ("reply-to", Value::string("/queues/replies")),
        ("content-type", Value::symbol("text/plain")),
        ("content-encoding", Value::symbol("gzip")),
        ("group-id", Value::string("g")),
        ("group-sequence", Value::Uint(9)),
        ("reply-to-group-id", Value::string("rg")),
        ("creation-time", Value::Timestamp(1_700_000_000_000)),
        ("absolute-expiry-time", Value::Timestamp(4_000_000_000_000)),
        ("subject", Value::string("&p:su")),
    ] {
        let mut c = within(
            conn.consumer()
                .queue("props-s")
                .stream_offset(StreamOffset::First)
                .property_filter(field, value.clone())
                .build(),
        )
        .await
        .unwrap_or_else(|e| panic!("{field}: {e}"));
        let d = within(c.receive()).await.unwrap();
        assert_eq!(d.message.data(), Some(&b"1"[..]), "{field} = {value:?}");
        d.accept();
        assert!(
            tokio::time::timeout(Duration::from_millis(200), c.receive())
                .await
                .is_err(),
            "{field}: only the one message"
        );
        c.close();
    }
    match within(
        conn.consumer()
            .queue("props-s")
            .property_filter("no-such-field", Value::string("x"))
            .build(),
    )
    .await
    {
        Err(Error::FilterRefused(_)) => {}
        other => panic!("expected the filter refused, got {:?}", other.map(|_| ())),
    }
    conn.close().await;
}
