//! Samples every message counter each `collect_statistics_interval`, so
//! the management API's rates (`*_details.rate`) are per second over the
//! last interval, as RabbitMQ reports them. One pass over all queues per
//! interval: a lock-free read of a few atomics and one small lock each.
//! Connections' octet rates (`recv_oct_details`) are sampled in the same
//! pass.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use warren_core::Broker;

use crate::connections::Registry;

pub fn spawn(
    broker: Arc<Broker>,
    connections: Registry,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every.max(Duration::from_millis(100)));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => break,
            }
            let now = Instant::now();
            broker.messages.sample(now);
            for vh in broker.vhosts() {
                for q in vh.queues() {
                    q.counters.sample(now);
                }
            }
            for c in connections.list() {
                c.sample(now);
            }
        }
    });
}
