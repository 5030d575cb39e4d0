//! Stream protocol workloads on warren-client's stream module
//! (`-P stream --warren-client`), like stream-perf-test: the streams are created (or found)
//! through an `Environment`; each producer publishes batches of
//! `--batch-size` messages with at most `-c` unconfirmed (named with
//! `--producer-name` for deduplication, `--sub-entry-size` and
//! `--compression` as the Java client's); each consumer reads from
//! `--offset`, storing its offset under `--consumer-name` if given.
//! Every message carries its send time in its first 8 body bytes, for the
//! consumers' latency figure.
//!
//! Each producer and consumer runs on a thread of its own (see
//! `on_own_thread`). The built-in stream mode beside it (`super`) stays
//! the default for the broker's benchmarks: on two cores this one's
//! extra CPU per 1 KB message still lowers what the broker is seen to do
//! by a few per cent (bench/RESULTS.md).

mod consumer;
mod producer;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tokio::task::JoinSet;
use warren_client::stream::{Environment, Error, OffsetSpecification, StreamOptions};
use warren_stream::command::OffsetSpec;

use crate::options::{Options, Uri};
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
#[allow(clippy::too_many_arguments)]
pub(super) fn spawn<E>(
    opts: &Options,
    uris: &[Uri],
    streams: &[String],
    offset: OffsetSpec,
    stats: &Arc<Stats>,
    stop: &Arc<AtomicBool>,
    consumers: &mut JoinSet<std::result::Result<(), E>>,
    producers: &mut JoinSet<std::result::Result<(), E>>,
) where
    E: From<Error> + Send + 'static,
{
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
}

/// Run the future `make` makes on a thread of its own, with a
/// current-thread runtime: a producer's or consumer's tasks (its own,
/// its connection's reader and writer) then wake one another on one
/// core, and share no cache lines with another core's, as the built-in
/// mode's single task per socket does not need to (on two cores shared
/// with the broker, the cross-core wake-ups cost the client mode ~15 %
/// more CPU per message).
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
