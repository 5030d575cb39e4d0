//! Classic queue behaviour through lapin: TTLs, x-expires, length limits
//! with each overflow mode, dead-lettering with x-death, priorities,
//! auto-delete, purge and delete's conditions.

use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};

use crate::common::*;

async fn publish(ch: &Channel, q: &str, body: &[u8], props: BasicProperties) {
    within(ch.basic_publish("".into(), q.into(), BasicPublishOptions::default(), body, props))
        .await
        .unwrap();
}

async fn get_body(ch: &Channel, q: &str) -> Option<Vec<u8>> {
    within(ch.basic_get(q.into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
        .map(|m| m.delivery.data)
}

/// Wait until `q` holds `n` ready messages.
async fn wait_depth(ch: &Channel, q: &str, n: u32) {
    within(async {
        while depth(ch, q).await != n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

fn death(props: &BasicProperties) -> Vec<FieldTable> {
    let h = props.headers().clone().expect("headers");
    match h.inner().get("x-death") {
        Some(AMQPValue::FieldArray(a)) => a
            .as_slice()
            .iter()
            .map(|v| match v {
                AMQPValue::FieldTable(t) => t.clone(),
                other => panic!("x-death entry {other:?}"),
            })
            .collect(),
        other => panic!("x-death is {other:?}"),
    }
}

fn str_of(t: &FieldTable, k: &str) -> String {
    match t.inner().get(k) {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        other => panic!("{k} is {other:?}"),
    }
}

#[tokio::test]
async fn message_ttl_dead_letters_with_x_death() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    within(ch.exchange_declare(
        "dlx".into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    declare(&ch, "dead", FieldTable::default()).await;
    within(ch.queue_bind(
        "dead".into(),
        "dlx".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    declare(
        &ch,
        "ttl",
        table(&[("x-message-ttl", i(50)), ("x-dead-letter-exchange", s("dlx"))]),
    )
    .await;
    publish(&ch, "ttl", b"old", BasicProperties::default()).await;
    // per-message expiration, shorter than the queue's
    declare(&ch, "pm", table(&[("x-dead-letter-exchange", s("dlx"))])).await;
    publish(
        &ch,
        "pm",
        b"short",
        BasicProperties::default().with_expiration("30".into()),
    )
    .await;
    wait_depth(&ch, "dead", 2).await;
    assert_eq!(depth(&ch, "ttl").await, 0);
    let mut seen = Vec::new();
    for _ in 0..2 {
        let m = within(ch.basic_get("dead".into(), BasicGetOptions { no_ack: true }))
            .await
            .unwrap()
            .unwrap();
        let d = death(&m.delivery.properties);
        assert_eq!(d.len(), 1);
        assert_eq!(str_of(&d[0], "reason"), "expired");
        assert_eq!(d[0].inner().get("count"), Some(&AMQPValue::LongLongInt(1)));
        assert_eq!(str_of(&d[0], "exchange"), "");
        assert!(m.delivery.properties.expiration().is_none(), "expiration removed");
        if m.delivery.data == b"short" {
            assert_eq!(str_of(&d[0], "original-expiration"), "30");
        }
        let h = m.delivery.properties.headers().clone().unwrap();
        assert!(h.inner().contains_key("x-first-death-queue"));
        seen.push(str_of(&d[0], "queue"));
    }
    seen.sort();
    assert_eq!(seen, vec!["pm", "ttl"]);
}

#[tokio::test]
async fn ttl_zero_delivers_only_to_waiting_consumers() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "z", table(&[("x-message-ttl", i(0))])).await;
    publish(&ch, "z", b"gone", BasicProperties::default()).await;
    assert_eq!(depth(&ch, "z").await, 0);
    let mut consumer = within(ch.basic_consume(
        "z".into(),
        "c".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    publish(&ch, "z", b"kept", BasicProperties::default()).await;
    let d = within(consumer.next()).await.unwrap().unwrap();
    assert_eq!(d.data, b"kept");
}

#[tokio::test]
async fn rejected_messages_dead_letter_with_routing_key_override() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    within(ch.exchange_declare(
        "dlx".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    declare(&ch, "parked", FieldTable::default()).await;
    within(ch.queue_bind(
        "parked".into(),
        "dlx".into(),
        "park".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    declare(
        &ch,
        "work",
        table(&[
            ("x-dead-letter-exchange", s("dlx")),
            ("x-dead-letter-routing-key", s("park")),
        ]),
    )
    .await;
    publish(&ch, "work", b"bad", BasicProperties::default()).await;
    let m = within(ch.basic_get("work".into(), BasicGetOptions::default()))
        .await
        .unwrap()
        .unwrap();
    m.delivery
        .reject(BasicRejectOptions { requeue: false })
        .await
        .unwrap();
    wait_depth(&ch, "parked", 1).await;
    let m = within(ch.basic_get("parked".into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.delivery.routing_key.as_str(), "park");
    assert_eq!(m.delivery.exchange.as_str(), "dlx");
    let d = death(&m.delivery.properties);
    assert_eq!(str_of(&d[0], "reason"), "rejected");
    assert_eq!(str_of(&d[0], "queue"), "work");
    // nack without requeue does the same; with requeue it comes back
    publish(&ch, "work", b"again", BasicProperties::default()).await;
    let m = within(ch.basic_get("work".into(), BasicGetOptions::default()))
        .await
        .unwrap()
        .unwrap();
    m.delivery
        .nack(BasicNackOptions {
            requeue: true,
            multiple: false,
        })
        .await
        .unwrap();
    let m = within(ch.basic_get("work".into(), BasicGetOptions::default()))
        .await
        .unwrap()
        .unwrap();
    assert!(m.delivery.redelivered);
    m.delivery
        .nack(BasicNackOptions {
            requeue: false,
            multiple: false,
        })
        .await
        .unwrap();
    wait_depth(&ch, "parked", 1).await;
}

#[tokio::test]
async fn max_length_drop_head_dead_letters_maxlen() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "overflowed", FieldTable::default()).await;
    declare(
        &ch,
        "ml",
        table(&[
            ("x-max-length", i(2)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("overflowed")),
        ]),
    )
    .await;
    for n in [b"1", b"2", b"3"] {
        publish(&ch, "ml", n, BasicProperties::default()).await;
    }
    assert_eq!(depth(&ch, "ml").await, 2);
    assert_eq!(get_body(&ch, "ml").await.unwrap(), b"2", "the oldest was dropped");
    let m = within(ch.basic_get("overflowed".into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.delivery.data, b"1");
    assert_eq!(str_of(&death(&m.delivery.properties)[0], "reason"), "maxlen");
    // x-max-length-bytes counts body bytes
    declare(&ch, "mlb", table(&[("x-max-length-bytes", i(10))])).await;
    publish(&ch, "mlb", b"123456", BasicProperties::default()).await;
    publish(&ch, "mlb", b"7890ab", BasicProperties::default()).await;
    assert_eq!(depth(&ch, "mlb").await, 1);
    assert_eq!(get_body(&ch, "mlb").await.unwrap(), b"7890ab");
}

#[tokio::test]
async fn max_length_reject_publish_nacks() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    declare(
        &ch,
        "rj",
        table(&[("x-max-length", i(1)), ("x-overflow", s("reject-publish"))]),
    )
    .await;
    let confirm = |body: &'static [u8]| {
        let ch = ch.clone();
        async move {
            within(async {
                ch.basic_publish(
                    "".into(),
                    "rj".into(),
                    BasicPublishOptions::default(),
                    body,
                    BasicProperties::default(),
                )
                .await
                .unwrap()
                .await
                .unwrap()
            })
            .await
        }
    };
    assert!(confirm(b"a").await.is_ack());
    assert!(confirm(b"b").await.is_nack());
    assert_eq!(get_body(&ch, "rj").await.unwrap(), b"a");
    assert!(confirm(b"c").await.is_ack());

    // reject-publish-dlx also dead-letters the refused message
    declare(&ch, "refused", FieldTable::default()).await;
    declare(
        &ch,
        "rjd",
        table(&[
            ("x-max-length", i(0)),
            ("x-overflow", s("reject-publish-dlx")),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("refused")),
        ]),
    )
    .await;
    let c = within(async {
        ch.basic_publish(
            "".into(),
            "rjd".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap()
    })
    .await;
    assert!(c.is_nack());
    wait_depth(&ch, "refused", 1).await;
}

#[tokio::test]
async fn priority_queue_delivers_highest_first() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(
        &ch,
        "prio",
        table(&[("x-max-priority", AMQPValue::ShortShortUInt(10))]),
    )
    .await;
    for (body, p) in [(b"low", 1u8), (b"top", 9), (b"mid", 5), (b"max", 200)] {
        publish(&ch, "prio", body, BasicProperties::default().with_priority(p)).await;
    }
    publish(&ch, "prio", b"none", BasicProperties::default()).await;
    let mut order = Vec::new();
    while let Some(b) = get_body(&ch, "prio").await {
        order.push(String::from_utf8(b).unwrap());
    }
    // priorities above x-max-priority count as the maximum
    assert_eq!(order, vec!["max", "top", "mid", "low", "none"]);
}

#[tokio::test]
async fn auto_delete_queue_goes_with_its_last_consumer() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare(
        "ad".into(),
        QueueDeclareOptions {
            auto_delete: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    let c1 = within(ch.basic_consume(
        "ad".into(),
        "c1".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    let c2 = within(ch.basic_consume(
        "ad".into(),
        "c2".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    within(ch.basic_cancel(c1.tag(), BasicCancelOptions::default()))
        .await
        .unwrap();
    assert_eq!(depth(&ch, "ad").await, 0, "still there with one consumer");
    within(ch.basic_cancel(c2.tag(), BasicCancelOptions::default()))
        .await
        .unwrap();
    let err = within(ch.queue_declare(
        "ad".into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap_err();
    assert_eq!(amqp_error(&err).0, 404);
}

#[tokio::test]
async fn x_expires_deletes_an_unused_queue() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "exp", table(&[("x-expires", i(100))])).await;
    declare(&ch, "exp-used", table(&[("x-expires", i(100))])).await;
    let _c = within(ch.basic_consume(
        "exp-used".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (_c2, ch2) = b.channel().await;
    let err = within(ch2.queue_declare(
        "exp".into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap_err();
    assert_eq!(amqp_error(&err).0, 404);
    assert_eq!(
        depth(&ch, "exp-used").await,
        0,
        "a queue with a consumer does not expire"
    );
}

#[tokio::test]
async fn purge_and_conditional_delete() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "p", FieldTable::default()).await;
    for _ in 0..5 {
        publish(&ch, "p", b"x", BasicProperties::default()).await;
    }
    assert_eq!(
        within(ch.queue_purge("p".into(), QueuePurgeOptions::default()))
            .await
            .unwrap(),
        5
    );
    publish(&ch, "p", b"x", BasicProperties::default()).await;
    let err = within(ch.queue_delete(
        "p".into(),
        QueueDeleteOptions {
            if_empty: true,
            ..Default::default()
        },
    ))
    .await
    .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            406,
            "PRECONDITION_FAILED - queue 'p' in vhost '/' not empty".into()
        )
    );
    let (_c, ch) = b.channel().await;
    let _consumer = within(ch.basic_consume(
        "p".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    let (_c2, ch2) = b.channel().await;
    let err = within(ch2.queue_delete(
        "p".into(),
        QueueDeleteOptions {
            if_unused: true,
            ..Default::default()
        },
    ))
    .await
    .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (406, "PRECONDITION_FAILED - queue 'p' in vhost '/' in use".into())
    );
    let (_c3, ch3) = b.channel().await;
    assert_eq!(
        within(ch3.queue_delete("p".into(), QueueDeleteOptions::default()))
            .await
            .unwrap(),
        0,
        "the message is unacked, not ready"
    );
    assert_eq!(
        within(ch3.queue_delete("p".into(), QueueDeleteOptions::default()))
            .await
            .unwrap(),
        0,
        "idempotent"
    );
}
