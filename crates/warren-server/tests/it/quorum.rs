//! Quorum queues on a single node (issue 17), with lapin: the declare's
//! rules, publishes confirmed once their entry is committed (on disk),
//! consumers served in order within their prefetch, acks, requeues with
//! x-delivery-count, x-delivery-limit dead-lettering, the queue's
//! messages surviving a restart (from the Raft log and a checkpoint), and
//! a deep backlog paged to the queue's segments.

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

use crate::common::*;

fn quorum() -> FieldTable {
    table(&[("x-queue-type", s("quorum"))])
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

pub(crate) async fn declare_quorum(ch: &Channel, name: &str, mut args: FieldTable) {
    args.insert("x-queue-type".into(), s("quorum"));
    within(ch.queue_declare(name.into(), durable(), args))
        .await
        .unwrap();
}

/// A channel in confirm mode, a classic queue `dlq`, and quorum queue
/// "qq" with `arg` and its dead letters routed to `dlq`.
async fn dead_lettering(b: &Broker, dlq: &str, arg: (&str, AMQPValue)) -> (lapin::Connection, Channel) {
    let (c, ch) = b.confirm_channel().await;
    declare(&ch, dlq, FieldTable::default()).await;
    declare_quorum(
        &ch,
        "qq",
        table(&[
            arg,
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s(dlq)),
        ]),
    )
    .await;
    (c, ch)
}

/// The next message in dead-letter queue `dlq` (which must have one:
/// `what` says which) and its x-first-death-reason.
async fn dead_letter(ch: &Channel, dlq: &str, what: &str) -> (Vec<u8>, Option<AMQPValue>) {
    if depth(ch, dlq).await == 0 {
        panic!("{what}: {dlq} is empty");
    }
    take_with_reason(ch, dlq).await
}

/// Publish `n` messages "m0".."m{n-1}" with confirms; every one acked.
async fn publish_confirmed(ch: &Channel, queue: &str, n: usize) {
    publish_each(ch, queue, 0..n, |i| format!("m{i}").into_bytes()).await;
}

/// Publish `body(i)` for each i of `ids`, persistent, with confirms;
/// every one acked.
pub(crate) async fn publish_each(
    ch: &Channel,
    queue: &str,
    ids: std::ops::Range<usize>,
    body: impl Fn(usize) -> Vec<u8>,
) {
    let mut confirms = Vec::new();
    for i in ids {
        let c = within(ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            &body(i),
            BasicProperties::default().with_delivery_mode(2),
        ))
        .await
        .unwrap();
        confirms.push(c);
    }
    for c in confirms {
        assert!(within(c).await.unwrap().is_ack());
    }
}

#[tokio::test]
async fn declares_follow_rabbitmqs_rules() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare_quorum(&ch, "qq", FieldTable::default()).await;
    let (status, v) = b.http(reqwest::Method::GET, "/api/queues/%2F/qq", None).await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert_eq!(v["type"], "quorum", "{v}");
    assert_eq!(v["arguments"]["x-queue-type"], "quorum", "{v}");
    let me = v["node"].clone();
    assert_eq!(v["members"], serde_json::json!([me]), "{v}");
    assert_eq!(v["online"], serde_json::json!([me]), "{v}");
    // Redeclared alike: fine; passive: fine.
    declare_quorum(&ch, "qq", FieldTable::default()).await;
    within(ch.queue_declare(
        "qq".into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    for (opts, what) in [
        (QueueDeclareOptions::default(), "non-durable"),
        (
            QueueDeclareOptions {
                durable: true,
                exclusive: true,
                ..Default::default()
            },
            "exclusive-owner",
        ),
        (
            QueueDeclareOptions {
                durable: true,
                auto_delete: true,
                ..Default::default()
            },
            "auto-delete",
        ),
    ] {
        let (_c2, ch2) = b.channel().await;
        let e = within(ch2.queue_declare("bad".into(), opts, quorum()))
            .await
            .unwrap_err();
        let (code, text) = amqp_error(&e);
        assert_eq!(code, 406, "{text}");
        assert!(text.contains(&format!("invalid property '{what}'")), "{text}");
    }
}

#[tokio::test]
async fn confirmed_messages_are_consumed_in_order_within_the_prefetch_and_acked() {
    let b = Broker::start().await;
    let (_c, ch) = b.confirm_channel().await;
    declare_quorum(&ch, "qq", FieldTable::default()).await;
    publish_confirmed(&ch, "qq", 500).await;
    assert_eq!(depth(&ch, "qq").await, 500);

    let (_c2, cch) = b.channel().await;
    within(cch.basic_qos(10, BasicQosOptions::default()))
        .await
        .unwrap();
    let mut consumer = within(cch.basic_consume(
        "qq".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    // Prefetch 10: ten come, then nothing until an ack.
    let mut held = Vec::new();
    for i in 0..10 {
        let d = within(consumer.next()).await.unwrap().unwrap();
        assert_eq!(d.data, format!("m{i}").as_bytes());
        assert!(!d.redelivered);
        held.push(d);
    }
    nothing_within(300, consumer.next()).await;
    for d in held {
        within(d.ack(BasicAckOptions::default())).await.unwrap();
    }
    for i in 10..500 {
        let d = within(consumer.next()).await.unwrap().unwrap();
        assert_eq!(d.data, format!("m{i}").as_bytes());
        within(d.ack(BasicAckOptions::default())).await.unwrap();
    }
    // All acked: the queue is empty.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let q = within(ch.queue_declare(
        "qq".into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    assert_eq!(q.message_count(), 0);
}

#[tokio::test]
async fn requeued_messages_carry_their_delivery_count_and_past_the_limit_are_dead_lettered() {
    let b = Broker::start().await;
    let (_c, ch) = dead_lettering(&b, "dead", ("x-delivery-limit", i(2))).await;
    publish_confirmed(&ch, "qq", 1).await;
    let (_c2, cch) = b.channel().await;
    within(cch.basic_qos(1, BasicQosOptions::default()))
        .await
        .unwrap();
    let mut consumer = within(cch.basic_consume(
        "qq".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    let count = delivery_count;
    let d = within(consumer.next()).await.unwrap().unwrap();
    assert!(!d.redelivered);
    assert_eq!(count(&d), None);
    // basic.nack with requeue is not a failure (RabbitMQ 4.3): back,
    // redelivered, with no count.
    within(d.nack(BasicNackOptions {
        requeue: true,
        ..Default::default()
    }))
    .await
    .unwrap();
    let mut d = within(consumer.next()).await.unwrap().unwrap();
    assert!(d.redelivered);
    assert_eq!(count(&d), None);
    // basic.reject with requeue is: counted, and the third passes the
    // limit of 2.
    for n in 1..=2 {
        within(d.reject(BasicRejectOptions { requeue: true }))
            .await
            .unwrap();
        d = within(consumer.next()).await.unwrap().unwrap();
        assert!(d.redelivered);
        assert_eq!(d.data, b"m0");
        assert_eq!(count(&d), Some(n));
    }
    within(d.reject(BasicRejectOptions { requeue: true }))
        .await
        .unwrap();
    nothing_within(300, consumer.next()).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(depth(&ch, "dead").await, 1);
    let (body, reason) = dead_letter(&ch, "dead", "the dead letter").await;
    assert_eq!(body, b"m0");
    assert_eq!(reason, Some(AMQPValue::LongString("delivery_limit".into())));
}

#[tokio::test]
async fn messages_survive_restarts_with_unacked_ones_back_as_redelivered() {
    let mut b = Broker::start().await;
    {
        let (_c, ch) = b.confirm_channel().await;
        declare_quorum(&ch, "qq", FieldTable::default()).await;
        publish_confirmed(&ch, "qq", 12000).await;
        // A consumer (prefetch 100, acking every 100th with multiple)
        // takes most: past a checkpoint's worth of entries with few left,
        // so the restart installs a checkpoint and replays what came after.
        let (_c2, cch) = b.channel().await;
        within(cch.basic_qos(100, BasicQosOptions::default()))
            .await
            .unwrap();
        let mut first = within(cch.basic_consume(
            "qq".into(),
            "first".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ))
        .await
        .unwrap();
        for i in 0..11000 {
            let d = within(first.next()).await.unwrap().unwrap();
            assert_eq!(d.data, format!("m{i}").as_bytes());
            if i % 100 == 99 {
                within(d.ack(BasicAckOptions { multiple: true })).await.unwrap();
            }
        }
        // It held the next 100 (11000-11099): closing returns them.
        within(cch.close(200, "done".into())).await.unwrap();
        let (_c3, cch) = b.channel().await;
        within(cch.basic_qos(5, BasicQosOptions::default()))
            .await
            .unwrap();
        let mut consumer = within(cch.basic_consume(
            "qq".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ))
        .await
        .unwrap();
        // Two acked, three held (unacked) when the node stops.
        for i in 0..5 {
            let d = within(consumer.next()).await.unwrap().unwrap();
            assert_eq!(d.data, format!("m{}", 11000 + i).as_bytes());
            if i < 2 {
                within(d.ack(BasicAckOptions::default())).await.unwrap();
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    let snaps = std::fs::read_dir(b.data_dir.join("quorum"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "snap")
        })
        .count();
    assert_eq!(snaps, 1, "a checkpoint was written");
    b.restart().await;
    let (_c, ch) = b.channel().await;
    assert_eq!(depth(&ch, "qq").await, 998);
    let mut consumer = within(ch.basic_consume(
        "qq".into(),
        "c".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    for i in 11002..12000 {
        let d = within(consumer.next()).await.unwrap().unwrap();
        assert_eq!(d.data, format!("m{i}").as_bytes(), "message {i}");
        // 11000-11099 were taken before (by the first consumer).
        assert_eq!(d.redelivered, i < 11100, "message {i}");
    }
}

/// A 4 KiB body that names its message.
fn big(i: usize) -> Vec<u8> {
    let mut b = format!("m{i}:").into_bytes();
    b.resize(4096, b'a' + (i % 26) as u8);
    b
}

/// Segment files of the quorum queues' paged bodies under `data_dir`.
fn segments(data_dir: &std::path::Path) -> usize {
    std::fs::read_dir(data_dir.join("quorum"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .filter(|e| e.path().extension().is_some_and(|x| x == "qseg"))
        .count()
}

/// Take `n` messages, checking each is `big(from + k)`, acking each.
async fn take_big(ch: &Channel, queue: &str, from: usize, n: usize) {
    let mut c = within(ch.basic_consume(
        queue.into(),
        format!("take-{from}").as_str().into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    for k in 0..n {
        let d = within(c.next()).await.unwrap().unwrap();
        assert!(
            d.data == big(from + k),
            "message {} (got {:?})",
            from + k,
            &d.data[..12]
        );
        within(d.ack(BasicAckOptions::default())).await.unwrap();
    }
    within(ch.basic_cancel(
        format!("take-{from}").as_str().into(),
        BasicCancelOptions::default(),
    ))
    .await
    .unwrap();
}

async fn publish_big(ch: &Channel, queue: &str, from: usize, n: usize) {
    publish_each(ch, queue, from..from + n, big).await;
}

#[tokio::test]
async fn a_deep_backlog_is_paged_out_and_read_back_across_a_restart() {
    let mut b = Broker::start().await;
    {
        let (_c, ch) = b.confirm_channel().await;
        declare_quorum(&ch, "deep", FieldTable::default()).await;
        // 24 MiB: past the 8 MiB kept in memory.
        publish_big(&ch, "deep", 0, 6000).await;
        assert!(segments(&b.data_dir) > 0, "bodies past the window are paged");
        within(ch.basic_qos(50, BasicQosOptions::default()))
            .await
            .unwrap();
        take_big(&ch, "deep", 0, 1000).await;
    }
    b.restart().await;
    let (_c, ch) = b.confirm_channel().await;
    within(ch.basic_qos(50, BasicQosOptions::default()))
        .await
        .unwrap();
    // The consumer of the run before held up to its prefetch past the
    // 1,000 it acked: they are ready again once the restarted member,
    // leading, has let that consumer go (a Raft round after it is served).
    until_depth(&ch, "deep", 5000).await;
    take_big(&ch, "deep", 1000, 5000).await;
    // Drained; once 12 MiB more has gone through the log, a checkpoint
    // no longer names the emptied segments and they go.
    for round in 0..10 {
        let from = 6000 + round * 300;
        publish_big(&ch, "deep", from, 300).await;
        take_big(&ch, "deep", from, 300).await;
    }
    assert_eq!(segments(&b.data_dir), 0, "emptied segments are deleted");
}

#[tokio::test]
async fn basic_get_takes_from_the_head_and_purge_drops_what_waits() {
    let b = Broker::start().await;
    let (_c, ch) = b.confirm_channel().await;
    declare_quorum(&ch, "qq", FieldTable::default()).await;
    publish_confirmed(&ch, "qq", 5).await;
    let get = |no_ack| {
        let ch = ch.clone();
        async move {
            within(ch.basic_get("qq".into(), BasicGetOptions { no_ack }))
                .await
                .unwrap()
        }
    };
    // No-ack: gone. Then one held, rejected back (requeue), got again.
    let m = get(true).await.expect("m0");
    assert_eq!((m.delivery.data.as_slice(), m.message_count), (&b"m0"[..], 4));
    let m = get(false).await.expect("m1");
    assert_eq!((m.delivery.data.as_slice(), m.message_count), (&b"m1"[..], 3));
    assert!(!m.delivery.redelivered);
    within(m.delivery.reject(BasicRejectOptions { requeue: true }))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let m = get(false).await.expect("m1 again");
    assert_eq!(m.delivery.data, b"m1");
    assert!(m.delivery.redelivered);
    within(m.delivery.ack(BasicAckOptions::default())).await.unwrap();
    // Purge drops the three that wait.
    let n = within(ch.queue_purge("qq".into(), QueuePurgeOptions::default()))
        .await
        .unwrap();
    assert_eq!(n, 3);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(get(true).await.is_none());
}

#[tokio::test]
async fn messages_past_their_ttl_are_dead_lettered_from_the_head() {
    let b = Broker::start().await;
    let (_c, ch) = dead_lettering(&b, "expired", ("x-message-ttl", i(200))).await;
    publish_confirmed(&ch, "qq", 3).await;
    // A per-message expiration shorter than the queue's.
    let c = within(ch.basic_publish(
        "".into(),
        "qq".into(),
        BasicPublishOptions::default(),
        b"short",
        BasicProperties::default().with_expiration("50".into()),
    ))
    .await
    .unwrap();
    assert!(within(c).await.unwrap().is_ack());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while depth(&ch, "expired").await < 4 {
        assert!(std::time::Instant::now() < deadline, "not all expired");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(depth(&ch, "qq").await, 0);
    let (_, reason) = dead_letter(&ch, "expired", "a dead letter").await;
    assert_eq!(reason, Some(AMQPValue::LongString("expired".into())));
}

#[tokio::test]
async fn max_length_drops_the_head_or_refuses_the_publish() {
    let b = Broker::start().await;
    let (_c, ch) = dead_lettering(&b, "dropped", ("x-max-length", i(2))).await;
    publish_confirmed(&ch, "qq", 3).await;
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(depth(&ch, "qq").await, 2);
    let (body, reason) = dead_letter(&ch, "dropped", "the dropped head").await;
    assert_eq!(body, b"m0");
    assert_eq!(reason, Some(AMQPValue::LongString("maxlen".into())));

    declare_quorum(
        &ch,
        "full",
        table(&[("x-max-length", i(2)), ("x-overflow", s("reject-publish"))]),
    )
    .await;
    let mut acks = Vec::new();
    for n in 0..3 {
        let c = within(ch.basic_publish(
            "".into(),
            "full".into(),
            BasicPublishOptions::default(),
            format!("f{n}").as_bytes(),
            BasicProperties::default(),
        ))
        .await
        .unwrap();
        acks.push(within(c).await.unwrap().is_ack());
    }
    assert_eq!(acks, [true, true, false]);
    assert_eq!(depth(&ch, "full").await, 2);
}

#[tokio::test]
async fn an_unused_queue_expires() {
    let b = Broker::start().await;
    let (_c, ch) = b.channel().await;
    declare_quorum(&ch, "qq", table(&[("x-expires", i(300))])).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (status, _) = b.http(reqwest::Method::GET, "/api/queues/%2F/qq", None).await;
        if status == reqwest::StatusCode::NOT_FOUND {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never expired");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_single_active_consumer_gets_everything_until_it_goes() {
    let b = Broker::start().await;
    let (_c, ch) = b.confirm_channel().await;
    declare_quorum(
        &ch,
        "qq",
        table(&[("x-single-active-consumer", AMQPValue::Boolean(true))]),
    )
    .await;
    let consume = |tag: &'static str| {
        let b = &b;
        async move {
            let (c, ch) = b.channel().await;
            let consumer = within(ch.basic_consume(
                "qq".into(),
                tag.into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..Default::default()
                },
                FieldTable::default(),
            ))
            .await
            .unwrap();
            (c, ch, consumer)
        }
    };
    let (_c1, ch1, mut first) = consume("first").await;
    let (_c2, _ch2, mut second) = consume("second").await;
    publish_confirmed(&ch, "qq", 3).await;
    for i in 0..3 {
        let d = within(first.next()).await.unwrap().unwrap();
        assert_eq!(d.data, format!("m{i}").as_bytes());
    }
    nothing_within(300, second.next()).await;
    within(ch1.basic_cancel("first".into(), BasicCancelOptions::default()))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    publish_confirmed(&ch, "qq", 1).await;
    let d = within(second.next()).await.unwrap().unwrap();
    assert_eq!(d.data, b"m0");
}

#[tokio::test]
async fn a_higher_priority_consumer_is_served_first() {
    let b = Broker::start().await;
    let (_c, ch) = b.confirm_channel().await;
    declare_quorum(&ch, "qq", FieldTable::default()).await;
    let mut consumers = Vec::new();
    for (tag, priority) in [("low", 0), ("high", 5)] {
        let (c, cch) = b.channel().await;
        within(cch.basic_qos(10, BasicQosOptions::default()))
            .await
            .unwrap();
        let consumer = within(cch.basic_consume(
            "qq".into(),
            tag.into(),
            BasicConsumeOptions::default(),
            table(&[("x-priority", i(priority))]),
        ))
        .await
        .unwrap();
        consumers.push((c, cch, consumer));
    }
    publish_confirmed(&ch, "qq", 5).await;
    for n in 0..5 {
        let d = within(consumers[1].2.next()).await.unwrap().unwrap();
        assert_eq!(d.data, format!("m{n}").as_bytes());
    }
    nothing_within(300, consumers[0].2.next()).await;
}

/// RabbitMQ's consumer timeout (`consumer_timeout`): a delivery left
/// unacknowledged past it closes its channel with PRECONDITION_FAILED and
/// RabbitMQ 3.10's text, and the message goes back to its queue (marked
/// redelivered); a channel whose deliveries are acked in time stays open.
/// For a quorum queue and a classic one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_held_past_the_consumer_timeout_closes_its_channel() {
    let b = Broker::start_with(|c| c.consumer_timeout = 600).await;
    let (_c, ch) = b.confirm_channel().await;
    declare_quorum(&ch, "slow-qq", FieldTable::default()).await;
    within(ch.queue_declare("slow-cq".into(), durable(), FieldTable::default()))
        .await
        .unwrap();
    for q in ["slow-qq", "slow-cq"] {
        publish_each(&ch, q, 0..2, |i| format!("m{i}").into_bytes()).await;
        let (_c2, consuming) = b.channel().await;
        let mut consumer = within(consuming.basic_consume(
            q.into(),
            "slow".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ))
        .await
        .unwrap();
        // Acked in time: nothing happens.
        let first = within(consumer.next()).await.unwrap().unwrap();
        within(first.ack(BasicAckOptions::default())).await.unwrap();
        let held = within(consumer.next()).await.unwrap().unwrap();
        assert_eq!(held.data, b"m1");
        // lapin ends the consumer with the channel's close reason.
        let text = match within(consumer.next()).await {
            Some(Err(e)) => e.to_string(),
            other => panic!("{q}: the channel stays open: {other:?}"),
        };
        drop(held);
        assert!(
            text.contains(
                "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. \
                 Timeout value used: 600 ms. This timeout value can be configured, \
                 see consumers doc guide to learn more"
            ),
            "{q}: {text}"
        );
        // The message is back (once the channel's return is applied),
        // and says it was delivered before.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        let again = loop {
            let got = within(ch.basic_get(q.into(), BasicGetOptions { no_ack: true }))
                .await
                .unwrap();
            if let Some(m) = got {
                break m;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{q}: the held message is not back"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        assert_eq!(again.delivery.data, b"m1");
        assert!(again.delivery.redelivered, "{q}");
    }
}

/// `x-dead-letter-strategy: at-least-once` (with reject-publish and a
/// dead-letter exchange): a dead letter with nowhere to go is kept in the
/// source queue, not lost (at-most-once drops it), also across a restart,
/// and counts against the source's length limit; once the exchange routes
/// somewhere it arrives there, once, and leaves the source.
#[tokio::test]
async fn dead_letters_at_least_once_wait_in_the_source_until_a_target_has_them() {
    let mut b = Broker::start().await;
    let (_c, ch) = b.confirm_channel().await;
    within(ch.exchange_declare(
        "dlx".into(),
        lapin::ExchangeKind::Fanout,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .unwrap();
    let args = |strategy: &str| {
        table(&[
            ("x-dead-letter-exchange", s("dlx")),
            ("x-dead-letter-strategy", s(strategy)),
            ("x-overflow", s("reject-publish")),
            ("x-max-length", i(4)),
        ])
    };
    declare_quorum(&ch, "src", args("at-least-once")).await;
    declare_quorum(&ch, "lossy", args("at-most-once")).await;
    // An unknown strategy is refused.
    let (_c2, ch2) = b.channel().await;
    let mut bad = args("sometimes");
    bad.insert("x-queue-type".into(), s("quorum"));
    let e = within(ch2.queue_declare("bad".into(), durable(), bad))
        .await
        .unwrap_err();
    assert_eq!(amqp_error(&e).0, 406);

    for q in ["src", "lossy"] {
        publish_confirmed(&ch, q, 3).await;
        for _ in 0..3 {
            let m = within(ch.basic_get(q.into(), BasicGetOptions { no_ack: false }))
                .await
                .unwrap()
                .expect("a message");
            within(m.delivery.reject(BasicRejectOptions { requeue: false }))
                .await
                .unwrap();
        }
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(depth(&ch, "src").await, 0);
    // The API counts them as RabbitMQ 4 does: in messages, and apart.
    let (_, v) = b.http(reqwest::Method::GET, "/api/queues/%2F/src", None).await;
    assert_eq!(
        (v["messages"].as_u64(), v["messages_ready"].as_u64()),
        (Some(3), Some(0)),
        "{v}"
    );
    assert_eq!(v["messages_dlx"], 3, "{v}");
    assert_eq!(v["message_bytes_dlx"], 6, "{v}");
    // The three wait as dead letters and count against max-length 4: one
    // more is taken, the next refused.
    let mut acks = Vec::new();
    for n in 0..2 {
        acks.push(publish_acked(&ch, "src", format!("x{n}").as_bytes()).await);
    }
    assert_eq!(acks, [true, false]);
    let m = within(ch.basic_get("src".into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap()
        .expect("x0");
    assert_eq!(m.delivery.data, b"x0");

    // Kept across a restart.
    b.restart().await;
    let (_c, ch) = b.confirm_channel().await;
    declare(&ch, "dlq", FieldTable::default()).await;
    within(ch.queue_bind(
        "dlq".into(),
        "dlx".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    // Sent again (every few seconds while they go nowhere): the three of
    // "src" arrive; "lossy"'s were dropped when they went nowhere.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while depth(&ch, "dlq").await < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the dead letters never came"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let mut got = Vec::new();
    for _ in 0..3 {
        let (body, reason) = dead_letter(&ch, "dlq", "a dead letter").await;
        assert_eq!(reason, Some(AMQPValue::LongString("rejected".into())));
        got.push(String::from_utf8(body).unwrap());
    }
    got.sort();
    assert_eq!(got, ["m0", "m1", "m2"]);
    // Once each, and the source has room again.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(depth(&ch, "dlq").await, 0);
    publish_confirmed(&ch, "src", 4).await;
}

/// A policy changed after the declare reaches a quorum queue (RabbitMQ's
/// update_config, through the log): a max-length drops the heads at once,
/// reject-publish refuses, and a cleared policy lifts the limit, also
/// across a restart.
#[tokio::test]
async fn a_policy_changed_later_reaches_a_quorum_queue() {
    use reqwest::{Method, StatusCode};
    use serde_json::json;
    let mut b = Broker::start().await;
    let (_c, ch) = b.confirm_channel().await;
    declare_quorum(&ch, "capped", FieldTable::default()).await;
    publish_confirmed(&ch, "capped", 3).await;
    let put =
        |def: serde_json::Value| json!({"pattern": "^capped$", "apply-to": "queues", "definition": def});
    let (status, _) = b
        .http(
            Method::PUT,
            "/api/policies/%2F/cap",
            Some(put(json!({"max-length": 2}))),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while depth(&ch, "capped").await != 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the policy's max-length never applied"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let m = within(ch.basic_get("capped".into(), BasicGetOptions { no_ack: false }))
        .await
        .unwrap()
        .expect("a message");
    assert_eq!(m.delivery.data, b"m1", "the head m0 was dropped");
    within(m.delivery.nack(BasicNackOptions {
        requeue: true,
        ..Default::default()
    }))
    .await
    .unwrap();
    // Reject-publish by policy: the next publish is nacked.
    let (status, _) = b
        .http(
            Method::PUT,
            "/api/policies/%2F/cap",
            Some(put(json!({"max-length": 2, "overflow": "reject-publish"}))),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(!publish_acked(&ch, "capped", b"over").await);
    // Cleared: the limit goes, and stays gone after a restart.
    let (status, _) = b.http(Method::DELETE, "/api/policies/%2F/cap", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    publish_confirmed(&ch, "capped", 2).await;
    assert_eq!(depth(&ch, "capped").await, 4);
    b.restart().await;
    let (_c, ch) = b.confirm_channel().await;
    publish_confirmed(&ch, "capped", 1).await;
    assert_eq!(depth(&ch, "capped").await, 5);
}

/// A queue's own consumer timeout (`x-consumer-timeout`, or a policy's
/// `consumer-timeout`, RabbitMQ 3.12 and later) wins over the broker's:
/// with the broker's at 30 minutes, a queue's 500 ms closes the channel of
/// a consumer holding its delivery, with that value in the text; another
/// channel's delivery of a queue without one is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queues_own_consumer_timeout_wins_over_the_brokers() {
    use reqwest::{Method, StatusCode};
    let b = Broker::start().await;
    let (_c, ch) = b.confirm_channel().await;
    declare_quorum(&ch, "quick", table(&[("x-consumer-timeout", i(500))])).await;
    declare_quorum(&ch, "by-policy", FieldTable::default()).await;
    declare_quorum(&ch, "patient", FieldTable::default()).await;
    let (status, _) = b
        .http(
            Method::PUT,
            "/api/policies/%2F/ct",
            Some(serde_json::json!({"pattern": "^by-policy$", "apply-to": "queues",
                                    "definition": {"consumer-timeout": 700}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    for q in ["quick", "by-policy", "patient"] {
        publish_each(&ch, q, 0..1, |i| format!("m{i}").into_bytes()).await;
    }
    let (_c3, patient_ch) = b.channel().await;
    let mut patient = within(patient_ch.basic_consume(
        "patient".into(),
        "p".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .unwrap();
    let _held_long = within(patient.next()).await.unwrap().unwrap();
    for (q, ms) in [("quick", 500), ("by-policy", 700)] {
        let (_c2, consuming) = b.channel().await;
        let text = held_until_closed(&consuming, q).await;
        assert!(
            text.contains(&format!("Timeout value used: {ms} ms")),
            "{q}: {text}"
        );
    }
    // The queue without one keeps its consumer's delivery.
    assert!(patient_ch.status().connected(), "the patient channel was closed");
    nothing_within(300, patient.next()).await;
}
