//! One producer: its own connection and channel, publishing to one queue
//! through the default exchange, as fast as its in-flight limit
//! (unconfirmed messages), its rate limit and the socket allow. Everything
//! publishable at one moment goes out in one write.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use warren_amqp091::frame::{write_body, write_content_header_raw, write_method};
use warren_amqp091::methods::*;
use warren_amqp091::{BasicProperties, FrameType, Method};

use super::client::{Client, ClientError, Result};
use crate::options::Uri;
use crate::stats::{now_nanos, Stats};

/// Stop filling the write buffer past this; write, then go on.
const BATCH_BYTES: usize = 128 << 10;
/// After the stop signal, how long to wait for outstanding confirms.
const CONFIRM_GRACE: Duration = Duration::from_secs(5);

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

pub async fn run(spec: ProducerSpec, stats: Arc<Stats>, stop: Arc<AtomicBool>) -> Result<()> {
    let mut c = Client::connect(&spec.uri, &spec.name).await?;
    c.open_channel(1).await?;
    let confirms = spec.confirm > 0;
    if confirms {
        match c.call(1, ConfirmSelect { nowait: false }).await? {
            Method::ConfirmSelectOk(_) => {}
            other => {
                return Err(ClientError::Protocol(format!(
                    "expected confirm.select-ok, got {other:?}"
                )))
            }
        }
    }
    let props = BasicProperties {
        delivery_mode: Some(if spec.persistent { 2 } else { 1 }),
        ..Default::default()
    }
    .to_bytes();
    let publish = Method::BasicPublish(BasicPublish {
        routing_key: spec.queue.as_str().into(),
        ..Default::default()
    });
    let mut body = vec![0u8; spec.size];
    // (seq, send time) of unconfirmed publishes, in order.
    let mut outstanding: VecDeque<(u64, u64)> = VecDeque::new();
    let mut next_seq = 1u64;
    let mut sent = 0u64;
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut stopping_since: Option<Instant> = None;

    loop {
        let stopped = stop.load(Ordering::Relaxed) || (spec.messages > 0 && sent >= spec.messages);
        if stopped {
            let since = *stopping_since.get_or_insert_with(Instant::now);
            if outstanding.is_empty() || since.elapsed() > CONFIRM_GRACE {
                break;
            }
        }
        // Publish what the limits allow.
        let mut n = 0u64;
        let mut rate_wait = None;
        while !stopped && c.wbuf.len() < BATCH_BYTES {
            if confirms && outstanding.len() >= spec.confirm as usize {
                break;
            }
            if spec.messages > 0 && sent >= spec.messages {
                break;
            }
            if spec.rate > 0 {
                let due = Duration::from_secs_f64(sent as f64 / spec.rate as f64);
                let elapsed = started.elapsed();
                if due > elapsed {
                    rate_wait = Some(due - elapsed);
                    break;
                }
            }
            let ts = now_nanos();
            if body.len() >= 8 {
                body[..8].copy_from_slice(&ts.to_be_bytes());
            }
            write_method(&mut c.wbuf, 1, &publish);
            write_content_header_raw(&mut c.wbuf, 1, 60, body.len() as u64, &props);
            let frame_max = c.frame_max;
            write_body(&mut c.wbuf, 1, &body, frame_max);
            if confirms {
                outstanding.push_back((next_seq, ts));
            }
            next_seq += 1;
            sent += 1;
            n += 1;
        }
        if n > 0 {
            stats.sent.fetch_add(n, Ordering::Relaxed);
        }
        let flushed = c.try_flush()?;
        // Confirms (and anything else the broker says).
        let got = c.try_read()?;
        if got > 0 {
            handle_frames(&mut c, &mut outstanding, &stats, &mut latencies)?;
        }
        if n > 0 || got > 0 {
            // Busy loops never meet a pending await: give the scheduler its
            // turn, or tasks queued behind this one (a consumer still
            // connecting) starve.
            tokio::task::yield_now().await;
            continue;
        }
        // Nothing to do right now: wait for the socket, the rate limit, or
        // (at most 50 ms) the stop signal.
        let wait = rate_wait
            .unwrap_or(Duration::from_millis(50))
            .min(Duration::from_millis(50));
        c.ready(!flushed, wait).await?;
    }
    let _ = c.try_flush();
    c.close().await;
    Ok(())
}

fn handle_frames(
    c: &mut Client,
    outstanding: &mut VecDeque<(u64, u64)>,
    stats: &Stats,
    latencies: &mut Vec<u64>,
) -> Result<()> {
    let now = now_nanos();
    let (mut acked, mut nacked) = (0u64, 0u64);
    while let Some(f) = c.parse()? {
        if f.kind != FrameType::Method {
            continue; // content of a basic.return
        }
        let m = Method::decode(f.payload)?;
        Client::check_closed(&m)?;
        let (tag, multiple, ack) = match m {
            Method::BasicAck(a) => (a.delivery_tag, a.multiple, true),
            Method::BasicNack(n) => (n.delivery_tag, n.multiple, false),
            Method::BasicReturn(_) => {
                stats.returned.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            _ => continue,
        };
        let mut settle = |ts: u64| {
            if ack {
                acked += 1;
                latencies.push(now.saturating_sub(ts) / 1000);
            } else {
                nacked += 1;
            }
        };
        if multiple {
            while outstanding.front().is_some_and(|&(s, _)| s <= tag) {
                if let Some((_, ts)) = outstanding.pop_front() {
                    settle(ts);
                }
            }
        } else if let Ok(i) = outstanding.binary_search_by_key(&tag, |&(s, _)| s) {
            if let Some((_, ts)) = outstanding.remove(i) {
                settle(ts);
            }
        }
    }
    stats.confirmed.fetch_add(acked, Ordering::Relaxed);
    stats.nacked.fetch_add(nacked, Ordering::Relaxed);
    stats.confirm_latencies(latencies);
    latencies.clear();
    Ok(())
}
