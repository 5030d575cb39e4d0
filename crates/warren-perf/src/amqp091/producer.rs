//! One producer: its own connection and channel, publishing to one queue
//! through the default exchange, as fast as its in-flight limit
//! (unconfirmed messages), its rate limit and the connection allow, in
//! batches of what may go at one moment. Each message carries its send
//! time in its first 8 bytes, for the consumers' latency figure.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;
use warren_client::amqp091::{Confirm, Confirmation, Error, Properties};

use crate::options::Uri;
use crate::stats::{now_nanos, Stats};

/// After the stop signal, how long to wait for outstanding confirms.
const CONFIRM_GRACE: Duration = Duration::from_secs(5);
/// The most messages published in one batch.
const BATCH: usize = 256;
/// In-flight limits below this publish one message at a time.
const LOW_IN_FLIGHT: u32 = 256;
/// Counters are added to the shared statistics every this many messages.
const REPORT_EVERY: u64 = 64;

#[derive(Debug, Clone)]
pub struct ProducerSpec {
    pub uri: Uri,
    pub name: String,
    pub queue: String,
    pub size: usize,
    pub persistent: bool,
    /// Unconfirmed limit; 0 for no confirms.
    pub confirm: u32,
    pub rate: u64,
    pub messages: u64,
}

/// Confirms not yet settled, oldest first, with their send times.
struct Outstanding {
    pending: VecDeque<(u64, Confirm)>,
    acked: u64,
    nacked: u64,
    returned: u64,
    latencies: Vec<u64>,
}

impl Outstanding {
    fn settle(&mut self, sent_at: u64, now: u64, c: Result<Confirmation, Error>) -> Result<(), Error> {
        match c? {
            Confirmation::Nack => self.nacked += 1,
            other => {
                if matches!(other, Confirmation::Returned(_)) {
                    self.returned += 1;
                }
                self.acked += 1;
                self.latencies.push(now.saturating_sub(sent_at) / 1000);
            }
        }
        Ok(())
    }

    /// Settle the oldest confirms that have arrived, without waiting.
    fn settle_ready(&mut self) -> Result<(), Error> {
        // One clock reading for all: they arrived together.
        let now = now_nanos();
        while let Some((_, c)) = self.pending.front_mut() {
            let Some(c) = c.now_or_never() else { break };
            let (sent_at, _) = self.pending.pop_front().expect("checked");
            self.settle(sent_at, now, c)?;
        }
        Ok(())
    }

    /// Wait for the oldest confirm, then settle those that came with it.
    async fn settle_one(&mut self) -> Result<(), Error> {
        if let Some((sent_at, c)) = self.pending.pop_front() {
            let c = c.await;
            self.settle(sent_at, now_nanos(), c)?;
        }
        self.settle_ready()
    }

    fn report(&mut self, stats: &Stats) {
        stats
            .confirmed
            .fetch_add(std::mem::take(&mut self.acked), Ordering::Relaxed);
        stats
            .nacked
            .fetch_add(std::mem::take(&mut self.nacked), Ordering::Relaxed);
        stats
            .returned
            .fetch_add(std::mem::take(&mut self.returned), Ordering::Relaxed);
        stats.confirm_latencies(&self.latencies);
        self.latencies.clear();
    }
}

pub async fn run(spec: ProducerSpec, stats: Arc<Stats>, stop: Arc<AtomicBool>) -> Result<(), Error> {
    let conn = super::connect(&spec.uri, &spec.name).await?;
    let ch = conn.channel().await?;
    let confirms = spec.confirm > 0;
    if confirms {
        ch.confirm_select().await?;
        ch.set_max_in_flight(spec.confirm as usize);
    }
    let props = Properties {
        delivery_mode: Some(if spec.persistent { 2 } else { 1 }),
        ..Default::default()
    };
    let mut out = Outstanding {
        pending: VecDeque::with_capacity(spec.confirm as usize),
        acked: 0,
        nacked: 0,
        returned: 0,
        latencies: Vec::new(),
    };
    let mut bodies = BytesMut::new();
    let (mut sent, mut unreported) = (0u64, 0u64);
    // Batches at a high in-flight limit (or none); at a low one a message
    // per freed slot keeps the pipeline fuller (measured: at 20 in flight
    // batching the freed slots ran at two thirds the rate).
    let batch_limit = match spec.confirm {
        1..LOW_IN_FLIGHT => 1,
        _ => BATCH as u64,
    };
    let started = Instant::now();
    while !stop.load(Ordering::Relaxed) && (spec.messages == 0 || sent < spec.messages) {
        // As many as may go now, in one batch (one turn through the
        // client, one write): the count, the rate and the in-flight
        // limit decide.
        let mut n = batch_limit;
        if spec.messages > 0 {
            n = n.min(spec.messages - sent);
        }
        if spec.rate > 0 {
            let due = (started.elapsed().as_secs_f64() * spec.rate as f64) as u64;
            if due <= sent {
                let next = Duration::from_secs_f64((sent + 1) as f64 / spec.rate as f64);
                // At most 50 ms at a time, to see the stop signal.
                stats
                    .sent
                    .fetch_add(std::mem::take(&mut unreported), Ordering::Relaxed);
                out.settle_ready()?;
                out.report(&stats);
                let wait = next.saturating_sub(started.elapsed());
                tokio::time::sleep(wait.min(Duration::from_millis(50))).await;
                continue;
            }
            n = n.min(due - sent);
        }
        if confirms {
            let room = (spec.confirm as usize).saturating_sub(out.pending.len()) as u64;
            if room == 0 {
                out.settle_one().await?;
                continue;
            }
            n = n.min(room);
        }
        let sent_at = now_nanos();
        refill(&mut bodies, n as usize, spec.size);
        if n == 1 {
            let body = next_body(&mut bodies, spec.size, sent_at);
            let confirm = ch.publish("", &spec.queue, props.clone(), body).await?;
            if confirms {
                out.pending.push_back((sent_at, confirm));
            }
        } else {
            let batch = (0..n).map(|_| next_body(&mut bodies, spec.size, sent_at));
            let published = ch.publish_bodies("", &spec.queue, &props, batch).await?;
            if confirms {
                out.pending.extend(published.into_iter().map(|c| (sent_at, c)));
            }
        }
        sent += n;
        unreported += n;
        if unreported >= REPORT_EVERY {
            stats
                .sent
                .fetch_add(std::mem::take(&mut unreported), Ordering::Relaxed);
            out.settle_ready()?;
            out.report(&stats);
            // A publish that never waits never yields: let tasks queued
            // behind this one (a consumer still connecting) run.
            tokio::task::yield_now().await;
        }
    }
    stats.sent.fetch_add(unreported, Ordering::Relaxed);
    let grace = tokio::time::timeout(CONFIRM_GRACE, async {
        while !out.pending.is_empty() {
            out.settle_one().await?;
        }
        Ok::<_, Error>(())
    })
    .await;
    out.report(&stats);
    if let Ok(settled) = grace {
        settled?;
    }
    conn.close().await
}

/// Make room in `bodies` for `n` bodies of `size` bytes. The bodies cut
/// from it before are gone by now (copied into the connection's outbox
/// and dropped), so it takes its memory back whole: no allocation, and no
/// page faults, per round.
fn refill(bodies: &mut BytesMut, n: usize, size: usize) {
    bodies.clear();
    bodies.reserve(n * size);
    bodies.resize(n * size, 0);
}

/// A body of `size` bytes whose first 8 (when it has them) are the send
/// time, cut from `bodies` (filled by [`refill`]).
fn next_body(bodies: &mut BytesMut, size: usize, sent_at: u64) -> Bytes {
    let mut b = bodies.split_to(size);
    if size >= 8 {
        b[..8].copy_from_slice(&sent_at.to_be_bytes());
    }
    b.freeze()
}
