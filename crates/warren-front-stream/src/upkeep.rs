//! Background upkeep of every stream: once a second, what was written is
//! fdatasynced (on duplicate handles, so publishers are not held up; a
//! chunk is confirmed once written, as a single RabbitMQ node confirms
//! stream messages, and is on disk within about a second); once a minute,
//! retention runs (x-max-age needs a clock, not only segment roll-overs;
//! RabbitMQ re-evaluates it hourly).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use warren_core::queue::StreamLog;
use warren_core::Broker;

fn streams(broker: &Broker) -> Vec<Arc<StreamLog>> {
    broker
        .vhosts()
        .iter()
        .flat_map(|vh| vh.queues())
        .filter_map(|q| q.stream().cloned())
        .collect()
}

pub fn spawn(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut n: u64 = 0;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => break,
            }
            n += 1;
            let logs = streams(&broker);
            if logs.is_empty() {
                continue;
            }
            let retention = n.is_multiple_of(60);
            let _ = tokio::task::spawn_blocking(move || {
                for l in logs {
                    if let Err(e) = l.sync() {
                        tracing::warn!(stream = %l.name, "stream sync failed: {e}");
                    }
                    if retention {
                        let _ = l.apply_retention();
                    }
                }
            })
            .await;
        }
        // A last sync on the way out.
        let logs = streams(&broker);
        let _ = tokio::task::spawn_blocking(move || {
            for l in logs {
                let _ = l.sync();
            }
        })
        .await;
    });
}
