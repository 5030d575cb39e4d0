//! The RabbitMQ Stream protocol with the real rabbitmq-stream-client crate:
//! create and delete, publish with confirms, consume from every offset
//! specification, deduplication across reconnects, server-side offset
//! tracking across a restart, super streams, and 0-9-1 publishers feeding
//! a stream that stream clients read.

use std::time::Duration;

use futures_lite::StreamExt;
use rabbitmq_stream_client::error::StreamCreateError;
use rabbitmq_stream_client::types::{ByteCapacity, Message, OffsetSpecification, ResponseCode};
use rabbitmq_stream_client::Environment;

use crate::common::*;

impl Broker {
    pub fn stream_port(&self) -> u16 {
        self.running.as_ref().unwrap().stream_addr.unwrap().port()
    }

    pub async fn stream_env(&self) -> Environment {
        within(
            Environment::builder()
                .host("127.0.0.1")
                .port(self.stream_port())
                .build(),
        )
        .await
        .expect("stream environment connects")
    }
}

pub(crate) async fn publish(env: &Environment, stream: &str, bodies: impl IntoIterator<Item = String>) {
    let producer = within(env.producer().build(stream)).await.unwrap();
    let msgs: Vec<Message> = bodies
        .into_iter()
        .map(|b| Message::builder().body(b).build())
        .collect();
    let n = msgs.len();
    let confirmed = within(producer.batch_send_with_confirm(msgs)).await.unwrap();
    assert_eq!(confirmed.len(), n);
    assert!(confirmed.iter().all(|c| c.confirmed()), "every message confirmed");
    within(producer.close()).await.unwrap();
}

/// (offset, body) of the next `n` messages from `spec`.
pub(crate) async fn consume(
    env: &Environment,
    stream: &str,
    spec: OffsetSpecification,
    n: usize,
) -> Vec<(u64, String)> {
    let mut consumer = within(env.consumer().offset(spec).build(stream)).await.unwrap();
    let mut out = Vec::new();
    while out.len() < n {
        let d = within(consumer.next())
            .await
            .expect("a delivery")
            .expect("no error");
        let body = String::from_utf8(d.message().data().unwrap_or_default().to_vec()).unwrap();
        out.push((d.offset(), body));
    }
    let _ = within(consumer.handle().close()).await;
    out
}

#[tokio::test]
async fn publish_confirm_and_consume_from_every_offset_spec() {
    let b = Broker::start().await;
    let env = b.stream_env().await;
    within(
        env.stream_creator()
            .max_length(ByteCapacity::GB(1))
            .create("events"),
    )
    .await
    .unwrap();
    // Again: it exists.
    let again = within(
        env.stream_creator()
            .max_length(ByteCapacity::GB(1))
            .create("events"),
    )
    .await;
    assert!(
        matches!(
            again,
            Err(StreamCreateError::Create {
                status: ResponseCode::StreamAlreadyExists,
                ..
            })
        ),
        "{again:?}"
    );
    publish(&env, "events", (0..100).map(|i| format!("e{i}"))).await;
    let first = consume(&env, "events", OffsetSpecification::First, 100).await;
    assert_eq!(first[0], (0, "e0".into()));
    assert_eq!(first[99], (99, "e99".into()));
    assert!(first.windows(2).all(|w| w[0].0 < w[1].0));
    let mid = consume(&env, "events", OffsetSpecification::Offset(40), 1).await;
    assert_eq!(
        mid[0],
        (40, "e40".into()),
        "the client skips records before the offset"
    );
    // Last: the newest chunk (the 100 went as one chunk; this is another).
    publish(&env, "events", ["tail".to_string()]).await;
    let last = consume(&env, "events", OffsetSpecification::Last, 1).await;
    assert_eq!(last[0], (100, "tail".into()));
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let by_time = consume(&env, "events", OffsetSpecification::Timestamp(ts - 60_000), 1).await;
    assert_eq!(by_time[0].0, 0);

    // Next: nothing until something is published.
    let mut next = within(env.consumer().offset(OffsetSpecification::Next).build("events"))
        .await
        .unwrap();
    nothing_within(300, next.next()).await;
    publish(&env, "events", ["after".to_string()]).await;
    let d = within(next.next()).await.unwrap().unwrap();
    assert_eq!(d.offset(), 101);
    assert_eq!(d.message().data(), Some(&b"after"[..]));
    let _ = within(next.handle().close()).await;

    within(env.delete_stream("events")).await.unwrap();
    assert!(
        within(env.delete_stream("events")).await.is_err(),
        "deleting twice fails"
    );
    assert!(
        within(env.producer().build("events")).await.is_err(),
        "the stream is gone"
    );
}

#[tokio::test]
async fn a_named_producer_is_deduplicated_across_reconnects() {
    let b = Broker::start().await;
    let env = b.stream_env().await;
    within(env.stream_creator().create("dedup")).await.unwrap();
    let send = |ids: std::ops::Range<u64>| {
        let env = env.clone();
        async move {
            let mut p = within(env.producer().name("orders").build("dedup"))
                .await
                .unwrap();
            let msgs: Vec<Message> = ids
                .map(|i| Message::builder().body(format!("o{i}")).publishing_id(i).build())
                .collect();
            let n = msgs.len();
            let c = within(p.batch_send_with_confirm(msgs)).await.unwrap();
            assert_eq!(c.len(), n, "duplicates are confirmed too");
            within(p.close()).await.unwrap();
        }
    };
    send(0..10).await;
    // The same ids again, and some new: only the new ones are stored.
    send(5..15).await;
    let got = consume(&env, "dedup", OffsetSpecification::First, 15).await;
    let bodies: Vec<String> = got.into_iter().map(|m| m.1).collect();
    assert_eq!(bodies, (0..15).map(|i| format!("o{i}")).collect::<Vec<_>>());
    let mut consumer = within(env.consumer().offset(OffsetSpecification::First).build("dedup"))
        .await
        .unwrap();
    for _ in 0..15 {
        within(consumer.next()).await.unwrap().unwrap();
    }
    nothing_within(300, consumer.next()).await;
    let _ = within(consumer.handle().close()).await;
}

#[tokio::test]
async fn stored_offsets_and_producer_sequences_survive_a_restart() {
    let dir = temp_dir("stream-restart");
    let d2 = dir.clone();
    let mut b = Broker::start_with(move |c| c.data_dir = d2).await;
    {
        let env = b.stream_env().await;
        within(env.stream_creator().create("tracked")).await.unwrap();
        let mut p = within(env.producer().name("writer").build("tracked"))
            .await
            .unwrap();
        for i in 0..5u64 {
            let m = Message::builder().body(format!("t{i}")).publishing_id(i).build();
            within(p.send_with_confirm(m)).await.unwrap();
        }
        within(p.close()).await.unwrap();
        let consumer = within(
            env.consumer()
                .name("reader")
                .offset(OffsetSpecification::First)
                .build("tracked"),
        )
        .await
        .unwrap();
        within(consumer.store_offset(3)).await.unwrap();
        // Stored offsets are read back (after the store is taken).
        let mut stored = 0;
        for _ in 0..50 {
            stored = within(consumer.query_offset()).await.unwrap_or(u64::MAX);
            if stored == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(stored, 3);
        let _ = within(consumer.handle().close()).await;
    }
    b.stop().await;
    let d3 = dir.clone();
    let b = Broker::start_with(move |c| c.data_dir = d3).await;
    let env = b.stream_env().await;
    let consumer = within(
        env.consumer()
            .name("reader")
            .offset(OffsetSpecification::First)
            .build("tracked"),
    )
    .await
    .unwrap();
    assert_eq!(within(consumer.query_offset()).await.unwrap(), 3);
    let _ = within(consumer.handle().close()).await;
    // The producer's last id came back too: resending 0..5 stores nothing.
    let mut p = within(env.producer().name("writer").build("tracked"))
        .await
        .unwrap();
    for i in 0..5u64 {
        let m = Message::builder()
            .body(format!("again{i}"))
            .publishing_id(i)
            .build();
        within(p.send_with_confirm(m)).await.unwrap();
    }
    within(p.close()).await.unwrap();
    let all = consume(&env, "tracked", OffsetSpecification::First, 5).await;
    assert!(all.iter().all(|m| m.1.starts_with('t')), "{all:?}");
    let mut c = within(
        env.consumer()
            .offset(OffsetSpecification::Offset(all[4].0 + 1))
            .build("tracked"),
    )
    .await
    .unwrap();
    nothing_within(300, c.next()).await;
    let _ = within(c.handle().close()).await;
}

#[tokio::test]
async fn super_streams_route_by_key_to_their_partitions() {
    let b = Broker::start().await;
    let env = b.stream_env().await;
    within(env.stream_creator().create_super_stream("invoices", 3, None))
        .await
        .unwrap();
    let client = within(rabbitmq_stream_client::Client::connect(
        rabbitmq_stream_client::ClientOptions::builder()
            .host("127.0.0.1")
            .port(b.stream_port())
            .build(),
    ))
    .await
    .unwrap();
    let parts = within(client.partitions("invoices".into())).await.unwrap();
    assert_eq!(
        parts.streams,
        vec!["invoices-0".to_string(), "invoices-1".into(), "invoices-2".into()]
    );
    let route = within(client.route("1".into(), "invoices".into())).await.unwrap();
    assert_eq!(route.streams, vec!["invoices-1".to_string()]);
    let none = within(client.route("nope".into(), "invoices".into()))
        .await
        .unwrap();
    assert!(none.streams.is_empty());
    let _ = client.close().await;
    within(env.delete_super_stream("invoices")).await.unwrap();
    assert!(within(env.producer().build("invoices-0")).await.is_err());
}

/// Streams are queues: a 0-9-1 publisher routes into one (through an
/// exchange), and stream clients read the messages, stored as AMQP 1.0.
#[tokio::test]
async fn amqp_0_9_1_publishers_feed_a_stream_that_stream_clients_read() {
    use lapin::options::{BasicPublishOptions, QueueBindOptions, QueueDeclareOptions};
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare(
        "from-091".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        table(&[("x-queue-type", s("stream"))]),
    ))
    .await
    .unwrap();
    within(ch.queue_bind(
        "from-091".into(),
        "amq.topic".into(),
        "log.#".into(),
        QueueBindOptions::default(),
        Default::default(),
    ))
    .await
    .unwrap();
    for i in 0..20 {
        within(ch.basic_publish(
            "amq.topic".into(),
            "log.info".into(),
            BasicPublishOptions::default(),
            format!("line {i}").as_bytes(),
            lapin::BasicProperties::default().with_content_type("text/plain".into()),
        ))
        .await
        .unwrap();
    }
    let env = b.stream_env().await;
    let got = consume(&env, "from-091", OffsetSpecification::First, 20).await;
    assert_eq!(got[0].1, "line 0");
    assert_eq!(got[19].1, "line 19");
    // A non-durable stream is refused, as in RabbitMQ.
    let (_c2, ch2) = b.channel().await;
    let r = within(ch2.queue_declare(
        "transient-stream".into(),
        QueueDeclareOptions::default(),
        table(&[("x-queue-type", s("stream"))]),
    ))
    .await;
    assert_eq!(amqp_error(&r.unwrap_err()).0, 406);
}

/// And back: what stream clients publish (plain and in compressed
/// sub-entry batches) reaches AMQP 0-9-1 consumers of the stream, from
/// the offset they ask for (x-stream-offset), each message carrying its
/// offset; acks return credit and take nothing from the stream.
#[tokio::test]
async fn amqp_0_9_1_consumers_read_a_stream_from_an_offset() {
    use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
    use lapin::types::AMQPValue;
    use rabbitmq_stream_client::types::Message;
    let b = Broker::start().await;
    let env = b.stream_env().await;
    within(env.stream_creator().create("to-091")).await.unwrap();
    publish(&env, "to-091", (0..30).map(|i| format!("s{i}"))).await;

    let (_c, ch) = b.channel().await;
    // Without a prefetch a stream cannot be consumed (RabbitMQ's rule).
    let (_c0, ch0) = b.channel().await;
    let r = within(ch0.basic_consume(
        "to-091".into(),
        "nope".into(),
        BasicConsumeOptions::default(),
        Default::default(),
    ))
    .await;
    assert!(r.is_err(), "a stream consumer needs a prefetch");

    within(ch.basic_qos(10, BasicQosOptions::default()))
        .await
        .unwrap();
    let mut consumer = within(ch.basic_consume(
        "to-091".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        table(&[("x-stream-offset", AMQPValue::LongLongInt(12))]),
    ))
    .await
    .unwrap();
    for i in 12..30 {
        let d = within(consumer.next()).await.unwrap().unwrap();
        assert_eq!(d.data, format!("s{i}").as_bytes());
        let h = d.properties.headers().as_ref().unwrap().inner();
        assert_eq!(h.get("x-stream-offset"), Some(&AMQPValue::LongLongInt(i)));
        within(d.ack(BasicAckOptions::default())).await.unwrap();
    }
    // Live: a new message arrives as it is published.
    let p = within(env.producer().build("to-091")).await.unwrap();
    within(p.send_with_confirm(Message::builder().body("live").build()))
        .await
        .unwrap();
    let d = within(consumer.next()).await.unwrap().unwrap();
    assert_eq!(d.data, b"live");
    within(d.ack(BasicAckOptions::default())).await.unwrap();
    within(p.close()).await.unwrap();

    // "first" from another consumer: the stream was not consumed away.
    let (_c2, ch2) = b.channel().await;
    within(ch2.basic_qos(100, BasicQosOptions::default()))
        .await
        .unwrap();
    let mut again = within(ch2.basic_consume(
        "to-091".into(),
        "again".into(),
        BasicConsumeOptions::default(),
        table(&[("x-stream-offset", s("first"))]),
    ))
    .await
    .unwrap();
    let d = within(again.next()).await.unwrap().unwrap();
    assert_eq!(d.data, b"s0");
}

/// Single active consumer: two consumers of one name on one stream, one
/// gets the messages; when it goes, the other takes over from where the
/// group's stored offset says.
#[tokio::test]
async fn a_single_active_consumer_hands_over_when_it_leaves() {
    let b = Broker::start().await;
    let env = b.stream_env().await;
    within(env.stream_creator().create("sac")).await.unwrap();
    let build = |env: Environment| async move {
        within(
            env.consumer()
                .name("group-a")
                .enable_single_active_consumer(true)
                .offset(OffsetSpecification::First)
                .consumer_update(move |_active, ctx| async move {
                    // Resume after the group's stored offset, if any.
                    match ctx.client().query_offset(ctx.name(), ctx.stream().as_str()).await {
                        Ok(o) => OffsetSpecification::Offset(o + 1),
                        Err(_) => OffsetSpecification::First,
                    }
                })
                .build("sac"),
        )
        .await
        .unwrap()
    };
    let mut first = build(env.clone()).await;
    let mut second = build(env.clone()).await;
    publish(&env, "sac", (0..10).map(|i| format!("a{i}"))).await;
    let mut last = 0;
    for i in 0..10 {
        let d = within(first.next()).await.unwrap().unwrap();
        assert_eq!(d.message().data(), Some(format!("a{i}").as_bytes()));
        last = d.offset();
    }
    nothing_within(300, second.next()).await;
    within(first.store_offset(last)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    within(first.handle().close()).await.unwrap();
    publish(&env, "sac", (0..5).map(|i| format!("b{i}"))).await;
    for i in 0..5 {
        let d = within(second.next()).await.unwrap().unwrap();
        assert_eq!(
            d.message().data(),
            Some(format!("b{i}").as_bytes()),
            "the second resumes after the first"
        );
    }
    let _ = within(second.handle().close()).await;
}

/// Single active consumer on a super stream: one application instance is
/// active on every partition; when a second joins, the partitions spread
/// over both (partition i goes to member i % 2, as RabbitMQ does), the
/// first stepping down from partition 1 before the second takes it over;
/// when the second leaves, the first takes partition 1 back.
#[tokio::test]
async fn super_stream_single_active_consumers_spread_over_partitions() {
    let b = Broker::start().await;
    let env = b.stream_env().await;
    within(env.stream_creator().create_super_stream("orders", 3, None))
        .await
        .unwrap();
    let build = |env: Environment| async move {
        within(
            env.super_stream_consumer()
                .name("app")
                .enable_single_active_consumer(true)
                .offset(OffsetSpecification::Next)
                .consumer_update(|_active, _ctx| async { OffsetSpecification::Next })
                .build("orders"),
        )
        .await
        .unwrap()
    };
    // (partition stream, body) of the next `n` deliveries.
    async fn take(
        c: &mut rabbitmq_stream_client::types::SuperStreamConsumer,
        n: usize,
    ) -> Vec<(String, String)> {
        let mut out = Vec::new();
        while out.len() < n {
            let d = within(c.next()).await.unwrap().unwrap();
            let body = String::from_utf8(d.message().data().unwrap_or_default().to_vec()).unwrap();
            out.push((d.stream().clone(), body));
        }
        out.sort();
        out
    }
    let settle = || tokio::time::sleep(Duration::from_millis(300));
    let mut first = build(env.clone()).await;
    settle().await;
    for p in 0..3 {
        publish(&env, &format!("orders-{p}"), [format!("a{p}")]).await;
    }
    assert_eq!(
        take(&mut first, 3).await,
        vec![
            ("orders-0".to_string(), "a0".to_string()),
            ("orders-1".into(), "a1".into()),
            ("orders-2".into(), "a2".into())
        ],
        "alone, the first is active everywhere"
    );
    let mut second = build(env.clone()).await;
    settle().await;
    for p in 0..3 {
        publish(&env, &format!("orders-{p}"), [format!("b{p}")]).await;
    }
    assert_eq!(
        take(&mut first, 2).await,
        vec![
            ("orders-0".to_string(), "b0".to_string()),
            ("orders-2".into(), "b2".into())
        ]
    );
    assert_eq!(
        take(&mut second, 1).await,
        vec![("orders-1".to_string(), "b1".to_string())]
    );
    nothing_within(300, first.next()).await;
    nothing_within(300, second.next()).await;
    // The second leaves: partition 1 comes back to the first.
    within(second.handle().close()).await.unwrap();
    settle().await;
    publish(&env, "orders-1", ["c1".to_string()]).await;
    assert_eq!(
        take(&mut first, 1).await,
        vec![("orders-1".to_string(), "c1".to_string())]
    );
    let _ = within(first.handle().close()).await;
}

/// A stream deleted under a live publisher: its next publish is refused
/// (an error, never a confirm), and the broker goes on: a new stream of
/// the same name takes messages.
#[tokio::test]
async fn publishing_to_a_stream_deleted_under_the_publisher_is_refused() {
    let b = Broker::start().await;
    let env = b.stream_env().await;
    within(env.stream_creator().create("doomed")).await.unwrap();
    let producer = within(env.producer().build("doomed")).await.unwrap();
    let before = within(producer.send_with_confirm(Message::builder().body("before").build()))
        .await
        .unwrap();
    assert!(before.confirmed());
    within(env.delete_stream("doomed")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = within(producer.send_with_confirm(Message::builder().body("after").build())).await;
    if let Ok(status) = after {
        assert!(
            !status.confirmed(),
            "a publish to a deleted stream is not confirmed ({:?})",
            status.status()
        );
    }
    // Closed here: the client's Drop blocks on a close of its own.
    let _ = within(producer.close()).await;
    within(env.stream_creator().create("doomed")).await.unwrap();
    publish(&env, "doomed", ["again".to_string()]).await;
    let got = consume(&env, "doomed", OffsetSpecification::First, 1).await;
    assert_eq!(got[0].1, "again", "the new stream holds only what came after");
}

/// Bad input on the stream port: a frame larger than allowed before open
/// and an unknown command after it each get the protocol's answer (Close
/// with its code) and never take the broker down. (Malformed Publish
/// frames are the fuzz target's and `parse_publish`'s unit tests' job.)
#[tokio::test]
async fn bad_frames_get_protocol_errors_and_the_broker_goes_on() {
    use bytes::{BufMut, BytesMut};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use warren_stream::command::{parse_frame, Command};

    let b = Broker::start().await;
    async fn read_close(s: &mut tokio::net::TcpStream) -> Option<u16> {
        let mut buf = BytesMut::new();
        loop {
            while let Ok(Some(f)) = parse_frame(&mut buf, 1 << 20) {
                if let Ok(Command::Close { code, .. }) = Command::decode(f) {
                    return Some(code);
                }
            }
            if s.read_buf(&mut buf).await.ok()? == 0 {
                return None;
            }
        }
    }
    // A 1 MiB frame before the connection is open: frame too large (14).
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", b.stream_port()))
        .await
        .unwrap();
    s.write_all(&(1u32 << 20).to_be_bytes()).await.unwrap();
    assert_eq!(within(read_close(&mut s)).await, Some(0x0e));

    // An unknown command key after a proper opening: unknown frame (13).
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", b.stream_port()))
        .await
        .unwrap();
    let mut out = BytesMut::new();
    Command::PeerProperties {
        correlation_id: 1,
        properties: vec![],
    }
    .encode(&mut out);
    Command::SaslHandshake { correlation_id: 2 }.encode(&mut out);
    Command::SaslAuthenticate {
        correlation_id: 3,
        mechanism: "PLAIN".into(),
        data: bytes::Bytes::from_static(b"\0guest\0guest"),
    }
    .encode(&mut out);
    Command::Tune {
        frame_max: 1 << 20,
        heartbeat: 0,
    }
    .encode(&mut out);
    Command::Open {
        correlation_id: 4,
        vhost: "/".into(),
    }
    .encode(&mut out);
    s.write_all(&out).await.unwrap();
    // Give the broker the opening, then a frame with key 0x7777.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut bad = BytesMut::new();
    bad.put_u32(4);
    bad.put_u16(0x7777);
    bad.put_u16(1);
    s.write_all(&bad).await.unwrap();
    assert_eq!(within(read_close(&mut s)).await, Some(0x0d));

    // The broker is fine: a real client works.
    let env = b.stream_env().await;
    within(env.stream_creator().create("after-bad")).await.unwrap();
    publish(&env, "after-bad", ["ok".to_string()]).await;
}

/// The protocol's answers to misuse, as RabbitMQ gives them: a publisher
/// on a missing stream (2), the same publisher id twice (17), a
/// subscription id in use (3), unsubscribing one that is not (4), metadata
/// for a missing stream (2), a query for an offset never stored (19).
#[tokio::test]
async fn misuse_gets_rabbitmqs_response_codes() {
    use std::collections::HashMap;
    let b = Broker::start().await;
    let env = b.stream_env().await;
    within(env.stream_creator().create("codes")).await.unwrap();
    let client = within(rabbitmq_stream_client::Client::connect(
        rabbitmq_stream_client::ClientOptions::builder()
            .host("127.0.0.1")
            .port(b.stream_port())
            .build(),
    ))
    .await
    .unwrap();
    let r = within(client.declare_publisher(1, None, "no-such-stream"))
        .await
        .unwrap();
    assert_eq!(r.code(), &ResponseCode::StreamDoesNotExist);
    let r = within(client.declare_publisher(1, None, "codes")).await.unwrap();
    assert_eq!(r.code(), &ResponseCode::Ok);
    let r = within(client.declare_publisher(1, None, "codes")).await.unwrap();
    assert_eq!(r.code(), &ResponseCode::PreconditionFailed);
    let sub = |id| client.subscribe(id, "codes", OffsetSpecification::First, 1, HashMap::new());
    assert_eq!(within(sub(7)).await.unwrap().code(), &ResponseCode::Ok);
    assert_eq!(
        within(sub(7)).await.unwrap().code(),
        &ResponseCode::SubscriptionIdAlreadyExists
    );
    assert_eq!(
        within(client.unsubscribe(9)).await.unwrap().code(),
        &ResponseCode::SubscriptionIdDoesNotExist
    );
    assert_eq!(
        within(client.unsubscribe(7)).await.unwrap().code(),
        &ResponseCode::Ok
    );
    let md = within(client.metadata(vec!["codes".into(), "nope".into()]))
        .await
        .unwrap();
    assert_eq!(md["codes"].response_code, ResponseCode::Ok);
    assert_eq!(
        md["codes"].leader.port as u16,
        b.stream_port(),
        "the leader is this broker"
    );
    // A missing stream has no leader (0xffff): the client leaves it out,
    // as it does with RabbitMQ.
    assert!(
        !md.contains_key("nope"),
        "{:?}",
        md.get("nope").map(|m| &m.response_code)
    );
    let q = within(client.query_offset("never-stored".into(), "codes")).await;
    assert!(format!("{q:?}").contains("OffsetNotFound"), "{q:?}");
    let _ = client.close().await;
}
