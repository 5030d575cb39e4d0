//! connection.blocked as an event and as back-pressure: with Warren's
//! memory watermark low, a publisher is blocked; its next publish waits
//! (nothing piles up in the client) until a consumer elsewhere drains
//! the queue and the broker unblocks it.

mod support;

use std::time::Duration;

use bytes::Bytes;
use support::{brokers_with, within};
use warren_client::amqp091::{Confirmation, Connection, Event, Properties, QueueOptions};

#[tokio::test]
async fn a_blocked_connection_holds_publishes_back_until_unblocked() {
    let (uris, _warren) = brokers_with(|c| c.memory_high_watermark_bytes = 64 * 1024).await;
    let uri = &uris[0];
    let conn = within(Connection::open(uri)).await.unwrap();
    let mut events = conn.events();
    let ch = within(conn.channel()).await.unwrap();
    within(ch.queue_declare("flood", QueueOptions::default()))
        .await
        .unwrap();
    let body = Bytes::from(vec![7u8; 1024]);
    // Publish until the broker says it is blocked.
    let reason = within(async {
        let mut sent = 0;
        loop {
            tokio::select! {
                e = events.next() => match e {
                    Some(Event::Blocked { reason }) => return reason,
                    Some(_) => {}
                    None => panic!("events ended"),
                },
                r = ch.publish("", "flood", Properties::default(), body.clone()), if sent < 10_000 => {
                    let _not_confirming = r.unwrap();
                    sent += 1;
                }
            }
        }
    })
    .await;
    assert_eq!(reason, "low on memory");
    // A publish now waits.
    let pch = ch.clone();
    let b = body.clone();
    let mut waiting = tokio::spawn(async move { pch.publish("", "flood", Properties::default(), b).await });
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut waiting)
            .await
            .is_err(),
        "a publish on a blocked connection returned at once"
    );
    // Drained from another connection, the broker unblocks: it goes on.
    let other = within(Connection::open(uri)).await.unwrap();
    let och = within(other.channel()).await.unwrap();
    let drain = tokio::spawn(async move {
        loop {
            match och.get("flood", true).await.unwrap() {
                Some(_) => {}
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    });
    loop {
        match within(events.next()).await {
            Some(Event::Unblocked) => break,
            Some(_) => {}
            None => panic!("events ended"),
        }
    }
    let sent = within(waiting).await.unwrap().unwrap();
    assert_eq!(within(sent).await.unwrap(), Confirmation::Sent);
    drain.abort();
}
