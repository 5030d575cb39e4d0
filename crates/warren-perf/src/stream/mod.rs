//! Stream protocol workloads (`-P stream`) on warren-client's stream
//! module, like stream-perf-test: the streams are created (or found)
//! through an `Environment`; each producer publishes batches of
//! `--batch-size` messages with at most `-c` unconfirmed (named with
//! `--producer-name` for deduplication, `--sub-entry-size` and
//! `--compression` as the Java client's); each consumer reads from
//! `--offset`, storing its offset under `--consumer-name` if given.
//! Message bodies are AMQP 1.0 messages (one data section), as
//! RabbitMQ's clients send, each carrying its send time in its first 8
//! body bytes for the consumers' latency figure.
//!
//! Each producer and consumer runs on a thread of its own (see
//! `on_own_thread`).

mod consumer;
mod producer;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tokio::task::JoinSet;
use warren_amqp10::messaging;
use warren_client::stream::{Environment, Error, OffsetSpecification, StreamOptions};
use warren_stream::command::OffsetSpec;

use crate::options::{OptionError, Options, Uri};
use crate::stats::Stats;

/// The environment a producer, a consumer or the set-up uses: its own
/// connections (as stream-perf-test gives each its own), to the URI's
/// address only in load-balancer mode.
pub(crate) async fn environment(opts: &Options, uri: &Uri, name: &str) -> Result<Environment, Error> {
    Environment::builder()
        .uri(uri.stream_uri())
        .name(name)
        .load_balancer_mode(opts.load_balancer)
        .build()
        .await
}

/// Create every stream of the run (an existing one is fine).
pub async fn declare(opts: &Options, uri: &Uri, run_id: &str) -> Result<Vec<String>, Error> {
    let env = environment(opts, uri, "warren-perf setup").await?;
    let options = StreamOptions::default()
        .max_length_bytes(opts.max_length_bytes)
        .max_segment_size_bytes(opts.stream_max_segment_size_bytes);
    let mut names = Vec::new();
    for i in 0..opts.queues {
        let name = opts.queue_name(i, run_id);
        match env.create_stream(&name, &options).await {
            Ok(()) => {}
            Err(Error::Refused {
                code: warren_client::stream::ResponseCode::StreamAlreadyExists,
                ..
            }) => {}
            Err(e) => return Err(e),
        }
        names.push(name);
    }
    env.close().await;
    Ok(names)
}

/// Start the run's consumers and producers, reading from `offset`, in
/// the caller's task sets; each task's error becomes the caller's error
/// type `E`.
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
    E: From<Error> + From<OptionError> + Send + 'static,
{
    let offset = OffsetSpec::parse(&opts.offset)
        .ok_or_else(|| OptionError::Invalid(format!("bad --offset '{}'", opts.offset)))?;
    let offset = match offset {
        OffsetSpec::First => OffsetSpecification::First,
        OffsetSpec::Last => OffsetSpecification::Last,
        OffsetSpec::Next => OffsetSpecification::Next,
        OffsetSpec::Offset(o) => OffsetSpecification::Offset(o),
        OffsetSpec::Timestamp(t) => OffsetSpecification::Timestamp(t),
    };
    for i in 0..opts.consumers {
        let spec = consumer::ConsumerSpec {
            uri: uris[i as usize % uris.len()].clone(),
            stream: streams[i as usize % streams.len()].clone(),
            offset,
            name: opts.consumer_name.as_ref().map(|n| format!("{n}-{i}")),
            limit: opts.cmessages,
        };
        let (opts, stats, stop) = (opts.clone(), stats.clone(), stop.clone());
        consumers.spawn(on_own_thread(move || async move {
            consumer::run(&opts, spec, stats, stop).await.map_err(E::from)
        }));
    }
    for i in 0..opts.producers {
        let spec = producer::ProducerSpec {
            uri: uris[(i + opts.consumers) as usize % uris.len()].clone(),
            stream: streams[i as usize % streams.len()].clone(),
            reference: opts.producer_name.as_ref().map(|n| format!("{n}-{i}")),
            size: opts.size,
            batch: opts.batch_size.max(1) as usize,
            confirm: if opts.confirm == 0 {
                10_000
            } else {
                opts.confirm as usize
            },
            sub_entry_size: opts.sub_entry_size,
            compression: opts.compression.into(),
            rate: opts.rate,
            messages: opts.pmessages,
        };
        let (opts, stats, stop) = (opts.clone(), stats.clone(), stop.clone());
        producers.spawn(on_own_thread(move || async move {
            producer::run(&opts, spec, stats, stop).await.map_err(E::from)
        }));
    }
    Ok(())
}

/// Run the future `make` makes on a thread of its own, with a
/// current-thread runtime: a producer's or consumer's tasks (its own,
/// its connection's reader and writer) then wake one another on one
/// core and share no cache lines with another core's (on two cores
/// shared with the broker, cross-core wake-ups cost ~15 % more CPU per
/// message).
async fn on_own_thread<F, Fut, T, E>(make: F) -> std::result::Result<T, E>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = std::result::Result<T, E>>,
    T: Send + 'static,
    E: From<Error> + Send + 'static,
{
    let run = tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| E::from(Error::from(e)))?;
        rt.block_on(make())
    });
    match run.await {
        Ok(r) => r,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use warren_amqp10::messaging::Header;

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
