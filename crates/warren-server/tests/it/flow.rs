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

/// Publish `n` 1 KB messages to `queue` without waiting (a blocked
/// connection just stops reading them).
fn flood(ch: &lapin::Channel, queue: &'static str, n: usize) -> tokio::task::JoinHandle<()> {
    let ch = ch.clone();
    tokio::spawn(async move {
        let body = vec![7u8; 1024];
        for _ in 0..n {
            if ch
                .basic_publish(
                    "".into(),
                    queue.into(),
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
    })
}

async fn next_blocked(events: &mut (impl futures_lite::Stream<Item = Event> + Unpin)) -> String {
    within(async {
        while let Some(ev) = events.next().await {
            if let Event::ConnectionBlocked(reason) = ev {
                return reason.to_string();
            }
        }
        panic!("events ended");
    })
    .await
}

async fn next_unblocked(events: &mut (impl futures_lite::Stream<Item = Event> + Unpin)) {
    within(async {
        while let Some(ev) = events.next().await {
            if matches!(ev, Event::ConnectionUnblocked) {
                return;
            }
        }
        panic!("events ended");
    })
    .await
}

#[tokio::test]
async fn raising_the_memory_watermark_lets_blocked_publishers_go_on() {
    let b = Broker::start_with(|c| c.memory_high_watermark_bytes = 64 * 1024).await;
    let publisher = b.lapin().await;
    let mut events = publisher.events_listener();
    let ch = publisher.create_channel().await.unwrap();
    declare(&ch, "mem", FieldTable::default()).await;
    let pubs = flood(&ch, "mem", 300);
    assert_eq!(next_blocked(&mut events).await, "low on memory");

    // Blocked: the count stops growing short of 300...
    let (_c2, other) = b.channel().await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let stuck = depth(&other, "mem").await;
    assert!(stuck < 300, "{stuck}");
    // ...while a consumer still receives.
    let m = within(other.basic_get("mem".into(), BasicGetOptions { no_ack: true }))
        .await
        .unwrap();
    assert!(m.is_some());

    // rabbitmqctl set_vm_memory_high_watermark, in effect.
    b.running
        .as_ref()
        .unwrap()
        .ctx
        .broker
        .alarms
        .set_memory_limit(1 << 30);
    next_unblocked(&mut events).await;
    within(pubs).await.unwrap();
    within(async {
        while depth(&other, "mem").await < 299 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn the_disk_alarm_blocks_publishers_until_space_is_back() {
    // A limit no disk meets: the alarm is on from the start.
    let b = Broker::start_with(|c| c.disk_free_limit_bytes = u64::MAX / 2).await;
    let publisher = b.lapin().await;
    let mut events = publisher.events_listener();
    let ch = publisher.create_channel().await.unwrap();
    declare(&ch, "disk", FieldTable::default()).await;
    let pubs = flood(&ch, "disk", 50);
    assert_eq!(next_blocked(&mut events).await, "low on disk");

    let (_c2, other) = b.channel().await;
    let before = depth(&other, "disk").await;
    assert!(before < 50, "{before}");
    if before > 0 {
        // Consuming goes on under the alarm.
        let m = within(other.basic_get("disk".into(), BasicGetOptions { no_ack: true }))
            .await
            .unwrap();
        assert!(m.is_some());
    }
    b.running
        .as_ref()
        .unwrap()
        .ctx
        .broker
        .alarms
        .set_disk_free_limit(0);
    next_unblocked(&mut events).await;
    within(pubs).await.unwrap();
    within(async {
        while depth(&other, "disk").await + u32::from(before > 0) < 50 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
}
