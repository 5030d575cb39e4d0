//! Message counters and their rates, for the management API's
//! `message_stats` and Prometheus' `rabbitmq_global_messages_*_total`.
//!
//! Counting is one relaxed atomic add per event, on the path that already
//! holds the queue's lock or owns the connection, so it costs nothing
//! measurable. Rates are not kept per event: [`MessageCounters::sample`]
//! runs every few seconds (RabbitMQ's collect_statistics_interval is 5 s)
//! and turns the counts since the previous sample into per-second rates.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

/// What is counted. Queues count all but `Unroutable`; the broker-wide
/// counters count `Publish` per message received from a publisher (not
/// per queue it reached) and `Unroutable` for messages no queue took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    Publish,
    Deliver,
    DeliverNoAck,
    Get,
    GetNoAck,
    Ack,
    Redeliver,
    Confirm,
    Unroutable,
}

impl Stat {
    pub const ALL: [Stat; 9] = [
        Stat::Publish,
        Stat::Deliver,
        Stat::DeliverNoAck,
        Stat::Get,
        Stat::GetNoAck,
        Stat::Ack,
        Stat::Redeliver,
        Stat::Confirm,
        Stat::Unroutable,
    ];

    /// The field name in RabbitMQ's `message_stats`.
    pub fn name(self) -> &'static str {
        match self {
            Stat::Publish => "publish",
            Stat::Deliver => "deliver",
            Stat::DeliverNoAck => "deliver_no_ack",
            Stat::Get => "get",
            Stat::GetNoAck => "get_no_ack",
            Stat::Ack => "ack",
            Stat::Redeliver => "redeliver",
            Stat::Confirm => "confirm",
            Stat::Unroutable => "drop_unroutable",
        }
    }
}

/// What a queue counts: all but the last two of [`Stat::ALL`] (the
/// broker-wide counters add confirms and unroutable drops).
pub const QUEUE_STATS: &[Stat] = Stat::ALL.split_at(7).0;

const N: usize = Stat::ALL.len();

/// The previous sample and the rates it gave.
#[derive(Debug)]
struct Sampled {
    at: Instant,
    counts: [u64; N],
    rates: [f64; N],
}

#[derive(Debug)]
pub struct MessageCounters {
    counts: [AtomicU64; N],
    sampled: Mutex<Sampled>,
}

impl Default for MessageCounters {
    fn default() -> Self {
        MessageCounters {
            counts: Default::default(),
            sampled: Mutex::new(Sampled {
                at: Instant::now(),
                counts: [0; N],
                rates: [0.0; N],
            }),
        }
    }
}

impl MessageCounters {
    pub fn add(&self, stat: Stat, n: u64) {
        self.counts[stat as usize].fetch_add(n, Ordering::Relaxed);
    }

    pub fn count(&self, stat: Stat) -> u64 {
        self.counts[stat as usize].load(Ordering::Relaxed)
    }

    /// Per second, over the last sampling interval.
    pub fn rate(&self, stat: Stat) -> f64 {
        self.sampled.lock().rates[stat as usize]
    }

    /// Messages handed out by consumers and gets together (RabbitMQ's
    /// `deliver_get`).
    pub fn deliver_get(&self) -> (u64, f64) {
        let parts = [Stat::Deliver, Stat::DeliverNoAck, Stat::Get, Stat::GetNoAck];
        let s = self.sampled.lock();
        let rate = parts.iter().map(|&p| s.rates[p as usize]).sum();
        drop(s);
        (parts.iter().map(|&p| self.count(p)).sum(), rate)
    }

    /// Close a sampling interval at `now`: rates become the counts since
    /// the last sample over the time it took.
    pub fn sample(&self, now: Instant) {
        let mut s = self.sampled.lock();
        let secs = now.saturating_duration_since(s.at).as_secs_f64();
        if secs < 0.001 {
            return;
        }
        for (i, c) in self.counts.iter().enumerate() {
            let c = c.load(Ordering::Relaxed);
            s.rates[i] = c.saturating_sub(s.counts[i]) as f64 / secs;
            s.counts[i] = c;
        }
        s.at = now;
    }

    /// Has anything been counted? (RabbitMQ omits `message_stats` for an
    /// object that never saw a message.)
    pub fn any(&self) -> bool {
        self.counts.iter().any(|c| c.load(Ordering::Relaxed) > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rates_are_counts_over_the_sampling_interval() {
        let c = MessageCounters::default();
        let t0 = Instant::now();
        c.sample(t0);
        c.add(Stat::Publish, 50);
        c.add(Stat::Deliver, 20);
        c.add(Stat::Get, 5);
        c.sample(t0 + Duration::from_secs(5));
        assert_eq!(c.count(Stat::Publish), 50);
        assert!((c.rate(Stat::Publish) - 10.0).abs() < 1e-3);
        let (n, rate) = c.deliver_get();
        assert_eq!(n, 25);
        assert!((rate - 5.0).abs() < 1e-3, "{rate}");
        // Nothing new: the rate falls to zero, the count stays.
        c.sample(t0 + Duration::from_secs(10));
        assert_eq!(c.rate(Stat::Publish), 0.0);
        assert_eq!(c.count(Stat::Publish), 50);
        assert!(c.any());
    }
}
