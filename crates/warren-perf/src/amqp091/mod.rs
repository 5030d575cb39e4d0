//! AMQP 0-9-1 workloads: declare the queues on a set-up connection, then
//! start consumers (first, so nothing published is missed) and producers,
//! each on its own connection, spread round-robin over the queues and URIs.

pub mod client;
pub mod consumer;
pub mod producer;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tokio::task::JoinSet;
use warren_amqp091::methods::*;
use warren_amqp091::{FieldTable, FieldValue, Method};

use crate::options::{Options, QueueType, Uri};
use crate::stats::Stats;
use client::{Client, ClientError, Result};

/// Declare every queue of the run (idempotent for queues that exist with
/// the same settings).
pub async fn declare(opts: &Options, uri: &Uri, run_id: &str) -> Result<Vec<String>> {
    let mut c = Client::connect(uri, "warren-perf setup").await?;
    c.open_channel(1).await?;
    let mut names = Vec::new();
    for i in 0..opts.queues {
        let name = opts.queue_name(i, run_id);
        let mut args = FieldTable::new();
        // Quorum queues and streams are always durable, never auto-delete.
        let replicated = opts.queue_type != QueueType::Classic;
        if replicated {
            args.insert(
                "x-queue-type",
                FieldValue::LongStr(opts.queue_type.as_str().as_bytes().to_vec().into()),
            );
        }
        let d = QueueDeclare {
            queue: name.as_str().into(),
            durable: opts.persistent || replicated,
            auto_delete: opts.auto_delete() && !replicated,
            arguments: args,
            ..Default::default()
        };
        match c.call(1, d).await? {
            Method::QueueDeclareOk(_) => {}
            other => {
                return Err(ClientError::Protocol(format!(
                    "expected queue.declare-ok, got {other:?}"
                )))
            }
        }
        names.push(name);
    }
    c.close().await;
    Ok(names)
}

/// Start the consumers and producers; they stop on `stop` or their counts.
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
    E: From<ClientError> + Send + 'static,
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
