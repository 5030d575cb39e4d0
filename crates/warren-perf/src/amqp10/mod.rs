//! AMQP 1.0 workloads (`-P amqp10`) on warren-client's `amqp` module:
//! each producer is a publisher and each consumer a consumer, on a
//! connection (and session) of its own, to the node `--amqp10-address`
//! names for its queue (`/amq/queue/NAME` for RabbitMQ 3.x's plugin;
//! `/queues/NAME` for RabbitMQ 4 and Warren). Queues are declared over
//! AMQP 0-9-1 first, on the same port.
//!
//! With confirms (`-c N`) a producer publishes with at most N outcomes
//! awaited, each awaited in order on a task of its own; without, it
//! publishes pre-settled. A consumer takes a credit window of `-q`
//! (topped up as it settles; deliveries accepted `-A` at a time, which go
//! as one disposition), or receives pre-settled in autoack.
//! Each message carries its send time in its first 8 body bytes for the
//! latency figures.
//!
//! Each producer and consumer runs on a thread of its own, on a
//! single-threaded runtime, as PerfTest gives each client a thread: its
//! connection's reader and writer and its own task then take turns on
//! one core instead of waking each other across cores per message (on
//! the 1 KB multi-ack point a shared runtime had three times the context
//! switches per message, and the broker read and wrote smaller batches).

mod consumer;
mod producer;

use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tokio::task::JoinSet;
use warren_client::amqp::{Connection, Error};

use crate::options::{Options, Uri};
use crate::stats::Stats;

pub fn address(opts: &Options, queue: &str) -> String {
    opts.amqp10_address.replace("{queue}", queue)
}

/// A connection of its own for a producer or consumer, without recovery
/// (a lost connection ends the run, as with the other protocols).
async fn connect(uri: &Uri, name: &str) -> Result<Connection, Error> {
    Connection::builder(&uri.amqp_uri())
        .container_id(name)
        .recovery(warren_client::amqp::RecoveryOptions::disabled())
        .open()
        .await
}

/// Start the run's consumers and producers in the caller's task sets;
/// each task's error becomes the caller's error type `E`.
pub fn spawn<E>(
    opts: &Options,
    uris: &[Uri],
    queues: &[String],
    stats: &Arc<Stats>,
    stop: &Arc<AtomicBool>,
    consumers: &mut JoinSet<std::result::Result<(), E>>,
    producers: &mut JoinSet<std::result::Result<(), E>>,
) where
    E: From<Error> + Send + 'static,
{
    for i in 0..opts.consumers {
        let spec = consumer::ConsumerSpec {
            uri: uris[i as usize % uris.len()].clone(),
            name: format!("warren-perf-consumer-{i}"),
            address: address(opts, &queues[i as usize % queues.len()]),
            // AMQP 1.0 has no "unlimited" credit: -q 0 grants 1000.
            credit: if opts.qos == 0 { 1000 } else { opts.qos },
            autoack: opts.autoack,
            ack_every: opts.ack_every.max(1),
            limit: opts.cmessages,
        };
        let (stats, stop) = (stats.clone(), stop.clone());
        let run = on_own_thread(spec.name.clone(), move || consumer::run(spec, stats, stop));
        consumers.spawn(async move { run.await.map_err(E::from) });
    }
    for i in 0..opts.producers {
        let spec = producer::ProducerSpec {
            uri: uris[(i + opts.consumers) as usize % uris.len()].clone(),
            name: format!("warren-perf-producer-{i}"),
            address: address(opts, &queues[i as usize % queues.len()]),
            size: opts.size,
            persistent: opts.persistent,
            confirm: opts.confirm as usize,
            rate: opts.rate,
            messages: opts.pmessages,
        };
        let (stats, stop) = (stats.clone(), stop.clone());
        let run = on_own_thread(spec.name.clone(), move || producer::run(spec, stats, stop));
        producers.spawn(async move { run.await.map_err(E::from) });
    }
}

/// Run `work` on a new thread named `name`, on a runtime of its own
/// with one thread; the future returned ends with it.
fn on_own_thread<F, W>(name: String, work: F) -> impl Future<Output = Result<(), Error>>
where
    F: FnOnce() -> W + Send + 'static,
    W: Future<Output = Result<(), Error>>,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    let started = std::thread::Builder::new().name(name).spawn(move || {
        let result = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt.block_on(work()),
            Err(e) => Err(Error::Connect(format!("no runtime for the client: {e}"))),
        };
        let _ = tx.send(result);
    });
    async move {
        started.map_err(|e| Error::Connect(format!("no thread for the client: {e}")))?;
        rx.await
            .unwrap_or_else(|_| Err(Error::ConnectionClosed("the client's thread ended early".into())))
    }
}

/// The send time in the first 8 bytes of a message's body.
fn sent_at(body: &[u8]) -> Option<u64> {
    let b: [u8; 8] = body.get(..8)?.try_into().ok()?;
    Some(u64::from_be_bytes(b))
}
