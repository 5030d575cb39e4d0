//! One producer: a publisher on a connection of its own, publishing as
//! fast as its in-flight limit, its rate limit and the broker's credit
//! allow; with confirms each outcome is awaited in order on a task of
//! its own, which counts them and their latency.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::sync::mpsc;
use warren_client::amqp::{Error, Message, Outcome, Published};

use crate::options::Uri;
use crate::stats::{now_nanos, Stats};

/// After the stop signal, how long to wait for outstanding outcomes.
const SETTLE_GRACE: Duration = Duration::from_secs(5);
/// Outcomes counted at once by the settling task.
const BURST: usize = 256;

pub struct ProducerSpec {
    pub uri: Uri,
    pub name: String,
    pub address: String,
    pub size: usize,
    pub persistent: bool,
    /// Outcomes awaited at most (0: publish pre-settled).
    pub confirm: usize,
    pub rate: u64,
    pub messages: u64,
}

pub async fn run(spec: ProducerSpec, stats: Arc<Stats>, stop: Arc<AtomicBool>) -> Result<(), Error> {
    let conn = super::connect(&spec.uri, &spec.name).await?;
    let builder = conn.publisher().address(spec.address.clone());
    let zeros = vec![0u8; spec.size];
    // Bodies are cut from one buffer (a fresh one now and then), not
    // allocated one by one.
    let mut bodies = BytesMut::new();
    let message = |bodies: &mut BytesMut| {
        let ts = now_nanos();
        if bodies.capacity() < spec.size {
            bodies.reserve(spec.size.max(1) * 16);
        }
        bodies.extend_from_slice(&zeros);
        if spec.size >= 8 {
            bodies[..8].copy_from_slice(&ts.to_be_bytes());
        }
        let m = Message::new(bodies.split().freeze());
        (ts, if spec.persistent { m } else { m.transient() })
    };
    let started = Instant::now();
    let mut sent = 0u64;
    let go_on = |sent: u64| !stop.load(Ordering::Relaxed) && (spec.messages == 0 || sent < spec.messages);
    let pace = |sent: u64| {
        spec.rate > 0 && Duration::from_secs_f64(sent as f64 / spec.rate as f64) > started.elapsed()
    };
    if spec.confirm == 0 {
        let publisher = builder.build_pre_settled().await?;
        while go_on(sent) {
            if pace(sent) {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
            match publisher.send(message(&mut bodies).1).await {
                // At the end the consumers' going may delete an
                // auto-delete queue under the publisher.
                Err(_) if stop.load(Ordering::Relaxed) => break,
                r => r?,
            }
            sent += 1;
            stats.sent.fetch_add(1, Ordering::Relaxed);
        }
        publisher.close();
    } else {
        let publisher = builder.max_in_flight(spec.confirm).build().await?;
        let (tx, rx) = mpsc::channel(spec.confirm + 1);
        let settling = tokio::spawn(settle(rx, stats.clone()));
        while go_on(sent) {
            if pace(sent) {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
            let (ts, m) = message(&mut bodies);
            let published = match publisher.publish(m).await {
                Err(_) if stop.load(Ordering::Relaxed) => break,
                r => r?,
            };
            sent += 1;
            stats.sent.fetch_add(1, Ordering::Relaxed);
            if tx.send((ts, published)).await.is_err() {
                break;
            }
        }
        drop(tx);
        let _ = tokio::time::timeout(SETTLE_GRACE, settling).await;
        publisher.close();
    }
    conn.close().await;
    Ok(())
}

/// Await each outcome in order, counting them and their latency a burst
/// at a time.
async fn settle(mut rx: mpsc::Receiver<(u64, Published)>, stats: Arc<Stats>) {
    let mut burst = Vec::with_capacity(BURST);
    let mut latencies = Vec::with_capacity(BURST);
    while rx.recv_many(&mut burst, BURST).await > 0 {
        let (mut acked, mut nacked) = (0, 0);
        latencies.clear();
        for (ts, published) in burst.drain(..) {
            match published.await {
                Ok(Outcome::Accepted) => {
                    acked += 1;
                    latencies.push(now_nanos().saturating_sub(ts) / 1000);
                }
                Ok(_) => nacked += 1,
                // No outcome (the link or connection went at the end):
                // neither confirmed nor refused.
                Err(_) => {}
            }
        }
        stats.confirmed.fetch_add(acked, Ordering::Relaxed);
        stats.nacked.fetch_add(nacked, Ordering::Relaxed);
        stats.confirm_latencies(&latencies);
    }
}
