//! One producer: its own environment, publishing batches to one stream as
//! fast as its in-flight limit, its rate limit and the connection allow.
//! Each batch has one confirm for all its messages (`send_all`), awaited
//! on a task of its own, which counts them and their latency (one send
//! time per batch).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::sync::mpsc;
use warren_client::stream::{BatchConfirm, Compression, Error, Message};

use crate::options::{Options, Uri};
use crate::stats::{now_nanos, Stats};

/// After the stop signal, how long to wait for outstanding confirms.
const CONFIRM_GRACE: Duration = Duration::from_secs(5);

pub struct ProducerSpec {
    pub uri: Uri,
    pub stream: String,
    pub reference: Option<String>,
    pub size: usize,
    pub batch: usize,
    /// Unconfirmed limit (stream publishing is always confirmed).
    pub confirm: usize,
    pub sub_entry_size: u16,
    pub compression: Compression,
    pub rate: u64,
    pub messages: u64,
}

pub async fn run(
    opts: &Options,
    spec: ProducerSpec,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
) -> Result<(), Error> {
    let env = super::environment(opts, &spec.uri, "warren-perf producer").await?;
    let mut builder = env
        .producer()
        .max_unconfirmed(spec.confirm)
        .sub_entry_size(spec.sub_entry_size)
        .compression(spec.compression);
    if let Some(r) = &spec.reference {
        builder = builder.name(r.clone());
    }
    let producer = builder.build(&spec.stream).await?;
    let (tx, rx) = mpsc::channel(spec.confirm / spec.batch + 2);
    let settling = tokio::spawn(settle(rx, stats.clone()));
    let mut body = BytesMut::from(&vec![0u8; spec.size][..]);
    let stamped = spec.size >= 8;
    let started = Instant::now();
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) && (spec.messages == 0 || sent < spec.messages) {
        let mut batch = spec.batch as u64;
        if spec.messages > 0 {
            batch = batch.min(spec.messages - sent);
        }
        if spec.rate > 0 {
            let due = (started.elapsed().as_secs_f64() * spec.rate as f64) as u64;
            batch = batch.min(due.saturating_sub(sent));
            if batch == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
        }
        // The batch goes out together: one send time for all of it.
        let ts = now_nanos();
        if stamped {
            body[..8].copy_from_slice(&ts.to_be_bytes());
        }
        // One message, lent to the producer for each publish of the batch.
        let message = Message::new(body.clone().freeze());
        let confirms = producer
            .send_all(std::iter::repeat_n(&message, batch as usize))
            .await?;
        sent += batch;
        stats.sent.fetch_add(batch, Ordering::Relaxed);
        if tx.send((ts, confirms)).await.is_err() {
            break;
        }
    }
    drop(tx);
    let _ = tokio::time::timeout(CONFIRM_GRACE, settling).await;
    let _ = producer.close().await;
    env.close().await;
    Ok(())
}

/// Await each batch's confirm in order, counting its messages and their
/// latency.
async fn settle(mut rx: mpsc::Receiver<(u64, BatchConfirm)>, stats: Arc<Stats>) {
    let mut latencies = Vec::new();
    while let Some((ts, confirm)) = rx.recv().await {
        let outcome = confirm.await;
        let acked = outcome.confirmed as u64;
        let nacked = (outcome.rejected.len() + outcome.failed) as u64;
        let micros = now_nanos().saturating_sub(ts) / 1000;
        latencies.clear();
        latencies.resize(acked as usize, micros);
        stats.confirmed.fetch_add(acked, Ordering::Relaxed);
        stats.nacked.fetch_add(nacked, Ordering::Relaxed);
        stats.confirm_latencies(&latencies);
    }
}
