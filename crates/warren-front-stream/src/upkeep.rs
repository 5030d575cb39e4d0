//! Background upkeep of every stream: every [`SYNC_EVERY`], what was
//! written is fdatasynced (on duplicate handles, so publishers are not
//! held up; a chunk is confirmed once written, as a single RabbitMQ node
//! confirms stream messages, and is on disk within about that time), and
//! older data leaves the page cache; every [`RETENTION_EVERY`], retention
//! runs (x-max-age needs a clock, not only segment roll-overs; RabbitMQ
//! re-evaluates it hourly).
//!
//! Why 200 ms and not a second: what a stream wrote stays dirty in the
//! page cache until its sync, and only then can the stream cache drop
//! what is older than its kept tail. A busy stream (600 MB/s on three
//! nodes of this project's VM) thus freed half a gigabyte per node at
//! once each second; on a virtual machine that hands free memory back to
//! its host (free page reporting), pages freed in such bursts are handed
//! back before they are reused, and every later write takes a fresh page
//! that faults in the hypervisor. Syncing five times as often frees a
//! fifth as much each time, reused while still warm (bench/RESULTS.md,
//! 2026-12-07 (night): on three nodes the broker's CPU per 1 KB message
//! fell by 13-18 %).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::MissedTickBehavior;
use warren_core::queue::StreamLog;
use warren_core::Broker;

/// How often written streams are fdatasynced and their page cache trimmed.
pub const SYNC_EVERY: Duration = Duration::from_millis(200);

/// How often retention runs on a clock.
pub const RETENTION_EVERY: Duration = Duration::from_secs(60);

/// The broker's streams that `wanted` keeps.
fn streams(broker: &Broker, wanted: impl Fn(&StreamLog) -> bool) -> Vec<Arc<StreamLog>> {
    broker
        .vhosts()
        .iter()
        .flat_map(|vh| vh.queues())
        .filter_map(|q| q.stream().filter(|l| wanted(l)).cloned())
        .collect()
}

/// Whether the `n`th sync pass (from 1) also runs retention: once every
/// `RETENTION_EVERY`, whatever the sync interval.
fn retention_due(n: u64) -> bool {
    let per_retention = (RETENTION_EVERY.as_millis() / SYNC_EVERY.as_millis()).max(1) as u64;
    n.is_multiple_of(per_retention)
}

pub fn spawn(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SYNC_EVERY);
        // A sync that outlasts the interval is followed by one interval's
        // wait, not by a burst of passes catching up.
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut n: u64 = 0;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => break,
            }
            n += 1;
            let retention = retention_due(n);
            // Five passes a second: streams nothing was written to since
            // their last sync are left out, and so is the blocking pool
            // when none was.
            let logs = streams(&broker, |l| retention || l.needs_sync());
            if logs.is_empty() {
                continue;
            }
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
        let logs = streams(&broker, |_| true);
        let _ = tokio::task::spawn_blocking(move || {
            for l in logs {
                let _ = l.sync();
            }
        })
        .await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_runs_once_a_minute_of_sync_passes() {
        let per_minute = (60_000 / SYNC_EVERY.as_millis()) as u64;
        let due: Vec<u64> = (1..=3 * per_minute).filter(|&n| retention_due(n)).collect();
        assert_eq!(due, vec![per_minute, 2 * per_minute, 3 * per_minute]);
    }
}
