//! What a message looks like after crossing protocols, and the modified
//! outcome, with the real fe2o3-amqp and lapin clients: 1.0 bodies of any
//! kind come back to 1.0 consumers as sent; properties, application
//! properties and `x-` annotations map to 0-9-1 as RabbitMQ 4 maps them,
//! and back.

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Body, Message, MessageAnnotations, MessageId, Modified, Properties,
};
use fe2o3_amqp::types::primitives::{OrderedMap, SimpleValue, Symbol, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use lapin::options::{BasicGetOptions, BasicPublishOptions};
use lapin::types::{AMQPValue, FieldTable as LapinTable};

use crate::common::*;

type AnyDelivery = fe2o3_amqp::link::delivery::Delivery<Body<Value>>;

async fn open(b: &Broker) -> (ConnectionHandle<()>, SessionHandle<()>) {
    let url = format!("amqp://guest:guest@127.0.0.1:{}", b.port);
    let mut conn = within(Connection::open("warren-test", url.as_str()))
        .await
        .unwrap();
    let session = within(Session::begin(&mut conn)).await.unwrap();
    (conn, session)
}

fn annotation<'a>(m: &'a Message<Body<Value>>, key: &str) -> Option<&'a Value> {
    let ma = m.message_annotations.as_ref()?;
    ma.0.iter()
        .find(|(k, _)| format!("{k:?}").contains(&format!("\"{key}\"")))
        .map(|(_, v)| v)
}

#[tokio::test]
async fn a_1_0_body_of_any_kind_comes_back_as_it_was_sent() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "kinds", Default::default()).await;
    let (mut conn, mut session) = open(&b).await;
    let mut sender = within(Sender::attach(&mut session, "s", "/queues/kinds"))
        .await
        .unwrap();
    let id = fe2o3_amqp::types::primitives::Uuid::from([7u8; 16]);
    let mut map = OrderedMap::new();
    map.insert(Value::String("a".into()), Value::Long(1));
    let m = Message::builder()
        .properties(
            Properties::builder()
                .message_id(id.clone())
                .subject("greeting")
                .build(),
        )
        .application_properties(
            ApplicationProperties::builder()
                .insert("k", SimpleValue::Long(5))
                .build(),
        )
        .message_annotations(
            MessageAnnotations::builder()
                .insert(Symbol::from("x-opt-tenant"), Value::String("t1".into()))
                .build(),
        )
        .value(Value::Map(map.clone()))
        .build();
    assert!(within(sender.send(m)).await.unwrap().is_accepted());
    assert!(within(sender.send("just a string")).await.unwrap().is_accepted());
    within(sender.close()).await.unwrap();

    let mut receiver = within(Receiver::attach(&mut session, "r", "/queues/kinds"))
        .await
        .unwrap();
    let d: AnyDelivery = within(receiver.recv()).await.unwrap();
    match d.body() {
        Body::Value(v) => assert_eq!(v.0, Value::Map(map)),
        other => panic!("expected the amqp-value map back, got {other:?}"),
    }
    let m = d.message();
    let props = m.properties.as_ref().unwrap();
    assert_eq!(
        props.message_id,
        Some(MessageId::Uuid(id)),
        "the uuid id comes back a uuid"
    );
    let app = m.application_properties.as_ref().unwrap();
    assert_eq!(app.0.get("k"), Some(&SimpleValue::Long(5)));
    assert_eq!(annotation(m, "x-opt-tenant"), Some(&Value::String("t1".into())));
    assert_eq!(
        annotation(m, "x-routing-key"),
        Some(&Value::String("kinds".into()))
    );
    assert!(
        m.header.as_ref().unwrap().durable,
        "no header means durable, as in RabbitMQ 4"
    );
    within(receiver.accept(&d)).await.unwrap();
    let d: AnyDelivery = within(receiver.recv()).await.unwrap();
    match d.body() {
        Body::Value(v) => assert_eq!(v.0, Value::String("just a string".into())),
        other => panic!("expected the amqp-value string back, got {other:?}"),
    }
    within(receiver.accept(&d)).await.unwrap();
    within(receiver.close()).await.unwrap();
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
}

#[tokio::test]
async fn properties_and_headers_map_between_0_9_1_and_1_0() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "map-in", Default::default()).await;
    declare(&ch, "map-out", Default::default()).await;
    let (mut conn, mut session) = open(&b).await;

    // 1.0 -> 0-9-1.
    let mut sender = within(Sender::attach(&mut session, "s", "/queues/map-in"))
        .await
        .unwrap();
    let m = Message::builder()
        .properties(
            Properties::builder()
                .message_id(String::from("m-1"))
                .correlation_id(42u64)
                .content_type("text/plain")
                .group_id(String::from("grp"))
                .build(),
        )
        .application_properties(
            ApplicationProperties::builder()
                .insert("plain", SimpleValue::Int(3))
                .build(),
        )
        .message_annotations(
            MessageAnnotations::builder()
                .insert(Symbol::from("x-opt-a"), Value::String("va".into()))
                .insert(Symbol::from("no-x"), Value::String("dropped".into()))
                .build(),
        )
        .data(b"payload".to_vec())
        .build();
    assert!(within(sender.send(m)).await.unwrap().is_accepted());
    within(sender.close()).await.unwrap();
    let got = within(ch.basic_get("map-in".into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
        .expect("the message arrived");
    assert_eq!(got.delivery.data, b"payload");
    let p = &got.delivery.properties;
    assert_eq!(p.message_id().as_ref().map(|s| s.as_str()), Some("m-1"));
    assert_eq!(p.correlation_id().as_ref().map(|s| s.as_str()), Some("42"));
    assert_eq!(p.content_type().as_ref().map(|s| s.as_str()), Some("text/plain"));
    assert_eq!(p.app_id().as_ref().map(|s| s.as_str()), Some("grp"));
    assert_eq!(*p.delivery_mode(), Some(2));
    let h = p.headers().as_ref().expect("headers").inner();
    assert_eq!(h.get("plain"), Some(&AMQPValue::LongInt(3)));
    assert!(matches!(h.get("x-opt-a"), Some(AMQPValue::LongString(s)) if s.as_bytes() == b"va"));
    assert!(h.get("no-x").is_none());

    // 0-9-1 -> 1.0.
    let mut headers = LapinTable::default();
    headers.insert("x-custom".into(), AMQPValue::LongString("xc".into()));
    headers.insert("plain".into(), AMQPValue::LongLongInt(9));
    within(
        ch.basic_publish(
            "".into(),
            "map-out".into(),
            BasicPublishOptions::default(),
            b"from 0-9-1",
            lapin::BasicProperties::default()
                .with_headers(headers)
                .with_message_id("urn:uuid:01020304-0506-0708-090a-0b0c0d0e0f10".into())
                .with_app_id("app".into())
                .with_type("kind-t".into())
                .with_delivery_mode(1),
        ),
    )
    .await
    .unwrap();
    let mut receiver = within(Receiver::attach(&mut session, "r", "/queues/map-out"))
        .await
        .unwrap();
    let d: AnyDelivery = within(receiver.recv()).await.unwrap();
    match d.body() {
        Body::Data(batch) => assert_eq!(
            batch.iter().flat_map(|d| d.0.to_vec()).collect::<Vec<u8>>(),
            b"from 0-9-1"
        ),
        other => panic!("expected a data section, got {other:?}"),
    }
    let m = d.message();
    assert!(!m.header.as_ref().unwrap().durable);
    assert_eq!(annotation(m, "x-custom"), Some(&Value::String("xc".into())));
    assert_eq!(
        annotation(m, "x-basic-type"),
        Some(&Value::String("kind-t".into()))
    );
    assert_eq!(annotation(m, "x-exchange"), Some(&Value::String("".into())));
    let app = m.application_properties.as_ref().unwrap();
    assert_eq!(app.0.get("plain"), Some(&SimpleValue::Long(9)));
    assert!(
        app.0.get("x-custom").is_none(),
        "x- headers are annotations, not properties"
    );
    let props = m.properties.as_ref().unwrap();
    assert_eq!(
        props.message_id,
        Some(MessageId::Uuid(fe2o3_amqp::types::primitives::Uuid::from([
            1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16
        ])))
    );
    assert_eq!(props.group_id.as_deref(), Some("app"));
    within(receiver.accept(&d)).await.unwrap();
    within(receiver.close()).await.unwrap();
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
}

/// The modified outcome (§3.4.5): delivery-failed counts an attempt (the
/// next delivery's header says so), message-annotations are merged into
/// the message, and undeliverable-here dead-letters it as RabbitMQ does.
#[tokio::test]
async fn modified_counts_the_attempt_merges_annotations_and_can_dead_letter() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "mod-dlq", Default::default()).await;
    declare(
        &ch,
        "mod",
        table(&[
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("mod-dlq")),
        ]),
    )
    .await;
    for body in [&b"first"[..], b"second"] {
        within(ch.basic_publish(
            "".into(),
            "mod".into(),
            BasicPublishOptions::default(),
            body,
            lapin::BasicProperties::default(),
        ))
        .await
        .unwrap();
    }
    let (mut conn, mut session) = open(&b).await;
    let mut receiver = within(Receiver::attach(&mut session, "r", "/queues/mod"))
        .await
        .unwrap();
    let d: AnyDelivery = within(receiver.recv()).await.unwrap();
    assert!(
        format!("{:?}", d.body()).contains("102, 105, 114, 115, 116"),
        "first: {:?}",
        d.body()
    );
    let h = d.message().header.as_ref().unwrap();
    assert!(h.first_acquirer && h.delivery_count == 0);
    // The receiver's credit lets both arrive before it decides.
    let second: AnyDelivery = within(receiver.recv()).await.unwrap();
    let mut ann = OrderedMap::new();
    ann.insert(Symbol::from("x-opt-reason"), Value::String("busy".into()));
    let modified = Modified {
        delivery_failed: Some(true),
        undeliverable_here: None,
        message_annotations: Some(ann),
    };
    within(receiver.modify(&d, modified)).await.unwrap();
    // Undeliverable here: dead-lettered, not requeued.
    let modified = Modified {
        delivery_failed: Some(true),
        undeliverable_here: Some(true),
        message_annotations: None,
    };
    within(receiver.modify(&second, modified)).await.unwrap();

    // The first comes back, with the attempt counted and the annotation
    // on it.
    let again: AnyDelivery = within(receiver.recv()).await.unwrap();
    assert_eq!(format!("{:?}", again.body()), format!("{:?}", d.body()));
    let h = again.message().header.as_ref().unwrap();
    assert!(!h.first_acquirer);
    assert_eq!(h.delivery_count, 1);
    assert_eq!(
        annotation(again.message(), "x-opt-reason"),
        Some(&Value::String("busy".into()))
    );
    within(receiver.accept(&again)).await.unwrap();
    within(receiver.close()).await.unwrap();
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
    let dead = within(ch.basic_get("mod-dlq".into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
        .expect("dead-lettered");
    assert_eq!(dead.delivery.data, b"second");
    let q = declare(
        &ch,
        "mod",
        table(&[
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("mod-dlq")),
        ]),
    )
    .await;
    assert_eq!(q.message_count(), 0);
}

/// A modified outcome's `x-` annotations stay on a quorum queue's
/// message (every member stores it anew), with and without
/// delivery-failed, and the next modification adds to them (RabbitMQ 4).
#[tokio::test]
async fn a_modified_outcomes_annotations_stay_on_a_quorum_queues_message() {
    let b = Broker::start().await;
    let (_c, ch) = b.confirm_channel().await;
    within(ch.queue_declare(
        "qq-mod".into(),
        lapin::options::QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        table(&[("x-queue-type", s("quorum"))]),
    ))
    .await
    .unwrap();
    assert!(publish_acked(&ch, "qq-mod", b"m").await);
    let (mut conn, mut session) = open(&b).await;
    let mut receiver = within(Receiver::attach(&mut session, "r", "/queues/qq-mod"))
        .await
        .unwrap();
    let modified = |failed: bool, key: &str, value: &str| {
        let mut ann = OrderedMap::new();
        ann.insert(Symbol::from(key), Value::String(value.into()));
        Modified {
            delivery_failed: Some(failed),
            undeliverable_here: None,
            message_annotations: Some(ann),
        }
    };
    let d: AnyDelivery = within(receiver.recv()).await.unwrap();
    within(receiver.modify(&d, modified(false, "x-opt-first", "one")))
        .await
        .unwrap();
    let d: AnyDelivery = within(receiver.recv()).await.unwrap();
    assert_eq!(d.message().header.as_ref().unwrap().delivery_count, 0);
    assert_eq!(
        annotation(d.message(), "x-opt-first"),
        Some(&Value::String("one".into()))
    );
    within(receiver.modify(&d, modified(true, "x-opt-second", "two")))
        .await
        .unwrap();
    let d: AnyDelivery = within(receiver.recv()).await.unwrap();
    assert_eq!(d.message().header.as_ref().unwrap().delivery_count, 1);
    assert_eq!(
        annotation(d.message(), "x-opt-first"),
        Some(&Value::String("one".into()))
    );
    assert_eq!(
        annotation(d.message(), "x-opt-second"),
        Some(&Value::String("two".into()))
    );
    within(receiver.accept(&d)).await.unwrap();
    within(receiver.close()).await.unwrap();
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
}
