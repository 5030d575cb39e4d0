//! AMQP 0-9-1 workloads on warren-client: declare the queues on a set-up
//! connection, then start consumers (first, so nothing published is
//! missed) and producers, each on its own connection, spread round-robin
//! over the queues and URIs. Connections do not recover: a load run that
//! loses its broker ends with an error rather than quietly going on.

pub mod consumer;
pub mod producer;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tokio::task::JoinSet;
use warren_client::amqp091::{Connection, Error, FieldTable, FieldValue, QueueOptions, RecoveryOptions};

use crate::options::{Options, QueueType, Uri};
use crate::stats::Stats;

/// Open a connection named `name`, without recovery.
pub(crate) async fn connect(uri: &Uri, name: &str) -> Result<Connection, Error> {
    Connection::builder(&uri.amqp_uri())
        .name(name)
        .recovery(RecoveryOptions::disabled())
        .open()
        .await
}

/// Declare every queue of the run (idempotent for queues that exist with
/// the same settings).
pub async fn declare(opts: &Options, uri: &Uri, run_id: &str) -> Result<Vec<String>, Error> {
    let conn = connect(uri, "warren-perf setup").await?;
    let ch = conn.channel().await?;
    let mut names = Vec::new();
    for i in 0..opts.queues {
        let name = opts.queue_name(i, run_id);
        // Quorum queues and streams are always durable, never auto-delete.
        let replicated = opts.queue_type != QueueType::Classic;
        let mut arguments = FieldTable::new();
        if replicated {
            arguments.insert(
                "x-queue-type",
                FieldValue::LongStr(opts.queue_type.as_str().as_bytes().to_vec().into()),
            );
        }
        let options = QueueOptions {
            durable: opts.persistent || replicated,
            auto_delete: opts.auto_delete() && !replicated,
            arguments,
            ..Default::default()
        };
        ch.queue_declare(&name, options).await?;
        names.push(name);
    }
    conn.close().await?;
    Ok(names)
}

/// Start the run's consumers and producers in the caller's task sets;
/// they stop on `stop` or their counts, and each task's error becomes
/// the caller's error type `E`.
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
            queue: queues[i as usize % queues.len()].clone(),
            prefetch: opts.qos as u16,
            autoack: opts.autoack,
            ack_every: opts.ack_every,
            messages: opts.cmessages,
        };
        let run = consumer::run(spec, stats.clone(), stop.clone());
        consumers.spawn(async move { run.await.map_err(E::from) });
    }
    for i in 0..opts.producers {
        let spec = producer::ProducerSpec {
            uri: uris[(i + opts.consumers) as usize % uris.len()].clone(),
            name: format!("warren-perf-producer-{i}"),
            queue: queues[i as usize % queues.len()].clone(),
            size: opts.size,
            persistent: opts.persistent,
            confirm: opts.confirm,
            rate: opts.rate,
            messages: opts.pmessages,
        };
        let run = producer::run(spec, stats.clone(), stop.clone());
        producers.spawn(async move { run.await.map_err(E::from) });
    }
}
