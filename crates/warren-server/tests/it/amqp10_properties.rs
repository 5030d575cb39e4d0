//! Every field of an AMQP 1.0 message's properties section, and
//! application properties of every simple type, reach a 1.0 consumer as a
//! fe2o3-amqp publisher sent them: through a classic queue (across a
//! restart, from the store) and through a stream. A 0-9-1 consumer (lapin)
//! reads them mapped as RabbitMQ 4's mc_amqpl maps them, the fields 0-9-1
//! has no place for kept in RabbitMQ's `x-amqp-1.0-properties` header.

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::{ApplicationProperties, Body, Message, Properties, Source};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Timestamp, Uuid, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use lapin::options::BasicGetOptions;
use lapin::types::AMQPValue;
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;

use crate::common::*;

type AnyDelivery = fe2o3_amqp::link::delivery::Delivery<Body<Value>>;

async fn open(b: &Broker) -> (ConnectionHandle<()>, SessionHandle<()>) {
    let url = format!("amqp://guest:guest@127.0.0.1:{}", b.port);
    let mut conn = within(Connection::open("props-test", url.as_str()))
        .await
        .unwrap();
    let session = within(Session::begin(&mut conn)).await.unwrap();
    (conn, session)
}

const ID: [u8; 16] = [0x5e; 16];

fn all_properties() -> Properties {
    Properties::builder()
        .message_id(123_456_789u64)
        .user_id(Binary::from(b"guest".to_vec()))
        .to("/queues/elsewhere")
        .subject("greeting")
        .reply_to("/queues/replies")
        .correlation_id(Uuid::from(ID))
        .content_type(Symbol::from("text/plain"))
        .content_encoding(Symbol::from("utf-8"))
        .absolute_expiry_time(Timestamp::from_milliseconds(4_102_444_800_123))
        .creation_time(Timestamp::from_milliseconds(1_764_000_000_456))
        .group_id("g-1".to_string())
        .group_sequence(7)
        .reply_to_group_id("rg-1".to_string())
        .build()
}

fn all_application_properties() -> ApplicationProperties {
    ApplicationProperties::builder()
        .insert("ulong", SimpleValue::Ulong(u64::MAX))
        .insert("uint", SimpleValue::Uint(7))
        .insert("long", SimpleValue::Long(-3))
        .insert("symbol", SimpleValue::Symbol(Symbol::from("sym")))
        .insert("uuid", SimpleValue::Uuid(Uuid::from(ID)))
        .insert(
            "ts",
            SimpleValue::Timestamp(Timestamp::from_milliseconds(1_764_000_000_789)),
        )
        .insert("binary", SimpleValue::Binary(Binary::from(vec![0u8, 1, 2])))
        .insert("text", SimpleValue::String("plain".into()))
        .insert("flag", SimpleValue::Bool(true))
        .build()
}

async fn send(session: &mut SessionHandle<()>, address: &str) {
    let mut sender = within(Sender::attach(session, "s", address)).await.unwrap();
    let m = Message::builder()
        .properties(all_properties())
        .application_properties(all_application_properties())
        .data(b"body".to_vec())
        .build();
    assert!(within(sender.send(m)).await.unwrap().is_accepted());
    within(sender.close()).await.unwrap();
}

async fn receive_and_check(session: &mut SessionHandle<()>, source: Source, what: &str) {
    let mut receiver = within(Receiver::builder().name("r").source(source).attach(session))
        .await
        .unwrap();
    let d: AnyDelivery = within(receiver.recv()).await.unwrap();
    let m = d.message();
    assert_eq!(
        m.properties.as_ref(),
        Some(&all_properties()),
        "{what}: properties"
    );
    assert_eq!(
        m.application_properties.as_ref().map(|a| &a.0),
        Some(&all_application_properties().0),
        "{what}: application properties"
    );
    // RabbitMQ's carrier header is the broker's business, not the reader's.
    let annotations = format!("{:?}", m.message_annotations);
    assert!(!annotations.contains("x-amqp-1.0"), "{what}: {annotations}");
    within(receiver.accept(&d)).await.unwrap();
    within(receiver.close()).await.unwrap();
}

#[tokio::test]
async fn every_property_survives_1_0_to_1_0_and_maps_to_0_9_1() {
    let mut b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    let durable = lapin::options::QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    for q in ["props", "props-091"] {
        within(ch.queue_declare(q.into(), durable, Default::default()))
            .await
            .unwrap();
    }
    within(ch.queue_declare(
        "props-stream".into(),
        durable,
        table(&[("x-queue-type", s("stream"))]),
    ))
    .await
    .unwrap();
    let (mut conn, mut session) = open(&b).await;
    for q in ["props", "props-091", "props-stream"] {
        send(&mut session, &format!("/queues/{q}")).await;
    }

    // 0-9-1 reads the fields it has, as RabbitMQ 4 maps them.
    let got = within(ch.basic_get("props-091".into(), BasicGetOptions::default()))
        .await
        .unwrap()
        .expect("a message");
    let p = &got.properties;
    assert_eq!(p.message_id().as_ref().map(|s| s.as_str()), Some("123456789"));
    assert_eq!(
        p.correlation_id().as_ref().map(|s| s.as_str()),
        Some("urn:uuid:5e5e5e5e-5e5e-5e5e-5e5e-5e5e5e5e5e5e")
    );
    assert_eq!(p.user_id().as_ref().map(|s| s.as_str()), Some("guest"));
    assert_eq!(p.reply_to().as_ref().map(|s| s.as_str()), Some("/queues/replies"));
    assert_eq!(p.content_type().as_ref().map(|s| s.as_str()), Some("text/plain"));
    assert_eq!(p.content_encoding().as_ref().map(|s| s.as_str()), Some("utf-8"));
    assert_eq!(*p.timestamp(), Some(1_764_000_000));
    assert_eq!(p.app_id().as_ref().map(|s| s.as_str()), Some("g-1"));
    let h = p.headers().as_ref().unwrap().inner();
    assert_eq!(h.get("uint"), Some(&AMQPValue::LongUInt(7)));
    assert_eq!(h.get("long"), Some(&AMQPValue::LongLongInt(-3)));
    assert_eq!(
        h.get("binary"),
        Some(&AMQPValue::ByteArray(vec![0u8, 1, 2].into()))
    );
    assert_eq!(h.get("text"), Some(&AMQPValue::LongString("plain".into())));
    assert!(
        matches!(h.get("x-amqp-1.0-properties"), Some(AMQPValue::LongString(_))),
        "subject, to and the rest are kept as RabbitMQ keeps them: {h:?}"
    );

    // 1.0 to 1.0: from the queue after a restart (so from the store), and
    // from the stream.
    drop(session);
    let _ = within(conn.close()).await;
    drop(ch);
    drop(_c);
    b.restart().await;
    let (mut conn, mut session) = open(&b).await;
    receive_and_check(
        &mut session,
        Source::builder().address("/queues/props").build(),
        "queue",
    )
    .await;
    let first = Described {
        descriptor: Descriptor::Name(Symbol::from("rabbitmq:stream-offset-spec")),
        value: Value::String("first".into()),
    };
    let stream = Source::builder()
        .address("/queues/props-stream")
        .add_to_filter("rabbitmq:stream-offset-spec", Some(first))
        .build();
    receive_and_check(&mut session, stream, "stream").await;
    let _ = within(session.end()).await;
    let _ = within(conn.close()).await;
}
