//! The runs through warren-client.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use warren_client::amqp091::{Confirmation, Connection, ConsumeOptions, Properties, QueueOptions};

use crate::{usage, Outcome};

pub async fn publish(
    uri: &str,
    q: &str,
    body: &[u8],
    in_flight: usize,
    secs: Duration,
    busy_poll: Option<Duration>,
) -> Outcome {
    let conn = open(uri, busy_poll).await;
    let ch = conn.channel().await.unwrap();
    ch.confirm_select().await.unwrap();
    ch.set_max_in_flight(in_flight);
    let body = Bytes::copy_from_slice(body);
    let mut pending = VecDeque::with_capacity(in_flight);
    let (start, mut acked) = (Instant::now(), 0u64);
    while start.elapsed() < secs {
        pending.push_back(
            ch.publish("", q, Properties::default(), body.clone())
                .await
                .unwrap(),
        );
        if pending.len() >= in_flight {
            assert_eq!(pending.pop_front().unwrap().await.unwrap(), Confirmation::Ack);
            acked += 1;
        }
    }
    for c in pending {
        assert_eq!(c.await.unwrap(), Confirmation::Ack);
        acked += 1;
    }
    let elapsed = start.elapsed();
    conn.close().await.unwrap();
    Outcome {
        messages: acked,
        elapsed,
        note: String::new(),
    }
}

pub async fn consume(uri: &str, q: &str, n: u64, ack_every: u64, prefetch: u16) -> Outcome {
    let conn = Connection::open(uri).await.expect("connects");
    let ch = conn.channel().await.unwrap();
    ch.basic_qos(prefetch).await.unwrap();
    let start = Instant::now();
    let mut consumer = ch.consume(q, ConsumeOptions::default()).await.unwrap();
    let mut got = 0u64;
    while got < n {
        let d = consumer.next().await.expect("a delivery");
        got += 1;
        if got.is_multiple_of(ack_every) || got == n {
            d.acker().ack(true).await.unwrap();
        }
    }
    let elapsed = start.elapsed();
    conn.close().await.unwrap();
    Outcome {
        messages: got,
        elapsed,
        note: String::new(),
    }
}

pub async fn dispatch(
    uri: &str,
    q: &str,
    n: u64,
    concurrency: usize,
    handler_ms: u64,
    secs: Duration,
) -> Outcome {
    let conn = Connection::open(uri).await.expect("connects");
    let ch = conn.channel().await.unwrap();
    ch.basic_qos(256.max(concurrency as u16 * 2)).await.unwrap();
    let consumer = ch.consume(q, ConsumeOptions::default()).await.unwrap();
    let done = Arc::new(AtomicU64::new(0));
    // The handlers' own time in total: a timer's sleep of 5 ms lasts
    // longer (tokio's timer rounds up to its 1 ms tick).
    let handling_us = Arc::new(AtomicU64::new(0));
    let (d, h) = (done.clone(), handling_us.clone());
    let start = Instant::now();
    let running = tokio::spawn(consumer.run_concurrently(concurrency, move |delivery| {
        let (d, h) = (d.clone(), h.clone());
        async move {
            if handler_ms > 0 {
                let began = Instant::now();
                tokio::time::sleep(Duration::from_millis(handler_ms)).await;
                h.fetch_add(began.elapsed().as_micros() as u64, Ordering::Relaxed);
            }
            let _ = delivery.ack().await;
            d.fetch_add(1, Ordering::Relaxed);
        }
    }));
    while start.elapsed() < secs && done.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (messages, elapsed) = (done.load(Ordering::Relaxed), start.elapsed());
    running.abort();
    conn.close().await.unwrap();
    let mean_ms = handling_us.load(Ordering::Relaxed) as f64 / messages.max(1) as f64 / 1000.0;
    // What N handlers of that length could do with no dispatch cost.
    let ideal = if mean_ms > 0.0 {
        concurrency as f64 * 1000.0 / mean_ms
    } else {
        0.0
    };
    Outcome {
        messages,
        elapsed,
        note: format!("handler_mean_ms={mean_ms:.2}\tideal_rate={ideal:.0}"),
    }
}

/// A publisher at about 2,000 messages a second and a consumer whose
/// handler takes 5 ms (about 200 a second, ten times slower), for
/// `secs`; the client's resident memory sampled each second.
pub async fn memory(uri: &str, body: &[u8], secs: Duration) -> Outcome {
    let conn = Connection::open(uri).await.expect("connects");
    let setup = conn.channel().await.unwrap();
    let q = "client-bench-memory";
    let _ = setup.queue_delete(q, false, false).await;
    setup.queue_declare(q, QueueOptions::default()).await.unwrap();
    let cch = conn.channel().await.unwrap();
    cch.basic_qos(100).await.unwrap();
    let consumer = cch.consume(q, ConsumeOptions::default()).await.unwrap();
    let consumed = Arc::new(AtomicU64::new(0));
    let c = consumed.clone();
    let consuming = tokio::spawn(consumer.run(move |d| {
        let c = c.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let _ = d.ack().await;
            c.fetch_add(1, Ordering::Relaxed);
        }
    }));
    let pch = conn.channel().await.unwrap();
    let body = Bytes::copy_from_slice(body);
    let start = Instant::now();
    let publishing = tokio::spawn(async move {
        let mut sent = 0u64;
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        while start.elapsed() < secs {
            tick.tick().await;
            for _ in 0..20 {
                let _sent = pch
                    .publish("", q, Properties::default(), body.clone())
                    .await
                    .unwrap();
                sent += 1;
            }
        }
        sent
    });
    let mut samples = Vec::new();
    while start.elapsed() < secs {
        tokio::time::sleep(Duration::from_secs(1)).await;
        samples.push(usage::rss_kib());
    }
    let published = publishing.await.unwrap();
    consuming.abort();
    let _ = setup.queue_delete(q, false, false).await;
    conn.close().await.unwrap();
    let half = samples.len() / 2;
    let avg = |s: &[u64]| s.iter().sum::<u64>() as f64 / s.len().max(1) as f64;
    Outcome {
        messages: consumed.load(Ordering::Relaxed),
        elapsed: start.elapsed(),
        note: format!(
            "published={published}\trss_kib_first_half={:.0}\trss_kib_second_half={:.0}\trss_kib_samples={:?}",
            avg(&samples[..half]),
            avg(&samples[half..]),
            samples
        ),
    }
}

pub async fn round_trips(uri: &str, secs: Duration, busy_poll: Option<Duration>) -> Outcome {
    let conn = open(uri, busy_poll).await;
    let ch = conn.channel().await.unwrap();
    let (start, mut n) = (Instant::now(), 0u64);
    while start.elapsed() < secs {
        ch.basic_qos(10).await.unwrap();
        n += 1;
    }
    let elapsed = start.elapsed();
    conn.close().await.unwrap();
    Outcome {
        messages: n,
        elapsed,
        note: String::new(),
    }
}

/// A connection, polling its socket for `busy_poll` before sleeping.
async fn open(uri: &str, busy_poll: Option<Duration>) -> Connection {
    let mut builder = Connection::builder(uri);
    if let Some(budget) = busy_poll {
        builder = builder.busy_poll(budget);
    }
    builder.open().await.expect("connects")
}
