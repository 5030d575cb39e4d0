//! Stream protocol workloads (`-P stream`), like stream-perf-test: the
//! stream is created (or found) with Create; each producer declares a
//! publisher (named with `--producer-name` for deduplication) and publishes
//! batches of `--batch-size` messages, at most `-c` unconfirmed; each
//! consumer subscribes from `--offset` with chunk credit and tops it up
//! per chunk, storing its offset under `--consumer-name` if given. Message
//! bodies are AMQP 1.0 messages (data section), as RabbitMQ's clients send.

pub mod conn;
pub mod on_client;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::task::JoinSet;
use warren_amqp10::messaging::{self, Header};
use warren_stream::chunk::{Chunk, Entry};
use warren_stream::command::{begin_publish, code, end_frame, put_published, Command, OffsetSpec};

use crate::options::{Options, Uri};
use crate::stats::{now_nanos, Stats};
use conn::{Conn, Result, StreamError};

const SETTLE_GRACE: Duration = Duration::from_secs(5);
/// Chunks a subscription may have in flight.
const CHUNK_CREDIT: u16 = 10;

/// Create every stream of the run (an existing one is fine).
pub async fn declare(opts: &Options, uri: &Uri, run_id: &str) -> Result<Vec<String>> {
    let mut c = Conn::connect(uri, "warren-perf setup").await?;
    let mut names = Vec::new();
    for i in 0..opts.queues {
        let name = opts.queue_name(i, run_id);
        let r = c
            .call(|id| Command::Create {
                correlation_id: id,
                stream: name.clone(),
                arguments: vec![
                    ("max-length-bytes".into(), opts.max_length_bytes.to_string()),
                    (
                        "stream-max-segment-size-bytes".into(),
                        opts.stream_max_segment_size_bytes.to_string(),
                    ),
                ],
            })
            .await?;
        if r.code != code::OK && r.code != code::STREAM_ALREADY_EXISTS {
            return Err(StreamError::Refused(format!("create {name}: code {:#x}", r.code)));
        }
        names.push(name);
    }
    c.close().await;
    Ok(names)
}

/// Start the run's consumers and producers in the caller's task sets
/// (on warren-client with `--warren-client`); each task's error becomes
/// the caller's error type `E`.
pub fn spawn<E>(
    opts: &Options,
    uris: &[Uri],
    streams: &[String],
    stats: &Arc<Stats>,
    stop: &Arc<AtomicBool>,
    consumers: &mut JoinSet<std::result::Result<(), E>>,
    producers: &mut JoinSet<std::result::Result<(), E>>,
) -> std::result::Result<(), E>
where
    E: From<StreamError>
        + From<warren_client::stream::Error>
        + From<crate::options::OptionError>
        + Send
        + 'static,
{
    let offset = OffsetSpec::parse(&opts.offset)
        .ok_or_else(|| crate::options::OptionError::Invalid(format!("bad --offset '{}'", opts.offset)))?;
    if opts.warren_client {
        on_client::spawn(opts, uris, streams, offset, stats, stop, consumers, producers);
        return Ok(());
    }
    for i in 0..opts.consumers {
        let uri = uris[i as usize % uris.len()].clone();
        let stream = streams[i as usize % streams.len()].clone();
        let name = opts.consumer_name.as_ref().map(|n| format!("{n}-{i}"));
        let (limit, stats, stop) = (opts.cmessages, stats.clone(), stop.clone());
        consumers.spawn(async move {
            consumer(uri, stream, offset, name, limit, stats, stop)
                .await
                .map_err(E::from)
        });
    }
    for i in 0..opts.producers {
        let uri = uris[(i + opts.consumers) as usize % uris.len()].clone();
        let spec = ProducerSpec {
            stream: streams[i as usize % streams.len()].clone(),
            reference: opts.producer_name.as_ref().map(|n| format!("{n}-{i}")),
            size: opts.size,
            batch: opts.batch_size.max(1),
            confirm: if opts.confirm == 0 { 10_000 } else { opts.confirm },
            rate: opts.rate,
            messages: opts.pmessages,
        };
        let (stats, stop) = (stats.clone(), stop.clone());
        producers.spawn(async move { producer(uri, spec, stats, stop).await.map_err(E::from) });
    }
    Ok(())
}

struct ProducerSpec {
    stream: String,
    reference: Option<String>,
    size: usize,
    batch: u32,
    /// Unconfirmed limit (stream publishing is always confirmed).
    confirm: u32,
    rate: u64,
    messages: u64,
}

async fn producer(uri: Uri, spec: ProducerSpec, stats: Arc<Stats>, stop: Arc<AtomicBool>) -> Result<()> {
    let mut c = Conn::connect(&uri, "warren-perf producer").await?;
    let stream = spec.stream.clone();
    let reference = spec.reference.clone();
    let r = c
        .call(|id| Command::DeclarePublisher {
            correlation_id: id,
            publisher_id: 0,
            reference: reference.clone(),
            stream: stream.clone(),
        })
        .await?;
    if r.code != code::OK {
        return Err(StreamError::Refused(format!(
            "declare publisher on {stream}: code {:#x}",
            r.code
        )));
    }
    // With a name, continue after the last publishing id the broker has
    // (deduplication keys on name + strictly increasing id).
    let mut next_id = 0u64;
    if let Some(reference) = &spec.reference {
        let r = c
            .call(|id| Command::QueryPublisherSequence {
                correlation_id: id,
                reference: reference.clone(),
                stream: stream.clone(),
            })
            .await?;
        if r.code == code::OK && r.rest.len() >= 8 {
            next_id = u64::from_be_bytes(r.rest[..8].try_into().unwrap_or_default()) + 1;
        }
    }
    // One encoded message, reused: only the send time in its first body
    // bytes changes (the load generator's own cost is kept low so that it
    // is the broker that is measured).
    let mut message = BytesMut::new();
    messaging::encode_message(&mut message, &Header::default(), &vec![0u8; spec.size]);
    let stamp = (spec.size >= 8).then(|| message.len() - spec.size);
    let mut outstanding: VecDeque<(u64, u64)> = VecDeque::new();
    let mut sent = 0u64;
    let started = Instant::now();
    let mut stopping: Option<Instant> = None;
    loop {
        let stopped = stop.load(Ordering::Relaxed) || (spec.messages > 0 && sent >= spec.messages);
        if stopped
            && (outstanding.is_empty() || stopping.get_or_insert_with(Instant::now).elapsed() > SETTLE_GRACE)
        {
            break;
        }
        let mut n = 0u64;
        while !stopped && c.wbuf.len() < (256 << 10) {
            let room = (spec.confirm as usize).saturating_sub(outstanding.len());
            let mut batch = (spec.batch as usize).min(room) as u64;
            if spec.messages > 0 {
                batch = batch.min(spec.messages - sent);
            }
            if spec.rate > 0 {
                let due = (started.elapsed().as_secs_f64() * spec.rate as f64) as u64;
                batch = batch.min(due.saturating_sub(sent));
            }
            if batch == 0 {
                break;
            }
            let at = begin_publish(&mut c.wbuf, 0, batch as u32);
            // The batch goes out together: one send time for all of it.
            let ts = now_nanos();
            if let Some(i) = stamp {
                message[i..i + 8].copy_from_slice(&ts.to_be_bytes());
            }
            for _ in 0..batch {
                put_published(&mut c.wbuf, next_id, &message);
                outstanding.push_back((next_id, ts));
                next_id += 1;
            }
            end_frame(&mut c.wbuf, at);
            sent += batch;
            n += batch;
        }
        if n > 0 {
            stats.sent.fetch_add(n, Ordering::Relaxed);
        }
        let flushed = c.try_flush()?;
        let got = c.try_read()?;
        while let Some(cmd) = c.parse()? {
            let now = now_nanos();
            match cmd {
                Command::PublishConfirm { ids, .. } => {
                    let mut lat = Vec::with_capacity(ids.len());
                    let mut acked = 0;
                    for id in ids {
                        if let Some((_, ts)) = take(&mut outstanding, id) {
                            acked += 1;
                            lat.push(now.saturating_sub(ts) / 1000);
                        }
                    }
                    stats.confirmed.fetch_add(acked, Ordering::Relaxed);
                    stats.confirm_latencies(&lat);
                }
                Command::PublishError { errors, .. } => {
                    let mut nacked = 0;
                    for (id, _) in errors {
                        if take(&mut outstanding, id).is_some() {
                            nacked += 1;
                        }
                    }
                    stats.nacked.fetch_add(nacked, Ordering::Relaxed);
                }
                other => c.handle_other(other)?,
            }
        }
        if n > 0 || got > 0 {
            tokio::task::yield_now().await;
            continue;
        }
        c.ready(!flushed, Duration::from_millis(50)).await?;
    }
    let _ = c.try_flush();
    c.close().await;
    Ok(())
}

/// The send time in the first 8 body bytes of an AMQP 1.0 message. A
/// message that is one data section (what warren-perf sends) is read in
/// place; anything else goes through the full decoder.
pub(crate) fn sent_at(m: &[u8]) -> Option<u64> {
    // 0x00 0x53 0x75: described by smallulong 0x75 (amqp:data:binary);
    // then vbin8 (0xa0, 1-byte size) or vbin32 (0xb0, 4-byte size).
    let body = match m {
        [0x00, 0x53, 0x75, 0xa0, _, rest @ ..] => Some(rest),
        [0x00, 0x53, 0x75, 0xb0, _, _, _, _, rest @ ..] => Some(rest),
        _ => None,
    };
    let first8 = |b: &[u8]| {
        b.get(..8)
            .map(|x| u64::from_be_bytes(x.try_into().unwrap_or_default()))
    };
    match body {
        Some(b) => first8(b),
        None => messaging::data_body(m).ok().and_then(|b| first8(&b)),
    }
}

/// Remove publishing id `id` (usually at the front) from `outstanding`.
fn take(outstanding: &mut VecDeque<(u64, u64)>, id: u64) -> Option<(u64, u64)> {
    if outstanding.front().is_some_and(|&(x, _)| x == id) {
        return outstanding.pop_front();
    }
    let i = outstanding.binary_search_by_key(&id, |&(x, _)| x).ok()?;
    outstanding.remove(i)
}

async fn consumer(
    uri: Uri,
    stream: String,
    offset: OffsetSpec,
    name: Option<String>,
    limit: u64,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
) -> Result<()> {
    let mut c = Conn::connect(&uri, "warren-perf consumer").await?;
    let mut properties = Vec::new();
    if let Some(n) = &name {
        properties.push(("name".to_string(), n.clone()));
    }
    let s = stream.clone();
    let r = c
        .call(|id| Command::Subscribe {
            correlation_id: id,
            subscription_id: 0,
            stream: s.clone(),
            offset,
            credit: CHUNK_CREDIT,
            properties: properties.clone(),
        })
        .await?;
    if r.code != code::OK {
        return Err(StreamError::Refused(format!(
            "subscribe to {stream}: code {:#x}",
            r.code
        )));
    }
    let mut received = 0u64;
    let mut chunks = 0u64;
    let mut lat = Vec::new();
    let mut got = 1;
    while !stop.load(Ordering::Relaxed) && (limit == 0 || received < limit) {
        if got == 0 {
            c.ready(!c.wbuf.is_empty(), Duration::from_millis(50)).await?;
            c.try_flush()?;
        }
        got = c.try_read()?;
        let before = received;
        while let Some(cmd) = c.parse()? {
            let Command::Deliver { chunk, .. } = cmd else {
                c.handle_other(cmd)?;
                continue;
            };
            let chunk = Chunk::parse(&chunk, false)?;
            // The first chunk may start before the requested offset; a
            // perf run counts what it is given, as stream-perf-test does.
            received += chunk.header.num_records as u64;
            let now = now_nanos();
            for e in &chunk.entries {
                if let Entry::Simple(m) = e {
                    if let Some(ts) = sent_at(m) {
                        lat.push(now.saturating_sub(ts) / 1000);
                    }
                }
            }
            chunks += 1;
            Command::Credit {
                subscription_id: 0,
                credit: 1,
            }
            .encode(&mut c.wbuf);
            if let (Some(n), true) = (&name, chunks.is_multiple_of(10)) {
                let last = chunk.header.first_offset + chunk.header.num_records.saturating_sub(1) as u64;
                Command::StoreOffset {
                    reference: n.clone(),
                    stream: stream.clone(),
                    offset: last,
                }
                .encode(&mut c.wbuf);
            }
        }
        if received > before {
            got = got.max(1);
        }
        stats.received.fetch_add(received - before, Ordering::Relaxed);
        stats.consumer_latencies(&lat);
        lat.clear();
        c.try_flush()?;
        tokio::task::yield_now().await;
    }
    c.close().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_send_time_is_read_from_small_and_large_bodies() {
        for size in [8usize, 12, 300, 1000] {
            let mut body = vec![7u8; size];
            body[..8].copy_from_slice(&42u64.to_be_bytes());
            let mut m = BytesMut::new();
            messaging::encode_message(&mut m, &Header::default(), &body);
            assert_eq!(sent_at(&m), Some(42), "{size} bytes");
            // With a header section the full decoder finds it too.
            let mut m = BytesMut::new();
            let h = Header {
                durable: true,
                ..Default::default()
            };
            messaging::encode_message(&mut m, &h, &body);
            assert_eq!(sent_at(&m), Some(42), "{size} bytes, durable");
        }
        assert_eq!(sent_at(b"\x00\x53\x75\xa0\x02ab"), None);
    }
}
