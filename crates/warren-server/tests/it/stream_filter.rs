//! Stream filtering across protocols: a filter value comes in by any route
//! (the 0-9-1 `x-stream-filter-value` header with lapin, the AMQP 1.0
//! message annotation of that name with fe2o3-amqp, the stream protocol's
//! publish v2 with rabbitmq-stream-client) and every kind of consumer
//! (stream protocol, 0-9-1 `x-stream-filter`, AMQP 1.0
//! `rabbitmq:stream-filter`) asking for "banana" from the first offset gets
//! the bananas and nothing else, however they were published.

use fe2o3_amqp::types::messaging::{Body, Message as AmqpMessage, MessageAnnotations, Source};
use fe2o3_amqp::types::primitives::{Symbol, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use futures_lite::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions};
use lapin::BasicProperties;
use rabbitmq_stream_client::types::{Message as StreamMessage, OffsetSpecification};
use rabbitmq_stream_client::FilterConfiguration;
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;

use crate::common::*;

/// Ten messages of each kind; `None` publishes without a filter value.
const KINDS: [Option<&str>; 3] = [Some("banana"), Some("apple"), None];

fn body(kind: Option<&str>, i: usize) -> String {
    format!("{}-{i}", kind.unwrap_or("plain"))
}

fn bananas() -> Vec<String> {
    (0..10).map(|i| body(Some("banana"), i)).collect()
}

async fn publish_0_9_1(b: &Broker, stream: &str) {
    let (_c, ch) = b.channel().await;
    within(ch.confirm_select(Default::default())).await.unwrap();
    for kind in KINDS {
        for i in 0..10 {
            let mut props = BasicProperties::default();
            if let Some(k) = kind {
                props = props.with_headers(table(&[("x-stream-filter-value", s(k))]));
            }
            within(ch.basic_publish(
                "".into(),
                stream.into(),
                BasicPublishOptions::default(),
                body(kind, i).as_bytes(),
                props,
            ))
            .await
            .unwrap()
            .await
            .unwrap();
        }
    }
}

async fn publish_1_0(b: &Broker, stream: &str) {
    let url = format!("amqp://guest:guest@127.0.0.1:{}", b.port);
    let mut conn = within(Connection::open("filter-pub", url.as_str()))
        .await
        .unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    let mut sender = within(Sender::attach(&mut session, "s", format!("/queues/{stream}")))
        .await
        .unwrap();
    for kind in KINDS {
        for i in 0..10 {
            let mut m = AmqpMessage::builder().data(body(kind, i).into_bytes());
            if let Some(k) = kind {
                m = m.message_annotations(
                    MessageAnnotations::builder()
                        .insert(Symbol::from("x-stream-filter-value"), Value::String(k.into()))
                        .build(),
                );
            }
            let outcome = within(sender.send(m.build())).await.unwrap();
            assert!(outcome.is_accepted());
        }
    }
    within(sender.close()).await.unwrap();
    within(session.end()).await.unwrap();
    within(conn.close()).await.unwrap();
}

async fn publish_stream(b: &Broker, stream: &str) {
    let env = b.stream_env().await;
    let producer = within(
        env.producer()
            .filter_value_extractor(|m: &StreamMessage| {
                let b = String::from_utf8_lossy(m.data().unwrap_or_default()).into_owned();
                b.split('-')
                    .next()
                    .filter(|k| *k != "plain")
                    .unwrap_or("")
                    .to_string()
            })
            .build(stream),
    )
    .await
    .unwrap();
    // One batch per kind, so each kind has chunks of its own.
    for kind in KINDS {
        let msgs = (0..10)
            .map(|i| StreamMessage::builder().body(body(kind, i)).build())
            .collect();
        let confirmed = within(producer.batch_send_with_confirm(msgs)).await.unwrap();
        assert!(confirmed.iter().all(|c| c.confirmed()));
    }
    within(producer.close()).await.unwrap();
}

async fn consume_stream(b: &Broker, stream: &str) -> Vec<String> {
    let env = b.stream_env().await;
    let mut consumer = within(
        env.consumer()
            .offset(OffsetSpecification::First)
            .filter_input(Some(FilterConfiguration::new(vec!["banana".into()], false)))
            .build(stream),
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    while got.len() < 10 {
        let d = within(consumer.next()).await.unwrap().unwrap();
        got.push(String::from_utf8_lossy(d.message().data().unwrap_or_default()).into_owned());
    }
    nothing_within(300, consumer.next()).await;
    let _ = within(consumer.handle().close()).await;
    got
}

async fn consume_0_9_1(b: &Broker, stream: &str) -> Vec<String> {
    let (_c, ch) = b.channel().await;
    within(ch.basic_qos(100, BasicQosOptions::default()))
        .await
        .unwrap();
    let mut consumer = within(ch.basic_consume(
        stream.into(),
        "filtered".into(),
        BasicConsumeOptions::default(),
        table(&[("x-stream-offset", s("first")), ("x-stream-filter", s("banana"))]),
    ))
    .await
    .unwrap();
    let mut got = Vec::new();
    while got.len() < 10 {
        let d = within(consumer.next()).await.unwrap().unwrap();
        got.push(String::from_utf8_lossy(&d.data).into_owned());
        within(d.ack(BasicAckOptions::default())).await.unwrap();
    }
    nothing_within(300, consumer.next()).await;
    got
}

fn filter(name: &str, value: Value) -> Option<Described<Value>> {
    Some(Described {
        descriptor: Descriptor::Name(Symbol::from(name)),
        value,
    })
}

async fn consume_1_0(b: &Broker, stream: &str) -> Vec<String> {
    let url = format!("amqp://guest:guest@127.0.0.1:{}", b.port);
    let mut conn = within(Connection::open("filter-sub", url.as_str()))
        .await
        .unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    let source = Source::builder()
        .address(format!("/queues/{stream}"))
        .add_to_filter(
            "rabbitmq:stream-offset-spec",
            filter("rabbitmq:stream-offset-spec", Value::String("first".into())),
        )
        .add_to_filter(
            "rabbitmq:stream-filter",
            filter("rabbitmq:stream-filter", Value::String("banana".into())),
        )
        .build();
    let mut receiver = within(
        Receiver::builder()
            .name("filtered")
            .source(source)
            .credit_mode(fe2o3_amqp::link::receiver::CreditMode::Auto(100))
            .attach(&mut session),
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    while got.len() < 10 {
        let d: fe2o3_amqp::link::delivery::Delivery<Body<Value>> = within(receiver.recv()).await.unwrap();
        let text = match d.body() {
            Body::Data(batch) => batch.iter().flat_map(|d| d.0.to_vec()).collect::<Vec<u8>>(),
            other => panic!("expected a data section, got {other:?}"),
        };
        got.push(String::from_utf8_lossy(&text).into_owned());
        within(receiver.accept(&d)).await.unwrap();
    }
    nothing_within(300, receiver.recv::<Body<Value>>()).await;
    let _ = within(receiver.close()).await;
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
    got
}

#[tokio::test]
async fn every_publisher_route_reaches_every_filtering_consumer() {
    let b = Broker::start().await;
    let env = b.stream_env().await;
    for route in ["amqp091", "amqp10", "stream"] {
        let stream = format!("fruit-{route}");
        within(env.stream_creator().create(&stream)).await.unwrap();
        match route {
            "amqp091" => publish_0_9_1(&b, &stream).await,
            "amqp10" => publish_1_0(&b, &stream).await,
            _ => publish_stream(&b, &stream).await,
        }
        assert_eq!(consume_stream(&b, &stream).await, bananas(), "{route} -> stream");
        assert_eq!(consume_0_9_1(&b, &stream).await, bananas(), "{route} -> 0-9-1");
        assert_eq!(consume_1_0(&b, &stream).await, bananas(), "{route} -> 1.0");
    }
}

/// Filters are named by their descriptors, whatever the client calls them
/// in the map (RabbitMQ's own tests label them "ts filter" and the like);
/// the attach answers with the filters in force, not a properties filter
/// this broker does not apply.
#[tokio::test]
async fn filters_go_by_descriptor_and_only_known_ones_are_echoed() {
    let b = Broker::start().await;
    let env = b.stream_env().await;
    within(env.stream_creator().create("labelled")).await.unwrap();
    publish_0_9_1(&b, "labelled").await;
    let url = format!("amqp://guest:guest@127.0.0.1:{}", b.port);
    let mut conn = within(Connection::open("labelled-sub", url.as_str()))
        .await
        .unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    let source = |with_properties_filter: bool| {
        let mut s = Source::builder()
            .address("/queues/labelled")
            .add_to_filter(
                "ts filter",
                filter("rabbitmq:stream-offset-spec", Value::String("first".into())),
            )
            .add_to_filter(
                "bloom filter",
                filter("rabbitmq:stream-filter", Value::String("banana".into())),
            );
        if with_properties_filter {
            s = s.add_to_filter(
                "prop filter",
                filter("amqp:properties-filter", Value::String("not applied here".into())),
            );
        }
        s.build()
    };
    // fe2o3-amqp reads the echo, and refuses a link without a filter it
    // asked for.
    let refused = within(
        Receiver::builder()
            .name("with-props")
            .source(source(true))
            .attach(&mut session),
    )
    .await;
    let text = format!("{:?}", refused.err());
    assert!(
        text.contains("DesiredFilterNotSupported") && text.contains("prop filter") && !text.contains("bloom"),
        "{text}"
    );
    let mut receiver = within(
        Receiver::builder()
            .name("labelled")
            .source(source(false))
            .credit_mode(fe2o3_amqp::link::receiver::CreditMode::Auto(100))
            .attach(&mut session),
    )
    .await
    .unwrap();
    let d: fe2o3_amqp::link::delivery::Delivery<Body<Value>> = within(receiver.recv()).await.unwrap();
    match d.body() {
        Body::Data(batch) => assert_eq!(batch[0].0.as_slice(), b"banana-0"),
        other => panic!("expected a data section, got {other:?}"),
    }
    within(receiver.accept(&d)).await.unwrap();
    let _ = within(receiver.close()).await;
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
}

/// A described map, as filter expressions are sent.
fn filter_map(name: &str, pairs: Vec<(Value, Value)>) -> Option<Described<Value>> {
    let mut m = fe2o3_amqp::types::primitives::OrderedMap::new();
    for (k, v) in pairs {
        m.insert(k, v);
    }
    filter(name, Value::Map(m))
}

/// RabbitMQ 4.1's filter expressions on a stream (issue 32, item 9): a
/// properties filter and an application-properties filter, alone or
/// together, with the `&p:` prefix and `&s:` suffix forms and numbers
/// compared across types, and 4.2's SQL filters; each is echoed by the
/// attach, and each receiver gets exactly the messages that match.
#[tokio::test]
async fn properties_and_application_properties_filters_pick_messages() {
    use fe2o3_amqp::types::messaging::{ApplicationProperties, Properties};
    let b = Broker::start().await;
    let env = b.stream_env().await;
    within(env.stream_creator().create("orders")).await.unwrap();
    let url = format!("amqp://guest:guest@127.0.0.1:{}", b.port);
    let mut conn = within(Connection::open("filtex", url.as_str())).await.unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    let mut sender = within(Sender::attach(&mut session, "s", "/queues/orders"))
        .await
        .unwrap();
    for (subject, region) in [
        (Some("order.created"), "eu"),
        (Some("order.deleted"), "us"),
        (None, "eu"),
    ] {
        for i in 0..10i64 {
            let mut p = Properties::builder();
            if let Some(s) = subject {
                p = p.subject(s);
            }
            let m = AmqpMessage::builder()
                .properties(p.build())
                .application_properties(
                    ApplicationProperties::builder()
                        .insert("region", region)
                        .insert("n", i)
                        .build(),
                )
                .data(format!("{}-{region}-{i}", subject.unwrap_or("none")).into_bytes())
                .build();
            assert!(within(sender.send(m)).await.unwrap().is_accepted());
        }
    }
    let consume = |name: &'static str, filters: Vec<(&'static str, Option<Described<Value>>)>| {
        let mut s = Source::builder().address("/queues/orders").add_to_filter(
            "offset",
            filter("rabbitmq:stream-offset-spec", Value::String("first".into())),
        );
        for (label, f) in filters {
            s = s.add_to_filter(label, f);
        }
        (name, s.build())
    };
    let prefix = filter_map(
        "amqp:properties-filter",
        vec![(Value::Symbol("subject".into()), Value::String("&p:order.".into()))],
    );
    let created = filter_map(
        "amqp:properties-filter",
        vec![(
            Value::Symbol("subject".into()),
            Value::String("&s:.created".into()),
        )],
    );
    let eu = filter_map(
        "amqp:application-properties-filter",
        vec![(Value::String("region".into()), Value::String("eu".into()))],
    );
    let us = filter_map(
        "amqp:application-properties-filter",
        vec![(Value::String("region".into()), Value::String("us".into()))],
    );
    let three = filter_map(
        "amqp:application-properties-filter",
        vec![(Value::String("n".into()), Value::Double(3.0.into()))],
    );
    let cases = [
        (consume("prefix", vec![("p", prefix)]), 20),
        (consume("created-eu", vec![("p", created.clone()), ("a", eu)]), 10),
        (consume("created-us", vec![("p", created), ("a", us)]), 0),
        (consume("three", vec![("a", three)]), 3),
        // RabbitMQ 4.2's SQL filter expressions.
        (
            consume(
                "sql",
                vec![(
                    "sql-filter",
                    filter(
                        "amqp:sql-filter",
                        Value::String("p.subject LIKE 'order.%' AND region = 'eu'".into()),
                    ),
                )],
            ),
            10,
        ),
        (
            consume(
                "sql-numbers",
                vec![(
                    "sql-filter",
                    filter(
                        "amqp:sql-filter",
                        Value::String("n >= 8 AND (p.subject IS NULL OR region = 'us')".into()),
                    ),
                )],
            ),
            4,
        ),
    ];
    for ((name, source), want) in cases {
        let mut receiver = within(
            Receiver::builder()
                .name(name)
                .source(source)
                .credit_mode(fe2o3_amqp::link::receiver::CreditMode::Auto(100))
                .attach(&mut session),
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: the filters echoed: {e:?}"));
        let mut got = Vec::new();
        while let Ok(Ok(d)) = tokio::time::timeout(
            std::time::Duration::from_millis(400),
            receiver.recv::<Body<Value>>(),
        )
        .await
        {
            got.push(format!("{:?}", d.body()));
            within(receiver.accept(&d)).await.unwrap();
        }
        assert_eq!(got.len(), want, "{name}: {got:?}");
        let _ = within(receiver.close()).await;
    }
    let _ = within(sender.close()).await;
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
}

/// A SQL filter that does not parse, or a properties filter of the wrong
/// type, is left out of the attach's answer (RabbitMQ does not refuse
/// the attach; the client sees what is in force), and with both a SQL
/// and a properties filter only the later is kept.
#[tokio::test]
async fn filters_not_taken_are_left_out_of_the_answer() {
    let b = Broker::start().await;
    let env = b.stream_env().await;
    within(env.stream_creator().create("echo")).await.unwrap();
    let url = format!("amqp://guest:guest@127.0.0.1:{}", b.port);
    let mut conn = within(Connection::open("echo", url.as_str())).await.unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    let sql = |e: &str| filter("amqp:sql-filter", Value::String(e.into()));
    let subject = filter_map(
        "amqp:properties-filter",
        vec![(Value::Symbol("subject".into()), Value::String("x".into()))],
    );
    let cases = [
        ("bad-sql", vec![("sql-filter", sql("subject = "))]),
        ("lower-case", vec![("sql-filter", sql("a = 1 and b = 2"))]),
        (
            "wrong-type",
            vec![(
                "p",
                filter_map(
                    "amqp:properties-filter",
                    vec![(Value::Symbol("subject".into()), Value::Long(1))],
                ),
            )],
        ),
        ("both", vec![("sql-filter", sql("a = 1")), ("p", subject)]),
    ];
    for (name, filters) in cases {
        let mut s = Source::builder().address("/queues/echo");
        for (label, f) in filters {
            s = s.add_to_filter(label, f);
        }
        // fe2o3-amqp refuses a link whose answer lacks a filter it asked
        // for, naming the filters missing.
        let refused = within(
            Receiver::builder()
                .name(name)
                .source(s.build())
                .attach(&mut session),
        )
        .await;
        let text = format!("{:?}", refused.err());
        assert!(text.contains("DesiredFilterNotSupported"), "{name}: {text}");
        if name == "both" {
            assert!(text.contains("sql-filter") && !text.contains("\"p\""), "{text}");
        }
    }
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
}
