//! The stream protocol runs through warren-client's `stream` module.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use warren_client::stream::{Confirm, Environment, Message, OffsetSpecification, StreamOptions};

use crate::Outcome;

/// Messages per `send_batch`, for both stream clients.
pub const BATCH: usize = 100;

/// A fresh stream named `name` (deleted first if it is there), with room
/// for every message a run writes (retention would cut the start of the
/// stream a consume run reads from).
pub async fn fresh_stream(uri: &str, name: &str) {
    let env = Environment::connect(uri).await.expect("connects");
    let _ = env.delete_stream(name).await;
    env.create_stream(name, &StreamOptions::default().max_length_bytes(20_000_000_000))
        .await
        .unwrap();
    env.close().await;
}

/// Publish batches of [`BATCH`] with at most `in_flight` unconfirmed for
/// `secs`; the messages confirmed.
/// With CLIENT_BENCH_STREAM_PRODUCERS=N (warren), N producers of one
/// environment publish at once, sharing its connection.
pub async fn publish(uri: &str, stream: &str, body: &[u8], in_flight: usize, secs: Duration) -> Outcome {
    let env = Environment::connect(uri).await.expect("connects");
    let n: usize = std::env::var("CLIENT_BENCH_STREAM_PRODUCERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let start = Instant::now();
    let mut runs = tokio::task::JoinSet::new();
    for _ in 0..n.max(1) {
        let (env, stream, body) = (env.clone(), stream.to_string(), body.to_vec());
        runs.spawn(async move { publish_one(&env, &stream, &body, in_flight, secs).await });
    }
    let confirmed: u64 = runs.join_all().await.into_iter().sum();
    let elapsed = start.elapsed();
    env.close().await;
    Outcome {
        messages: confirmed,
        elapsed,
        note: String::new(),
    }
}

async fn publish_one(env: &Environment, stream: &str, body: &[u8], in_flight: usize, secs: Duration) -> u64 {
    let producer = env
        .producer()
        .max_unconfirmed(in_flight)
        .build(stream)
        .await
        .unwrap();
    let body = bytes::Bytes::copy_from_slice(body);
    let mut pending: VecDeque<Vec<Confirm>> = VecDeque::new();
    let (start, mut confirmed) = (Instant::now(), 0u64);
    let settle = |batch: Vec<Confirm>| async move {
        let mut n = 0;
        for c in batch {
            assert!(c.await.unwrap().is_confirmed());
            n += 1;
        }
        n
    };
    while start.elapsed() < secs {
        let batch = producer
            .send_batch((0..BATCH).map(|_| Message::new(body.clone())))
            .await
            .unwrap();
        pending.push_back(batch);
        while pending.len() * BATCH >= in_flight {
            confirmed += settle(pending.pop_front().unwrap()).await;
        }
    }
    for b in pending {
        confirmed += settle(b).await;
    }
    confirmed
}

/// Fill `stream` with `n` messages of `body` (before the clock starts).
pub async fn fill(uri: &str, stream: &str, body: &[u8], n: u64) {
    let env = Environment::connect(uri).await.expect("connects");
    let producer = env.producer().build(stream).await.unwrap();
    let body = bytes::Bytes::copy_from_slice(body);
    let mut left = n;
    let mut pending = VecDeque::new();
    while left > 0 {
        let k = left.min(BATCH as u64);
        pending.push_back(
            producer
                .send_batch((0..k).map(|_| Message::new(body.clone())))
                .await
                .unwrap(),
        );
        left -= k;
        while pending.len() > 50 {
            for c in pending.pop_front().unwrap() {
                c.await.unwrap();
            }
        }
    }
    for b in pending {
        for c in b {
            c.await.unwrap();
        }
    }
    env.close().await;
}

/// Read `n` messages from the start of `stream`, each body taken out of
/// its AMQP 1.0 encoding (as rabbitmq-stream-client does for every
/// message).
pub async fn consume(uri: &str, stream: &str, n: u64) -> Outcome {
    let env = Environment::connect(uri).await.expect("connects");
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
        std::hint::black_box(d.body().unwrap());
        got += 1;
    }
    let elapsed = start.elapsed();
    drop(consumer);
    env.close().await;
    Outcome {
        messages: got,
        elapsed,
        note: String::new(),
    }
}
