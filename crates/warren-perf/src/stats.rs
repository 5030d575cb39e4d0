//! What a run measures: message counters, and two HDR histograms
//! (consumer latency, from the send time carried in each message body to
//! its arrival; confirm latency, from publish to the broker's ack), each
//! kept for the last second and for the whole run. Workers record latencies
//! in batches (one lock per batch of frames), the reporter samples once a
//! second.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::Mutex;

/// The process-wide clock that message timestamps count from (producers
/// and consumers of one run share the process, so no wall clock is needed).
pub fn clock() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

/// Nanoseconds since [`clock`], as written into message bodies.
pub fn now_nanos() -> u64 {
    clock().elapsed().as_nanos() as u64
}

#[derive(Debug)]
struct Pair {
    interval: Histogram<u64>,
    total: Histogram<u64>,
}

impl Pair {
    fn new() -> Pair {
        // 1 µs to 1 hour, 3 significant digits.
        let h = Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds");
        Pair {
            interval: h.clone(),
            total: h,
        }
    }

    fn record(&mut self, micros: &[u64]) {
        // Messages sent together and taken together have one latency:
        // each run of equal values is recorded once, with its count.
        for run in micros.chunk_by(|a, b| a == b) {
            let v = run[0].clamp(1, 3_600_000_000);
            let _ = self.interval.record_n(v, run.len() as u64);
            let _ = self.total.record_n(v, run.len() as u64);
        }
    }
}

/// Latency percentiles, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub p50: u64,
    pub p75: u64,
    pub p95: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            count: h.len(),
            p50: h.value_at_quantile(0.50),
            p75: h.value_at_quantile(0.75),
            p95: h.value_at_quantile(0.95),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

#[derive(Debug)]
pub struct Stats {
    pub sent: AtomicU64,
    pub confirmed: AtomicU64,
    pub nacked: AtomicU64,
    pub returned: AtomicU64,
    pub received: AtomicU64,
    consumer: Mutex<Pair>,
    confirm: Mutex<Pair>,
    last: Mutex<(Instant, [u64; 4])>,
    started: Instant,
}

/// One second of a run, as rates.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    pub t: f64,
    pub sent: f64,
    pub confirmed: f64,
    pub nacked: f64,
    pub received: f64,
    pub consumer: Percentiles,
    pub confirm: Percentiles,
}

/// The whole run.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub seconds: f64,
    pub sent: u64,
    pub confirmed: u64,
    pub nacked: u64,
    pub returned: u64,
    pub received: u64,
    pub consumer: Percentiles,
    pub confirm: Percentiles,
    pub samples: Vec<Sample>,
}

impl Summary {
    pub fn rate(&self, n: u64) -> f64 {
        if self.seconds > 0.0 {
            n as f64 / self.seconds
        } else {
            0.0
        }
    }
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new()
    }
}

impl Stats {
    pub fn new() -> Stats {
        let now = Instant::now();
        Stats {
            sent: AtomicU64::new(0),
            confirmed: AtomicU64::new(0),
            nacked: AtomicU64::new(0),
            returned: AtomicU64::new(0),
            received: AtomicU64::new(0),
            consumer: Mutex::new(Pair::new()),
            confirm: Mutex::new(Pair::new()),
            last: Mutex::new((now, [0; 4])),
            started: now,
        }
    }

    pub fn consumer_latencies(&self, micros: &[u64]) {
        if !micros.is_empty() {
            self.consumer.lock().record(micros);
        }
    }

    pub fn confirm_latencies(&self, micros: &[u64]) {
        if !micros.is_empty() {
            self.confirm.lock().record(micros);
        }
    }

    fn counts(&self) -> [u64; 4] {
        [
            self.sent.load(Ordering::Relaxed),
            self.confirmed.load(Ordering::Relaxed),
            self.nacked.load(Ordering::Relaxed),
            self.received.load(Ordering::Relaxed),
        ]
    }

    /// Rates and latencies since the previous sample.
    pub fn sample(&self) -> Sample {
        let now = Instant::now();
        let counts = self.counts();
        let mut last = self.last.lock();
        let dt = now
            .duration_since(last.0)
            .max(Duration::from_millis(1))
            .as_secs_f64();
        let rate = |i: usize| (counts[i] - last.1[i]) as f64 / dt;
        let s = Sample {
            t: now.duration_since(self.started).as_secs_f64(),
            sent: rate(0),
            confirmed: rate(1),
            nacked: rate(2),
            received: rate(3),
            consumer: take_interval(&self.consumer),
            confirm: take_interval(&self.confirm),
        };
        *last = (now, counts);
        s
    }

    pub fn summary(&self, samples: Vec<Sample>) -> Summary {
        let c = self.counts();
        Summary {
            seconds: self.started.elapsed().as_secs_f64(),
            sent: c[0],
            confirmed: c[1],
            nacked: c[2],
            returned: self.returned.load(Ordering::Relaxed),
            received: c[3],
            consumer: Percentiles::of(&self.consumer.lock().total),
            confirm: Percentiles::of(&self.confirm.lock().total),
            samples,
        }
    }
}

fn take_interval(p: &Mutex<Pair>) -> Percentiles {
    let mut p = p.lock();
    let out = Percentiles::of(&p.interval);
    p.interval.reset();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let s = Stats::new();
        let v: Vec<u64> = (1..=1000).collect();
        s.consumer_latencies(&v);
        let p = s.summary(Vec::new()).consumer;
        assert_eq!(p.count, 1000);
        // HDR keeps 3 significant digits.
        assert!((499..=501).contains(&p.p50), "{p:?}");
        assert!((989..=991).contains(&p.p99), "{p:?}");
        assert!((998..=1000).contains(&p.p999), "{p:?}");
        assert_eq!(p.max, 1000);
    }

    #[test]
    fn the_interval_resets_and_the_total_does_not() {
        let s = Stats::new();
        s.confirm_latencies(&[100; 10]);
        let first = s.sample();
        assert_eq!(first.confirm.count, 10);
        s.confirm_latencies(&[5000; 5]);
        let second = s.sample();
        assert_eq!(second.confirm.count, 5);
        assert!((4995..=5005).contains(&second.confirm.p50));
        let total = s.summary(vec![first, second]).confirm;
        assert_eq!(total.count, 15);
        assert!((99..=101).contains(&total.p50));
    }

    #[test]
    fn out_of_range_values_are_clamped_not_lost() {
        let s = Stats::new();
        s.consumer_latencies(&[0, u64::MAX]);
        assert_eq!(s.summary(Vec::new()).consumer.count, 2);
    }

    #[test]
    fn rates_come_from_counter_deltas() {
        let s = Stats::new();
        s.sent.fetch_add(1000, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(100));
        let x = s.sample();
        assert!(x.sent > 1000.0 && x.sent < 20_000.0, "{}", x.sent);
        assert_eq!(s.sample().received, 0.0);
    }
}
