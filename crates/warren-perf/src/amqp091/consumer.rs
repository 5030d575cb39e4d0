//! One consumer: its own connection and channel, basic.qos, basic.consume,
//! and acks every N messages with `multiple` (or none, in autoack). Its
//! latency figure is arrival time minus the send time in the body's first
//! 8 bytes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use warren_client::amqp091::{ConsumeOptions, Error};

use crate::options::Uri;
use crate::stats::{now_nanos, Stats};

/// How often an idle consumer looks at the stop signal.
const STOP_POLL: Duration = Duration::from_millis(50);
/// Counters are added to the shared statistics every this many messages.
const REPORT_EVERY: u64 = 64;

#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    pub uri: Uri,
    pub name: String,
    pub queue: String,
    /// basic.qos prefetch-count; 0 for none.
    pub prefetch: u16,
    pub autoack: bool,
    pub ack_every: u32,
    /// Stop after this many (0: run until told to stop).
    pub messages: u64,
}

pub async fn run(spec: ConsumerSpec, stats: Arc<Stats>, stop: Arc<AtomicBool>) -> Result<(), Error> {
    let conn = super::connect(&spec.uri, &spec.name).await?;
    let ch = conn.channel().await?;
    if spec.prefetch > 0 {
        ch.basic_qos(spec.prefetch).await?;
    }
    let options = ConsumeOptions {
        tag: spec.name.clone(),
        no_ack: spec.autoack,
        ..Default::default()
    };
    let mut consumer = ch.consume(&spec.queue, options).await?;
    // Never hold more unacked than the prefetch allows, or both sides wait.
    let ack_every = match spec.prefetch {
        0 => spec.ack_every,
        p => spec.ack_every.min(p as u32),
    }
    .max(1) as u64;
    let (mut received, mut unreported, mut unacked) = (0u64, 0u64, 0u64);
    let mut last = None;
    let mut latencies = Vec::new();
    while !stop.load(Ordering::Relaxed) && (spec.messages == 0 || received < spec.messages) {
        // A timer only when nothing is buffered: most calls find a
        // delivery waiting.
        let next = match consumer.next().now_or_never() {
            Some(d) => Ok(d),
            None => tokio::time::timeout(STOP_POLL, consumer.next()).await,
        };
        let delivery = match next {
            Ok(Some(d)) => d,
            Ok(None) => {
                return Err(Error::Protocol(
                    "the consumer ended (cancelled by the broker?)".into(),
                ))
            }
            Err(_) => {
                report(&stats, &mut unreported, &mut latencies);
                continue;
            }
        };
        if delivery.body.len() >= 8 {
            let mut ts = [0u8; 8];
            ts.copy_from_slice(&delivery.body[..8]);
            latencies.push(now_nanos().saturating_sub(u64::from_be_bytes(ts)) / 1000);
        }
        received += 1;
        unreported += 1;
        if !spec.autoack {
            unacked += 1;
            if unacked >= ack_every {
                delivery.acker().ack(ack_every > 1).await?;
                unacked = 0;
            } else {
                last = Some(delivery.acker());
            }
        }
        if unreported >= REPORT_EVERY {
            report(&stats, &mut unreported, &mut latencies);
        }
    }
    report(&stats, &mut unreported, &mut latencies);
    if let (Some(acker), true) = (last, unacked > 0) {
        acker.ack(true).await?;
    }
    conn.close().await
}

fn report(stats: &Stats, unreported: &mut u64, latencies: &mut Vec<u64>) {
    stats
        .received
        .fetch_add(std::mem::take(unreported), Ordering::Relaxed);
    stats.consumer_latencies(latencies);
    latencies.clear();
}
