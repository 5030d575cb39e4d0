//! What the AMQP 1.0 suites share: an in-process Warren, and waiting for
//! a queue's counts as the broker reports them.

use std::time::Duration;

use warren_client::amqp::{Connection, Management, Message, Outcome, Publisher, QueueSpec};

use super::within;

/// An in-process Warren's AMQP URI (and the broker, kept running).
pub async fn warren() -> (String, warren_server::Running) {
    let (uris, running) = super::brokers().await;
    (uris[0].clone(), running)
}

/// Wait (2 s at most) until queue `q` holds `want` ready messages; the
/// count last seen.
pub async fn wait_for_count(m: &Management, q: &str, want: u64) -> u64 {
    let mut last = 0;
    for _ in 0..100 {
        last = within(m.queue_info(q)).await.unwrap().message_count;
        if last == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    last
}

/// The broker's count of deliveries not yet settled on queue `q`
/// (through the management API at `api`).
pub async fn unacked(api: &str, q: &str) -> u64 {
    let info: serde_json::Value = reqwest::Client::new()
        .get(format!("{api}/api/queues/%2f/{q}"))
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    info["messages_unacknowledged"].as_u64().unwrap_or(u64::MAX)
}

/// Publish `m` and wait for its outcome.
pub async fn publish(p: &Publisher, m: Message) -> Outcome {
    within(within(p.publish(m)).await.unwrap()).await.unwrap()
}

/// A connection to `uri`, its management link, and classic queue `q`
/// declared.
pub async fn with_queue(uri: &str, q: &str) -> (Connection, Management) {
    let conn = within(Connection::open(uri)).await.unwrap();
    let m = within(conn.management()).await.unwrap();
    within(m.declare_queue(&QueueSpec::classic(q))).await.unwrap();
    (conn, m)
}
