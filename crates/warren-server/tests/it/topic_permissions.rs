//! Topic permissions as RabbitMQ 3.10 answered the same steps: set over
//! the HTTP API (201 for a user's first in a vhost, 204 after; 400 for a
//! missing field, a bad regex or an unknown user), listed by pair, user
//! and vhost, kept in definitions and across a restart; enforced on the
//! routing key of 0-9-1 (lapin), AMQP 1.0 (fe2o3-amqp) and HTTP publishes
//! to topic exchanges and on the binding key of binds and unbinds from
//! them, with `{username}` and `{client_id}` filled in.

use fe2o3_amqp::{Connection as AmqpConnection, Sender, Session};
use lapin::options::{BasicPublishOptions, ExchangeBindOptions, QueueBindOptions};
use lapin::types::{AMQPValue, FieldArray};
use lapin::{BasicProperties, Channel, ExchangeKind};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::common::*;

async fn put(b: &Broker, exchange: &str, write: &str, read: &str) -> StatusCode {
    b.http(
        Method::PUT,
        "/api/topic-permissions/%2F/guest",
        Some(json!({"exchange": exchange, "write": write, "read": read})),
    )
    .await
    .0
}

/// A publish in confirm mode, waiting for its confirm: a refusal closes
/// the channel, and the pending confirm fails with the broker's close
/// (a later method on the channel could race lapin's own closing state).
async fn publish(
    ch: &Channel,
    exchange: &str,
    key: &str,
    props: BasicProperties,
) -> Result<(), lapin::Error> {
    within(ch.confirm_select(Default::default())).await?;
    within(async {
        ch.basic_publish(
            exchange.into(),
            key.into(),
            BasicPublishOptions::default(),
            b"m",
            props,
        )
        .await?
        .await
    })
    .await
    .map(|_| ())
}

fn refused(r: Result<(), lapin::Error>, key: &str, exchange: &str) {
    let e = r.expect_err("refused");
    assert_eq!(
        amqp_error(&e),
        (
            403,
            format!("ACCESS_REFUSED - access to topic '{key}' in exchange '{exchange}' in vhost '/' refused for user 'guest'")
        )
    );
}

#[tokio::test]
async fn the_api_sets_lists_and_removes_them_as_rabbitmq_does() {
    let b = Broker::start().await;
    assert_eq!(put(&b, "amq.topic", "^a", ".*").await, StatusCode::CREATED);
    assert_eq!(put(&b, "amq.topic", "^b", ".*").await, StatusCode::NO_CONTENT);
    assert_eq!(put(&b, "t2", "{username}", "").await, StatusCode::NO_CONTENT);
    let want = json!([
        {"user": "guest", "vhost": "/", "exchange": "amq.topic", "write": "^b", "read": ".*"},
        {"user": "guest", "vhost": "/", "exchange": "t2", "write": "{username}", "read": ""},
    ]);
    for path in [
        "/api/topic-permissions",
        "/api/topic-permissions/%2F/guest",
        "/api/users/guest/topic-permissions",
        "/api/vhosts/%2F/topic-permissions",
    ] {
        assert_eq!(
            b.http(Method::GET, path, None).await,
            (StatusCode::OK, want.clone()),
            "{path}"
        );
    }
    let b = &b;
    let bad = |body| async move {
        b.http(Method::PUT, "/api/topic-permissions/%2F/guest", Some(body))
            .await
    };
    let (s, e) = bad(json!({"write": "a", "read": ".*"})).await;
    assert_eq!(
        (s, e["reason"].as_str()),
        (StatusCode::BAD_REQUEST, Some("[{key_missing,exchange}]"))
    );
    let (s, e) = bad(json!({"exchange": "x", "read": ".*"})).await;
    assert_eq!(
        (s, e["reason"].as_str()),
        (StatusCode::BAD_REQUEST, Some("[{key_missing,write}]"))
    );
    let (s, _) = bad(json!({"exchange": "x", "write": "(", "read": ".*"})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    for path in [
        "/api/topic-permissions/%2F/nobody",
        "/api/topic-permissions/novhost/guest",
    ] {
        let (s, e) = b
            .http(
                Method::PUT,
                path,
                Some(json!({"exchange": "x", "write": "a", "read": "a"})),
            )
            .await;
        assert_eq!(
            (s, e["reason"].as_str()),
            (StatusCode::BAD_REQUEST, Some("vhost_or_user_not_found"))
        );
    }
    // The definitions carry them; an import gives them back.
    let (_, defs) = b.http(Method::GET, "/api/definitions", None).await;
    assert_eq!(defs["topic_permissions"].as_array().map(Vec::len), Some(2));
    assert_eq!(defs["parameters"], json!([]));
    assert!(defs["global_parameters"].is_array());
    // One exchange's (RabbitMQ 4's path), then the rest.
    let one = "/api/topic-permissions/%2F/guest/t2";
    assert_eq!(b.http(Method::DELETE, one, None).await.0, StatusCode::NO_CONTENT);
    let (_, left) = b
        .http(Method::GET, "/api/topic-permissions/%2F/guest", None)
        .await;
    assert_eq!(left, json!([want[0].clone()]));
    assert_eq!(b.http(Method::DELETE, one, None).await.0, StatusCode::NOT_FOUND);
    let (s, _) = b
        .http(Method::DELETE, "/api/topic-permissions/%2F/guest", None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _) = b
        .http(Method::DELETE, "/api/topic-permissions/%2F/guest", None)
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(
        b.http(Method::GET, "/api/topic-permissions/%2F/guest", None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    let (s, _) = b.http(Method::POST, "/api/definitions", Some(defs)).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert_eq!(
        b.http(Method::GET, "/api/topic-permissions", None).await,
        (StatusCode::OK, want)
    );
}

#[tokio::test]
async fn amqp_0_9_1_publishes_and_binds_are_checked_on_topic_exchanges() {
    let mut b = Broker::start().await;
    let (_c, setup) = b.channel().await;
    for (x, kind) in [
        ("tp.direct", ExchangeKind::Direct),
        ("tp.user", ExchangeKind::Topic),
    ] {
        within(setup.exchange_declare(x.into(), kind, Default::default(), Default::default()))
            .await
            .unwrap();
    }
    declare(&setup, "tp.q", Default::default()).await;
    put(&b, "amq.topic", "^b", "^r").await;
    put(&b, "tp.direct", "^b", "^r").await;
    put(&b, "tp.user", "^{username}\\.", "^{client_id}$").await;
    // Permissions are taken at connection open.
    let conn = b.lapin().await;
    let ch = || async { within(conn.create_channel()).await.unwrap() };
    let none = BasicProperties::default;

    publish(&ch().await, "amq.topic", "b.1", none()).await.unwrap();
    refused(
        publish(&ch().await, "amq.topic", "a.1", none()).await,
        "a.1",
        "amq.topic",
    );
    // CC and BCC keys are not checked, nor other kinds of exchange.
    let cc = FieldArray::from(vec![AMQPValue::LongString("a.1".into())]);
    let props = none().with_headers(table(&[("CC", AMQPValue::FieldArray(cc))]));
    publish(&ch().await, "amq.topic", "b.1", props).await.unwrap();
    publish(&ch().await, "tp.direct", "a.1", none()).await.unwrap();
    // {username} is filled in; 0-9-1 has no client id, so {client_id}
    // stays literal text.
    publish(&ch().await, "tp.user", "guest.x", none()).await.unwrap();
    refused(
        publish(&ch().await, "tp.user", "bob.x", none()).await,
        "bob.x",
        "tp.user",
    );

    let bind = |ch: Channel, x: &'static str, key: &'static str| async move {
        within(ch.queue_bind(
            "tp.q".into(),
            x.into(),
            key.into(),
            QueueBindOptions::default(),
            Default::default(),
        ))
        .await
    };
    bind(ch().await, "amq.topic", "r.1").await.unwrap();
    refused(bind(ch().await, "amq.topic", "x.1").await, "x.1", "amq.topic");
    bind(ch().await, "tp.user", "{client_id}").await.unwrap();
    let unbind_ch = ch().await;
    let unbind = within(unbind_ch.queue_unbind(
        "tp.q".into(),
        "amq.topic".into(),
        "x.1".into(),
        Default::default(),
    ));
    refused(unbind.await, "x.1", "amq.topic");
    let e2e_ch = ch().await;
    let e2e = within(e2e_ch.exchange_bind(
        "tp.direct".into(),
        "amq.topic".into(),
        "x.1".into(),
        ExchangeBindOptions::default(),
        Default::default(),
    ));
    refused(e2e.await, "x.1", "amq.topic");

    // The HTTP API's publish and bind are checked too.
    let (s, e) = b
        .http(
            Method::POST,
            "/api/exchanges/%2F/amq.topic/publish",
            Some(
                json!({"routing_key": "a.1", "payload": "p", "payload_encoding": "string", "properties": {}}),
            ),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(
        e["reason"],
        "403 ACCESS_REFUSED - access to topic 'a.1' in exchange 'amq.topic' in vhost '/' refused for user 'guest'"
    );
    let (s, _) = b
        .http(
            Method::POST,
            "/api/bindings/%2F/e/amq.topic/q/tp.q",
            Some(json!({"routing_key": "x.2"})),
        )
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    // Kept across a restart.
    drop(conn);
    b.restart().await;
    let conn = b.lapin().await;
    let ch = within(conn.create_channel()).await.unwrap();
    refused(publish(&ch, "amq.topic", "a.1", none()).await, "a.1", "amq.topic");
}

#[tokio::test]
async fn amqp_1_0_publishes_are_checked_with_the_container_id_filled_in() {
    let b = Broker::start().await;
    put(&b, "amq.topic", "^{client_id}\\.", ".*").await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "tp.in", Default::default()).await;
    within(ch.queue_bind(
        "tp.in".into(),
        "amq.topic".into(),
        "#".into(),
        Default::default(),
        Default::default(),
    ))
    .await
    .unwrap();
    let url = format!("amqp://guest:guest@127.0.0.1:{}", b.port);
    let mut conn = within(AmqpConnection::open("sensor-7", url.as_str()))
        .await
        .unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    let mut ok = within(Sender::attach(
        &mut session,
        "ok",
        "/exchanges/amq.topic/sensor-7.temp",
    ))
    .await
    .unwrap();
    assert!(within(ok.send("21.5")).await.unwrap().is_accepted());
    assert_eq!(depth(&ch, "tp.in").await, 1);
    let mut other = within(Sender::attach(
        &mut session,
        "other",
        "/exchanges/amq.topic/sensor-8.temp",
    ))
    .await
    .unwrap();
    let r = within(other.send("19.0")).await;
    let text = format!("{r:?}");
    assert!(
        r.is_err() && text.contains("access to topic 'sensor-8.temp' in exchange 'amq.topic'"),
        "{text}"
    );
    assert_eq!(depth(&ch, "tp.in").await, 1);
}
