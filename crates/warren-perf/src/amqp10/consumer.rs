//! One consumer: a consumer on a connection of its own with a window of
//! credit, accepting deliveries `-A` at a time (as PerfTest acks with
//! `multiple`: they go as one disposition) or taking them pre-settled in
//! autoack, counting what it gets and each message's latency, a burst
//! at a time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use warren_client::amqp::{Batch, Error};

use crate::options::Uri;
use crate::stats::{now_nanos, Stats};

/// How often a waiting consumer looks at the stop signal.
const STOP_CHECK: Duration = Duration::from_millis(50);
/// Deliveries counted into the shared statistics at once.
const BURST: u64 = 256;

pub struct ConsumerSpec {
    pub uri: Uri,
    pub name: String,
    pub address: String,
    pub credit: u32,
    pub autoack: bool,
    /// Deliveries accepted together.
    pub ack_every: u32,
    pub limit: u64,
}

pub async fn run(spec: ConsumerSpec, stats: Arc<Stats>, stop: Arc<AtomicBool>) -> Result<(), Error> {
    let conn = super::connect(&spec.uri, &spec.name).await?;
    let mut builder = conn
        .consumer()
        .address(spec.address.clone())
        .initial_credit(spec.credit);
    if spec.autoack {
        builder = builder.pre_settled();
    }
    let mut consumer = builder.build().await?;
    let mut received = 0u64;
    let mut counted = 0u64;
    let mut latencies = Vec::with_capacity(BURST as usize);
    // Settled together: one lock of the session, one disposition.
    let mut held = Batch::with_capacity(spec.ack_every as usize);
    // One timer for the run, not one per delivery.
    let mut check = tokio::time::interval(STOP_CHECK);
    while !stop.load(Ordering::Relaxed) && (spec.limit == 0 || received < spec.limit) {
        let d = tokio::select! {
            biased;
            d = consumer.receive() => match d {
                Err(_) if stop.load(Ordering::Relaxed) => break,
                d => d?,
            },
            _ = check.tick() => {
                held.accept();
                flush(&stats, &mut counted, received, &mut latencies);
                continue;
            }
        };
        if let Some(ts) = d.message.data().and_then(super::sent_at) {
            latencies.push(now_nanos().saturating_sub(ts) / 1000);
        }
        held.push(d);
        if held.len() >= spec.ack_every as usize {
            held.accept();
        }
        received += 1;
        if received - counted >= BURST {
            flush(&stats, &mut counted, received, &mut latencies);
        }
    }
    held.accept();
    flush(&stats, &mut counted, received, &mut latencies);
    consumer.close();
    conn.close().await;
    Ok(())
}

fn flush(stats: &Stats, counted: &mut u64, received: u64, latencies: &mut Vec<u64>) {
    stats.received.fetch_add(received - *counted, Ordering::Relaxed);
    stats.consumer_latencies(latencies);
    latencies.clear();
    *counted = received;
}
