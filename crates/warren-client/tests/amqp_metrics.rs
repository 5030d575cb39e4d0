//! warren-client's AMQP 1.0 metrics hooks against an in-process Warren,
//! as RabbitMQ's AMQP 1.0 clients' metrics collector tests count: a
//! connection opened and closed, messages published and their outcomes
//! (accepted, released), deliveries consumed and how the application
//! settled them, bytes both ways.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use support::amqp::{publish, warren};
use support::within;
use warren_client::amqp::{Connection, ExchangeSpec, Message, Metrics, Outcome, QueueSpec, Settlement};

#[derive(Default)]
struct Counts {
    opened: AtomicU64,
    closed: AtomicU64,
    published: AtomicU64,
    accepted: AtomicU64,
    released: AtomicU64,
    consumed: AtomicU64,
    settled_accepted: AtomicU64,
    discarded: AtomicU64,
    requeued: AtomicU64,
    written: AtomicU64,
    read: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Metrics for Counts {
    fn connection_opened(&self) {
        add(&self.opened, 1);
    }
    fn connection_closed(&self) {
        add(&self.closed, 1);
    }
    fn published(&self) {
        add(&self.published, 1);
    }
    fn outcome(&self, outcome: &Outcome) {
        match outcome {
            Outcome::Accepted => add(&self.accepted, 1),
            Outcome::Released => add(&self.released, 1),
            _ => {}
        }
    }
    fn consumed(&self) {
        add(&self.consumed, 1);
    }
    fn settled(&self, settlement: Settlement) {
        match settlement {
            Settlement::Accepted => add(&self.settled_accepted, 1),
            Settlement::Discarded => add(&self.discarded, 1),
            Settlement::Requeued => add(&self.requeued, 1),
            _ => {}
        }
    }
    fn written(&self, bytes: u64) {
        add(&self.written, bytes);
    }
    fn read(&self, bytes: u64) {
        add(&self.read, bytes);
    }
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

#[tokio::test]
async fn a_connection_counts_what_it_publishes_consumes_and_settles() {
    let (uri, _broker) = warren().await;
    let counts = Arc::new(Counts::default());
    let conn = within(Connection::builder(&uri).metrics(counts.clone()).open())
        .await
        .unwrap();
    assert_eq!(get(&counts.opened), 1);
    let m = within(conn.management()).await.unwrap();
    within(m.declare_queue(&QueueSpec::classic("metrics-q")))
        .await
        .unwrap();
    within(m.declare_exchange(&ExchangeSpec::fanout("metrics-x")))
        .await
        .unwrap();
    let p = within(conn.publisher().queue("metrics-q").build()).await.unwrap();
    for i in 0..10 {
        assert_eq!(
            publish(&p, Message::new(format!("m{i}"))).await,
            Outcome::Accepted
        );
    }
    // Bound to nothing: released.
    let nowhere = within(conn.publisher().exchange("metrics-x", "").build())
        .await
        .unwrap();
    assert_eq!(publish(&nowhere, Message::new("lost")).await, Outcome::Released);
    assert_eq!(get(&counts.published), 11);
    assert_eq!(get(&counts.accepted), 10);
    assert_eq!(get(&counts.released), 1);

    let mut c = within(conn.consumer().queue("metrics-q").build()).await.unwrap();
    // The first is requeued once, then everything accepted but the last,
    // which is discarded.
    within(c.receive()).await.unwrap().requeue();
    for i in 0..10 {
        let d = within(c.receive()).await.unwrap();
        if i < 9 {
            d.accept();
        } else {
            d.discard();
        }
    }
    assert_eq!(get(&counts.consumed), 11);
    assert_eq!(get(&counts.requeued), 1);
    assert_eq!(get(&counts.settled_accepted), 9);
    assert_eq!(get(&counts.discarded), 1);
    // Management requests and replies count as bytes, not messages.
    assert!(get(&counts.written) > 11 * 2, "{}", get(&counts.written));
    assert!(get(&counts.read) > 11 * 2, "{}", get(&counts.read));
    conn.close().await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while get(&counts.closed) == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(get(&counts.closed), 1);
}
