//! Flow control: the memory alarm blocks publishing connections
//! (connection.blocked), never consuming ones, and lifts once queues drain.

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Event};

use crate::common::*;

#[tokio::test]
async fn memory_alarm_blocks_publishers_until_queues_drain() {
    let b = Broker::start_with(|c| c.memory_high_watermark_bytes = 64 * 1024).await;
    let publisher = b.lapin().await;
    let mut events = publisher.events_listener();
    let ch = publisher.create_channel().await.unwrap();
    declare(&ch, "flood", FieldTable::default()).await;
    let body = vec![7u8; 1024];
    // Publish without waiting: once over the watermark the broker stops
    // reading this connection, so the later publishes just sit in buffers.
    let pch = ch.clone();
    let pubs = tokio::spawn(async move {
        for _ in 0..200 {
            if pch
                .basic_publish(
                    "".into(),
                    "flood".into(),
                    BasicPublishOptions::default(),
                    &body,
                    BasicProperties::default(),
                )
                .await
                .is_err()
            {
                break;
            }
        }
    });
    let blocked = within(async {
        while let Some(ev) = events.next().await {
            if let Event::ConnectionBlocked(reason) = ev {
                return reason;
            }
        }
        panic!("events ended");
    })
    .await;
    assert_eq!(blocked.as_str(), "low on memory");

    // A consumer on another connection still drains the queue...
    let (_c2, cons) = b.channel().await;
    let mut drained = 0;
    while drained < 200 {
        match within(cons.basic_get("flood".into(), BasicGetOptions { no_ack: true }))
            .await
            .unwrap()
        {
            Some(_) => drained += 1,
            None => {
                // ...and once memory falls the publisher is unblocked and
                // the rest of its messages arrive.
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    }
    let unblocked = within(async {
        while let Some(ev) = events.next().await {
            if matches!(ev, Event::ConnectionUnblocked) {
                return true;
            }
        }
        false
    })
    .await;
    assert!(unblocked);
    within(pubs).await.unwrap();
}
