//! A publish in confirm mode may wait for its task to write it when the
//! task next waits on a confirm (so a task's publishes leave in one
//! write). These tests hold the other end of that promise: a publish
//! whose task waits on something else, or lets its confirm go unpolled,
//! still reaches the queue promptly. Against the in-process Warren, and
//! RabbitMQ when `WARREN_CLIENT_RABBITMQ_URI` names one.

mod support;

use std::time::Duration;

use bytes::Bytes;
use support::{brokers, unique, within};
use warren_client::amqp091::{
    Channel, Confirmation, Connection, ConsumeOptions, Consumer, Properties, QueueOptions,
};

/// Far more than the writer's fallback (a tick or two of 1 ms) needs,
/// far less than a publish nobody writes would take (forever).
const PROMPTLY: Duration = Duration::from_secs(2);

/// A confirming channel that has published in batches and awaited their
/// confirms (so it defers), its queue, and a consumer of that queue on a
/// connection of its own (whose acks cannot carry the publisher's frames
/// out by the way).
async fn deferring(uri: &str) -> (Connection, Channel, Connection, Consumer, String) {
    let conn = within(Connection::open(uri)).await.unwrap();
    let ch = within(conn.channel()).await.unwrap();
    within(ch.confirm_select()).await.unwrap();
    let q = unique("batching");
    within(ch.queue_declare(&q, QueueOptions::default().auto_delete()))
        .await
        .unwrap();
    let other = within(Connection::open(uri)).await.unwrap();
    let cch = within(other.channel()).await.unwrap();
    let mut consumer = within(cch.consume(&q, ConsumeOptions::default().no_ack()))
        .await
        .unwrap();
    for round in 0..5u8 {
        let mut confirms = Vec::new();
        for i in 0..5u8 {
            let body = Bytes::from(vec![round, i]);
            confirms.push(
                within(ch.publish("", &q, Properties::default(), body))
                    .await
                    .unwrap(),
            );
        }
        for c in confirms {
            assert_eq!(within(c).await.unwrap(), Confirmation::Ack);
        }
    }
    for _ in 0..25 {
        within(consumer.next()).await.expect("a warm-up delivery");
    }
    (conn, ch, other, consumer, q)
}

async fn publishes_held_unpolled_reach_the_queue(uri: &str) {
    let (conn, ch, other, mut consumer, q) = deferring(uri).await;
    let mut held = Vec::new();
    // The first two are late for the writer's fallback (the second turns
    // deferring off); the rest go as any frame does.
    for i in 0..4u8 {
        held.push(
            within(ch.publish("", &q, Properties::default(), Bytes::from(vec![b'h', i])))
                .await
                .unwrap(),
        );
        let d = tokio::time::timeout(PROMPTLY, consumer.next())
            .await
            .unwrap_or_else(|_| panic!("publish {i}, its confirm unpolled, never reached {uri}"))
            .expect("a delivery");
        assert_eq!(&d.body[..], &[b'h', i]);
    }
    for c in held {
        assert_eq!(within(c).await.unwrap(), Confirmation::Ack);
    }
    within(conn.close()).await.unwrap();
    within(other.close()).await.unwrap();
}

#[tokio::test]
async fn publishes_whose_confirms_are_held_unpolled_still_reach_the_queue() {
    let (uris, _warren) = brokers().await;
    for uri in uris {
        publishes_held_unpolled_reach_the_queue(&uri).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_many_threads_too_publishes_held_unpolled_reach_the_queue() {
    let (uris, _warren) = brokers().await;
    for uri in uris {
        publishes_held_unpolled_reach_the_queue(&uri).await;
    }
}

#[tokio::test]
async fn a_publish_whose_confirm_is_let_go_unpolled_reaches_the_queue() {
    let (uris, _warren) = brokers().await;
    for uri in uris {
        let (conn, ch, other, mut consumer, q) = deferring(&uri).await;
        for i in 0..20u8 {
            let confirm = within(ch.publish("", &q, Properties::default(), Bytes::from(vec![b'd', i])))
                .await
                .unwrap();
            drop(confirm);
            let d = tokio::time::timeout(PROMPTLY, consumer.next())
                .await
                .unwrap_or_else(|_| panic!("publish {i}, its confirm dropped, never reached {uri}"))
                .expect("a delivery");
            assert_eq!(&d.body[..], &[b'd', i]);
        }
        within(conn.close()).await.unwrap();
        within(other.close()).await.unwrap();
    }
}
