//! The everyday path with lapin: declare, publish, consume, ack, get,
//! confirms, returns, and message properties surviving the trip.

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;

use crate::common::*;

#[tokio::test]
async fn publish_consume_ack_roundtrip() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    let q = declare(&ch, "", FieldTable::default()).await;
    assert!(q.name().as_str().starts_with("amq.gen-"), "{}", q.name());
    assert_eq!(q.name().as_str().len(), "amq.gen-".len() + 22);
    let mut consumer = within(ch.basic_consume(
        q.name().clone(),
        "".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    assert!(consumer.tag().as_str().starts_with("amq.ctag-"));
    let mut headers = FieldTable::default();
    headers.insert("k".into(), AMQPValue::LongString("v".into()));
    let props = BasicProperties::default()
        .with_content_type("text/plain".into())
        .with_correlation_id("c1".into())
        .with_priority(3)
        .with_headers(headers);
    for n in 0..100u32 {
        within(ch.basic_publish(
            "".into(),
            q.name().clone(),
            BasicPublishOptions::default(),
            &n.to_be_bytes(),
            props.clone(),
        ))
        .await
        .unwrap();
    }
    for n in 0..100u32 {
        let d = within(consumer.next()).await.unwrap().unwrap();
        assert_eq!(d.data, n.to_be_bytes(), "in order");
        assert_eq!(d.delivery_tag, n as u64 + 1);
        assert!(!d.redelivered);
        assert_eq!(d.routing_key.as_str(), q.name().as_str());
        assert_eq!(d.properties.correlation_id().as_ref().unwrap().as_str(), "c1");
        assert_eq!(*d.properties.priority(), Some(3));
        let h = d.properties.headers().as_ref().unwrap();
        assert_eq!(h.inner().get("k"), Some(&AMQPValue::LongString("v".into())));
        d.ack(BasicAckOptions::default()).await.unwrap();
    }
    let q2 = within(ch.queue_declare(
        q.name().clone(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    assert_eq!(q2.message_count(), 0);
    assert_eq!(q2.consumer_count(), 1);
}

#[tokio::test]
async fn large_message_spans_frames() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "big", FieldTable::default()).await;
    let body: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    within(ch.basic_publish(
        "".into(),
        "big".into(),
        BasicPublishOptions::default(),
        &body,
        BasicProperties::default(),
    ))
    .await
    .unwrap();
    let got = within(ch.basic_get("big".into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.delivery.data.len(), body.len());
    assert!(got.delivery.data == body);
    assert_eq!(got.message_count, 0);
}

#[tokio::test]
async fn basic_get_counts_and_redelivery() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "g", FieldTable::default()).await;
    for m in [b"a", b"b", b"c"] {
        ch.basic_publish(
            "".into(),
            "g".into(),
            BasicPublishOptions::default(),
            m,
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    let a = within(ch.basic_get("g".into(), BasicGetOptions::default()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a.delivery.data, b"a");
    assert_eq!(a.message_count, 2, "ready messages left");
    // Requeued messages go back to their original position.
    a.delivery
        .nack(BasicNackOptions {
            requeue: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let again = within(ch.basic_get("g".into(), BasicGetOptions::default()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.delivery.data, b"a");
    assert!(again.delivery.redelivered);
    again.delivery.ack(BasicAckOptions::default()).await.unwrap();
    assert!(within(ch.basic_get("g".into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
        .is_some());
    assert!(within(ch.basic_get("g".into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
        .is_some());
    assert!(within(ch.basic_get("g".into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn confirms_ack_and_mandatory_return() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    declare(&ch, "cq", FieldTable::default()).await;
    let ok = within(async {
        ch.basic_publish(
            "".into(),
            "cq".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
    })
    .await
    .unwrap();
    assert!(ok.is_ack());
    let ret = within(async {
        ch.basic_publish(
            "".into(),
            "nowhere".into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            b"lost",
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
    })
    .await
    .unwrap();
    assert!(ret.is_ack(), "unroutable messages are still confirmed");
    let returned = ret.take_message().expect("basic.return before the ack");
    assert_eq!(returned.reply_code, 312);
    assert_eq!(returned.reply_text.as_str(), "NO_ROUTE");
    assert_eq!(returned.delivery.data, b"lost");
    // Many publishes in flight: every one confirmed.
    let mut pending = Vec::new();
    for _ in 0..500 {
        pending.push(
            ch.basic_publish(
                "".into(),
                "cq".into(),
                BasicPublishOptions::default(),
                b"y",
                BasicProperties::default(),
            )
            .await
            .unwrap(),
        );
    }
    for p in pending {
        assert!(within(p).await.unwrap().is_ack());
    }
}

#[tokio::test]
async fn transactions_commit_and_rollback() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "tx", FieldTable::default()).await;
    within(ch.tx_select()).await.unwrap();
    ch.basic_publish(
        "".into(),
        "tx".into(),
        BasicPublishOptions::default(),
        b"1",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    let (_c2, other) = b.channel().await;
    let q = declare(&other, "tx", FieldTable::default()).await;
    assert_eq!(q.message_count(), 0, "not visible before commit");
    within(ch.tx_commit()).await.unwrap();
    let q = declare(&other, "tx", FieldTable::default()).await;
    assert_eq!(q.message_count(), 1);
    ch.basic_publish(
        "".into(),
        "tx".into(),
        BasicPublishOptions::default(),
        b"2",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    within(ch.tx_rollback()).await.unwrap();
    let q = declare(&other, "tx", FieldTable::default()).await;
    assert_eq!(q.message_count(), 1, "rolled back publish is gone");
    // Acks inside a transaction apply on commit only: a rolled-back ack
    // leaves the message unacked, so closing the channel requeues it.
    let (_c3, txch) = b.channel().await;
    within(txch.tx_select()).await.unwrap();
    let m = within(txch.basic_get("tx".into(), BasicGetOptions::default()))
        .await
        .unwrap()
        .unwrap();
    m.delivery.ack(BasicAckOptions::default()).await.unwrap();
    within(txch.tx_rollback()).await.unwrap();
    within(txch.close(200, "bye".into())).await.unwrap();
    let q = declare(&other, "tx", FieldTable::default()).await;
    assert_eq!(q.message_count(), 1, "rolled-back ack: requeued on close");
    let (_c4, txch) = b.channel().await;
    within(txch.tx_select()).await.unwrap();
    let m = within(txch.basic_get("tx".into(), BasicGetOptions::default()))
        .await
        .unwrap()
        .unwrap();
    m.delivery.ack(BasicAckOptions::default()).await.unwrap();
    within(txch.tx_commit()).await.unwrap();
    within(txch.close(200, "bye".into())).await.unwrap();
    let q = declare(&other, "tx", FieldTable::default()).await;
    assert_eq!(q.message_count(), 0, "committed ack is final");
}
