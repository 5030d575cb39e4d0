//! Consumers through lapin: prefetch (per consumer and channel-wide),
//! consumer priorities, single active consumer, exclusive consumers,
//! requeue on close to the original position, recover, multiple acks, and
//! server-sent basic.cancel when a queue is deleted.

use std::time::Duration;

use futures_lite::StreamExt;
use lapin::message::Delivery;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Consumer};

use crate::common::*;

async fn fill(ch: &Channel, q: &str, n: u32) {
    for k in 0..n {
        within(ch.basic_publish(
            "".into(),
            q.into(),
            BasicPublishOptions::default(),
            &k.to_be_bytes(),
            BasicProperties::default(),
        ))
        .await
        .unwrap();
    }
}

async fn consume(ch: &Channel, q: &str, tag: &str, args: FieldTable) -> Consumer {
    within(ch.basic_consume(q.into(), tag.into(), BasicConsumeOptions::default(), args))
        .await
        .unwrap()
}

async fn next(c: &mut Consumer) -> Delivery {
    within(c.next()).await.expect("stream open").expect("delivery")
}

fn num(d: &Delivery) -> u32 {
    u32::from_be_bytes(d.data[..4].try_into().unwrap())
}

#[tokio::test]
async fn per_consumer_prefetch_is_never_exceeded() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "pf", FieldTable::default()).await;
    fill(&ch, "pf", 20).await;
    within(ch.basic_qos(3, BasicQosOptions::default())).await.unwrap();
    let mut c = consume(&ch, "pf", "c", FieldTable::default()).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(next(&mut c).await);
    }
    nothing_within(200, c.next()).await;
    // one ack lets exactly one more through
    held.remove(0).ack(BasicAckOptions::default()).await.unwrap();
    held.push(next(&mut c).await);
    nothing_within(200, c.next()).await;
    // a multiple ack frees all three
    held.last()
        .unwrap()
        .ack(BasicAckOptions { multiple: true })
        .await
        .unwrap();
    for _ in 0..3 {
        next(&mut c).await;
    }
    nothing_within(200, c.next()).await;
}

#[tokio::test]
async fn global_prefetch_is_shared_by_the_channel() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "g1", FieldTable::default()).await;
    declare(&ch, "g2", FieldTable::default()).await;
    fill(&ch, "g1", 10).await;
    fill(&ch, "g2", 10).await;
    within(ch.basic_qos(4, BasicQosOptions { global: true }))
        .await
        .unwrap();
    let mut c1 = consume(&ch, "g1", "c1", FieldTable::default()).await;
    let mut c2 = consume(&ch, "g2", "c2", FieldTable::default()).await;
    let mut got = 0;
    let mut last = None;
    loop {
        tokio::select! {
            Some(Ok(d)) = c1.next() => { got += 1; last = Some(d); }
            Some(Ok(d)) = c2.next() => { got += 1; last = Some(d); }
            _ = tokio::time::sleep(Duration::from_millis(300)) => break,
        }
    }
    assert_eq!(got, 4, "four unacked across both consumers");
    last.unwrap()
        .ack(BasicAckOptions { multiple: true })
        .await
        .unwrap();
    let mut more = 0;
    loop {
        tokio::select! {
            Some(Ok(_)) = c1.next() => more += 1,
            Some(Ok(_)) = c2.next() => more += 1,
            _ = tokio::time::sleep(Duration::from_millis(300)) => break,
        }
    }
    assert_eq!(more, 4);
}

#[tokio::test]
async fn consumer_priorities_and_round_robin() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "cp", FieldTable::default()).await;
    within(ch.basic_qos(1, BasicQosOptions::default())).await.unwrap();
    let mut low = consume(&ch, "cp", "low", FieldTable::default()).await;
    let mut high = consume(
        &ch,
        "cp",
        "high",
        table(&[("x-priority", AMQPValue::LongInt(10))]),
    )
    .await;
    fill(&ch, "cp", 2).await;
    // The high-priority consumer gets the first; with its prefetch full,
    // the next goes to the low one.
    let h = next(&mut high).await;
    assert_eq!(num(&h), 0);
    let l = next(&mut low).await;
    assert_eq!(num(&l), 1);
    h.ack(BasicAckOptions::default()).await.unwrap();
    l.ack(BasicAckOptions::default()).await.unwrap();

    // equal priorities share round-robin
    declare(&ch, "rr", FieldTable::default()).await;
    let (_c2, ch2) = b.channel().await;
    let mut a = within(ch2.basic_consume(
        "rr".into(),
        "a".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    let mut bb = within(ch2.basic_consume(
        "rr".into(),
        "b".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    fill(&ch, "rr", 4).await;
    let mut to_a = vec![];
    let mut to_b = vec![];
    for _ in 0..4 {
        tokio::select! {
            Some(Ok(d)) = a.next() => to_a.push(num(&d)),
            Some(Ok(d)) = bb.next() => to_b.push(num(&d)),
        }
    }
    assert_eq!(to_a.len(), 2, "{to_a:?} {to_b:?}");
    assert_eq!(to_b.len(), 2);
}

#[tokio::test]
async fn single_active_consumer_hands_over_on_cancel() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(
        &ch,
        "sac",
        table(&[("x-single-active-consumer", AMQPValue::Boolean(true))]),
    )
    .await;
    let (_c2, ch2) = b.channel().await;
    let mut first = consume(&ch, "sac", "first", FieldTable::default()).await;
    let mut second = consume(&ch2, "sac", "second", FieldTable::default()).await;
    fill(&ch, "sac", 3).await;
    for k in 0..3 {
        let d = next(&mut first).await;
        assert_eq!(num(&d), k);
        d.ack(BasicAckOptions::default()).await.unwrap();
    }
    nothing_within(200, second.next()).await;
    within(ch.basic_cancel("first".into(), BasicCancelOptions::default()))
        .await
        .unwrap();
    fill(&ch, "sac", 1).await;
    assert_eq!(num(&next(&mut second).await), 0);
    let q = declare(
        &ch,
        "sac",
        table(&[("x-single-active-consumer", AMQPValue::Boolean(true))]),
    )
    .await;
    assert_eq!(q.consumer_count(), 1);
}

#[tokio::test]
async fn exclusive_consumer_refuses_others() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "ex", FieldTable::default()).await;
    // (lapin cancels a consumer when its handle drops: keep it.)
    let _only = within(ch.basic_consume(
        "ex".into(),
        "only".into(),
        BasicConsumeOptions {
            exclusive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    let (_c2, ch2) = b.channel().await;
    let err = within(ch2.basic_consume(
        "ex".into(),
        "other".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            403,
            "ACCESS_REFUSED - queue 'ex' in vhost '/' in exclusive use".into()
        )
    );
}

#[tokio::test]
async fn requeued_messages_keep_their_position() {
    let b = Broker::start().await;
    let (c1, ch) = b.channel().await;
    declare(&ch, "order", FieldTable::default()).await;
    fill(&ch, "order", 6).await;
    within(ch.basic_qos(3, BasicQosOptions::default())).await.unwrap();
    let mut c = consume(&ch, "order", "c", FieldTable::default()).await;
    for _ in 0..3 {
        next(&mut c).await; // 0,1,2 held unacked
    }
    // closing the connection requeues 0,1,2 ahead of 3,4,5
    c1.close(200, "bye".into()).await.unwrap();
    let (_c2, ch2) = b.channel().await;
    let mut order = vec![];
    let mut redelivered = vec![];
    while let Some(m) = within(ch2.basic_get("order".into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
    {
        order.push(u32::from_be_bytes(m.delivery.data[..4].try_into().unwrap()));
        redelivered.push(m.delivery.redelivered);
    }
    assert_eq!(order, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(redelivered, vec![true, true, true, false, false, false]);
}

#[tokio::test]
async fn recover_requeues_unacked() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "rec", FieldTable::default()).await;
    fill(&ch, "rec", 2).await;
    let mut c = consume(&ch, "rec", "c", FieldTable::default()).await;
    let first = next(&mut c).await;
    assert!(!first.redelivered);
    next(&mut c).await;
    within(ch.basic_recover(BasicRecoverOptions { requeue: true }))
        .await
        .unwrap();
    let again = next(&mut c).await;
    assert!(again.redelivered);
    assert_eq!(num(&again), 0);
    assert!(again.delivery_tag > 2, "new delivery tags after recover");
}

#[tokio::test]
async fn deleting_a_queue_cancels_its_consumers() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "doomed", FieldTable::default()).await;
    let mut c = consume(&ch, "doomed", "c", FieldTable::default()).await;
    let (_c2, ch2) = b.channel().await;
    within(ch2.queue_delete("doomed".into(), QueueDeleteOptions::default()))
        .await
        .unwrap();
    // lapin ends the consumer stream on a server basic.cancel
    let end = within(c.next()).await;
    assert!(end.is_none(), "consumer cancelled by the server: {end:?}");
    assert!(ch.status().connected());
}

#[tokio::test]
async fn no_ack_consumer_gets_everything_in_order() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "fast", FieldTable::default()).await;
    let mut c = within(ch.basic_consume(
        "fast".into(),
        "c".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    let (_c2, pubch) = b.channel().await;
    let n = 20_000u32;
    let publisher = tokio::spawn(async move {
        for k in 0..n {
            pubch
                .basic_publish(
                    "".into(),
                    "fast".into(),
                    BasicPublishOptions::default(),
                    &k.to_be_bytes(),
                    BasicProperties::default(),
                )
                .await
                .unwrap();
        }
        pubch
    });
    for k in 0..n {
        let d = within(c.next()).await.unwrap().unwrap();
        assert_eq!(num(&d), k);
    }
    publisher.await.unwrap();
}
