//! The stream protocol runs through rabbitmq-stream-client, the Rust
//! stream client RabbitMQ publishes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use rabbitmq_stream_client::types::{Message, OffsetSpecification};
use rabbitmq_stream_client::Environment;
use tokio::sync::Semaphore;

use crate::stream_side::BATCH;
use crate::Outcome;

async fn env(uri: &str) -> Environment {
    let u = warren_client::uri::AmqpUri::parse_stream(uri).expect("a stream URI");
    Environment::builder()
        .host(&u.host)
        .port(u.port)
        .username(&u.user)
        .password(&u.password)
        .virtual_host(&u.vhost)
        .load_balancer_mode(true)
        .build()
        .await
        .expect("connects")
}

/// Publish batches of [`BATCH`] with at most `in_flight` unconfirmed for
/// `secs` (confirms counted in the callbacks); the messages confirmed.
pub async fn publish(uri: &str, stream: &str, body: &[u8], in_flight: usize, secs: Duration) -> Outcome {
    let env = env(uri).await;
    let producer = env.producer().build(stream).await.unwrap();
    let slots = Arc::new(Semaphore::new(in_flight.max(BATCH)));
    let confirmed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    while start.elapsed() < secs {
        let permits = slots.clone().acquire_many_owned(BATCH as u32).await.unwrap();
        let permits = Arc::new(parking_lot::Mutex::new(Some(permits)));
        let left = Arc::new(AtomicU64::new(BATCH as u64));
        let messages = (0..BATCH)
            .map(|_| Message::builder().body(body.to_vec()).build())
            .collect();
        let (c, p, l) = (confirmed.clone(), permits.clone(), left.clone());
        producer
            .batch_send(messages, move |status| {
                let (c, p, l) = (c.clone(), p.clone(), l.clone());
                async move {
                    if status.is_ok_and(|s| s.confirmed()) {
                        c.fetch_add(1, Ordering::Relaxed);
                    }
                    if l.fetch_sub(1, Ordering::AcqRel) == 1 {
                        p.lock().take();
                    }
                }
            })
            .await
            .unwrap();
    }
    // Every batch's slots back: all confirmed (or failed).
    let _all = slots.acquire_many(in_flight.max(BATCH) as u32).await.unwrap();
    let elapsed = start.elapsed();
    let _ = producer.close().await;
    let _ = env;
    Outcome {
        messages: confirmed.load(Ordering::Relaxed),
        elapsed,
        note: String::new(),
    }
}

/// Read `n` messages from the start of `stream`.
pub async fn consume(uri: &str, stream: &str, n: u64) -> Outcome {
    let env = env(uri).await;
    let start = Instant::now();
    let mut consumer = env
        .consumer()
        .offset(OffsetSpecification::First)
        .build(stream)
        .await
        .unwrap();
    let mut got = 0u64;
    while got < n {
        let d = consumer.next().await.expect("a delivery").unwrap();
        std::hint::black_box(d.message().data());
        got += 1;
    }
    let elapsed = start.elapsed();
    let _ = consumer.handle().close().await;
    Outcome {
        messages: got,
        elapsed,
        note: String::new(),
    }
}
