//! Exchange types and routing through real clients: direct, fanout, topic,
//! headers (all/any/-with-x), the predeclared amq.* exchanges,
//! exchange-to-exchange bindings, alternate exchanges, CC/BCC, auto-delete.

use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};

use crate::common::*;

async fn exchange(ch: &Channel, name: &str, kind: ExchangeKind, args: FieldTable) {
    within(ch.exchange_declare(name.into(), kind, ExchangeDeclareOptions::default(), args))
        .await
        .unwrap();
}

async fn queue_bound(ch: &Channel, q: &str, x: &str, key: &str, args: FieldTable) {
    declare(ch, q, FieldTable::default()).await;
    within(ch.queue_bind(q.into(), x.into(), key.into(), QueueBindOptions::default(), args))
        .await
        .unwrap();
}

async fn publish(ch: &Channel, x: &str, key: &str, props: BasicProperties) {
    within(ch.basic_publish(x.into(), key.into(), BasicPublishOptions::default(), b"m", props))
        .await
        .unwrap();
}

#[tokio::test]
async fn topic_routing() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    exchange(&ch, "t", ExchangeKind::Topic, FieldTable::default()).await;
    queue_bound(&ch, "star", "t", "a.*.c", FieldTable::default()).await;
    queue_bound(&ch, "hash", "t", "a.#", FieldTable::default()).await;
    queue_bound(&ch, "all", "t", "#", FieldTable::default()).await;
    queue_bound(&ch, "exact", "t", "a.b", FieldTable::default()).await;
    for key in ["a.b.c", "a", "a.b", "x.y", "a.x.c.d"] {
        publish(&ch, "t", key, BasicProperties::default()).await;
    }
    assert_eq!(depth(&ch, "star").await, 1); // a.b.c
    assert_eq!(depth(&ch, "hash").await, 4); // a.b.c a a.b a.x.c.d
    assert_eq!(depth(&ch, "all").await, 5);
    assert_eq!(depth(&ch, "exact").await, 1);
    // amq.topic is predeclared.
    queue_bound(&ch, "amqt", "amq.topic", "k.*", FieldTable::default()).await;
    publish(&ch, "amq.topic", "k.1", BasicProperties::default()).await;
    assert_eq!(depth(&ch, "amqt").await, 1);
}

/// The empty key and empty words through a real client, as RabbitMQ 3.10
/// routed them: `*` does not take the empty key (it has no words) while
/// `#` and the empty binding do; `a.` ends in an empty word.
#[tokio::test]
async fn topic_empty_keys_and_words() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    exchange(&ch, "te", ExchangeKind::Topic, FieldTable::default()).await;
    for (q, key) in [("star", "*"), ("hash", "#"), ("empty", ""), ("trail", "#.")] {
        queue_bound(&ch, q, "te", key, FieldTable::default()).await;
    }
    for key in ["", "a", "a.", "."] {
        publish(&ch, "te", key, BasicProperties::default()).await;
    }
    assert_eq!(depth(&ch, "star").await, 1); // a
    assert_eq!(depth(&ch, "hash").await, 4);
    assert_eq!(depth(&ch, "empty").await, 1); // the empty key only
    assert_eq!(depth(&ch, "trail").await, 2); // a. and .
}

#[tokio::test]
async fn direct_and_fanout() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    exchange(&ch, "d", ExchangeKind::Direct, FieldTable::default()).await;
    queue_bound(&ch, "d1", "d", "red", FieldTable::default()).await;
    queue_bound(&ch, "d2", "d", "red", FieldTable::default()).await;
    within(ch.queue_bind(
        "d2".into(),
        "d".into(),
        "blue".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    publish(&ch, "d", "red", BasicProperties::default()).await;
    publish(&ch, "d", "blue", BasicProperties::default()).await;
    publish(&ch, "d", "green", BasicProperties::default()).await;
    assert_eq!((depth(&ch, "d1").await, depth(&ch, "d2").await), (1, 2));
    exchange(&ch, "f", ExchangeKind::Fanout, FieldTable::default()).await;
    queue_bound(&ch, "f1", "f", "", FieldTable::default()).await;
    queue_bound(&ch, "f2", "f", "ignored", FieldTable::default()).await;
    publish(&ch, "f", "whatever", BasicProperties::default()).await;
    assert_eq!((depth(&ch, "f1").await, depth(&ch, "f2").await), (1, 1));
    // unbind stops routing
    within(ch.queue_unbind("f1".into(), "f".into(), "".into(), FieldTable::default()))
        .await
        .unwrap();
    publish(&ch, "f", "x", BasicProperties::default()).await;
    assert_eq!((depth(&ch, "f1").await, depth(&ch, "f2").await), (1, 2));
    // unbinding what is not bound is fine
    within(ch.queue_unbind("f1".into(), "f".into(), "".into(), FieldTable::default()))
        .await
        .unwrap();
}

#[tokio::test]
async fn headers_exchange_matching() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    exchange(&ch, "h", ExchangeKind::Headers, FieldTable::default()).await;
    queue_bound(
        &ch,
        "all",
        "h",
        "",
        table(&[("x-match", s("all")), ("fmt", s("pdf")), ("type", s("report"))]),
    )
    .await;
    queue_bound(
        &ch,
        "any",
        "h",
        "",
        table(&[("x-match", s("any")), ("fmt", s("pdf")), ("type", s("log"))]),
    )
    .await;
    queue_bound(
        &ch,
        "withx",
        "h",
        "",
        table(&[("x-match", s("any-with-x")), ("x-tenant", s("t1"))]),
    )
    .await;
    queue_bound(&ch, "num", "h", "", table(&[("n", AMQPValue::LongInt(7))])).await;
    let send = |pairs: Vec<(&str, AMQPValue)>| {
        let mut h = FieldTable::default();
        for (k, v) in pairs {
            h.insert(k.into(), v);
        }
        BasicProperties::default().with_headers(h)
    };
    publish(&ch, "h", "", send(vec![("fmt", s("pdf")), ("type", s("report"))])).await; // all, any
    publish(&ch, "h", "", send(vec![("fmt", s("pdf"))])).await; // any
    publish(&ch, "h", "", send(vec![("x-tenant", s("t1"))])).await; // withx
    publish(&ch, "h", "", send(vec![("n", AMQPValue::LongLongInt(7))])).await; // num: numbers compare by value
    publish(&ch, "h", "", BasicProperties::default()).await; // none
    assert_eq!(depth(&ch, "all").await, 1);
    assert_eq!(depth(&ch, "any").await, 2);
    assert_eq!(depth(&ch, "withx").await, 1);
    assert_eq!(depth(&ch, "num").await, 1);
    // a bad x-match is refused
    let err = within(ch.queue_bind(
        "all".into(),
        "h".into(),
        "".into(),
        QueueBindOptions::default(),
        table(&[("x-match", s("some"))]),
    ))
    .await
    .unwrap_err();
    assert_eq!(amqp_error(&err).0, 406);
}

#[tokio::test]
async fn exchange_to_exchange_and_alternate() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    exchange(&ch, "ae", ExchangeKind::Fanout, FieldTable::default()).await;
    queue_bound(&ch, "unrouted", "ae", "", FieldTable::default()).await;
    exchange(
        &ch,
        "src",
        ExchangeKind::Direct,
        table(&[("alternate-exchange", s("ae"))]),
    )
    .await;
    exchange(&ch, "dst", ExchangeKind::Topic, FieldTable::default()).await;
    within(ch.exchange_bind(
        "dst".into(),
        "src".into(),
        "k".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    // a cycle back to src must not loop
    within(ch.exchange_bind(
        "src".into(),
        "dst".into(),
        "#".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    queue_bound(&ch, "viae2e", "dst", "#", FieldTable::default()).await;
    publish(&ch, "src", "k", BasicProperties::default()).await;
    publish(&ch, "src", "other", BasicProperties::default()).await;
    assert_eq!(depth(&ch, "viae2e").await, 1);
    assert_eq!(depth(&ch, "unrouted").await, 1);
    // mandatory is satisfied by the alternate exchange: no return
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    let c = within(async {
        ch.basic_publish(
            "src".into(),
            "zzz".into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            b"m",
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
    })
    .await
    .unwrap();
    assert!(c.take_message().is_none());
    assert_eq!(depth(&ch, "unrouted").await, 2);
    within(ch.exchange_unbind(
        "dst".into(),
        "src".into(),
        "k".into(),
        ExchangeUnbindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    publish(&ch, "src", "k", BasicProperties::default()).await;
    assert_eq!(depth(&ch, "viae2e").await, 1);
    assert_eq!(depth(&ch, "unrouted").await, 3);
}

#[tokio::test]
async fn cc_and_bcc_route_to_extra_keys() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    exchange(&ch, "d", ExchangeKind::Direct, FieldTable::default()).await;
    for k in ["main", "cc", "bcc"] {
        queue_bound(&ch, k, "d", k, FieldTable::default()).await;
    }
    let mut h = FieldTable::default();
    h.insert("CC".into(), AMQPValue::FieldArray(vec![s("cc")].into()));
    h.insert("BCC".into(), AMQPValue::FieldArray(vec![s("bcc")].into()));
    publish(&ch, "d", "main", BasicProperties::default().with_headers(h)).await;
    for k in ["main", "cc", "bcc"] {
        let m = within(ch.basic_get(k.into(), BasicGetOptions { no_ack: true }))
            .await
            .unwrap()
            .expect(k);
        let h = m.delivery.properties.headers().clone().unwrap();
        assert!(h.inner().contains_key("CC"), "CC stays visible");
        assert!(!h.inner().contains_key("BCC"), "BCC is removed");
    }
}

#[tokio::test]
async fn auto_delete_exchange_and_delete_rules() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    within(ch.exchange_declare(
        "ad".into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions {
            auto_delete: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    queue_bound(&ch, "adq", "ad", "", FieldTable::default()).await;
    within(ch.queue_unbind("adq".into(), "ad".into(), "".into(), FieldTable::default()))
        .await
        .unwrap();
    let err = within(ch.exchange_declare(
        "ad".into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap_err();
    assert_eq!(
        amqp_error(&err).0,
        404,
        "auto-delete exchange went with its last binding"
    );

    let (_c, ch) = b.channel().await;
    exchange(&ch, "used", ExchangeKind::Direct, FieldTable::default()).await;
    queue_bound(&ch, "uq", "used", "k", FieldTable::default()).await;
    let err = within(ch.exchange_delete(
        "used".into(),
        ExchangeDeleteOptions {
            if_unused: true,
            ..Default::default()
        },
    ))
    .await
    .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            406,
            "PRECONDITION_FAILED - exchange 'used' in vhost '/' in use".into()
        )
    );
    let (_c, ch) = b.channel().await;
    within(ch.exchange_delete("used".into(), ExchangeDeleteOptions::default()))
        .await
        .unwrap();
    within(ch.exchange_delete("used".into(), ExchangeDeleteOptions::default()))
        .await
        .unwrap(); // idempotent
    let err = within(ch.exchange_delete("amq.direct".into(), ExchangeDeleteOptions::default()))
        .await
        .unwrap_err();
    assert_eq!(amqp_error(&err).0, 403);
}

/// RabbitMQ 4.0's `x-local-random`: each message to exactly one bound
/// queue, at random; bindings are classic queues with an empty key.
#[tokio::test]
async fn local_random_exchange_picks_one_queue_per_message() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    let kind = || ExchangeKind::Custom("x-local-random".into());
    exchange(&ch, "lr", kind(), FieldTable::default()).await;
    for q in ["lr1", "lr2", "lr3"] {
        queue_bound(&ch, q, "lr", "", FieldTable::default()).await;
    }
    for _ in 0..60 {
        publish(&ch, "lr", "any-key", BasicProperties::default()).await;
    }
    let depths = [
        depth(&ch, "lr1").await,
        depth(&ch, "lr2").await,
        depth(&ch, "lr3").await,
    ];
    assert_eq!(depths.iter().sum::<u32>(), 60, "{depths:?}");
    assert!(
        depths.iter().all(|d| *d > 0),
        "every queue is picked in time: {depths:?}"
    );
    // Redeclaring with the same type is fine; the API shows the type.
    exchange(&ch, "lr", kind(), FieldTable::default()).await;
    let (_, x) = b.http(reqwest::Method::GET, "/api/exchanges/%2F/lr", None).await;
    assert_eq!(x["type"], "x-local-random");

    // A key is refused, and so is a stream.
    declare(&ch, "lr-keyed", FieldTable::default()).await;
    let e = within(ch.queue_bind(
        "lr-keyed".into(),
        "lr".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap_err();
    // RabbitMQ 4's texts (rabbit_exchange_type_local_random).
    assert_eq!(
        amqp_error(&e),
        (
            406,
            "PRECONDITION_FAILED - Non empty binding 'k' key not permitted".into()
        )
    );
    let (_c2, ch) = b.channel().await;
    within(ch.queue_declare(
        "lr-stream".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        table(&[("x-queue-type", s("stream"))]),
    ))
    .await
    .unwrap();
    let e = within(ch.queue_bind(
        "lr-stream".into(),
        "lr".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap_err();
    assert_eq!(
        amqp_error(&e),
        (
            406,
            "PRECONDITION_FAILED - Queue type rabbit_stream_queue not valid for this exchange type".into()
        )
    );
}
