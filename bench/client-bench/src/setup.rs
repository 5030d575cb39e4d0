//! Queues made (and filled) with warren-client before a run's clock
//! starts; every client then works on the same kind of queue.

use bytes::Bytes;
use warren_client::amqp091::{Connection, FieldTable, FieldValue, Properties, QueueOptions};

/// A fresh queue for confirmed publishing that never holds more than
/// 10,000 messages (the oldest are dropped), so a long run does not
/// grow the broker.
pub async fn publish_queue(uri: &str) -> String {
    let conn = Connection::open(uri).await.expect("connects");
    let ch = conn.channel().await.unwrap();
    let q = "client-bench-publish";
    let _ = ch.queue_delete(q, false, false).await;
    let mut args = FieldTable::new();
    args.insert("x-max-length", FieldValue::I32(10_000));
    ch.queue_declare(
        q,
        QueueOptions {
            arguments: args,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    conn.close().await.unwrap();
    q.to_string()
}

/// A fresh queue holding `n` messages of `body`.
pub async fn filled_queue(uri: &str, body: &[u8], n: u64) -> String {
    let conn = Connection::open(uri).await.expect("connects");
    let ch = conn.channel().await.unwrap();
    let q = "client-bench-consume";
    let _ = ch.queue_delete(q, false, false).await;
    ch.queue_declare(q, QueueOptions::default()).await.unwrap();
    ch.confirm_select().await.unwrap();
    ch.set_max_in_flight(1000);
    let body = Bytes::copy_from_slice(body);
    let mut pending = std::collections::VecDeque::new();
    for _ in 0..n {
        pending.push_back(
            ch.publish("", q, Properties::default(), body.clone())
                .await
                .unwrap(),
        );
        if pending.len() >= 1000 {
            pending.pop_front().unwrap().await.unwrap();
        }
    }
    for c in pending {
        c.await.unwrap();
    }
    conn.close().await.unwrap();
    q.to_string()
}
